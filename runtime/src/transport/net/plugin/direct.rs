//! GPU memory straight to a network plugin (NCCL's GPU Direct RDMA): where each connector of
//! a rank over a plugin keeps its Simple slots, and whether its receives are flushed.
//!
//! A GPU rank's connector goes direct where the channel's device reports `NCCL_PTR_CUDA`,
//! lies within `JITCCL_NET_GDR_LEVEL` of the GPU and, for a sender, may read GPU memory
//! (`JITCCL_NET_GDR_READ`): its Simple slots are then in device memory, registered with the
//! plugin as `NCCL_PTR_CUDA`, and the plugin moves them itself. A direct receiver flushes each
//! Simple step (`iflush`) before posting it to the kernel, where NCCL would: the device asks
//! for it (`forceFlush`, v9 and up; v8 reports none), `JITCCL_NET_FORCE_FLUSH`, a GPU before
//! compute capability 9.0, or a GPU reaching its CPU over C2C with the device within PXB.
//! Everything else is staged through page-locked host memory mapped into the GPU, as before.
//! LL and LL128 steps always are: the proxy stores them line by line, flags last, which
//! their readers poll in host memory.
//!
//! `regMrDmaBuf` is not used: every plugin that reports `NCCL_PTR_CUDA` takes `regMr` of
//! device memory (NCCL falls back to it too), while dma-buf needs the driver's export of each
//! range as a file descriptor, page-aligned, which no plugin jitccl runs with asks for; a
//! device that reports `NCCL_PTR_DMABUF` without `NCCL_PTR_CUDA` is staged, and the log says so.

use std::fmt;

use jitccl_codegen::abi::{Conn, STEPS};

use super::super::fifo::SIMPLE;
use super::nearest::{self, Choice};
use crate::device::{Device, Memory};
use crate::error::{Error, Result};
use crate::graph::GlobalSystem;
use crate::netplugin::{DeviceProps, Network, PTR_CUDA, PTR_DMABUF};
use crate::settings;
use crate::topo::PathType;
use crate::transport::connect::{Link, RankConns, Side};
use crate::transport::layout::Layout;

/// NCCL's settings of the direct path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The farthest path between a GPU and a device that still goes direct.
    pub level: PathType,
    /// Whether sends read GPU memory: None leaves it to the compute capability.
    pub read: Option<bool>,
    /// Every direct receive is flushed.
    pub force_flush: bool,
}

/// NCCL's old numbers for `NCCL_NET_GDR_LEVEL`, by value.
const OLD_LEVELS: [PathType; 5] = [PathType::Loc, PathType::Pix, PathType::Pxb, PathType::Phb, PathType::Sys];

/// A level as `NCCL_NET_GDR_LEVEL` takes it: a path type's name, or an old number.
fn level(v: &str) -> std::result::Result<PathType, String> {
    if let Ok(n) = v.parse::<u64>() {
        return Ok(OLD_LEVELS[(n as usize).min(OLD_LEVELS.len() - 1)]);
    }
    match PathType::parse(v) {
        Some(t) if t <= PathType::Sys => Ok(t),
        _ => Err("expected LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or 0 to 4".into()),
    }
}

impl Settings {
    pub fn from_env() -> Result<Settings> {
        let read = settings::NET_GDR_READ.parse_with(settings::parse::flag)?;
        Ok(Settings {
            level: settings::NET_GDR_LEVEL.parse_with(level)?.unwrap_or(PathType::P2c),
            read,
            force_flush: settings::NET_FORCE_FLUSH.flag(None)?,
        })
    }

    /// What a host rank decides with: it never reads the settings of GPU memory.
    fn default_host() -> Settings {
        Settings { level: PathType::P2c, read: None, force_flush: false }
    }
}

/// What a GPU rank's choice depends on besides the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gpu {
    /// Compute capability as `major * 10 + minor`.
    pub arch: u32,
    /// It has an NVLink peer or is its host's only GPU (where NCCL lets sends read GPU
    /// memory before compute capability 8.0).
    pub nvlink_or_alone: bool,
    /// It reaches its CPU over C2C.
    pub c2c: bool,
}

/// One connector end's facts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    pub side: Side,
    /// None: a host rank.
    pub gpu: Option<Gpu>,
    pub device: &'a DeviceProps,
    /// The plugin's interface version.
    pub version: u32,
    pub has_iflush: bool,
    /// The path from the GPU to the device, where the topology places both.
    pub distance: Option<PathType>,
}

/// Where a connector's Simple slots lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slots {
    /// Host memory (a host rank's FIFO, or a GPU rank's staged one), registered as
    /// `NCCL_PTR_HOST`.
    Host,
    /// Device memory registered as `NCCL_PTR_CUDA`; `flush`: each Simple step received is
    /// flushed before the kernel may read it.
    Gpu { flush: bool },
}

/// A connector end's slots, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub slots: Slots,
    pub why: String,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slots {
            Slots::Host => write!(f, "host memory: {}", self.why),
            Slots::Gpu { .. } => write!(f, "direct, GPU memory registered as NCCL_PTR_CUDA: {}", self.why),
        }
    }
}

fn staged(why: String) -> Route {
    Route { slots: Slots::Host, why: format!("staged through page-locked host memory: {why}") }
}

/// The route of one connector end, as NCCL decides GPU Direct RDMA and its flush.
pub(crate) fn decide(f: &Facts, s: &Settings) -> Route {
    let Some(gpu) = f.gpu else {
        return Route { slots: Slots::Host, why: "a host rank's FIFO".into() };
    };
    let name = &f.device.name;
    if f.device.ptr_support & PTR_CUDA == 0 {
        let dmabuf = if f.device.ptr_support & PTR_DMABUF != 0 { " (NCCL_PTR_DMABUF alone is not used)" } else { "" };
        return staged(format!(
            "device {name} does not report NCCL_PTR_CUDA (ptrSupport {:#x}){dmabuf}",
            f.device.ptr_support
        ));
    }
    if f.side == Side::Send {
        match s.read {
            Some(false) => return staged("JITCCL_NET_GDR_READ=0".into()),
            None if gpu.arch < 80 && !gpu.nvlink_or_alone => {
                return staged(format!(
                    "sends read GPU memory by default from compute capability 8.0 (this GPU: sm_{}) or with an \
                     NVLink peer; JITCCL_NET_GDR_READ=1 allows it",
                    gpu.arch
                ))
            }
            _ => {}
        }
    }
    let (distance, how_far) = match f.distance {
        Some(d) => (d, d.to_string()),
        None => (PathType::Sys, "SYS (the topology cannot place it)".to_string()),
    };
    if distance > s.level {
        return staged(format!("device {name} is {how_far} from the GPU, beyond JITCCL_NET_GDR_LEVEL {}", s.level));
    }
    let near = format!("device {name} reaches GPU memory, {how_far} from the GPU (JITCCL_NET_GDR_LEVEL {})", s.level);
    if f.side == Side::Send {
        return Route { slots: Slots::Gpu { flush: false }, why: near };
    }
    let flush_why = if f.device.force_flush {
        Some("the device asks for it (forceFlush)".to_string())
    } else if s.force_flush {
        Some("JITCCL_NET_FORCE_FLUSH=1".into())
    } else if gpu.arch < 90 {
        let v8 = if f.version < 9 { "; v8 reports no forceFlush" } else { "" };
        Some(format!("compute capability below 9.0 (sm_{}){v8}", gpu.arch))
    } else if gpu.c2c && distance <= PathType::Pxb {
        Some("the GPU reaches its CPU over C2C".into())
    } else {
        None
    };
    match flush_why {
        Some(why) if !f.has_iflush => {
            staged(format!("a receive into GPU memory needs iflush here ({why}), and the plugin's table has none"))
        }
        Some(why) => {
            Route { slots: Slots::Gpu { flush: true }, why: format!("{near}; iflush after each receive: {why}") }
        }
        None => Route { slots: Slots::Gpu { flush: false }, why: format!("{near}; no iflush (sm_{})", gpu.arch) },
    }
}

/// One connector over the plugin: its FIFO as its kernel sees it, and where its Simple
/// slots lie.
#[derive(Debug, Clone, Copy)]
pub(crate) struct End {
    pub link: Link,
    pub fifo: Conn,
    pub slots: Slots,
}

// SAFETY: the FIFO's pointers are addresses of segments the communicator keeps while its
// proxy runs; the ends go to the proxy thread, the only one that uses them there.
unsafe impl Send for End {}

/// A rank's connectors over a plugin: the device of each channel, and each connector's route.
pub(crate) struct Plan {
    pub choice: Choice,
    pub sends: Vec<End>,
    pub recvs: Vec<End>,
}

/// What places a rank's connectors.
pub(crate) struct Placing<'a> {
    pub rank: usize,
    pub device: &'a Device,
    pub global: &'a GlobalSystem,
    pub layout: &'a Layout,
    /// Per rank, whether it is reached over the network.
    pub net: &'a [bool],
    /// This rank's receive segment in host memory, and on a GPU its device segment of the
    /// same layout (where a direct receiver's Simple slots are, at the same offsets).
    pub own: *mut u8,
    pub own_device: Option<*mut u8>,
}

impl Plan {
    /// Chooses each channel's device of `net` and each net connector's route, moves the
    /// Simple slots of direct ones in `conns` (the kernels' tables) to device memory, and
    /// returns that memory (for direct senders), which must outlive the connectors.
    pub fn new(net: &Network, at: &Placing, conns: &mut RankConns) -> Result<(Plan, Option<Memory>)> {
        let gpu = gpu_facts(at)?;
        let settings = if gpu.is_some() { Settings::from_env()? } else { Settings::default_host() };
        Plan::place(net, at, gpu, &settings, conns, |bytes| Memory::zeroed(at.device, bytes, true))
    }

    /// [`new`](Self::new) for a rank with `gpu`'s facts, under `settings`; `alloc` gives the
    /// direct senders' memory.
    fn place(
        net: &Network, at: &Placing, gpu: Option<Gpu>, settings: &Settings, conns: &mut RankConns,
        alloc: impl FnOnce(usize) -> Result<Memory>,
    ) -> Result<(Plan, Option<Memory>)> {
        let rank = at.rank;
        let choice = nearest::choose(at.global, rank, net.devices(), at.layout.nchannels);
        let route = |side: Side, l: &Link| {
            let dev = choice.per_channel[l.chan];
            let facts = Facts {
                side,
                gpu,
                device: &net.devices()[dev],
                version: net.version(),
                has_iflush: net.has_iflush(),
                distance: choice.distance[l.chan],
            };
            decide(&facts, settings)
        };
        let (send_links, recv_links) = (conns.sends.clone(), conns.recvs.clone());
        let mut ends = |side: Side, links: &[Link]| -> Vec<(End, Route)> {
            links
                .iter()
                .filter(|l| at.net[l.peer])
                .map(|l| {
                    let fifo = *conns.end_mut(side, *l).expect("a connector of the rank");
                    let r = route(side, l);
                    (End { link: *l, fifo, slots: r.slots }, r)
                })
                .collect()
        };
        let (mut sends, mut recvs) = (ends(Side::Send, &send_links), ends(Side::Recv, &recv_links));
        let simple = at.layout.slot_bytes[SIMPLE] * STEPS;
        let direct_sends = sends.iter().filter(|(e, _)| e.slots != Slots::Host).count();
        let memory = if direct_sends > 0 && simple > 0 { Some(alloc(direct_sends * simple)?) } else { None };
        let mut next = memory.as_ref().map(Memory::ptr);
        for (e, _) in sends.iter_mut().filter(|(e, _)| e.slots != Slots::Host) {
            let Some(p) = next else { break };
            e.fifo.buf[SIMPLE] = p;
            // SAFETY: one Simple FIFO per direct sender, within the allocation.
            next = Some(unsafe { p.add(simple) });
        }
        for (e, _) in recvs.iter_mut().filter(|(e, _)| e.slots != Slots::Host) {
            let base = at.own_device.ok_or_else(|| {
                Error::Internal(format!("rank {rank}: a direct receive from rank {} without device FIFOs", e.link.peer))
            })?;
            let offset = e.fifo.buf[SIMPLE] as usize - at.own as usize;
            // SAFETY: the device segment has the host segment's layout and size.
            e.fifo.buf[SIMPLE] = unsafe { base.add(offset) };
        }
        if gpu.is_none() {
            tracing::info!(
                "rank {rank}: {} send and {} receive connector(s) over {}: host memory (a host rank)",
                sends.len(),
                recvs.len(),
                net.name()
            );
        }
        for (side, list) in [(Side::Send, &sends), (Side::Recv, &recvs)] {
            for (e, r) in list {
                let l = e.link;
                *conns.end_mut(side, l).expect("a connector of the rank") = e.fifo;
                if gpu.is_none() {
                    continue;
                }
                let dev = choice.per_channel[l.chan];
                let (dir, to) = if side == Side::Send { ("send", "to") } else { ("receive", "from") };
                tracing::info!(
                    "rank {rank}: {:?} {dir} {to} rank {} on channel {} over {} device {dev}: {r}",
                    l.edge,
                    l.peer,
                    l.chan,
                    net.name()
                );
            }
        }
        let strip = |v: Vec<(End, Route)>| -> Vec<End> { v.into_iter().map(|(e, _)| e).collect() };
        Ok((Plan { choice, sends: strip(sends), recvs: strip(recvs) }, memory))
    }
}

/// The facts of this rank's GPU, if it is on one: its compute capability, and from its
/// host's topology whether it has an NVLink peer (or no other GPU) and reaches its CPU over C2C.
fn gpu_facts(at: &Placing) -> Result<Option<Gpu>> {
    let Some(g) = at.device.gpu()? else { return Ok(None) };
    let sys = &at.global.hosts[at.global.ranks[at.rank].host];
    let node = at.global.node_of(at.rank);
    let ty = |to: usize| node.and_then(|n| sys.path(n, to)).map(|p| p.ty);
    let nvlink = sys.gpus.iter().any(|o| Some(o.node) != node && ty(o.node) == Some(PathType::Nvl));
    Ok(Some(Gpu {
        arch: g.arch,
        nvlink_or_alone: sys.gpus.len() <= 1 || nvlink,
        c2c: sys.cpus.iter().any(|c| ty(c.node) == Some(PathType::C2c)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netplugin::{self, PTR_HOST};

    fn device(ptr_support: u32, force_flush: bool) -> DeviceProps {
        DeviceProps {
            name: "nic0".into(),
            pci_path: None,
            guid: 0,
            ptr_support,
            speed_mbps: 100_000,
            latency_us: 0.0,
            max_comms: 1,
            max_recvs: 1,
            reg_is_global: false,
            force_flush,
        }
    }

    const HOPPER: Gpu = Gpu { arch: 90, nvlink_or_alone: true, c2c: false };
    const AMPERE: Gpu = Gpu { arch: 80, nvlink_or_alone: false, c2c: false };
    const VOLTA_PCIE: Gpu = Gpu { arch: 70, nvlink_or_alone: false, c2c: false };
    const GRACE_HOPPER: Gpu = Gpu { arch: 90, nvlink_or_alone: true, c2c: true };
    const DEFAULTS: Settings = Settings { level: PathType::P2c, read: None, force_flush: false };

    fn facts(side: Side, gpu: Option<Gpu>, device: &DeviceProps) -> Facts<'_> {
        Facts { side, gpu, device, version: 12, has_iflush: true, distance: Some(PathType::Pix) }
    }

    fn slots(f: &Facts, s: &Settings) -> Slots {
        decide(f, s).slots
    }

    #[test]
    fn a_host_rank_never_goes_direct_whatever_the_device_reports() {
        let d = device(PTR_HOST | PTR_CUDA, true);
        for side in [Side::Send, Side::Recv] {
            let r = decide(&facts(side, None, &d), &Settings { force_flush: true, read: Some(true), ..DEFAULTS });
            assert_eq!(r.slots, Slots::Host, "{r}");
            assert!(r.why.contains("host rank"), "{r}");
        }
    }

    #[test]
    fn a_gpu_goes_direct_only_where_the_device_reports_nccl_ptr_cuda() {
        let host_only = device(PTR_HOST, false);
        let r = decide(&facts(Side::Recv, Some(HOPPER), &host_only), &DEFAULTS);
        assert_eq!(r.slots, Slots::Host);
        assert!(r.why.contains("does not report NCCL_PTR_CUDA (ptrSupport 0x1)"), "{r}");
        let dmabuf = device(PTR_HOST | PTR_DMABUF, false);
        let r = decide(&facts(Side::Send, Some(HOPPER), &dmabuf), &DEFAULTS);
        assert_eq!(r.slots, Slots::Host);
        assert!(r.why.contains("NCCL_PTR_DMABUF alone is not used"), "{r}");
        let cuda = device(PTR_HOST | PTR_CUDA, false);
        assert_eq!(slots(&facts(Side::Send, Some(HOPPER), &cuda), &DEFAULTS), Slots::Gpu { flush: false });
        assert_eq!(slots(&facts(Side::Recv, Some(HOPPER), &cuda), &DEFAULTS), Slots::Gpu { flush: false });
    }

    #[test]
    fn the_level_bounds_the_path_and_an_unplaced_device_counts_as_sys() {
        let d = device(PTR_CUDA, false);
        let at = |distance, level| {
            let f = Facts { distance, ..facts(Side::Recv, Some(HOPPER), &d) };
            decide(&f, &Settings { level, ..DEFAULTS })
        };
        assert_eq!(at(Some(PathType::Pxb), PathType::P2c).slots, Slots::Gpu { flush: false });
        assert_eq!(at(Some(PathType::P2c), PathType::P2c).slots, Slots::Gpu { flush: false });
        let r = at(Some(PathType::Phb), PathType::P2c);
        assert_eq!(r.slots, Slots::Host);
        assert!(r.why.contains("is PHB from the GPU, beyond JITCCL_NET_GDR_LEVEL P2C"), "{r}");
        let r = at(None, PathType::Phb);
        assert_eq!(r.slots, Slots::Host, "{r}");
        assert!(r.why.contains("SYS (the topology cannot place it)"), "{r}");
        assert_eq!(at(None, PathType::Sys).slots, Slots::Gpu { flush: false });
        assert_eq!(at(Some(PathType::Pix), PathType::Loc).slots, Slots::Host, "LOC: nothing is near enough");
    }

    #[test]
    fn sends_read_gpu_memory_as_nccl_allows() {
        let d = device(PTR_CUDA, false);
        let send = |gpu, read| slots(&facts(Side::Send, Some(gpu), &d), &Settings { read, ..DEFAULTS });
        assert_eq!(send(AMPERE, None), Slots::Gpu { flush: false }, "from 8.0 by default");
        assert_eq!(send(VOLTA_PCIE, None), Slots::Host, "before 8.0 without NVLink");
        assert_eq!(send(Gpu { nvlink_or_alone: true, ..VOLTA_PCIE }, None), Slots::Gpu { flush: false });
        assert_eq!(send(VOLTA_PCIE, Some(true)), Slots::Gpu { flush: false }, "asked for");
        assert_eq!(send(HOPPER, Some(false)), Slots::Host, "JITCCL_NET_GDR_READ=0");
        // Reads are the sender's: a receiver writes GPU memory whatever the setting says.
        let recv = slots(&facts(Side::Recv, Some(VOLTA_PCIE), &d), &Settings { read: Some(false), ..DEFAULTS });
        assert_eq!(recv, Slots::Gpu { flush: true });
    }

    #[test]
    fn receives_flush_where_nccl_does() {
        let recv = |gpu, d: &DeviceProps, version, s: &Settings| {
            decide(&Facts { version, ..facts(Side::Recv, Some(gpu), d) }, s)
        };
        let plain = device(PTR_CUDA, false);
        let forced = device(PTR_CUDA, true);
        assert_eq!(recv(HOPPER, &plain, 12, &DEFAULTS).slots, Slots::Gpu { flush: false });
        let r = recv(HOPPER, &forced, 12, &DEFAULTS);
        assert_eq!(r.slots, Slots::Gpu { flush: true });
        assert!(r.why.contains("forceFlush"), "{r}");
        let r = recv(HOPPER, &plain, 12, &Settings { force_flush: true, ..DEFAULTS });
        assert_eq!(r.slots, Slots::Gpu { flush: true });
        assert!(r.why.contains("JITCCL_NET_FORCE_FLUSH=1"), "{r}");
        let r = recv(AMPERE, &plain, 12, &DEFAULTS);
        assert_eq!(r.slots, Slots::Gpu { flush: true });
        assert!(r.why.contains("below 9.0 (sm_80)") && !r.why.contains("v8"), "{r}");
        // v8 has no forceFlush: the compute capability decides.
        let r = recv(AMPERE, &plain, 8, &DEFAULTS);
        assert!(r.slots == Slots::Gpu { flush: true } && r.why.contains("v8 reports no forceFlush"), "{r}");
        assert_eq!(recv(HOPPER, &plain, 8, &DEFAULTS).slots, Slots::Gpu { flush: false });
        assert_eq!(recv(GRACE_HOPPER, &plain, 12, &DEFAULTS).slots, Slots::Gpu { flush: true }, "C2C, near NIC");
        let far = Facts { distance: Some(PathType::P2c), ..facts(Side::Recv, Some(GRACE_HOPPER), &plain) };
        assert_eq!(slots(&far, &DEFAULTS), Slots::Gpu { flush: false }, "C2C, NIC behind the CPU");
        // Senders never flush.
        let send = slots(&facts(Side::Send, Some(AMPERE), &forced), &Settings { force_flush: true, ..DEFAULTS });
        assert_eq!(send, Slots::Gpu { flush: false });
    }

    #[test]
    fn a_flush_the_table_cannot_make_stages_the_receive() {
        let d = device(PTR_CUDA, true);
        let f = Facts { has_iflush: false, ..facts(Side::Recv, Some(HOPPER), &d) };
        let r = decide(&f, &DEFAULTS);
        assert_eq!(r.slots, Slots::Host);
        assert!(r.why.contains("the plugin's table has none"), "{r}");
        // Without a flush to make, its absence does not matter; nor to a sender.
        let d = device(PTR_CUDA, false);
        assert_eq!(
            slots(&Facts { has_iflush: false, ..facts(Side::Recv, Some(HOPPER), &d) }, &DEFAULTS),
            Slots::Gpu { flush: false }
        );
        assert_eq!(
            slots(&Facts { has_iflush: false, ..facts(Side::Send, Some(AMPERE), &d) }, &DEFAULTS),
            Slots::Gpu { flush: false }
        );
    }

    /// A GPU rank's plan, its memory standing in host memory: direct senders' Simple slots
    /// move to a region each of the allocation, direct receivers' to the device segment at
    /// the same offset, in the kernels' tables as in the proxy's ends; the rest stays.
    #[test]
    fn a_plan_moves_the_simple_slots_of_direct_connectors_alone() {
        use crate::config::Config;
        use crate::device::HostMemory;
        use crate::graph::{Device as Place, Graph, RankPlace};
        use crate::topo::System;
        use crate::transport::connect::connect;

        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topo/hgx-h100-8gpu-8nic.xml");
        let sys = System::from_xml_file(fixture).unwrap();
        let places = (0..3).map(|g| RankPlace { host: 0, device: Place::Gpu(g) }).collect();
        let global = GlobalSystem::new(vec![sys], places).unwrap();
        let n = 3;
        let cfg =
            Config { nchannels: Some(2), slot_bytes: Some([4096, 512, 1024]), ..Config::default() }.resolve(n).unwrap();
        let layout = Layout::new(n, &cfg, &Device::host(0));
        let segs: Vec<HostMemory> = (0..n + 1).map(|_| HostMemory::zeroed(layout.segment_bytes()).unwrap()).collect();
        let bases: Vec<*mut u8> = segs[..n].iter().map(HostMemory::ptr).collect();
        let (own, own_device) = (bases[0], segs[n].ptr());
        let mut conns = connect(&layout, 0, &bases, &vec![own; n], &Graph::uniform(n, 2), &[], &[]).unwrap();
        let before = (conns.channels.clone(), conns.p2p_send.clone(), conns.p2p_recv.clone());
        // Rank 1 shares memory with rank 0; rank 2 is over the network.
        let net_peers = [false, false, true];
        let at = Placing {
            rank: 0,
            device: &Device::host(0),
            global: &global,
            layout: &layout,
            net: &net_peers,
            own,
            own_device: Some(own_device),
        };
        let net = netplugin::of_library(jitccl_plugins::EDGE_GPU, 0x91a);
        let settings = Settings { level: PathType::Sys, ..DEFAULTS };
        let mut given = 0;
        let (plan, memory) = Plan::place(&net, &at, Some(HOPPER), &settings, &mut conns, |bytes| {
            given = bytes;
            HostMemory::zeroed(bytes).map(Memory::Host)
        })
        .unwrap();
        let memory = memory.expect("memory for the direct senders");
        let simple = layout.slot_bytes[SIMPLE] * STEPS;
        assert!(!plan.sends.is_empty() && !plan.recvs.is_empty());
        assert_eq!(given, plan.sends.len() * simple, "one Simple FIFO per sender");
        assert!(plan.sends.iter().chain(&plan.recvs).all(|e| e.link.peer == 2), "only the network's peer");
        let mut starts: Vec<usize> = Vec::new();
        for e in &plan.sends {
            assert_eq!(e.slots, Slots::Gpu { flush: false });
            let p = e.fifo.buf[SIMPLE] as usize - memory.ptr() as usize;
            assert!(p.is_multiple_of(simple) && p < given, "{e:?}");
            starts.push(p);
            let want = layout.end(bases[2], e.link.chan, e.link.edge, 2);
            assert_eq!(
                (e.fifo.head, e.fifo.buf[1], e.fifo.buf[2]),
                (want.head, want.buf[1], want.buf[2]),
                "LL, LL128, counters stay"
            );
            assert_eq!(conns.end_mut(Side::Send, e.link).unwrap().buf, e.fifo.buf, "the kernels' table");
        }
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), plan.sends.len(), "a region each");
        for e in &plan.recvs {
            // EdgeGpu asks for flushes (forceFlush).
            assert_eq!(e.slots, Slots::Gpu { flush: true });
            let want = layout.end(own, e.link.chan, e.link.edge, 2);
            let offset = want.buf[SIMPLE] as usize - own as usize;
            assert_eq!(e.fifo.buf[SIMPLE] as usize, own_device as usize + offset, "the device segment's slots");
            assert_eq!((e.fifo.tail, e.fifo.buf[1]), (want.tail, want.buf[1]));
            assert_eq!(conns.end_mut(Side::Recv, e.link).unwrap().buf, e.fifo.buf, "the kernels' table");
        }
        // Connectors to the peer in memory are untouched.
        for c in 0..2 {
            assert_eq!(conns.p2p_send[1][c].buf, before.1[1][c].buf);
            assert_eq!(conns.p2p_recv[1][c].buf, before.2[1][c].buf);
        }
        // A host rank's plan moves nothing and allocates nothing.
        let mut host_conns = connect(&layout, 0, &bases, &vec![own; n], &Graph::uniform(n, 2), &[], &[]).unwrap();
        let (plan, memory) =
            Plan::place(&net, &at, None, &settings, &mut host_conns, |_| panic!("a host rank allocates")).unwrap();
        assert!(memory.is_none() && plan.sends.iter().chain(&plan.recvs).all(|e| e.slots == Slots::Host));
        assert_eq!(host_conns.channels[0].ring_send.buf, before.0[0].ring_send.buf);
    }

    #[test]
    fn levels_read_as_nccl_reads_them() {
        assert_eq!(level("PXB"), Ok(PathType::Pxb));
        assert_eq!(level("sys"), Ok(PathType::Sys));
        assert_eq!(level("P2C"), Ok(PathType::P2c));
        assert_eq!(level("0"), Ok(PathType::Loc));
        assert_eq!(level("1"), Ok(PathType::Pix));
        assert_eq!(level("3"), Ok(PathType::Phb));
        assert_eq!(level("9"), Ok(PathType::Sys));
        assert!(level("NET").is_err() && level("near").is_err());
    }
}
