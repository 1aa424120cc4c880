//! Ranks sharing a GPU: every rank's kernel of a call must be resident on it at once, since
//! each waits for the others, so their CTAs together must fit its SMs.

use super::Device;
use crate::error::Result;

/// A GPU of a communicator of ranks in one process: its SMs and how many ranks it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shared {
    pub ordinal: usize,
    pub sms: usize,
    pub ranks: usize,
}

/// The GPUs of `devices` (one per rank), each once, in order; none for the host.
pub(crate) fn sharing(devices: &[Device]) -> Result<Vec<Shared>> {
    let gpus = devices.iter().map(Device::gpu).collect::<Result<Vec<_>>>()?.into_iter().flatten().collect::<Vec<_>>();
    Ok(gpus
        .iter()
        .enumerate()
        .filter(|(i, a)| gpus[..*i].iter().all(|b| b.ordinal != a.ordinal))
        .map(|(_, a)| Shared {
            ordinal: a.ordinal,
            sms: a.sms as usize,
            ranks: gpus.iter().filter(|b| b.ordinal == a.ordinal).count(),
        })
        .collect())
}

/// The CTAs a rank's kernel may have where ranks share GPUs (None: no GPU, or none shared).
/// The FIFO kernels take 76-116 registers a thread (NVRTC 13, sm_90), so one CTA of 512
/// threads fills an SM's registers (all_reduce ring f32 sum: LL 76, Simple 105, LL128 116).
/// On an H200 (132 SMs), 8 ranks of 64 channels each would ask for 512.
pub(crate) fn cta_budget(sharing: &[Shared]) -> Option<usize> {
    sharing.iter().filter(|s| s.ranks > 1).map(|s| (s.sms / s.ranks).max(1)).min()
}

/// Says how the ranks sharing each GPU fit on it: within its SMs, or not (an explicit
/// channel count past `cta_budget`), which may leave calls waiting until the timeout.
pub(crate) fn log_sharing(sharing: &[Shared], nchannels: usize) {
    for s in sharing.iter().filter(|s| s.ranks > 1) {
        let ctas = s.ranks * nchannels;
        if ctas > s.sms {
            tracing::warn!(
                "cuda:{} holds {} ranks of one communicator with {nchannels} channel(s) each: {ctas} CTAs, more than its \
                 {} SMs hold at once (one CTA each), so large calls may wait for ranks whose kernels cannot start, \
                 until the timeout; at most {} channel(s) a rank fit",
                s.ordinal,
                s.ranks,
                s.sms,
                (s.sms / s.ranks).max(1)
            );
        } else {
            tracing::info!(
                "cuda:{} holds {} ranks of one communicator: {ctas} CTAs with {nchannels} channel(s) each, within its {} \
                 SMs",
                s.ordinal,
                s.ranks,
                s.sms
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_sharing_a_gpu_split_its_sms() {
        let gpu = |ordinal, sms, ranks| Shared { ordinal, sms, ranks };
        assert_eq!(cta_budget(&[]), None, "the host");
        assert_eq!(cta_budget(&[gpu(0, 132, 1), gpu(1, 132, 1)]), None, "a GPU each");
        assert_eq!(cta_budget(&[gpu(0, 132, 2)]), Some(66));
        assert_eq!(cta_budget(&[gpu(0, 132, 8)]), Some(16));
        assert_eq!(cta_budget(&[gpu(0, 132, 3), gpu(1, 114, 5)]), Some(22), "the tightest GPU");
        assert_eq!(cta_budget(&[gpu(0, 4, 8)]), Some(1), "never below one");
        assert_eq!(sharing(&[Device::host(0), Device::host(1)]).unwrap(), [], "host devices");
    }
}
