//! `jitccl tune --verify R`: the check that the written table pays off. With the new table
//! in place, perf's default choice ("auto") runs beside the best fixed candidates of the
//! tuning pass (the two fastest per size) and the cost model alone (an empty table), all
//! interleaved R times so that a burst of foreign load hits each of them; per size the
//! medians give auto's and the model's gap to the best fixed candidate.

use std::collections::BTreeMap;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jitccl::{Collective, Table};

use super::measure::{self, Candidate, Measurement, Partial};
use super::Plan;

/// One configuration the verification times.
#[derive(Clone, Copy)]
enum Setup {
    /// The written table, as a communicator loads it.
    Auto,
    /// No table: the cost model's choice.
    Model,
    Fixed(Candidate),
}

impl Setup {
    fn name(&self) -> String {
        match self {
            Setup::Auto => "auto (table)".into(),
            Setup::Model => "model".into(),
            Setup::Fixed(c) => c.to_string(),
        }
    }
}

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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

/// Runs the verification of `coll` against the table at `table` and prints its report.
pub(super) fn verify(
    exe: &Path, plan: &Plan, coll: Collective, table: &Path, partial: &Partial, reps: usize, work: &Path,
) -> Result<(), String> {
    let mut setups = vec![Setup::Auto, Setup::Model];
    setups.extend(finalists(plan, coll, partial, 2).into_iter().map(Setup::Fixed));
    let bar = ProgressBar::with_draw_target(Some((reps * setups.len()) as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} verification runs, ETA {eta} {msg}") {
        bar.set_style(style);
    }
    let empty = work.join("empty.csv");
    Table::default().write(&empty).map_err(|e| format!("writing {}: {e}", empty.display()))?;
    // times[setup][size]: one sample per repetition.
    let mut times: Vec<BTreeMap<usize, Vec<f64>>> = vec![BTreeMap::new(); setups.len()];
    let mut auto_picks = BTreeMap::new();
    for rep in 0..reps {
        // Rotating the order keeps any one setup from always running first or last.
        for k in 0..setups.len() {
            let i = (k + rep) % setups.len();
            bar.set_message(format!("{coll} {}", setups[i].name()));
            let m = match setups[i] {
                Setup::Auto => measure::with_table(exe, plan, coll, table, None, true),
                Setup::Model => measure::with_table(exe, plan, coll, &empty, None, false),
                Setup::Fixed(c) => Ok(measure::run(exe, plan, coll, Some(&c), work)),
            };
            match m {
                Ok(Measurement::Done { times: t, picks }) => {
                    for (size, us) in t {
                        times[i].entry(size).or_default().push(us);
                    }
                    if matches!(setups[i], Setup::Auto) {
                        auto_picks = picks;
                    }
                }
                Ok(Measurement::Failed(why)) | Err(why) => {
                    bar.finish_and_clear();
                    return Err(format!("verifying {coll}: {}: {why}", setups[i].name()));
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    println!(
        "#\n# {coll}, {} ranks, verification: medians of {reps} interleaved runs (us); gap = time / best fixed - 1",
        plan.nranks
    );
    println!(
        "# {:>10}  {:<22} {:>9}  {:<24} {:>9} {:>8}  {:>9} {:>8}",
        "size (B)", "auto pick", "auto", "best fixed", "time", "auto gap", "model", "mdl gap"
    );
    let (mut worst_auto, mut worst_model) = ((f64::NEG_INFINITY, 0usize), (f64::NEG_INFINITY, 0usize));
    for &size in &plan.sizes {
        let med = |i: usize| times[i].get(&size).filter(|v| !v.is_empty()).map(|v| median(v.clone()));
        let (Some(auto), Some(model)) = (med(0), med(1)) else { continue };
        let Some((best, bt)) = (2..setups.len()).filter_map(|i| Some((i, med(i)?))).min_by(|a, b| a.1.total_cmp(&b.1))
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
        let pick = auto_picks.get(&size).map_or("?", String::as_str);
        println!(
            "  {size:>10}  {pick:<22} {auto:>9.2}  {:<24} {bt:>9.2} {:>7.1}%  {model:>9.2} {:>7.1}%",
            setups[best].name(),
            100.0 * ga,
            100.0 * gm
        );
    }
    println!(
        "# worst gap to the best fixed candidate: auto {:.1}% at {} B, model alone {:.1}% at {} B",
        100.0 * worst_auto.0,
        worst_auto.1,
        100.0 * worst_model.0,
        worst_model.1
    );
    Ok(())
}
