//! What `jitccl tune` prints and writes per collective: per size the cost model's pick,
//! the measured best and the gap, and the table rows (the model's pick kept where the best
//! is not clearly faster).

use std::collections::BTreeMap;

use jitccl::tune::Row;
use jitccl::Collective;

use super::measure::{Candidate, Measurement, Partial};
use super::Plan;

/// Prints the comparison for `coll` and returns its rows: per size the fastest candidate,
/// adjacent sizes with the same winner merged, each row reaching up to the next one's size.
pub(super) fn report(plan: &Plan, coll: Collective, partial: &Partial) -> Result<Vec<Row>, String> {
    let (model, picks) = match partial.get(coll, None) {
        Some(Measurement::Done { times, picks }) => (Some(times), picks),
        _ => (None, BTreeMap::new()),
    };
    println!("#\n# {coll}, {} ranks: the cost model's pick and the measured best per size (time: min of out-of-place and in-place, us)", plan.nranks);
    println!("# {:>10}  {:<22} {:>10}  {:<24} {:>10} {:>8}", "size (B)", "model pick", "time", "best", "time", "gap");
    let mut winners: Vec<(usize, Candidate)> = Vec::new();
    for &size in &plan.sizes {
        let best = plan
            .candidates
            .iter()
            .filter_map(|c| match partial.get(coll, Some(c)) {
                Some(Measurement::Done { times, .. }) => times.get(&size).map(|&t| (*c, t)),
                _ => None,
            })
            // The model's run is a candidate too (its pick with the model's chunk): timing
            // noise may have made it faster than the same candidate's own run.
            .chain(model.as_ref().and_then(|m| Some((Candidate::from_pick(picks.get(&size)?)?, *m.get(&size)?))))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let Some((cand, t)) = best else {
            return Err(format!("{coll}: no candidate ran at {size} B (see the errors above)"));
        };
        let pick = picks.get(&size).map_or("?", String::as_str);
        let model_time = model.as_ref().and_then(|m| m.get(&size)).copied();
        let (mt, gap) = match model_time {
            Some(mt) => (format!("{mt:.2}"), format!("{:.1}%", 100.0 * (mt - t) / t)),
            None => ("failed".into(), "-".into()),
        };
        let model_pick = Candidate::from_pick(pick).zip(model_time);
        let row = winner((cand, t), model_pick);
        let kept = if row == cand { String::new() } else { format!("  (row: the model's, within {KEEP_MODEL_PCT}%)") };
        println!("  {size:>10}  {pick:<22} {mt:>10}  {:<24} {t:>10.2} {gap:>8}{kept}", cand.to_string());
        winners.push((size, row));
    }
    let mut rows: Vec<Row> = Vec::new();
    for (i, &(size, c)) in winners.iter().enumerate() {
        let max = winners.get(i + 1).map_or(size as u64, |&(next, _)| next as u64 - 1);
        match rows.last_mut() {
            Some(r) if (r.algo, r.proto, r.channels, r.chunk_bytes) == (c.algo, c.proto, Some(c.channels), c.chunk) => {
                r.max_bytes = max
            }
            _ => rows.push(c.row(coll, if i == 0 { 0 } else { size as u64 }, max, Some(plan.nranks), plan.wire)),
        }
    }
    Ok(rows)
}

/// How much faster (percent) than the cost model's pick a measured best must be to replace
/// it in the table. Below that the difference is within what two runs of one setup differ
/// by at small sizes, and the fastest of many noisy candidates is mostly the luckiest, so
/// a table that took every small win ran behind the model alone (docs/performance.md,
/// "Host cost model and tuning tables").
const KEEP_MODEL_PCT: u32 = 5;

/// The row's candidate at one size: the measured best (candidate, time), unless the model's
/// pick (candidate, its measured time) is within `KEEP_MODEL_PCT` of it.
fn winner(best: (Candidate, f64), model: Option<(Candidate, f64)>) -> Candidate {
    match model {
        Some((m, mt)) if mt <= best.1 * (1.0 + f64::from(KEEP_MODEL_PCT) / 100.0) => m,
        _ => best.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitccl::{Algorithm, Protocol};

    #[test]
    fn the_model_keeps_sizes_where_the_best_is_not_clearly_faster() {
        let c = |algo, proto| Candidate { algo, proto, channels: 1, chunk: None };
        let (best, model) = (c(Algorithm::Ring, Protocol::LL128), c(Algorithm::OneShot, Protocol::Simple));
        assert_eq!(winner((best, 1.0), Some((model, 1.04))), model, "4% slower: noise");
        assert_eq!(winner((best, 1.0), Some((model, 1.06))), best, "6% slower: measured");
        assert_eq!(winner((best, 1.0), None), best, "the model's run failed");
        assert_eq!(winner((model, 1.0), Some((model, 1.0))), model);
    }
}
