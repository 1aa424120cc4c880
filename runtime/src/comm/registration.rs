//! Symmetric and registered memory (NCCL's symmetric windows): buffers every rank's
//! kernels address, on which calls may run the direct algorithms.
//!
//! On a GPU, the flags areas and `alloc_symmetric`'s buffers are plain device allocations
//! (`cuMemAlloc`), which ranks of this process address as they are (peer access between
//! their GPUs is enabled at init) and ranks in other processes of the machine open through
//! CUDA IPC handles; a registered buffer (`register`) is addressed by this process's ranks
//! only (stream-ordered pool memory has no IPC handle). The kernels read every rank's
//! bases from a copy in device memory.
//!
//! Where every rank maps every rank's host arena (rank processes or threads of one host, by
//! default), an allocation is an arena block, registered: peers address it through the
//! arena they mapped at init. Elsewhere it is a shared-memory segment of its own, which
//! every rank maps once when the allocation is made (rather than one growing heap per rank
//! at equal offsets: nothing to size in advance, and freeing is exact). Arena blocks came
//! out faster at large sizes with the same direct kernel (docs/performance.md, "Host
//! buffers"; the cause is not known: neither page faults nor fallocate differ). The enqueue lookup is the same interval map either way. Ranks tell
//! each other their parts with an AllGather on the communicator itself (its own timeout
//! and failure handling), then confirm that every rank mapped every part before anyone
//! proceeds, so all ranks end with the region or all with the error.

use std::sync::{Arc, Weak};

use jitccl_codegen::Collective;

use crate::comm::{group, Comm};
use crate::device::{Device, DeviceBuffer, HostMemory, IpcHandle, IpcMapping, Memory};
use crate::element::Element;
use crate::enqueue::Call;
use crate::error::{Error, Result};
use crate::registry::{Flags, Keep, Region, Registry};
use crate::transport::shm::ShmSegment;
use jitccl_codegen::abi::SYM_FLAGS_WORDS;

/// Bytes of one rank's description of its part: words, then a segment's name or a CUDA
/// IPC handle (its 128 hex digits).
const DESC: usize = 192;
const NAME_AT: usize = 64;

/// One rank's part of a region, as it tells the others.
struct Part {
    id: u64,
    ptr: usize,
    bytes: usize,
    /// The shared-memory segment holding it, if any (else process memory).
    segment: Option<String>,
    /// Where the host arena holds it: the arena's base as this rank addresses it.
    arena_base: Option<usize>,
    /// The device allocation holding it, from its start, for other processes (CUDA).
    ipc: Option<IpcHandle>,
}

impl Part {
    /// Its wire form, from a rank on `device`.
    fn encode(&self, device: &Device) -> [u8; DESC] {
        let mut b = [0u8; DESC];
        let arena = self.arena_base.unwrap_or(0) as u64;
        let ipc = self.ipc.is_some() as u64;
        let gpu = match device {
            Device::Cuda { ordinal } => *ordinal as u64 + 1,
            Device::Host { .. } => 0,
        };
        let words =
            [std::process::id() as u64, host_id(), self.id, self.ptr as u64, self.bytes as u64, arena, ipc, gpu];
        for (i, w) in words.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let name = self.ipc.map(|h| h.encode()).or_else(|| self.segment.clone()).unwrap_or_default();
        b[NAME_AT..NAME_AT + name.len()].copy_from_slice(name.as_bytes());
        b
    }
}

/// A peer's part as received: (pid, host, id, ptr, bytes, segment name).
struct Peer {
    pid: u64,
    host: u64,
    id: u64,
    ptr: usize,
    bytes: usize,
    segment: String,
    /// Its arena's base in its own address space (0: not in an arena).
    arena_base: usize,
    /// The CUDA IPC handle of its device allocation, in its wire form (empty: none).
    ipc: String,
    /// Its GPU's ordinal + 1 (0: the host).
    gpu: u64,
}

fn decode(b: &[u8]) -> Peer {
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    let name = &b[NAME_AT..];
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    let name = String::from_utf8_lossy(&name[..end]).into_owned();
    let (segment, ipc) = if w(6) == 1 { (String::new(), name) } else { (name, String::new()) };
    Peer {
        pid: w(0),
        host: w(1),
        id: w(2),
        ptr: w(3) as usize,
        bytes: w(4) as usize,
        arena_base: w(5) as usize,
        segment,
        ipc,
        gpu: w(7),
    }
}

/// This machine, as ranks compare it (FNV-1a of the host name).
fn host_id() -> u64 {
    let mut buf = [0u8; 256];
    // SAFETY: a buffer of the length given.
    unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    buf.iter()
        .take_while(|&&c| c != 0)
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ c as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Segments get at least a page: an empty mapping is refused.
fn segment_bytes(bytes: usize) -> usize {
    bytes.max(4096)
}

/// Unregisters a region when its owner (a buffer's memory, or a `Registration`) goes.
struct Unregister {
    registry: Weak<Registry>,
    start: usize,
    id: u64,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        if let Some(r) = self.registry.upgrade() {
            r.remove(self.start, self.id);
        }
    }
}

/// Keeps a symmetric allocation's segment mapped, and unregisters it first.
struct SymmetricMemory {
    _unregister: Unregister,
    _segment: ShmSegment,
}

/// A buffer registered with [`Comm::register`]; unregistered when dropped. It keeps the
/// buffer's memory alive, since peers address it.
pub struct Registration {
    _unregister: Unregister,
    _memory: Option<Keep>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registration {}", self._unregister.id)
    }
}

impl Comm {
    /// A zeroed buffer of `len` elements in memory every rank of this communicator
    /// addresses (NCCL's symmetric memory): calls whose buffers are all symmetric or
    /// registered may run the direct algorithms, which load from and store to the peers'
    /// buffers with no FIFO in between. Collective: every rank calls it, with the same
    /// `len`, in the same order as its other allocations and registrations. Ranks on one
    /// host (on GPUs: ranks of this process, or processes that open each other's device
    /// memory through CUDA IPC); otherwise `Unsupported` on every rank. Freed (and
    /// unregistered) when the last view of it is dropped.
    pub fn alloc_symmetric<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("alloc_symmetric of {len} elements overflows")))?;
        let registry = self.registry("alloc_symmetric")?;
        if self.device().is_cuda() {
            return self.alloc_symmetric_on_gpu(&registry, len, bytes);
        }
        if let Some(buf) = registry.arena().and_then(|arena| arena_block::<T>(self, arena, len)) {
            // The registration keeps the block alive and unregisters it when the last view goes.
            let ptr = buf.byte_range().start as *mut u8;
            let reg = self.register(&buf)?;
            tracing::debug!("rank {}: symmetric buffer of {bytes} B in the host arena", self.rank());
            let mem = Memory::Host(HostMemory::mapped(ptr, bytes, Box::new(reg)));
            return Ok(DeviceBuffer::from_memory(self.device(), mem, len));
        }
        let seg = ShmSegment::create(segment_bytes(bytes))?;
        tracing::debug!("rank {}: symmetric buffer of {bytes} B in a shared-memory segment", self.rank());
        let ptr = seg.ptr();
        let id = registry.next_id();
        let part =
            Part { id, ptr: ptr as usize, bytes, segment: Some(seg.name().to_string()), arena_base: None, ipc: None };
        let region = self.share("alloc_symmetric", part, Some(&seg))?;
        registry.insert(region);
        let owner = SymmetricMemory {
            _unregister: Unregister { registry: Arc::downgrade(&registry), start: ptr as usize, id },
            _segment: seg,
        };
        let mem = Memory::Host(HostMemory::mapped(ptr, bytes, Box::new(owner)));
        Ok(DeviceBuffer::from_memory(self.device(), mem, len))
    }

    /// `alloc_symmetric` on a GPU: a plain device allocation (at least a byte, so that it
    /// has an IPC handle) that the registration's region names.
    fn alloc_symmetric_on_gpu<T: Element>(
        &self, registry: &Arc<Registry>, len: usize, bytes: usize,
    ) -> Result<DeviceBuffer<T>> {
        let dev = self.device();
        let mem = Memory::zeroed(dev, bytes.max(1), true)?;
        let (ptr, id) = (mem.ptr(), registry.next_id());
        let part = Part { id, ptr: ptr as usize, bytes, segment: None, arena_base: None, ipc: Some(mem.ipc_handle()?) };
        registry.insert(self.share("alloc_symmetric", part, None)?);
        tracing::debug!("rank {}: symmetric buffer of {bytes} B on {dev:?}", self.rank());
        // Unregistered before the memory is freed (fields drop in order).
        let owner = (Unregister { registry: Arc::downgrade(registry), start: ptr as usize, id }, mem);
        Ok(DeviceBuffer::from_memory(dev, Memory::kept(dev, ptr, bytes, Box::new(owner))?, len))
    }

    /// Registers `buf` so that calls on it may run the direct algorithms, like
    /// [`alloc_symmetric`](Self::alloc_symmetric)'s buffers. Collective: every rank
    /// registers a buffer of the same length, in the same order as its other allocations
    /// and registrations. Any buffer works when the ranks are threads of one process, and
    /// for ranks in other processes any buffer of `Device::alloc` where every rank maps
    /// every rank's host arena (else this fails with `Unsupported` on every rank: allocate
    /// with `alloc_symmetric` instead). Plain buffers there run the direct algorithms
    /// unregistered too; a registration names them as one region apart. On GPUs, ranks in
    /// other processes need `alloc_symmetric`'s buffers.
    pub fn register<T: Element>(&self, buf: &DeviceBuffer<T>) -> Result<Registration> {
        let registry = self.registry("register")?;
        let range = buf.byte_range();
        let id = registry.next_id();
        let arena_base = registry.arena().filter(|a| a.holds(&range)).map(|a| a.range.start);
        let part = Part { id, ptr: range.start, bytes: range.len(), segment: None, arena_base, ipc: None };
        let region = self.share("register", part, None)?;
        registry.insert(region);
        Ok(Registration {
            _unregister: Unregister { registry: Arc::downgrade(&registry), start: range.start, id },
            _memory: buf.keep_alive(),
        })
    }

    /// The registry, with the flags areas made (collectively) on first use.
    fn registry(&self, what: &str) -> Result<Arc<Registry>> {
        let rank = self.rank();
        if group::is_open() {
            return Err(Error::InvalidUsage(format!("{what} on rank {rank}: not inside group_start/group_end")));
        }
        let registry = self.inner(what)?.enq.sym.clone();
        if registry.flags().is_none() {
            let bytes = SYM_FLAGS_WORDS * size_of::<u64>();
            let (part, own, mem): (Part, Option<Arc<ShmSegment>>, Keep) = if self.device().is_cuda() {
                let mem = Memory::zeroed(self.device(), bytes, true)?;
                let ipc = Some(mem.ipc_handle()?);
                (
                    Part { id: 0, ptr: mem.ptr() as usize, bytes, segment: None, arena_base: None, ipc },
                    None,
                    Arc::new(mem),
                )
            } else {
                let seg = ShmSegment::create(segment_bytes(bytes))?;
                let name = Some(seg.name().to_string());
                let part = Part { id: 0, ptr: seg.ptr() as usize, bytes, segment: name, arena_base: None, ipc: None };
                let seg = Arc::new(seg);
                (part, Some(seg.clone()), seg)
            };
            let region = self.share(what, part, own.as_deref())?;
            let areas: Vec<*mut u64> = region.bases.iter().map(|&b| b.cast::<u64>()).collect();
            // The kernels read the areas where they read the region's bases.
            let table = region.kernel_bases().cast::<*mut u64>();
            registry.set_flags(Flags::new(areas, Some(table), vec![Arc::new(region) as Keep, mem]));
        }
        Ok(registry)
    }

    /// Tells every rank this rank's `part` and maps theirs: the region, on every rank, or
    /// the same error on every rank. `own`: this rank's segment, unlinked once all mapped it.
    fn share(&self, what: &str, part: Part, own: Option<&ShmSegment>) -> Result<Region> {
        let (rank, n) = (self.rank(), self.nranks());
        let parts = self.all_gather_bytes(&part.encode(self.device()), DESC)?;
        let peers: Vec<Peer> = parts.chunks(DESC).map(decode).collect();
        let arena = self.inner(what)?.enq.sym.arena().cloned();
        let mapped = map_peers(what, rank, &part, &peers, arena, self.device())
            .and_then(|(bases, keep)| region(self.device(), &part, bases, keep));
        // Every rank learns whether every rank mapped every part.
        let ok = self.all_gather_bytes(&[mapped.is_ok() as u8], 1)?;
        if let Some(own) = own {
            own.unlink();
        }
        let region = mapped?;
        if let Some(q) = (0..n).find(|&q| ok[q] == 0) {
            return Err(Error::Unsupported(format!(
                "{what} on rank {rank}: rank {q} cannot map every rank's memory (its error says why)"
            )));
        }
        Ok(region)
    }

    /// Every rank's `mine` (each `len` bytes), in rank order, through this communicator.
    fn all_gather_bytes(&self, mine: &[u8], len: usize) -> Result<Vec<u8>> {
        let dev = self.device();
        let stream = dev.stream()?;
        let send = dev.alloc_from(mine)?;
        let recv = dev.alloc::<u8>(len * self.nranks())?;
        let call = Call::checked(&self.group(), Collective::AllGather, None, &send, &recv, len, 0)?;
        self.submit(Ok(Call { internal: true, ..call }), &stream)?;
        stream.synchronize()?;
        Ok(recv.to_vec())
    }
}

/// Lets this rank's kernels (on `device`) reach peer `q`'s part `p` on another GPU of this
/// process: through peer access, which reaches plain device allocations (`alloc_symmetric`'s),
/// not the stream-ordered pool's that a registered buffer may be; or says why not.
fn reach_gpu(what: &str, rank: usize, q: usize, p: &Peer, device: &Device) -> Result<()> {
    let peer = match p.gpu.checked_sub(1) {
        Some(ordinal) => Device::Cuda { ordinal: ordinal as usize }.gpu()?,
        None => None,
    };
    let (Some(gpu), Some(peer)) = (device.gpu()?, peer) else {
        return Err(Error::Internal(format!("{what} on rank {rank}: rank {q} and this rank on different targets")));
    };
    if p.ipc.is_empty() {
        return Err(Error::Unsupported(format!(
            "{what} on rank {rank}: rank {q} is on another GPU (cuda:{}), which reaches only buffers of \
             Comm::alloc_symmetric there",
            peer.ordinal
        )));
    }
    gpu.enable_peer_access(&peer)
}

/// The region of `part` with every rank's `bases` (as mapped here, kept by `keep`). On a
/// GPU the kernels read the bases from a copy in device memory: stream-ordered pool
/// memory, whose freeing (at deregistration) waits for no kernel of another rank on the
/// GPU, unlike `cuMemFree`.
fn region(device: &Device, part: &Part, bases: Vec<*mut u8>, keep: Vec<Keep>) -> Result<Region> {
    let region = Region::new(part.id, part.ptr..part.ptr + part.bytes, bases, keep);
    if !device.is_cuda() {
        return Ok(region);
    }
    let bytes: Vec<u8> = region.bases.iter().flat_map(|&p| (p as u64).to_le_bytes()).collect();
    let mem = Memory::zeroed(device, bytes.len(), false)?;
    mem.write(0, &bytes)?;
    Ok(region.on_device(mem.ptr().cast_const().cast(), Arc::new(mem)))
}

/// A zeroed block of `len` elements in this process's host arena (`arena`: every rank's
/// arena as mapped here), or None to use a segment: an empty buffer (no arena block), or
/// one the arena refused (full).
fn arena_block<T: Element>(comm: &Comm, arena: &Region, len: usize) -> Option<DeviceBuffer<T>> {
    if len == 0 {
        return None;
    }
    let buf = comm.device().alloc::<T>(len).ok()?;
    arena.holds(&buf.byte_range()).then_some(buf)
}

/// Each rank's base address as this process addresses it, and what keeps it mapped
/// (`arena`: every rank's host arena as mapped here, where all ranks map all of them).
fn map_peers(
    what: &str, rank: usize, part: &Part, peers: &[Peer], arena: Option<Arc<Region>>, device: &Device,
) -> Result<(Vec<*mut u8>, Vec<Keep>)> {
    let me = &peers[rank];
    let (mut bases, mut keep) = (Vec::with_capacity(peers.len()), Vec::new());
    for (q, p) in peers.iter().enumerate() {
        if p.id != part.id || p.bytes != part.bytes {
            return Err(Error::InvalidArgument(format!(
                "{what} on rank {rank}: rank {q} registers {} B as its registration {}, this rank {} B as {} \
                 (every rank must make the same allocations and registrations in the same order)",
                p.bytes, p.id, part.bytes, part.id
            )));
        }
        if q == rank {
            bases.push(part.ptr as *mut u8);
        } else if p.host != me.host {
            return Err(Error::Unsupported(format!(
                "{what} on rank {rank}: rank {q} is on another host; only ranks of one host share memory"
            )));
        } else if !p.segment.is_empty() {
            let seg = ShmSegment::open(&p.segment, segment_bytes(p.bytes))?;
            bases.push(seg.ptr());
            keep.push(Arc::new(seg) as Keep);
        } else if let (Some(a), true) = (&arena, p.arena_base != 0) {
            // A buffer in the peer's arena, mapped here since init.
            bases.push(a.bases[q].wrapping_add(p.ptr - p.arena_base));
            keep.push(a.clone() as Keep);
        } else if p.pid == me.pid {
            // A thread rank of this process: its registration keeps the buffer alive while
            // it takes part in calls on it.
            if p.gpu != me.gpu {
                reach_gpu(what, rank, q, p, device)?;
            }
            bases.push(p.ptr as *mut u8);
        } else if let (false, Some(gpu)) = (p.ipc.is_empty(), device.gpu()?) {
            // A device allocation of a peer process (from its start), opened here.
            let handle = IpcHandle::decode(&p.ipc).map_err(|e| Error::Internal(format!("{what}: rank {q}: {e}")))?;
            let mapping = IpcMapping::open(&gpu, &handle, &format!("{what}: rank {q}'s memory"))?;
            bases.push(mapping.ptr());
            keep.push(Arc::new(mapping) as Keep);
        } else {
            return Err(Error::Unsupported(format!(
                "{what} on rank {rank}: rank {q} is another process, which cannot reach a buffer of \
                 process memory outside the host arenas (off, or not mapped by every rank: see the INFO log); \
                 allocate it with Comm::alloc_symmetric"
            )));
        }
    }
    Ok((bases, keep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_tells_its_segment_or_its_ipc_handle_and_never_both() {
        let part = |segment: Option<&str>, ipc: Option<IpcHandle>| Part {
            id: 7,
            ptr: 0x1000,
            bytes: 64,
            segment: segment.map(str::to_string),
            arena_base: None,
            ipc,
        };
        let (host, gpu) = (Device::host(0), Device::Cuda { ordinal: 3 });
        let handle = IpcHandle::decode(&"5a".repeat(64)).unwrap();
        let p = decode(&part(None, Some(handle)).encode(&gpu));
        assert_eq!((p.id, p.ptr, p.bytes, p.segment.as_str(), p.gpu), (7, 0x1000, 64, "", 4));
        assert_eq!(IpcHandle::decode(&p.ipc), Ok(handle), "the handle arrives whole");
        let p = decode(&part(Some("/jitccl-sym-1"), None).encode(&host));
        assert_eq!((p.segment.as_str(), p.ipc.as_str(), p.gpu), ("/jitccl-sym-1", "", 0));
        let p = decode(&part(None, None).encode(&host));
        assert!(p.segment.is_empty() && p.ipc.is_empty(), "process memory: neither");
    }
}
