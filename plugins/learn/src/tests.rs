use tessera_sdk::{GpuRecord, NodeDelta, NodeRecord, Resources, ScorerHarness};

use super::*;

const WORKLOAD: &str = r#"[
    {"cpu_milli": 4000, "gpu_count": 1, "gpu_milli": 500, "weight": 0.3},
    {"cpu_milli": 2000, "gpu_count": 1, "gpu_milli": 250, "weight": 0.2},
    {"cpu_milli": 8000, "gpu_count": 1, "gpu_milli": 1000, "weight": 0.2},
    {"cpu_milli": 16000, "gpu_count": 2, "gpu_milli": 1000, "weight": 0.1},
    {"cpu_milli": 6000, "gpu_count": 0, "gpu_milli": 0, "weight": 0.2}
]"#;

/// A small deterministic stream (xorshift) for test inputs.
struct Stream(u64);
impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn node(id: u32, s: &mut Stream) -> NodeDelta {
    let gpus = [0, 2, 4, 8][s.below(4) as usize];
    let shares = [0, 100, 250, 300, 500, 700, 750, 1000, 1000, 1000];
    NodeDelta::Upsert(NodeRecord {
        id,
        gpu_model: "V100".into(),
        capacity: Resources { cpu_milli: 96_000, memory_mib: 393_216 },
        free: Resources { cpu_milli: 2_000 * s.below(49) as u32, memory_mib: 8_192 * s.below(49) as u32 },
        gpus: (0..gpus)
            .map(|_| GpuRecord { free_milli: shares[s.below(shares.len() as u64) as usize], ..GpuRecord::default() })
            .collect(),
        ready: true,
        ..NodeRecord::default()
    })
}

fn pods() -> Vec<Pod> {
    let p = |cpu: u32, gpus: u32, milli: u32| Pod {
        requests: Resources { cpu_milli: cpu, memory_mib: 1024 },
        gpu_count: gpus,
        gpu_milli: milli,
        ..Pod::default()
    };
    vec![p(4000, 1, 500), p(2000, 1, 250), p(8000, 1, 1000), p(16000, 2, 1000), p(6000, 0, 0), p(3000, 1, 300)]
}

fn scores<S: Scorer>(h: &mut ScorerHarness<S>, p: &Pod, ids: &[u32]) -> (Vec<i64>, Vec<u8>) {
    let (mut v, mut hints) = (Vec::new(), Vec::new());
    h.score(p, ids, &mut v, &mut hints).unwrap();
    (v, hints)
}

fn config(extra: &str) -> String {
    format!(r#"{{"workload": {WORKLOAD}{extra}}}"#)
}

fn model_config(m: &Model, digest: &str) -> String {
    config(&format!(r#", "model": {}, "digest": "{digest}""#, m.to_json()))
}

#[test]
fn the_embedded_model_is_valid_and_has_a_stable_digest() {
    let m = Model::embedded();
    assert_eq!(m.features, model::feature_names());
    assert_eq!(Model::from_json(&m.to_json()).unwrap(), m, "round trip");
    assert!(m.digest().starts_with("sha256:") && m.digest().len() == 7 + 64);
    ScorerHarness::<Learned>::new(&config(&format!(r#", "digest": "{}""#, m.digest()))).unwrap();
}

/// A valid model with eight hidden units and nonzero output weights.
fn hidden_model() -> Model {
    let mut s = Stream(3);
    let m = Model::initial(8, 0.5, || (s.below(2001) as f64 - 1000.0) / 1000.0);
    m.with_params(&m.params().iter().enumerate().map(|(i, p)| p + (i % 5) as f64 * 0.01).collect::<Vec<_>>())
}

/// Bad models are refused with the reason, naming what is wrong.
#[test]
fn bad_models_and_digests_are_refused_by_name() {
    // A model with a hidden layer, whatever shape the shipped one has.
    let m = hidden_model();
    let err = |cfg: String| ScorerHarness::<Learned>::new(&cfg).err().expect("refused");
    assert!(err(config(r#", "weights": 1"#)).contains("weights"), "unknown field");
    assert!(err(model_config(&m, "sha256:00")).contains("digest sha256:00 given"));
    assert!(err(config(&format!(r#", "model": {}"#, m.to_json()))).contains("(none)"), "a model needs its digest");
    assert!(err(config(r#", "digest": "sha256:ff""#)).contains("digest"), "the embedded model's digest is checked too");
    let mut short = m.clone();
    short.w2.pop();
    assert!(err(model_config(&short, &short.digest())).contains("`w2` has 7 weights, 8 expected"));
    let mut renamed = m.clone();
    renamed.features[0] = "something_else".into();
    assert!(err(model_config(&renamed, &renamed.digest())).contains("trained on features"));
    let mut big = m.clone();
    big.hidden = 1000;
    assert!(err(model_config(&big, &big.digest())).contains("at most 64"));
    assert_eq!(Model::from_json(r#"{"format": 1"#).unwrap_err().to_string().split(':').next(), Some("learned model"));
    let text = m.to_json().replacen("\"format\":1", "\"format\":2", 1);
    assert_eq!(Model::from_json(&text).unwrap_err(), ModelError::Format { found: 2 });
}

/// The starting point of training ranks candidates exactly as `default`'s
/// FGD configuration does: every pair of nodes in the same order, for
/// every kind of pod.
#[test]
fn the_initial_model_ranks_as_defaults_fgd() {
    let mut s = Stream(0x9E37_79B9);
    let initial = Model::initial(8, 0.5, || (s.below(2001) as f64 - 1000.0) / 1000.0);
    let mut learned = ScorerHarness::<Learned>::new(&model_config(&initial, &initial.digest())).unwrap();
    let fgd_config =
        config(r#", "spare_gpu_nodes": true, "balance_cpu": true, "fill_residue": true, "residue_first": true"#);
    let mut fgd = ScorerHarness::<Fgd>::new(&fgd_config).unwrap();
    let mut s = Stream(12345);
    let nodes: Vec<NodeDelta> = (0..60).map(|i| node(i, &mut s)).collect();
    learned.apply(nodes.clone()).unwrap();
    fgd.apply(nodes).unwrap();
    for p in pods() {
        // The nodes the host would offer: those the pod fits.
        let ids: Vec<u32> = (0..60)
            .filter(|&i| {
                let n = fgd.nodes().get(i).unwrap();
                n.free.cpu_milli >= p.requests.cpu_milli
                    && n.gpus().iter().filter(|g| g.fits(p.gpu_milli.min(1000))).count() >= p.gpu_count as usize
            })
            .collect();
        assert!(ids.len() > 5, "{p:?} fits {} nodes", ids.len());
        let (a, ha) = scores(&mut learned, &p, &ids);
        let (b, hb) = scores(&mut fgd, &p, &ids);
        for i in 0..ids.len() {
            for j in 0..ids.len() {
                assert_eq!(
                    a[i].cmp(&a[j]),
                    b[i].cmp(&b[j]),
                    "pod {p:?}, nodes {i} and {j}: {} {} vs {} {}",
                    a[i],
                    a[j],
                    b[i],
                    b[j]
                );
            }
        }
        if p.is_gpu_sharing() {
            assert_eq!(ha, hb, "the same GPUs");
        }
    }
}

/// Scores looked up between a node's changes equal scores computed afresh.
#[test]
fn remembered_scores_equal_fresh_ones_as_nodes_change() {
    let mut s = Stream(7);
    let m = Model::initial(8, 0.5, || (s.below(2001) as f64 - 1000.0) / 1000.0);
    let m = m.with_params(&m.params().iter().enumerate().map(|(i, p)| p + (i % 7) as f64 * 0.01).collect::<Vec<_>>());
    let cfg = model_config(&m, &m.digest());
    let mut kept = ScorerHarness::<Learned>::new(&cfg).unwrap();
    let mut s = Stream(99);
    let ids: Vec<u32> = (0..40).collect();
    let mut current: Vec<NodeDelta> = (0..40).map(|i| node(i, &mut s)).collect();
    kept.apply(current.clone()).unwrap();
    for round in 0..20u32 {
        let i = round * 3 % 40;
        current[i as usize] = node(i, &mut s);
        kept.apply([current[i as usize].clone()]).unwrap();
        let mut fresh = ScorerHarness::<Learned>::new(&cfg).unwrap();
        fresh.apply(current.clone()).unwrap();
        for p in pods() {
            assert_eq!(scores(&mut kept, &p, &ids), scores(&mut fresh, &p, &ids), "round {round}, pod {p:?}");
        }
    }
}

#[test]
fn params_round_trip_and_the_score_saturates() {
    for m in [Model::embedded(), hidden_model()] {
        assert_eq!(m.with_params(&m.params()), m);
        assert_eq!(m.params().len(), 27 + m.hidden * 14 + m.hidden + m.hidden);
    }
    assert_eq!(hidden_model().params().len(), 27 + 8 * 14 + 8 + 8);
    assert_eq!(Model::score(f64::NAN), 0);
    assert_eq!(Model::score(1e300), 9_000_000_000_000_000);
    assert_eq!(Model::score(0.123_456_7), 123_457);
}
