//! Choosing how to run a collective: algorithm, protocol, channels and chunk size. For now
//! a size rule (small: one-shot AllReduce, latency protocols, one channel; large: the ring,
//! Simple, all channels),
//! overridable by the configuration (JITCCL_ALGO / JITCCL_PROTO). The inputs are the same
//! on every rank, so every rank makes the same choice.

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
/// the one-shot algorithm: measured on the host target, LL moves data slowly enough that
/// beyond this the tree's fewer bytes win.
const ONESHOT_MAX_BYTES: usize = 4 << 10;

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
        _ if small_allreduce && bytes * nranks <= ONESHOT_MAX_BYTES => (Algorithm::OneShot, "bytes x ranks <= 4 KiB"),
        _ if small_allreduce && bytes <= 16 << 10 => (Algorithm::Tree, "<= 16 KiB"),
        _ if coll == Collective::AllReduce && !commutative => (Algorithm::Ring, "the op is not commutative"),
        _ => (Algorithm::Ring, "size rule"),
    };
    let proto = cfg.proto.unwrap_or(if bytes <= 64 << 10 {
        Protocol::LL
    } else if bytes <= 1 << 20 {
        Protocol::LL128
    } else {
        Protocol::Simple
    });
    // Point-to-point always spreads over every channel: sender and receiver must split a
    // message the same way although each launch may pair it with a different other half.
    let nchannels = if coll == Collective::SendRecv || bytes > 256 << 10 { cfg.nchannels } else { 1 };
    let chunk_elems = (step_capacity(proto, cfg.slot_bytes[proto as usize]) / elem_size) as u64;
    let choice = Choice { algo, proto, nchannels, chunk_elems };
    tracing::debug!(
        "{coll} {bytes} B x {nranks} ranks: {algo} ({why}), {proto} ({}), {nchannels} channel(s), {chunk_elems} elements/step",
        if cfg.proto.is_some() { "forced by configuration" } else { "size rule" }
    );
    choice
}
