//! `tessera sim`'s summary table.

use super::{Figures, SimOutcome};

/// The summary table.
pub fn summary(o: &SimOutcome) -> String {
    let r = &o.file.report;
    let mut rows: Vec<(String, String)> = vec![
        ("policy".into(), o.file.policy.clone()),
        ("protocol".into(), o.file.protocol.into()),
        ("nodes / GPUs".into(), format!("{} / {}", o.nodes, r.total_gpus)),
        ("pods submitted".into(), r.submitted.to_string()),
        ("placed".into(), r.placed.to_string()),
        ("failed".into(), r.failed.to_string()),
    ];
    if o.file.protocol == "time-replay" {
        rows.push(("departed / pending".into(), format!("{} / {}", r.departed, r.pending)));
    }
    if let Some(b) = r.buckets.last() {
        rows.push(("GPU demand arrived (end)".into(), format!("{}% of capacity", b.arrived_pct)));
    }
    for pct in [100, 130] {
        if let Some(a) = r.allocation_at(pct) {
            rows.push((format!("GPU allocation @ {pct}% arrived"), format!("{a:.2}%")));
        }
    }
    rows.push(("GPU allocation (end)".into(), format!("{:.2}%", r.last.allocation)));
    rows.push(("unallocated GPUs (end)".into(), format!("{:.2}%", 100.0 - r.last.allocation)));
    if let Some(b) = o.file.repacking_bound_allocation_pct {
        rows.push((
            "re-packing bound (admitted)".into(),
            format!("allocation ≤ {b:.2}%, unallocated ≥ {:.2}%", (100.0 - b).max(0.0)),
        ));
    }
    if let Some(b) = o.file.bound_allocation_pct {
        rows.push((
            "offline bound (LP)".into(),
            format!("allocation ≤ {b:.2}%, unallocated ≥ {:.2}%", (100.0 - b).max(0.0)),
        ));
    }
    rows.push((
        "fragmentation (end)".into(),
        format!("{:.2}% of GPUs, {:.2}% of free", r.last.fragmentation, r.last.fragmentation_rate),
    ));
    let hot = r.hotspot_counts.iter().filter(|&&c| c > 0).count();
    rows.push(("nodes ever hot (≥90%)".into(), hot.to_string()));
    for (code, n) in &r.failures_by_reason {
        rows.push((format!("failed: {code}"), n.to_string()));
    }
    if let Some(before) = &o.file.placement_only {
        let after = Figures::of(r);
        rows.push(("rescheduling".into(), "placement alone → with rescheduling".into()));
        rows.push(("  placed".into(), format!("{} → {}", before.placed, after.placed)));
        rows.push((
            "  unallocated GPUs @130%".into(),
            format!("{:.2}% → {:.2}%", before.unallocated_pct, after.unallocated_pct),
        ));
        rows.push((
            "  fragmentation (end)".into(),
            format!("{:.2}% → {:.2}%", before.fragmentation_pct, after.fragmentation_pct),
        ));
        rows.push(("  hotspot ratio".into(), format!("{:.3} → {:.3}", before.hotspot_ratio, after.hotspot_ratio)));
        rows.push((
            "  migrations".into(),
            format!(
                "0 → {} ({:.2}% of placed; {} to make room, {} planned; {} pods rescued)",
                r.migrations,
                100.0 * r.migrations as f64 / r.placed.max(1) as f64,
                r.migrations - r.planned_migrations,
                r.planned_migrations,
                r.rescued
            ),
        ));
    }
    if let Some(x) = &o.file.execution {
        rows.push((
            "moves executed".into(),
            format!(
                "{} of {} planned in {} plans, {} batches: {} failed, {} rolled back, {} dropped; {} lost",
                x.executed, x.moves_planned, x.plans, x.batches, x.failed, x.rolled_back, x.dropped, x.lost
            ),
        ));
        let peak = x.peak_unavailable.values().max().copied().unwrap_or(0);
        rows.push((
            "peak unavailable / workload".into(),
            format!(
                "{peak} (over {} workloads); budgets broken: {}",
                x.peak_unavailable.len(),
                if x.budget_violations.is_empty() { "none".to_string() } else { x.budget_violations.join(", ") }
            ),
        ));
    }
    if let Some(p) = &o.file.plans {
        let by: Vec<String> = p.moves_by_strategy.iter().map(|(s, n)| format!("{s} {n}")).collect();
        rows.push((
            "global plans".into(),
            format!(
                "{} ({} with moves; {}), cost {:.2}, gain {:.2}, migration time {:.0} s, slowest plan {:.1} ms",
                p.plans,
                p.plans_with_moves,
                if by.is_empty() { "no moves".to_string() } else { by.join(", ") },
                p.cost,
                p.gain,
                p.migration_time_s,
                p.plan_ms_max
            ),
        ));
    }
    rows.push(("plugin errors".into(), r.plugin_errors.to_string()));
    rows.push(("decisions past their deadline".into(), r.deadline_hits.to_string()));
    rows.push((
        "wall time".into(),
        format!("{:.3} s ({:.0} pods/s)", o.wall_s, r.submitted as f64 / o.wall_s.max(1e-9)),
    ));
    rows.iter().map(|(k, v)| format!("{k:<30} {v}\n")).collect()
}
