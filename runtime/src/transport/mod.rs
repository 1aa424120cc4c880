//! Transports: where a connector's FIFO lives and how both ends reach it. Every rank owns
//! one segment holding all the FIFOs it receives on, at offsets every rank can compute
//! (`layout`); `connect` turns the segments' addresses into a rank's connector tables. In
//! one process a segment is plain memory (`p2p`: both ends share pointers); processes on a
//! host map each other's (`shm`), or on GPUs open each other's device FIFOs through CUDA
//! IPC handles (`cuda_ipc`); across hosts a proxy thread moves FIFO steps over TCP
//! between a sender's local shadow of the peer's FIFO and the peer's own (`net`).
//!
//! Which one connects a pair is decided in one place, `select`, from what the ranks told
//! each other at init (`Endpoint`): like NCCL's transport table, each transport says
//! whether it can connect the two, the first that can (in the order p2p, cuda_ipc, shm,
//! net) wins,
//! and it maps the peer's segment here. Both ends decide from the same facts, so they agree.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::device::Device;
use crate::error::{Error, Result};
use cuda_ipc::CudaEnd;

pub(crate) mod connect;
pub(crate) mod cuda_ipc;
pub(crate) mod layout;
pub(crate) mod net;
pub(crate) mod p2p;
pub(crate) mod shm;

/// How ranks on one host connect (`JITCCL_TRANSPORT`): shared memory unless `net` is forced.
fn force_net() -> Result<bool> {
    Ok(crate::settings::TRANSPORT.choice(None)? == "net")
}

/// What identifies this machine as seen from here: ranks with the same id share /dev/shm
/// and reach each other through memory. Hosts in separate network namespaces on one
/// kernel (test hosts) count as different machines: they talk over the network.
fn host_id() -> String {
    let netns = std::fs::read_link("/proc/self/ns/net").map(|p| p.display().to_string()).unwrap_or_default();
    format!("{}/{netns}", machine_id())
}

/// What identifies the machine itself (its CPUs), namespaces aside.
fn machine_id() -> String {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    format!("{}/{}", read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/random/boot_id"))
}

/// What a rank tells its peers at init, so that both ends of every pair choose alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The machine and network namespace: ranks with the same host share /dev/shm.
    pub host: String,
    /// Ranks created together in one process share this id, and their segments' memory.
    pub group: Option<u64>,
    /// The name of the rank's receive segment in /dev/shm, for peers on its host.
    pub segment: String,
    /// `JITCCL_TRANSPORT=net`: TCP even where memory could be shared.
    pub net_only: bool,
    /// The rank's process, for peers on its host to watch.
    pub pid: u32,
    /// A rank on a GPU: its device and the FIFOs its CUDA IPC peers send into.
    pub cuda: Option<CudaEnd>,
}

impl Endpoint {
    /// A rank of a group of processes, receiving in the shared segment `segment` (and on a
    /// GPU, in the device FIFOs of `cuda`).
    pub(crate) fn of_process(segment: &str, cuda: Option<CudaEnd>) -> Result<Endpoint> {
        let (host, segment, pid) = (host_id(), segment.to_string(), std::process::id());
        Ok(Endpoint { host, group: None, segment, net_only: force_net()?, pid, cuda })
    }

    /// The endpoint of every rank of a new group created together in this process.
    pub(crate) fn of_group() -> Endpoint {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let group = Some(NEXT.fetch_add(1, Ordering::Relaxed));
        Endpoint {
            host: host_id(),
            group,
            segment: String::new(),
            net_only: false,
            pid: std::process::id(),
            cuda: None,
        }
    }

    /// The machine the rank runs on (its CPUs), whatever its network namespace: the host
    /// id without the namespace that `host_id` appends.
    pub(crate) fn machine(&self) -> &str {
        self.host.rsplit_once('/').map_or(self.host.as_str(), |(machine, _)| machine)
    }

    /// The bytes exchanged at init (fields joined by a separator no field holds).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let group = self.group.map_or(String::new(), |g| g.to_string());
        let pid = self.pid.to_string();
        let cuda = self.cuda.as_ref().map_or(String::new(), CudaEnd::encode);
        [self.host.as_str(), &group, &self.segment, if self.net_only { "net" } else { "" }, &pid, &cuda]
            .join("\u{1f}")
            .into_bytes()
    }

    /// Reads what rank `from` sent.
    pub(crate) fn decode(from: usize, b: &[u8]) -> Result<Endpoint> {
        let bad =
            |why: &str| Error::Internal(format!("rank {from} sent a malformed endpoint ({} bytes): {why}", b.len()));
        let s = std::str::from_utf8(b).map_err(|_| bad("not UTF-8"))?;
        let f: Vec<&str> = s.split('\u{1f}').collect();
        let [host, group, segment, net, pid, cuda] = f[..] else { return Err(bad("not 6 fields")) };
        let group = if group.is_empty() { None } else { Some(group.parse().map_err(|_| bad("group"))?) };
        let pid = pid.parse().map_err(|_| bad("pid"))?;
        let cuda = if cuda.is_empty() { None } else { Some(CudaEnd::decode(cuda).map_err(|e| bad(&e))?) };
        Ok(Endpoint { host: host.into(), group, segment: segment.into(), net_only: net == "net", pid, cuda })
    }
}

/// What a transport needs to reach a peer's receive segment from here.
pub(crate) struct AttachCtx<'a> {
    /// The rank attaching (for errors).
    pub rank: usize,
    pub bytes: usize,
    /// This rank's device: kernels on it must reach what is attached.
    pub device: &'a Device,
    pub endpoints: &'a [Endpoint],
    /// The segments of ranks created together in this process, if any.
    pub local: Option<&'a [*mut u8]>,
}

/// A peer's receive segment as mapped here, and what keeps the mapping alive.
pub(crate) type Attached = (*mut u8, Option<Box<dyn Send + Sync>>);

/// One transport (NCCL's `struct ncclTransport`).
pub(crate) trait Transport: Sync {
    fn name(&self) -> &'static str;
    /// Why this transport can connect `me` to `peer`, or None when it cannot.
    fn can_connect(&self, me: &Endpoint, peer: &Endpoint) -> Option<&'static str>;
    /// Maps `peer`'s receive segment here.
    fn attach(&self, ctx: &AttachCtx, peer: usize) -> Result<Attached>;
    /// Whether the peer is reached through the net proxy.
    fn is_net(&self) -> bool {
        false
    }
    /// Where `peer`'s failure board is mapped here, when it is not at the start of the
    /// segment `attach` maps (device FIFOs keep their board in host memory).
    fn attach_board(&self, _ctx: &AttachCtx, _peer: usize) -> Result<Option<Attached>> {
        Ok(None)
    }
    /// Whether this rank receives from the peer in its device segment (else in the
    /// segment its endpoint names).
    fn receives_in_device(&self) -> bool {
        false
    }
}

/// The table, in order of preference.
static TRANSPORTS: [&dyn Transport; 4] = [&p2p::P2p, &cuda_ipc::CudaIpc, &shm::Shm, &net::Net];

/// The transport that connects `me` to `peer`, and why.
pub(crate) fn select(me: &Endpoint, peer: &Endpoint) -> (&'static dyn Transport, &'static str) {
    for t in TRANSPORTS {
        if let Some(why) = t.can_connect(me, peer) {
            return (t, why);
        }
    }
    // Net connects any two ranks: the loop always returns.
    (&net::Net, "no other transport can")
}

/// Whether every pair of `endpoints` reaches each other through memory (no pair through
/// the network): the same answer on every rank, which holds them all.
pub(crate) fn all_in_memory(endpoints: &[Endpoint]) -> bool {
    endpoints.iter().enumerate().all(|(p, a)| endpoints[p + 1..].iter().all(|b| !select(a, b).0.is_net()))
}

/// How many hops of `ring` (ranks in ring order, the last sending to the first) go through
/// the network: the same answer on every rank.
pub(crate) fn net_hops(endpoints: &[Endpoint], ring: &[usize]) -> usize {
    let n = ring.len();
    if n < 2 {
        return 0;
    }
    (0..n).filter(|&i| select(&endpoints[ring[i]], &endpoints[ring[(i + 1) % n]]).0.is_net()).count()
}

/// The transport both ends pick for a pair, checking that they agree.
#[cfg(test)]
pub(crate) fn pick_agreed(a: &Endpoint, b: &Endpoint) -> &'static str {
    let (t, _) = select(a, b);
    assert_eq!(t.name(), select(b, a).0.name(), "both ends must agree");
    t.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, group: Option<u64>, net_only: bool) -> Endpoint {
        Endpoint { host: host.into(), group, segment: "jitccl-1-2-3".into(), net_only, pid: 7, cuda: None }
    }

    #[test]
    fn the_table_picks_the_closest_transport_alike_on_both_ends() {
        let pick = pick_agreed;
        assert_eq!(pick(&ep("h", Some(1), false), &ep("h", Some(1), false)), "p2p");
        assert_eq!(pick(&ep("h", Some(1), false), &ep("h", Some(2), false)), "shm");
        assert_eq!(pick(&ep("h", None, false), &ep("h", None, false)), "shm");
        assert_eq!(pick(&ep("h", None, false), &ep("other", None, false)), "net");
        assert_eq!(pick(&ep("h", None, true), &ep("h", None, true)), "net");
        let e = ep("host/ns", Some(7), true);
        assert_eq!(Endpoint::decode(3, &e.encode()).unwrap(), e);
        let err = Endpoint::decode(3, b"only\x1ftwo").unwrap_err().to_string();
        assert!(err.contains("rank 3 sent a malformed endpoint"), "{err}");
    }

    #[test]
    fn a_communicator_is_in_memory_where_no_pair_uses_the_network() {
        let (h, other, forced) = (ep("h", None, false), ep("other", None, false), ep("h", None, true));
        assert!(all_in_memory(&[h.clone(), h.clone(), h.clone()]));
        assert!(all_in_memory(std::slice::from_ref(&forced)), "one rank has no hops");
        assert!(!all_in_memory(&[h.clone(), h.clone(), other]), "another host");
        assert!(!all_in_memory(&[h.clone(), forced]), "JITCCL_TRANSPORT=net");
    }

    #[test]
    fn hosts_in_namespaces_of_one_machine_are_that_machine() {
        let (a, b) = (ep("box/boot-1/net:[1]", None, false), ep("box/boot-1/net:[2]", None, false));
        assert_eq!(a.machine(), "box/boot-1");
        assert_eq!(a.machine(), b.machine());
        assert!(!all_in_memory(&[a, b]), "each namespace its own host");
        assert_ne!(ep("box/boot-2/net:[1]", None, false).machine(), "box/boot-1", "rebooted: another machine");
        let own = Endpoint::of_process("", None).unwrap();
        assert_eq!(own.machine(), machine_id());
    }

    #[test]
    fn a_ring_crosses_the_network_once_per_hop_between_hosts() {
        let (a, b) = (ep("a", None, false), ep("b", None, false));
        let eps = [a.clone(), a, b.clone(), b];
        assert_eq!(net_hops(&eps, &[0, 1, 2, 3]), 2, "each host's ranks together");
        assert_eq!(net_hops(&eps, &[0, 2, 1, 3]), 4, "interleaved");
        assert_eq!(net_hops(&eps, &[0, 1]), 0, "one host");
        assert_eq!(net_hops(&eps, &[2]), 0, "one rank");
    }
}
