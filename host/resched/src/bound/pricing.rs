//! Pricing for the re-packing bound: the configuration of one node of
//! greatest reduced worth `Σ_c a_c d_c`, with the node's CPU counted.
//!
//! Exact for a relaxation of the real problem, so the bound stays a bound:
//! CPU in whole cores (pods' requests and nodes' capacity rounded down:
//! `Σ ⌊x_i⌋ ≤ ⌊Σ x_i⌋`, so whatever fits a node still fits), GPU shares
//! within one GPU in hundredths (rounded down likewise, with each class
//! never more often on a GPU than its exact share allows), memory and node
//! selectors left out, and a sharing class may repeat on every GPU beyond
//! its count (the LP's own row still caps it).
//!
//! Two knapsacks: over one GPU (share × CPU) for the best sharing packing
//! within each CPU budget, per GPU model; then over the node (GPUs × CPU)
//! for whole-GPU pods, CPU-only pods and, on each GPU left, one sharing
//! packing with a CPU budget of its own.

use tessera_core::model::GPU_MILLI;

/// Millicores per CPU unit of the knapsacks.
pub(super) const CPU_UNIT: u64 = 1000;

/// A class of pods: share of each GPU (1000: whole GPUs; 0: CPU-only),
/// GPUs per pod (1 for sharing pods, 0 for CPU-only ones), allowed models
/// (sorted; empty: any), CPU in units of [`CPU_UNIT`] (rounded down).
pub(super) type Class = (u32, u32, Vec<String>, u32);

/// Thousandths of a GPU per share unit of the one-GPU knapsack.
const SHARE_UNIT: u32 = 10;
/// Share units of one GPU.
const SHARES: usize = (GPU_MILLI / SHARE_UNIT) as usize;
/// Reduced worth below this is no gain.
const EPS: f64 = 1e-9;

/// The pod classes as pricing needs them.
pub(super) struct Catalog<'a> {
    pub(super) classes: &'a [Class],
    /// Most pods of each class.
    pub(super) hi: &'a [u64],
    /// GPU models of the node types, each with the sharing classes it may
    /// hold and the most CPU of a node of that model.
    pub(super) models: Vec<(String, Vec<usize>, usize)>,
}

/// What a node type may hold.
pub(super) struct Offer {
    /// Index in [`Catalog::models`] (`None`: no usable GPU).
    model: Option<usize>,
    gpus: usize,
    cpu: usize,
    /// Whole-GPU and CPU-only classes it may take.
    others: Vec<usize>,
}

/// Copies of one class taken together (binary splitting of a bounded
/// knapsack into 0/1 items).
struct Item {
    class: usize,
    copies: u64,
    /// Share units (one GPU) or GPUs (a node).
    size: usize,
    cpu: usize,
    worth: f64,
}

/// A 0/1 knapsack over two dimensions, best worth within each `(size,
/// cpu)`, and which items reach it.
struct Knapsack {
    cpus: usize,
    best: Vec<f64>,
    items: Vec<Item>,
    keep: Vec<bool>,
}

impl Knapsack {
    fn solve(items: Vec<Item>, sizes: usize, cpus: usize) -> Self {
        let cells = (sizes + 1) * (cpus + 1);
        let mut best = vec![0.0f64; cells];
        let mut keep = vec![false; items.len() * cells];
        for (i, it) in items.iter().enumerate() {
            let keep = &mut keep[i * cells..(i + 1) * cells];
            for s in (it.size..=sizes).rev() {
                for c in (it.cpu..=cpus).rev() {
                    let with = best[(s - it.size) * (cpus + 1) + c - it.cpu] + it.worth;
                    let at = s * (cpus + 1) + c;
                    if with > best[at] + EPS {
                        best[at] = with;
                        keep[at] = true;
                    }
                }
            }
        }
        Self { cpus, best, items, keep }
    }

    fn at(&self, size: usize, cpu: usize) -> f64 {
        self.best[size * (self.cpus + 1) + cpu]
    }

    /// Adds the pods reaching `at(size, cpu)` to `a`.
    fn take(&self, mut size: usize, mut cpu: usize, a: &mut [u64]) {
        let cells = self.best.len();
        for (i, it) in self.items.iter().enumerate().rev() {
            if self.keep[i * cells + size * (self.cpus + 1) + cpu] {
                a[it.class] += it.copies;
                size -= it.size;
                cpu -= it.cpu;
            }
        }
    }
}

/// How many items of `size` fit in `room` (any number when they take none).
fn at_most(room: usize, size: usize) -> u64 {
    room.checked_div(size).map_or(u64::MAX, |k| k as u64)
}

/// Up to `most` copies of class `c` as 0/1 items.
fn split(c: usize, most: u64, size: usize, cpu: usize, worth: f64, out: &mut Vec<Item>) {
    let (mut left, mut q) = (most, 1u64);
    while left > 0 {
        let k = q.min(left);
        out.push(Item { class: c, copies: k, size: size * k as usize, cpu: cpu * k as usize, worth: worth * k as f64 });
        left -= k;
        q *= 2;
    }
}

/// The best sharing packing of one GPU of a model within each CPU budget.
pub(super) struct GpuTable(Knapsack);

impl Catalog<'_> {
    pub(super) fn offer(&self, model: &str, gpus: usize, cpu: usize) -> Offer {
        let allows = |c: usize| self.classes[c].2.is_empty() || self.classes[c].2.iter().any(|m| m == model);
        let fits = |c: usize| self.classes[c].3 as usize <= cpu;
        let others = (0..self.classes.len())
            .filter(|&c| {
                let (share, k, _, _) = &self.classes[c];
                fits(c) && (*k == 0 || (*share >= GPU_MILLI && allows(c) && *k as usize <= gpus))
            })
            .collect();
        let model = if gpus > 0 { self.models.iter().position(|(m, _, _)| m == model) } else { None };
        Offer { model, gpus, cpu, others }
    }

    /// One table per model in [`Catalog::models`] for reduced worths `d`.
    pub(super) fn tables(&self, d: &[f64]) -> Vec<GpuTable> {
        self.models
            .iter()
            .map(|(_, sharing, cpus)| {
                let mut items = Vec::new();
                for &c in sharing.iter().filter(|&&c| d[c] > EPS) {
                    let (share, _, _, cpu) = self.classes[c];
                    let (cpu, share) = (cpu as usize, share.max(1));
                    let most = self.hi[c].min(u64::from(GPU_MILLI / share)).min(at_most(*cpus, cpu));
                    split(c, most, (share / SHARE_UNIT) as usize, cpu, d[c], &mut items);
                }
                GpuTable(Knapsack::solve(items, SHARES, *cpus))
            })
            .collect()
    }

    /// The configuration of a node with offer `o` of greatest reduced
    /// worth, and that worth.
    pub(super) fn price(&self, o: &Offer, tables: &[GpuTable], d: &[f64]) -> (f64, Vec<u64>) {
        let (gpus, cpus) = (o.gpus, o.cpu);
        let mut items = Vec::new();
        for &c in o.others.iter().filter(|&&c| d[c] > EPS) {
            let (_, k, _, cpu) = self.classes[c];
            let (k, cpu) = (k as usize, cpu as usize);
            let most = self.hi[c].min(at_most(gpus, k)).min(at_most(cpus, cpu));
            split(c, most, k, cpu, d[c], &mut items);
        }
        let mut node = Knapsack::solve(items, gpus, cpus);
        // Each GPU left may take a sharing packing with a CPU budget `b`
        // of its own: G rounds of a group knapsack, the budget each chose.
        let table = o.model.map(|m| &tables[m].0);
        let row = cpus + 1;
        let mut chose: Vec<Vec<u16>> = Vec::new();
        if let Some(t) = table {
            let one: Vec<f64> = (0..=cpus).map(|b| t.at(SHARES, b.min(t.cpus))).collect();
            // Budgets worth more than every smaller one (the others are
            // dominated).
            let steps: Vec<usize> =
                (0..=cpus).filter(|&b| one[b] > EPS && (b == 0 || one[b] > one[b - 1] + EPS)).collect();
            if !steps.is_empty() {
                for _ in 0..gpus {
                    let mut pick = vec![u16::MAX; (gpus + 1) * row];
                    for g in (1..=gpus).rev() {
                        for c in (0..=cpus).rev() {
                            let mut here = node.best[g * row + c];
                            for &b in steps.iter().take_while(|&&b| b <= c) {
                                let with = node.best[(g - 1) * row + c - b] + one[b];
                                if with > here + EPS {
                                    here = with;
                                    pick[g * row + c] = b as u16;
                                }
                            }
                            node.best[g * row + c] = here;
                        }
                    }
                    chose.push(pick);
                }
            }
        }
        let worth = node.at(gpus, cpus);
        let mut a = vec![0; d.len()];
        let (mut g, mut c) = (gpus, cpus);
        for pick in chose.iter().rev() {
            let b = pick[g * row + c];
            if b != u16::MAX {
                let b = b as usize;
                let t = table.expect("a pick implies a table");
                t.take(SHARES, b.min(t.cpus), &mut a);
                g -= 1;
                c -= b;
            }
        }
        node.take(g, c, &mut a);
        (worth, a)
    }
}
