//! The host target's memory arena: every buffer this process allocates for kernels lives in
//! one memory file (memfd), reserved large and filled on demand, that ranks in other
//! processes of this host map once (`/proc/<pid>/fd/<fd>`). So a plain buffer is memory
//! every local rank addresses, and calls on plain buffers can run the direct algorithms,
//! as OpenMPI's single copy does for its users' buffers, with no registration step.
//!
//! Blocks are whole pages, handed out best fit and coalesced when freed; freed pages are
//! zeroed (small blocks) or given back to the system (hole punched), so allocations come
//! zeroed. The first page holds the arena's token, which a peer checks after mapping the
//! file: a recycled pid or another pid namespace then fails the mapping, never aliases it.
//! A process where the arena cannot be made (or `JITCCL_HOST_ARENA=0`) allocates from the
//! heap instead, always: its communicators then agree to run no direct algorithm on plain
//! buffers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, Mutex, Weak};

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};

const PAGE: usize = 4096;
/// Freed blocks up to this size are zeroed in place; larger ones are punched out.
const ZERO_IN_PLACE: usize = 64 << 10;
/// Reserved address space, as a multiple of the machine's memory: room for fragmentation.
const RESERVE_PER_RAM: usize = 4;
/// At most this much, since every local peer maps every arena: 64 ranks of 1 TiB each fit
/// a 47-bit address space with room to spare.
const RESERVE_MAX: usize = 1 << 40;

/// What a peer needs to map an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArenaId {
    pub pid: u32,
    pub fd: i32,
    pub bytes: usize,
    pub token: u64,
}

/// This process's arena.
pub(crate) struct Arena {
    file: File,
    map: MmapRaw,
    id: ArenaId,
    free: Mutex<Extents>,
}

/// Free extents (offset, length), by offset and by length.
#[derive(Default)]
struct Extents {
    by_off: BTreeMap<usize, usize>,
    by_len: BTreeSet<(usize, usize)>,
}

impl Extents {
    fn insert(&mut self, off: usize, len: usize) {
        self.by_off.insert(off, len);
        self.by_len.insert((len, off));
    }

    fn remove(&mut self, off: usize, len: usize) {
        self.by_off.remove(&off);
        self.by_len.remove(&(len, off));
    }

    /// The offset of a block of `len` bytes (best fit, lowest offset among equals).
    fn take(&mut self, len: usize) -> Option<usize> {
        let &(have, off) = self.by_len.range((len, 0)..).next()?;
        self.remove(off, have);
        if have > len {
            self.insert(off + len, have - len);
        }
        Some(off)
    }

    /// Returns a block, merged with free neighbours.
    fn give(&mut self, mut off: usize, mut len: usize) {
        if let Some((&p, &plen)) = self.by_off.range(..off).next_back() {
            if p + plen == off {
                self.remove(p, plen);
                (off, len) = (p, len + plen);
            }
        }
        if let Some(&nlen) = self.by_off.get(&(off + len)) {
            self.remove(off + len, nlen);
            len += nlen;
        }
        self.insert(off, len);
    }
}

/// The process's arena: made on first use, again in a forked child (whose parent's arena
/// it shares, so must not allocate from); `None` once it could not be made.
static ARENA: Mutex<Option<(u32, Option<Arc<Arena>>)>> = Mutex::new(None);

impl Arena {
    /// This process's arena, or `None` where it cannot have one (logged once).
    pub(crate) fn get() -> Option<Arc<Arena>> {
        let pid = std::process::id();
        let mut g = ARENA.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, a)) = g.as_ref().filter(|(p, _)| *p == pid) {
            return a.clone();
        }
        let made = if !crate::settings::HOST_ARENA.flag_or_warn() {
            tracing::info!("host arena: off (JITCCL_HOST_ARENA=0): plain buffers take the FIFO algorithms only");
            None
        } else {
            match Arena::create(pid) {
                Ok(a) => {
                    tracing::debug!("host arena: {} GiB reserved (memfd {})", a.id.bytes >> 30, a.id.fd);
                    Some(Arc::new(a))
                }
                Err(e) => {
                    tracing::warn!("host arena: {e}; plain buffers take the FIFO algorithms only");
                    None
                }
            }
        };
        *g = Some((pid, made.clone()));
        made
    }

    fn create(pid: u32) -> Result<Arena> {
        let name = c"jitccl-arena";
        // SAFETY: a valid C string; the fd returned is ours.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(sys("memfd_create")(std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        // SAFETY: sysconf has no preconditions.
        let ram = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(1) as usize * PAGE;
        let bytes = ram.saturating_mul(RESERVE_PER_RAM).min(RESERVE_MAX);
        file.set_len(bytes as u64).map_err(sys("sizing the memory file"))?;
        let map = MmapOptions::new().len(bytes).map_raw(&file).map_err(sys("mapping the memory file"))?;
        let token = token();
        // SAFETY: the first page is the header, in bounds.
        unsafe { map.as_mut_ptr().cast::<u64>().write(token) };
        let mut free = Extents::default();
        free.insert(PAGE, bytes - PAGE);
        Ok(Arena { file, map, id: ArenaId { pid, fd, bytes, token }, free: Mutex::new(free) })
    }

    pub(crate) fn id(&self) -> ArenaId {
        self.id
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// A zeroed block of at least `bytes` (> 0) bytes: its offset and length.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<(usize, usize)> {
        let len = bytes.checked_next_multiple_of(PAGE).unwrap_or(usize::MAX);
        let off = self.free.lock().unwrap_or_else(|e| e.into_inner()).take(len);
        off.map(|off| (off, len)).ok_or_else(|| Error::System {
            context: format!("allocating {bytes} bytes from the host arena ({} GiB)", self.id.bytes >> 30),
            source: std::io::ErrorKind::OutOfMemory.into(),
        })
    }

    /// Returns a block from `alloc`, zeroed again.
    pub(crate) fn free(&self, off: usize, len: usize) {
        let punched = len > ZERO_IN_PLACE && {
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            // SAFETY: a range of our own file.
            unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off as i64, len as i64) == 0 }
        };
        if !punched {
            // SAFETY: the block is in bounds, and no view of it is left.
            unsafe { std::ptr::write_bytes(self.base().add(off), 0, len) };
        }
        self.free.lock().unwrap_or_else(|e| e.into_inner()).give(off, len);
    }
}

fn token() -> u64 {
    let mut t = [0u8; 8];
    // SAFETY: a buffer of the length given.
    let got = unsafe { libc::getrandom(t.as_mut_ptr().cast(), t.len(), 0) };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    if got == 8 {
        u64::from_le_bytes(t) | 1
    } else {
        (nanos ^ (std::process::id() as u64) << 32) | 1
    }
}

fn sys(context: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::System { context: format!("host arena: {context}"), source }
}

/// A peer process's arena, mapped here.
pub(crate) struct PeerArena {
    map: MmapRaw,
    id: ArenaId,
}

// SAFETY: plain shared memory; kernels synchronize what they access.
unsafe impl Send for PeerArena {}
unsafe impl Sync for PeerArena {}

/// Peers' arenas mapped in this process, by token: each is mapped once, whatever the
/// number of communicators that reach it.
static PEERS: Mutex<Option<HashMap<u64, Weak<PeerArena>>>> = Mutex::new(None);

impl PeerArena {
    /// Maps the arena `id` of a process on this host (this process's own arena excluded).
    pub(crate) fn open(id: ArenaId) -> Result<Arc<PeerArena>> {
        let mut g = PEERS.lock().unwrap_or_else(|e| e.into_inner());
        let peers = g.get_or_insert_with(HashMap::new);
        peers.retain(|_, w| w.strong_count() > 0);
        if let Some(p) = peers.get(&id.token).and_then(Weak::upgrade) {
            return Ok(p);
        }
        let path = format!("/proc/{}/fd/{}", id.pid, id.fd);
        let what = format!("mapping process {}'s host arena ({path})", id.pid);
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(sys(&what))?;
        let len = file.metadata().map_err(sys(&what))?.len();
        if len != id.bytes as u64 {
            return Err(Error::Internal(format!("{what}: {len} B where {} B were announced", id.bytes)));
        }
        let map = MmapOptions::new().len(id.bytes).map_raw(&file).map_err(sys(&what))?;
        // SAFETY: the header page is in bounds.
        let found = unsafe { map.as_ptr().cast::<u64>().read_volatile() };
        if found != id.token {
            return Err(Error::Internal(format!("{what}: another file (its token does not match)")));
        }
        let p = Arc::new(PeerArena { map, id });
        peers.insert(id.token, Arc::downgrade(&p));
        Ok(p)
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

impl std::fmt::Debug for PeerArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerArena {:?}", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_fit_best_and_merge_when_freed() {
        let mut e = Extents::default();
        e.insert(0, 100);
        assert_eq!(e.take(30), Some(0));
        assert_eq!(e.take(30), Some(30));
        assert_eq!(e.take(50), None);
        e.give(0, 30);
        // 0..30 and 60..100 free: 30 fits the first exactly, 40 only the second.
        assert_eq!(e.take(40), Some(60));
        e.give(60, 40);
        e.give(30, 30);
        assert_eq!(e.by_off.iter().collect::<Vec<_>>(), vec![(&0, &100)], "all merged back");
        assert_eq!(e.take(100), Some(0));
    }

    #[test]
    fn blocks_come_zeroed_again_and_peers_map_the_same_memory() {
        let Some(a) = Arena::get() else { return };
        for bytes in [8, 3 * PAGE, ZERO_IN_PLACE + 1] {
            let (off, len) = a.alloc(bytes).unwrap();
            assert!(len >= bytes && len % PAGE == 0 && off % PAGE == 0);
            // SAFETY: the block just allocated.
            let s = unsafe { std::slice::from_raw_parts_mut(a.base().add(off), len) };
            assert!(s.iter().all(|&b| b == 0));
            s.fill(7);
            a.free(off, len);
            let (off2, _) = a.alloc(bytes).unwrap();
            assert_eq!(off2, off);
            // SAFETY: as above.
            assert!(unsafe { std::slice::from_raw_parts(a.base().add(off2), len) }.iter().all(|&b| b == 0));
            a.free(off2, len);
        }
        // A second mapping of the same file (as a peer process makes) sees the same bytes.
        let peer = PeerArena::open(a.id()).unwrap();
        let (off, len) = a.alloc(8).unwrap();
        // SAFETY: in bounds of both mappings.
        unsafe {
            a.base().add(off).write(42);
            assert_eq!(peer.base().add(off).read_volatile(), 42);
        }
        a.free(off, len);
        assert!(Arc::ptr_eq(&peer, &PeerArena::open(a.id()).unwrap()), "mapped once");
        let wrong = ArenaId { token: a.id().token ^ 2, ..a.id() };
        drop(peer);
        assert!(PeerArena::open(wrong).unwrap_err().to_string().contains("token"));
        assert!(a.alloc(usize::MAX).is_err());
    }
}
