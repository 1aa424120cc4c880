//! All ranks in this process: one communicator per device, connected by direct pointers
//! (nothing to rendezvous, so nothing to wait for).

use std::sync::Arc;

use super::{attach, rank_state, Attached, Wiring};
use crate::affinity;
use crate::comm::{peer_arenas, Comm};
use crate::config::Config;
use crate::device::Device;
use crate::error::{invalid, Result};
use crate::graph::Graph;
use crate::transport::connect::connect;
use crate::transport::layout::Layout;
use crate::transport::p2p::{self, LocalSegments};
use crate::transport::Endpoint;
use crate::tune;

impl Comm {
    /// Creates `nranks` communicators in this process (one per rank, each with its own
    /// host device), connected through shared memory.
    pub fn init_all(nranks: usize, config: &Config) -> Result<Vec<Comm>> {
        Self::init_all_on(&(0..nranks).map(Device::host).collect::<Vec<_>>(), config)
    }

    /// Creates one communicator per device of `devices` in this process, rank r on
    /// `devices[r]`, connected by direct pointers. All devices are of one target: host
    /// devices, or CUDA devices (several ranks may share a GPU: their kernels must all be
    /// resident at once, so by default their channels split its SMs; GPUs of different ranks
    /// must reach each other's memory, and peer access is enabled between them).
    pub fn init_all_on(devices: &[Device], config: &Config) -> Result<Vec<Comm>> {
        crate::logging::init();
        let nranks = devices.len();
        if nranks == 0 {
            return invalid("a communicator needs at least one rank");
        }
        let (staged, sharing) = connect_devices(devices)?;
        let cfg = config.resolve_within(nranks, &devices[0], cta_budget(&sharing))?;
        log_sharing(&sharing, cfg.nchannels);
        let layout = Layout::new(nranks, &cfg, &devices[0]);
        let segments = Arc::new(LocalSegments::new(&layout, devices, staged)?);
        let (local, boards) = (segments.bases(), segments.boards());
        let group = Endpoint::of_group();
        let endpoints = vec![group; nranks];
        let graph = Graph::uniform(nranks, cfg.nchannels);
        let tuner = Arc::new(tune::from_plan(&tune::plan(&graph, &cfg, &devices[0])?, &graph, &cfg)?);
        tracing::info!(
            "init_all: {nranks} ranks in one process on {:?}, {} channel(s), slots {:?} B, timeout {:?}",
            devices[0],
            cfg.nchannels,
            cfg.slot_bytes,
            cfg.timeout
        );
        let inners = (0..nranks)
            .map(|rank| {
                let device = &devices[rank];
                let Attached { bases, recv, .. } =
                    attach(&layout, rank, &endpoints, device, Some(&local), local[rank], None)?;
                // Staged FIFOs live in host memory: every peer needs system scope then.
                let same_gpu: Vec<bool> = devices.iter().map(|d| !staged && d.is_cuda() && d == device).collect();
                let conns = connect(&layout, rank, &bases, &recv, &graph, &same_gpu)?;
                let cpus = affinity::for_local_rank(rank, nranks);
                let wiring = Wiring {
                    conns,
                    board: boards[rank],
                    boards: boards.iter().copied().map(Some).collect(),
                    device: devices[rank].clone(),
                };
                rank_state(rank, cfg.clone(), wiring, cpus, tuner.clone(), None, segments.clone())
            })
            .collect::<Result<Vec<_>>>()?;
        if !devices[0].is_cuda() {
            peer_arenas::share_threads(&inners.iter().map(|i| &*i.enq.sym).collect::<Vec<_>>())?;
        }
        Ok(Comm::share_rendezvous(inners.into_iter().map(Comm::from_inner).collect()))
    }
}

/// Checks that `devices` are of one target and, for GPUs, enables peer access between
/// every pair of distinct GPUs, or returns true where the FIFOs must be staged in host
/// memory instead (`p2p::staging`, logged with the reason); and the GPUs that hold several
/// ranks. Several ranks on one GPU are allowed (NCCL before 2.30 refuses them): every
/// kernel can be tested on one GPU, but the ranks' kernels must all be resident on it at
/// once, since each waits for the others (see `cta_budget`).
fn connect_devices(devices: &[Device]) -> Result<(bool, Vec<Shared>)> {
    if devices.iter().any(|d| d.is_cuda() != devices[0].is_cuda()) {
        return invalid(format!(
            "the ranks of one communicator must all be on host or all on CUDA devices: {devices:?}"
        ));
    }
    let gpus = devices.iter().map(Device::gpu).collect::<Result<Vec<_>>>()?.into_iter().flatten().collect::<Vec<_>>();
    let sharing = gpus
        .iter()
        .enumerate()
        .filter(|(i, a)| gpus[..*i].iter().all(|b| b.ordinal != a.ordinal))
        .map(|(_, a)| Shared {
            ordinal: a.ordinal,
            sms: a.sms as usize,
            ranks: gpus.iter().filter(|b| b.ordinal == a.ordinal).count(),
        })
        .collect::<Vec<_>>();
    let ordinals: Vec<usize> = gpus.iter().map(|g| g.ordinal).collect();
    let can = |i: usize, j: usize| gpus[i].can_access_peer(&gpus[j]);
    if let Some(why) = p2p::staging(&ordinals, p2p::staging_forced(), can)? {
        tracing::warn!("ranks on GPUs {ordinals:?}: FIFOs staged in host memory mapped into the GPUs ({why})");
        return Ok((true, sharing));
    }
    for (a, b) in gpus.iter().flat_map(|a| gpus.iter().map(move |b| (a, b))) {
        a.enable_peer_access(b)?;
    }
    Ok((false, sharing))
}

/// A GPU of the communicator: its SMs and how many of its ranks it holds.
struct Shared {
    ordinal: usize,
    sms: usize,
    ranks: usize,
}

/// The CTAs a rank's kernel may have where ranks share GPUs (None: no GPU, or none shared):
/// every rank's kernel of a call must be resident at once, since each waits for the others,
/// and the FIFO kernels take 76-116 registers a thread (NVRTC 13, sm_90), so one CTA of 512
/// threads fills an SM's registers (all_reduce ring f32 sum: LL 76, Simple 105, LL128 116).
/// On an H200 (132 SMs), 8 ranks of the default 32 channels would ask for 256.
fn cta_budget(sharing: &[Shared]) -> Option<usize> {
    sharing.iter().filter(|s| s.ranks > 1).map(|s| (s.sms / s.ranks).max(1)).min()
}

/// Says how the ranks sharing each GPU fit on it: within its SMs, or not (an explicit
/// channel count past `cta_budget`), which may leave calls waiting until the timeout.
fn log_sharing(sharing: &[Shared], nchannels: usize) {
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
    }
}
