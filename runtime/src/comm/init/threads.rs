//! All ranks in this process: one communicator per device, connected by direct pointers
//! (nothing to rendezvous, so nothing to wait for).

use std::sync::Arc;

use super::{attach, rank_state, Attached, Wiring};
use crate::affinity;
use crate::comm::{peer_arenas, Comm};
use crate::config::Config;
use crate::device::{self, Device};
use crate::enqueue::Reach;
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
        let staged = connect_devices(devices)?;
        let sharing = device::sharing(devices)?;
        let cfg = config.resolve_within(nranks, &devices[0], device::cta_budget(&sharing))?;
        crate::netplugin::check(cfg.net_name.as_deref())?;
        device::log_sharing(&sharing, cfg.nchannels);
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
                // Every hop is in memory: where the wire's kernels run at all
                // (`Config::wire_local`), every hop encodes.
                let conns = connect(&layout, rank, &bases, &recv, &graph, &same_gpu, &[])?;
                let cpus = affinity::for_local_rank(rank, nranks);
                let wiring = Wiring {
                    conns,
                    board: boards[rank],
                    boards: boards.iter().copied().map(Some).collect(),
                    device: devices[rank].clone(),
                    reach: Reach { in_memory: true, ring_net_hops: 0 },
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
/// memory instead (`p2p::staging`, logged with the reason). Several ranks on one GPU are allowed (NCCL before 2.30 refuses them): every
/// kernel can be tested on one GPU, but the ranks' kernels must all be resident on it at
/// once, since each waits for the others (see `device::cta_budget`).
fn connect_devices(devices: &[Device]) -> Result<bool> {
    if devices.iter().any(|d| d.is_cuda() != devices[0].is_cuda()) {
        return invalid(format!(
            "the ranks of one communicator must all be on host or all on CUDA devices: {devices:?}"
        ));
    }
    let gpus = devices.iter().map(Device::gpu).collect::<Result<Vec<_>>>()?.into_iter().flatten().collect::<Vec<_>>();
    let ordinals: Vec<usize> = gpus.iter().map(|g| g.ordinal).collect();
    let can = |i: usize, j: usize| gpus[i].can_access_peer(&gpus[j]);
    if let Some(why) = p2p::staging(&ordinals, p2p::staging_forced(), can)? {
        tracing::warn!("ranks on GPUs {ordinals:?}: FIFOs staged in host memory mapped into the GPUs ({why})");
        return Ok(true);
    }
    for (a, b) in gpus.iter().flat_map(|a| gpus.iter().map(move |b| (a, b))) {
        a.enable_peer_access(b)?;
    }
    Ok(false)
}
