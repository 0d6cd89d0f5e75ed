//! The dry run: the batches a plan would run, acting on nothing.

use crate::config::MovementConfig;
use crate::dag::Dag;

/// The batches a plan would run, assuming every step succeeds, with what
/// each step would do: acts on nothing.
pub fn dry_run(cfg: &MovementConfig, dag: &Dag) -> Vec<Vec<String>> {
    let len = cfg.batch_len(dag.steps.len());
    let mut done = vec![false; dag.steps.len()];
    let mut batches = Vec::new();
    loop {
        let batch: Vec<usize> = (0..dag.steps.len())
            .filter(|&i| !done[i] && dag.steps[i].deps.iter().all(|&d| done[d]))
            .take(len)
            .collect();
        if batch.is_empty() {
            break;
        }
        batches.push(
            batch
                .iter()
                .map(|&i| {
                    let s = &dag.steps[i];
                    format!(
                        "step {i}: reserve on node {to}, evict pod {pod} ({name}) from node {from}, start on node {to}{hop}{deps}",
                        to = s.mv.to,
                        pod = s.mv.pod,
                        name = s.mv.spec.name,
                        from = s.mv.from.node,
                        hop = if s.hop { " (hop)" } else { "" },
                        deps = if s.deps.is_empty() { String::new() } else { format!(", after steps {:?}", s.deps) },
                    )
                })
                .collect(),
        );
        for i in batch {
            done[i] = true;
        }
    }
    batches
}
