//! `jitccl tune --verify R`: the check that the written table pays off. With the new table
//! in place, perf's default choice ("auto") is timed beside the best fixed candidates of
//! the tuning pass (the two fastest per size) and the cost model alone (an empty table),
//! all in one `perf --compare` run per size band: every setup runs in the same rank
//! processes, taking turns R times per size, so that neither where the processes landed
//! nor a burst of foreign load favours one. Per size the medians give auto's and the
//! model's gap to the best fixed candidate. Where auto runs that very candidate, their
//! difference is measurement noise, and the summary says so apart from real misses.

use std::collections::BTreeMap;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jitccl::Collective;

use super::measure::{self, Candidate, Measurement, Partial, Setup};
use super::Plan;

/// The fastest `k` candidates of the tuning pass at each size, each listed once.
fn finalists(plan: &Plan, coll: Collective, partial: &Partial, k: usize) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for &size in &plan.sizes {
        let mut timed: Vec<(Candidate, f64)> = plan
            .candidates
            .iter()
            .filter_map(|c| match partial.get(coll, Some(c)) {
                Some(Measurement::Done { times, .. }) => times.get(&size).map(|&t| (*c, t)),
                _ => None,
            })
            .collect();
        timed.sort_by(|a, b| a.1.total_cmp(&b.1));
        for (c, _) in timed.into_iter().take(k) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// Runs the verification of `coll` against the table at `table` and prints its report.
pub(super) fn verify(
    exe: &Path, plan: &Plan, coll: Collective, table: &Path, partial: &Partial, reps: usize, work: &Path,
) -> Result<(), String> {
    // auto's twin runs the same table: the two differ by measurement noise alone, which
    // says how small a gap this machine can show.
    let mut setups = vec![Setup::table("auto", table), Setup::model(work)?, Setup::table("auto-twin", table)];
    for c in finalists(plan, coll, partial, 2) {
        setups.push(Setup::candidate(coll, c, plan.wire, work)?);
    }
    let bands = plan.bands(coll, reps);
    let bar = ProgressBar::with_draw_target(Some(bands.len() as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} verification runs, ETA {eta} {msg}") {
        bar.set_style(style);
    }
    bar.set_message(format!("{coll}: {} setups x {reps} rounds", setups.len()));
    // Per (size, label), the median round; per size, auto's choice and where it came from.
    let mut times = BTreeMap::new();
    let mut auto_picks = BTreeMap::new();
    for band in bands {
        let r = measure::compare(exe, coll, plan.wire, &band.args, &setups, reps).map_err(|e| {
            bar.finish_and_clear();
            format!("verifying {coll}: {e}")
        })?;
        times.extend(r.times);
        auto_picks.extend(r.picks.get("auto").cloned().unwrap_or_default());
        bar.inc(1);
    }
    bar.finish_and_clear();

    println!(
        "#\n# {coll}, {} ranks, verification: setups side by side in the same rank processes, median of {reps} rounds (us); gap = time / best fixed - 1; noise = |auto's twin (the same table) / auto - 1|",
        plan.nranks
    );
    println!(
        "# {:>10}  {:<22} {:>9}  {:<24} {:>9} {:>8} {:>5}  {:>9} {:>8} {:>7}",
        "size (B)", "auto pick", "auto", "best fixed", "time", "auto gap", "same", "model", "mdl gap", "noise"
    );
    let (mut worst_auto, mut worst_model) = ((f64::NEG_INFINITY, 0usize), (f64::NEG_INFINITY, 0usize));
    // Sizes where auto runs the best fixed candidate itself, of those measured; and the
    // worst gap where it runs another.
    let (mut same_picks, mut measured) = (0usize, 0usize);
    let mut worst_other: Option<(f64, usize)> = None;
    let mut noisiest = (0.0f64, 0usize);
    for &size in &plan.sizes {
        let at = |s: &Setup| times.get(&(size, s.label.clone())).copied();
        let (Some(auto), Some(model), Some(twin)) = (at(&setups[0]), at(&setups[1]), at(&setups[2])) else {
            return Err(format!("verifying {coll}: perf --compare printed no time for {size} B"));
        };
        let noise = (twin / auto - 1.0).abs();
        if noise > noisiest.0 {
            noisiest = (noise, size);
        }
        let Some((best, bt)) = setups[3..].iter().filter_map(|s| Some((s, at(s)?))).min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        let (ga, gm) = (auto / bt - 1.0, model / bt - 1.0);
        if ga > worst_auto.0 {
            worst_auto = (ga, size);
        }
        if gm > worst_model.0 {
            worst_model = (gm, size);
        }
        let pick = auto_picks.get(&size).map_or("?", |(p, _)| p.as_str());
        let same = pick == best.label;
        measured += 1;
        if same {
            same_picks += 1;
        } else if worst_other.is_none_or(|w| ga > w.0) {
            worst_other = Some((ga, size));
        }
        println!(
            "  {size:>10}  {pick:<22} {auto:>9.2}  {:<24} {bt:>9.2} {:>7.1}% {:>5}  {model:>9.2} {:>7.1}% {:>6.1}%",
            best.label,
            100.0 * ga,
            if same { "yes" } else { "no" },
            100.0 * gm,
            100.0 * noise
        );
    }
    println!(
        "# worst gap to the best fixed candidate: auto {:.1}% at {} B, model alone {:.1}% at {} B; noise up to {:.1}% (at {} B)",
        100.0 * worst_auto.0,
        worst_auto.1,
        100.0 * worst_model.0,
        worst_model.1,
        100.0 * noisiest.0,
        noisiest.1
    );
    let others = match worst_other {
        Some((g, size)) => format!("where it runs another, its worst gap is {:.1}% at {size} B", 100.0 * g),
        None => "it runs no other".to_string(),
    };
    println!(
        "# auto runs the best fixed candidate itself at {same_picks} of {measured} sizes (there its gap is noise); {others}"
    );
    Ok(())
}
