//! `perf --compare`: setups (a tuning table, optionally a channel count) timed side by side
//! in one run. Each setup is a communicator split from the ranks' own with its
//! configuration, so every setup runs in the same processes, on the same buffers and
//! cores; per size they take turns for --reps rounds in a rotating order, so that a burst
//! of foreign load hits each alike. Separate runs of one choice differ by far more than
//! turns do on a small VM (where the processes land), which hides gaps of a few percent;
//! turns within one run do not. Out of place, plain buffers.

use jitccl::reference::RefElement;
use jitccl::{Comm, Config, Stream};

use super::flags::{Layout, PerfArgs};
use super::sweep::{at_once, iterate, over_ranks_time, prepare, views, wrong};

/// Runs the comparison on `comms`; true when no element was wrong.
pub fn compare<T: RefElement>(a: &PerfArgs, lay: &Layout, comms: &[Comm], streams: &[Stream]) -> Result<bool, String> {
    let (n, esize) = (lay.nranks, size_of::<T>());
    let r = prepare::<T>(a, lay, comms, streams)?;
    let kids = children(a, comms)?;
    let printer = comms.iter().any(|c| c.rank() == 0);
    let say = |line: &str| {
        if printer {
            println!("{line}");
        }
    };
    header(a, lay, &say);
    let mut total_wrong = 0;
    // Per setup, its worst gap to the best: (gap, size).
    let mut worst = vec![(0.0f64, 0usize); a.compare.len()];
    for bytes in a.sizes()? {
        let (count, size) = a.coll.shape(bytes, esize, n);
        let at = |e: jitccl::Error| format!("size {size}: {e}");
        let v = views(a, lay, &r, count, false).map_err(at)?;
        let mut wrongs = Vec::with_capacity(kids.len());
        for k in &kids {
            iterate(a, k, streams, &v, count, a.warmup).map_err(at)?;
            wrongs.push(wrong(a, lay, &r, k, &v, count).map_err(at)?);
        }
        let mut samples = vec![Vec::with_capacity(a.reps); kids.len()];
        for round in 0..a.reps {
            for j in 0..kids.len() {
                let k = (round + j) % kids.len();
                let us = iterate(a, &kids[k], streams, &v, count, a.iters).map_err(at)?;
                samples[k].push(over_ranks_time(a, lay, &r, us).map_err(at)?);
            }
        }
        let stats: Vec<[f64; 3]> = samples.into_iter().map(spread).collect();
        let best = stats.iter().map(|s| s[0]).fold(f64::INFINITY, f64::min);
        for (k, (s, setup)) in stats.iter().zip(&a.compare).enumerate() {
            let gap = s[0] / best - 1.0;
            if gap > worst[k].0 {
                worst[k] = (gap, size);
            }
            let busbw = size as f64 / s[0] / 1e3 * a.coll.bus_factor(n);
            say(&format!(
                "  {size:>10} {:>16} {:>10.2} {:>10.2} {:>10.2} {busbw:>8.2} {:>+8.1}% {:>6}",
                setup.label,
                s[0],
                s[1],
                s[2],
                100.0 * gap,
                wrongs[k]
            ));
            total_wrong += wrongs[k];
        }
    }
    for ((gap, size), setup) in worst.iter().zip(&a.compare) {
        say(&format!("# {}: worst gap to the best setup {:+.1}% (at {size} B)", setup.label, 100.0 * gap));
    }
    say(&format!("# Out of bounds values : {total_wrong} {}", if total_wrong == 0 { "OK" } else { "FAILED" }));
    Ok(total_wrong == 0)
}

/// Per setup, this thread's ranks' children: a split of every rank (color 0, its own rank
/// as key, so ranks keep their numbers) with the setup's table, channels and label as the
/// communicator's name. Splits are collective: this thread's ranks take part at once.
fn children(a: &PerfArgs, comms: &[Comm]) -> Result<Vec<Vec<Comm>>, String> {
    let mut out = Vec::with_capacity(a.compare.len());
    for s in &a.compare {
        let cfg = Config {
            tuner_table: Some(s.table.clone()),
            nchannels: s.channels,
            comm_name: Some(s.label.clone()),
            ..Config::default()
        };
        let split = |c: &Comm| -> Result<Comm, String> {
            c.split_with(0, c.rank() as i64, &cfg)
                .and_then(|k| k.ok_or_else(|| jitccl::Error::Internal("no child came back".into())))
                .map_err(|e| format!("--compare {}: {e}", s.label))
        };
        out.push(at_once(comms, split).into_iter().collect::<Result<Vec<_>, _>>()?);
    }
    Ok(out)
}

/// [median, min, max] of a setup's rounds.
fn spread(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    [v[(v.len() - 1) / 2], v[0], v[v.len() - 1]]
}

fn header(a: &PerfArgs, lay: &Layout, say: &impl Fn(&str)) {
    let setups: Vec<String> = a
        .compare
        .iter()
        .map(|s| match s.channels {
            Some(c) => format!("{} = {} @ {c} channel(s)", s.label, s.table.display()),
            None => format!("{} = {}", s.label, s.table.display()),
        })
        .collect();
    say(&format!(
        "# jitccl perf --compare: {} on {} ranks ({} process(es) x {} thread(s) x {} rank(s)), {} rounds of {} timed iterations of {} op(s) per setup and size (after {} warm-up), out of place, plain buffers",
        a.coll, lay.nranks, lay.procs, lay.threads, lay.per_thread, a.reps, a.iters, a.agg, a.warmup
    ));
    say(&format!("# setups: {}", setups.join("; ")));
    say("# time: the median round (min and max beside it); vs best: the median against the fastest setup's");
    say("#");
    say(&format!(
        "# {:>10} {:>16} {:>10} {:>10} {:>10} {:>8} {:>9} {:>6}",
        "size", "setup", "time", "min", "max", "busbw", "vs best", "#wrong"
    ));
    say(&format!(
        "# {:>10} {:>16} {:>10} {:>10} {:>10} {:>8} {:>9} {:>6}",
        "(B)", "", "(us)", "(us)", "(us)", "(GB/s)", "", ""
    ));
}
