//! Shared-memory segments, the host analogue of CUDA IPC: the owner creates a segment in
//! /dev/shm and publishes its name; peers on the same host map it by name. The owner
//! unlinks the name as soon as every peer has mapped it (the mappings live on), so a
//! process that dies later leaves nothing behind; a segment still linked when its owner
//! drops it is unlinked then. A process killed between creating and unlinking leaves its
//! name: [`sweep`] removes such names (the survivors of a failed init, and every process
//! that creates its first segment, call it).
//!
//! Each segment is mapped once per process, whatever the number of ranks in it that use it
//! ([`MAPPED`]): 256 ranks as threads would otherwise make 65 280 mappings, past the
//! kernel's default limit of 65 530 per process.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use memmap2::MmapMut;

use crate::error::{sys, Error, Result};
use crate::transport::{AttachCtx, Attached, Endpoint, Transport};

/// Processes on one host: the peer's segment is mapped by name from /dev/shm.
pub(crate) struct Shm;

impl Transport for Shm {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn can_connect(&self, me: &Endpoint, peer: &Endpoint) -> Option<&'static str> {
        (me.host == peer.host && !me.net_only && !peer.net_only).then_some("same host: shared memory")
    }

    fn attach(&self, ctx: &AttachCtx, peer: usize) -> Result<Attached> {
        let seg = ShmSegment::open(&ctx.endpoints[peer].segment, ctx.bytes)?;
        Ok((seg.ptr(), Some(Box::new(seg))))
    }
}

const DIR: &str = "/dev/shm";

/// One mapping of a segment in this process.
struct Mapping {
    map: MmapMut,
    name: String,
    /// Whether this process created the segment (its owner rank lives here).
    created: bool,
}

/// Every segment mapped in this process, by name.
static MAPPED: Mutex<Option<HashMap<String, Weak<Mapping>>>> = Mutex::new(None);

fn mapped() -> MutexGuard<'static, Option<HashMap<String, Weak<Mapping>>>> {
    MAPPED.lock().unwrap_or_else(|e| e.into_inner())
}

impl Mapping {
    fn register(map: MmapMut, name: &str, created: bool) -> Arc<Mapping> {
        let m = Arc::new(Mapping { map, name: name.to_string(), created });
        mapped().get_or_insert_with(HashMap::new).insert(name.to_string(), Arc::downgrade(&m));
        m
    }

    fn find(name: &str) -> Option<Arc<Mapping>> {
        mapped().as_ref()?.get(name)?.upgrade()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let mut g = mapped();
        if let Some(m) = g.as_mut() {
            // Names are unique, but a dead entry is all that may be removed.
            if m.get(&self.name).is_some_and(|w| w.strong_count() == 0) {
                m.remove(&self.name);
            }
        }
    }
}

pub(crate) struct ShmSegment {
    map: Arc<Mapping>,
    name: String,
    /// Whether this process created the name and must unlink it.
    owned_link: AtomicBool,
}

impl ShmSegment {
    /// Bytes free for new segments (None where that cannot be read).
    pub(crate) fn available() -> Option<u64> {
        available(DIR)
    }

    /// A new zero-filled segment of `bytes` bytes with a unique name.
    pub(crate) fn create(bytes: usize) -> Result<ShmSegment> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(sweep);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("jitccl-{}-{}-{seq}-{nanos:08x}", std::process::id(), pid_namespace().unwrap_or(0));
        let path = PathBuf::from(DIR).join(&name);
        // Only this user's processes may map it: it holds their data.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(sys(format!("creating shared memory {}", path.display())))?;
        let map = reserve(&file, &path, bytes).and_then(|()| map(&file, &path)).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        let seg = ShmSegment { map: Mapping::register(map, &name, true), name, owned_link: AtomicBool::new(true) };
        tracing::debug!("shm segment {} created, {bytes} B", seg.name);
        Ok(seg)
    }

    /// Maps a peer's segment, checking that it has the expected size.
    pub(crate) fn open(name: &str, bytes: usize) -> Result<ShmSegment> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(Error::Internal(format!("bad shared memory name '{name}'")));
        }
        let share = |map| ShmSegment { map, name: name.to_string(), owned_link: AtomicBool::new(false) };
        if let Some(m) = Mapping::find(name) {
            if m.map.len() != bytes {
                return Err(Error::Internal(format!(
                    "shared memory {name} holds {} B, {bytes} B expected",
                    m.map.len()
                )));
            }
            return Ok(share(m));
        }
        let path = PathBuf::from(DIR).join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(sys(format!("opening a peer's shared memory {}", path.display())))?;
        let len = file.metadata().map_err(sys(format!("reading the size of {}", path.display())))?.len();
        if len != bytes as u64 {
            return Err(Error::Internal(format!("shared memory {name} holds {len} B, {bytes} B expected")));
        }
        Ok(share(Mapping::register(map(&file, &path)?, name, false)))
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.map.as_ptr() as *mut u8
    }

    /// Whether the segment `name` was created in this process (by a rank that is a thread
    /// of it) and is still mapped.
    pub(crate) fn is_created_here(name: &str) -> bool {
        Mapping::find(name).is_some_and(|m| m.created)
    }

    /// Removes the name (once every peer has mapped the segment).
    pub(crate) fn unlink(&self) {
        if self.owned_link.swap(false, Ordering::AcqRel) {
            let path = PathBuf::from(DIR).join(&self.name);
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!("cannot unlink shared memory {}: {e}", path.display());
            }
        }
    }
}

/// Removes the names in /dev/shm of this user's segments whose creating process has
/// ended (or is ending) without unlinking them. Only names made in this PID namespace are
/// judged: there a process number names the same process for every rank.
pub(crate) fn sweep() {
    let Some(ns) = pid_namespace() else { return };
    let Ok(dir) = std::fs::read_dir(DIR) else { return };
    // SAFETY: a plain call.
    let me = unsafe { libc::geteuid() };
    for entry in dir.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let Some((pid, seg_ns)) = name.to_str().and_then(creator) else { continue };
        let ours = || entry.metadata().is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == me);
        if seg_ns == ns && pid != std::process::id() && has_ended(pid) && ours() {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => tracing::info!("removed {}, left by process {pid}, which ended", entry.path().display()),
                Err(e) => tracing::debug!("cannot remove {}: {e}", entry.path().display()),
            }
        }
    }
}

/// The creating process and its PID namespace, from a segment's name.
fn creator(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_prefix("jitccl-")?.split('-');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// This process's PID namespace (its inode number), if the system says.
fn pid_namespace() -> Option<u64> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    link.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Whether process `pid` is gone, a zombie, or exiting (its descriptors, and so its
/// peers' connections, close before it becomes a zombie).
fn has_ended(pid: u32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    // "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold spaces.
    let mut after = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace();
    let state = after.next().unwrap_or("");
    let flags = after.nth(5).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    matches!(state, "Z" | "X" | "x") || flags & PF_EXITING != 0
}

/// Gives the new segment its size with every page reserved now: a sparse file in a
/// /dev/shm too small for it would kill whichever rank first touches a missing page with
/// SIGBUS, long after init.
fn reserve(file: &File, path: &Path, bytes: usize) -> Result<()> {
    // SAFETY: a plain call on an open descriptor.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC => Err(Error::System {
            context: format!(
                "not enough shared memory: need {bytes} bytes in {DIR}, have {} (for {}; enlarge {DIR}, e.g. docker's --shm-size, or lower JITCCL_BUFFSIZE or JITCCL_NCHANNELS)",
                available(DIR).map_or("an unknown amount".into(), |b| b.to_string()),
                path.display()
            ),
            source: std::io::Error::from_raw_os_error(rc),
        }),
        // A file system without fallocate: size it sparse.
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(bytes as u64).map_err(sys(format!("sizing {}", path.display()))),
        _ => Err(sys(format!("reserving {bytes} bytes for {}", path.display()))(std::io::Error::from_raw_os_error(rc))),
    }
}

/// Bytes free for an unprivileged user in the file system of `dir`.
fn available(dir: &str) -> Option<u64> {
    let c = std::ffi::CString::new(dir).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a struct to fill.
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

fn map(file: &File, path: &Path) -> Result<MmapMut> {
    // SAFETY: the segment is only ever accessed through raw pointers by kernels, which
    // synchronize with acquire/release counters and flags, as device memory is.
    unsafe { MmapMut::map_mut(file) }.map_err(sys(format!("mapping {}", path.display())))
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        self.unlink();
    }
}

// SAFETY: plain shared memory; see `map`.
unsafe impl Send for ShmSegment {}
unsafe impl Sync for ShmSegment {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_see_each_others_writes_and_names_are_removed() {
        let a = ShmSegment::create(8192).unwrap();
        let b = ShmSegment::open(a.name(), 8192).unwrap();
        // SAFETY: both map 8192 bytes of the same segment.
        unsafe {
            *a.ptr().add(100) = 42;
            assert_eq!(*b.ptr().add(100), 42);
        }
        assert!(ShmSegment::open(a.name(), 4096).is_err(), "size mismatch must be refused");
        a.unlink();
        assert!(!PathBuf::from(DIR).join(a.name()).exists());
        // SAFETY: the mapping outlives the name.
        unsafe { assert_eq!(*b.ptr().add(100), 42) };
        assert_eq!(b.ptr(), a.ptr(), "one mapping per process");
        assert!(ShmSegment::is_created_here(a.name()));
        let c = ShmSegment::create(4096).unwrap();
        let path = PathBuf::from(DIR).join(c.name());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a segment must be private to its user");
        drop(c);
        assert!(!path.exists(), "a dropped segment must not leave its name behind");
    }

    #[test]
    fn names_left_by_ended_processes_are_swept_and_others_kept() {
        let ns = pid_namespace().expect("a PID namespace");
        // A process that has ended: a child, reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let left = |pid: u32, ns: u64| {
            let name = format!("jitccl-{pid}-{ns}-0-sweeptest");
            std::fs::write(PathBuf::from(DIR).join(&name), b"").unwrap();
            PathBuf::from(DIR).join(name)
        };
        let (gone, alive, other_ns) = (left(dead, ns), left(std::process::id(), ns), left(dead, ns + 1));
        let live_peer = left(1, ns);
        sweep();
        assert!(!gone.exists(), "an ended process's name stays");
        for kept in [&alive, &other_ns, &live_peer] {
            assert!(kept.exists(), "{} was removed", kept.display());
            std::fs::remove_file(kept).unwrap();
        }
        let own = ShmSegment::create(4096).unwrap();
        assert_eq!(creator(own.name()), Some((std::process::id(), ns)), "{}", own.name());
    }

    #[test]
    fn a_segment_larger_than_dev_shm_is_refused_with_sizes_and_leaves_nothing() {
        // More than the whole file system holds, which tmpfs refuses before allocating.
        let c = std::ffi::CString::new(DIR).unwrap();
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid path and a struct to fill.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        let size = st.f_blocks as u64 * st.f_frsize as u64;
        let err = ShmSegment::create((size + (1 << 30)) as usize).err().expect("more than /dev/shm holds").to_string();
        assert!(err.contains("not enough shared memory: need") && err.contains("in /dev/shm, have"), "{err}");
        let path = err.split("(for ").nth(1).and_then(|r| r.split(';').next()).expect("the error names the segment");
        assert!(!Path::new(path).exists(), "the refused segment {path} was left behind");
    }
}
