//! Which candidates a band of sizes measures: all of them, except those the cost model
//! puts over [`SLOWER`] times its best estimate and over [`LONG_US`] a call at every size
//! of the band. Large sizes dominate a run's time, and there the slowest candidates (LL on
//! one channel moving 128 MiB, say) take seconds a turn while the model is sure of them: a
//! GPU tune to 128 MiB spent minutes on them, a 4-rank host tune to 256 MiB over ten. Calls
//! shorter than that are cheap to measure, and there the model's latency terms are least
//! certain. `--all` measures every candidate everywhere.

use jitccl::tune::{Constants, Topology};
use jitccl::Collective;

use super::measure::Candidate;

/// How many times the model's best estimate a candidate may take and still be measured. The
/// model's errors are tens of percent (its tests allow 30% on the host and the GPU), so a
/// candidate it puts 4x behind is not the fastest.
pub(super) const SLOWER: f64 = 4.0;

/// Below this estimate (us) a candidate is measured whatever the model says: a band's turns
/// of it take well under a second.
pub(super) const LONG_US: f64 = 1000.0;

/// Per candidate of `cands`, whether to measure it for `coll` at `sizes` on `topo` with
/// constants `k`. A candidate the model cannot estimate is measured.
pub(super) fn worth_measuring(
    topo: &Topology, k: &Constants, coll: Collective, cands: &[Candidate], sizes: &[usize],
) -> Vec<bool> {
    let est = |c: &Candidate, size| topo.estimate(k, coll, c.algo, c.proto, c.channels, size);
    let best: Vec<Option<f64>> =
        sizes.iter().map(|&s| cands.iter().filter_map(|c| est(c, s)).min_by(f64::total_cmp)).collect();
    cands
        .iter()
        .map(|c| {
            sizes.iter().zip(&best).any(|(&s, b)| match (est(c, s), b) {
                (Some(t), Some(b)) => t <= SLOWER * b || t <= LONG_US,
                _ => true,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jitccl::tune::Machine;
    use jitccl::{Algorithm, Protocol};

    fn cand(algo: Algorithm, proto: Protocol, channels: usize) -> Candidate {
        Candidate { algo, proto, channels, chunk: None }
    }

    #[test]
    fn large_sizes_skip_what_the_model_puts_far_behind_and_small_ones_measure_everything() {
        let (topo, k) = Machine::Gpus.one_node(2, 16);
        let cands = [
            cand(Algorithm::Ring, Protocol::Simple, 16),
            cand(Algorithm::Ring, Protocol::LL, 1),
            cand(Algorithm::Tree, Protocol::LL128, 1),
            cand(Algorithm::Ring, Protocol::Simple, 1),
        ];
        // A 8-byte call is all latency: every candidate is within a few microseconds.
        assert_eq!(worth_measuring(&topo, &k, Collective::AllReduce, &cands, &[8]), [true; 4]);
        // 1 MiB: one LL channel is far behind, but the call is short: measured.
        assert_eq!(worth_measuring(&topo, &k, Collective::AllReduce, &cands, &[1 << 20]), [true; 4]);
        // 128 MiB: one LL channel and one Simple channel are far behind 16 Simple ones.
        let big = worth_measuring(&topo, &k, Collective::AllReduce, &cands, &[128 << 20]);
        assert_eq!(big, [true, false, false, false]);
        // A band is measured where any of its sizes is within reach.
        let band = worth_measuring(&topo, &k, Collective::AllReduce, &cands, &[8, 128 << 20]);
        assert_eq!(band, [true; 4]);
    }

    #[test]
    fn a_candidate_the_model_cannot_estimate_is_measured() {
        let (topo, k) = Machine::Host { cores: 2 }.one_node(2, 2);
        // Broadcast has no one-shot algorithm: no estimate.
        let cands = [cand(Algorithm::Ring, Protocol::Simple, 1), cand(Algorithm::OneShot, Protocol::LL, 1)];
        assert_eq!(worth_measuring(&topo, &k, Collective::Broadcast, &cands, &[256 << 20]), [true, true]);
    }
}
