//! Choosing how to run a collective: algorithm, protocol, channels and chunk size, by a
//! size rule measured on the host target (small: one-shot AllReduce or the tree, one
//! channel; large: the ring on all channels), overridable by the configuration
//! (JITCCL_ALGO / JITCCL_PROTO). The inputs are the same on every rank, so every rank makes
//! the same choice.

use jitccl_codegen::{Algorithm, Collective, Protocol};

use crate::config::Resolved;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub nchannels: usize,
    /// Elements per FIFO step.
    pub chunk_elems: u64,
}

/// Largest AllReduce (bytes per rank times ranks, what each rank receives) that takes
/// the one-shot algorithm: beyond it, moving n times the data costs more than the tree's
/// extra hops (measured on the host target at 4 ranks).
const ONESHOT_MAX_BYTES: usize = 8 << 10;

/// Data bytes one FIFO step of `proto` carries.
pub(crate) fn step_capacity(proto: Protocol, slot_bytes: usize) -> usize {
    match proto {
        Protocol::Simple => slot_bytes,
        Protocol::LL => slot_bytes / 16 * 8,
        Protocol::LL128 => slot_bytes / 128 * 120,
    }
}

/// The choice for `coll` moving `bytes` (the per-rank buffer size) in elements of
/// `elem_size` bytes. A non-`commutative` op is only ever given the ring (the tree would
/// combine in an order that is not the ring's); forcing the tree for it is refused later,
/// with the reason, by the kernel spec.
pub(crate) fn choose(
    coll: Collective,
    bytes: usize,
    elem_size: usize,
    nranks: usize,
    commutative: bool,
    cfg: &Resolved,
) -> Choice {
    let small_allreduce = coll == Collective::AllReduce && commutative && nranks > 2;
    let (algo, why) = match cfg.algo {
        Some(a) if coll.algorithms().contains(&a) => (a, "forced by configuration"),
        // One hop instead of the ring's 2(n-1), for n times the data per rank. At 2 ranks
        // the ring's 2 steps cost no more than one-shot's extra copy through its own FIFO.
        _ if small_allreduce && bytes * nranks <= ONESHOT_MAX_BYTES => {
            (Algorithm::OneShot, "bytes x ranks within the one-shot limit")
        }
        _ if small_allreduce && bytes <= 16 << 10 => (Algorithm::Tree, "<= 16 KiB"),
        _ if coll == Collective::AllReduce && !commutative => (Algorithm::Ring, "the op is not commutative"),
        _ => (Algorithm::Ring, "size rule"),
    };
    // On the host, Simple is the fastest protocol at every size (measured, 2 and 4 ranks,
    // 8 B to 1 MiB): its release/acquire costs no more than LL's flags, and it moves twice
    // the data per line. LL and LL128 are the GPU's latency protocols, where a fence costs
    // microseconds; on the host they run when forced.
    let proto = cfg.proto.unwrap_or(Protocol::Simple);
    // Point-to-point always spreads over every channel: sender and receiver must split a
    // message the same way although each launch may pair it with a different other half.
    let nchannels = if coll == Collective::SendRecv || bytes > 256 << 10 { cfg.nchannels } else { 1 };
    let chunk_elems = (step_capacity(proto, cfg.slot_bytes[proto as usize]) / elem_size) as u64;
    let choice = Choice { algo, proto, nchannels, chunk_elems };
    tracing::debug!(
        "{coll} {bytes} B x {nranks} ranks: {algo} ({why}), {proto} ({}), {nchannels} channel(s), {chunk_elems} elements/step",
        if cfg.proto.is_some() { "forced by configuration" } else { "the host's protocol" }
    );
    choice
}
