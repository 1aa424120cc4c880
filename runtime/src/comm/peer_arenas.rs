//! Plain buffers as registered memory: at init, the ranks of a communicator on one host
//! map each other's host arena (`device::Arena`, where every host buffer lives) and register
//! it as one region with the same id everywhere, so a call on plain buffers may run the
//! direct algorithms (the tuner still weighs them against the FIFO ones).
//!
//! All ranks end with the region or all without it: a rank without an arena, one reached
//! over the network, or one that cannot map a peer's arena turns it off for every rank,
//! which then decide the same way for every call. (One rank running a direct kernel while
//! another runs a FIFO one would wait out the timeout.)
//!
//! The direct kernels' flags areas are shared-memory segments, not arena blocks: a rank
//! leaves a kernel's last barrier once it has seen every peer arrive, and may then destroy
//! its communicator before the slowest peer has read its own arrival; a segment stays
//! readable while any peer maps it, where a freed arena block is zeroed.

use std::sync::Arc;

use jitccl_codegen::abi::{SYM_FLAGS_WORDS, SYM_MAX_RANKS};

use crate::bootstrap::Bootstrap;
use crate::device::{Arena, ArenaId, PeerArena};
use crate::error::{Error, Result};
use crate::registry::{Flags, Keep, Region, Registry};
use crate::transport::shm::ShmSegment;

/// Bytes of a rank's description: a flag, its arena, its flags segment's name.
const DESC: usize = 128;
const NAME_AT: usize = 32;
/// A flags area: a line per channel and a record per peer (at least a page: an empty
/// mapping is refused).
const FLAGS_BYTES: usize = if SYM_FLAGS_WORDS * 8 > 4096 { SYM_FLAGS_WORDS * 8 } else { 4096 };

/// One rank's arena and flags area.
struct Local {
    arena: Arc<Arena>,
    flags: Arc<ShmSegment>,
}

impl Local {
    fn new() -> Result<Option<Local>> {
        let Some(arena) = Arena::get() else { return Ok(None) };
        Ok(Some(Local { arena, flags: Arc::new(ShmSegment::create(FLAGS_BYTES)?) }))
    }

    fn range(&self) -> std::ops::Range<usize> {
        let base = self.arena.base() as usize;
        base..base + self.arena.id().bytes
    }
}

/// A rank's arena and flags segment as it tells the others (`None`: it shares none).
fn encode(local: Option<&Local>) -> Result<[u8; DESC]> {
    let mut b = [0u8; DESC];
    if let Some(l) = local {
        let (id, name) = (l.arena.id(), l.flags.name().as_bytes());
        if name.len() >= DESC - NAME_AT {
            return Err(Error::Internal(format!("shared-memory segment name {:?} is too long", l.flags.name())));
        }
        b[0] = 1;
        b[4..8].copy_from_slice(&id.pid.to_le_bytes());
        b[8..12].copy_from_slice(&id.fd.to_le_bytes());
        b[16..24].copy_from_slice(&(id.bytes as u64).to_le_bytes());
        b[24..32].copy_from_slice(&id.token.to_le_bytes());
        b[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
    }
    Ok(b)
}

fn decode(b: &[u8]) -> Option<(ArenaId, String)> {
    if b.len() != DESC || b[0] != 1 {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
    let id = ArenaId { pid: u32_at(4), fd: u32_at(8) as i32, bytes: u64_at(16) as usize, token: u64_at(24) };
    let name = &b[NAME_AT..];
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    Some((id, String::from_utf8_lossy(&name[..end]).into_owned()))
}

/// Per rank, the base of its arena and its flags area as mapped here, and what keeps them.
struct Mapped {
    bases: Vec<*mut u8>,
    areas: Vec<*mut u64>,
    keep: Vec<Keep>,
    flags: Vec<Keep>,
}

fn map_all(rank: usize, local: &Local, all: &[(ArenaId, String)]) -> Result<Mapped> {
    let own = local.arena.id();
    let mut m = Mapped { bases: Vec::new(), areas: Vec::new(), keep: Vec::new(), flags: Vec::new() };
    for (q, (id, name)) in all.iter().enumerate() {
        let peer = |e: Error| Error::Unsupported(format!("rank {rank}, peer {q}: {e}"));
        if *id == own {
            m.bases.push(local.arena.base());
        } else {
            let p = PeerArena::open(*id).map_err(peer)?;
            m.bases.push(p.base());
            m.keep.push(p as Keep);
        }
        let seg = ShmSegment::open(name, FLAGS_BYTES).map_err(peer)?;
        m.areas.push(seg.ptr().cast());
        m.flags.push(Arc::new(seg) as Keep);
    }
    Ok(m)
}

/// Registers every rank's arena with `registry` (this rank's, of a communicator of
/// processes) where all ranks can: `shareable` is false where this rank reaches a peer
/// over the network or runs on a GPU. Collective through the bootstrap; every rank logs
/// the outcome and why.
pub(super) fn share_processes(bs: &Bootstrap, rank: usize, shareable: bool, registry: &Registry) -> Result<()> {
    let nranks = bs.nranks();
    let local = if shareable && nranks > 1 && nranks <= SYM_MAX_RANKS { Local::new()? } else { None };
    let all: Vec<Option<(ArenaId, String)>> =
        bs.all_gather(&encode(local.as_ref())?)?.iter().map(|b| decode(b)).collect();
    let fifo_only = |why: String| tracing::info!("rank {rank}: plain buffers take the FIFO algorithms only ({why})");
    // Every rank sees the same descriptors, so all stop here alike.
    let (Some(local), Some(all)) = (local, all.iter().cloned().collect::<Option<Vec<_>>>()) else {
        let q = all.iter().position(Option::is_none).unwrap_or(rank);
        fifo_only(format!(
            "rank {q} has no host arena: JITCCL_HOST_ARENA=0, none could be made, a peer over the network, or a GPU"
        ));
        return Ok(());
    };
    let mapped = map_all(rank, &local, &all);
    let oks = bs.all_gather(&[mapped.is_ok() as u8])?;
    // Every rank has mapped (or failed to map) every flags segment: the names can go.
    local.flags.unlink();
    let m = match mapped {
        Err(e) => {
            fifo_only(format!("this rank cannot map every arena: {e}"));
            return Ok(());
        }
        Ok(m) => m,
    };
    if let Some(q) = oks.iter().position(|b| b.first() != Some(&1)) {
        fifo_only(format!("rank {q} cannot map every arena"));
        return Ok(());
    }
    install(registry, &local, m.bases, m.keep, Flags::new(m.areas, None, m.flags));
    tracing::info!("rank {rank}: plain buffers may run the direct algorithms (every rank's host arena mapped)");
    Ok(())
}

/// Registers the arena of this process with each of `registries` (the ranks of a
/// communicator of threads, in rank order).
pub(super) fn share_threads(registries: &[&Registry]) -> Result<()> {
    let n = registries.len();
    if !(2..=SYM_MAX_RANKS).contains(&n) {
        return Ok(());
    }
    let Some(locals) = (0..n).map(|_| Local::new()).collect::<Result<Option<Vec<_>>>>()? else {
        return Ok(());
    };
    let areas: Vec<*mut u64> = locals.iter().map(|l| l.flags.ptr().cast()).collect();
    for l in &locals {
        l.flags.unlink();
    }
    // Every rank's registry keeps every flags area, which all of them address.
    let all: Vec<Keep> = locals.iter().map(|l| l.flags.clone() as Keep).collect();
    for (reg, local) in registries.iter().zip(&locals) {
        install(reg, local, vec![local.arena.base(); n], Vec::new(), Flags::new(areas.clone(), None, all.clone()));
    }
    Ok(())
}

fn install(registry: &Registry, local: &Local, bases: Vec<*mut u8>, mut keep: Vec<Keep>, flags: Flags) {
    keep.push(local.arena.clone() as Keep);
    registry.set_flags(flags);
    registry.set_arena(Region::new(registry.next_id(), local.range(), bases, keep));
}
