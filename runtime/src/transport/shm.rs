//! Shared-memory segments, the host analogue of CUDA IPC: the owner creates a segment in
//! /dev/shm and publishes its name; peers on the same host map it by name. The owner
//! unlinks the name as soon as every peer has mapped it (the mappings live on), so a
//! process that dies later leaves nothing behind; a segment still linked when its owner
//! drops it is unlinked then.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memmap2::MmapMut;

use crate::error::{sys, Error, Result};

const DIR: &str = "/dev/shm";

pub(crate) struct ShmSegment {
    map: MmapMut,
    name: String,
    /// Whether this process created the name and must unlink it.
    owned_link: AtomicBool,
}

impl ShmSegment {
    /// A new zero-filled segment of `bytes` bytes with a unique name.
    pub(crate) fn create(bytes: usize) -> Result<ShmSegment> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let name = format!("jitccl-{}-{}-{nanos:08x}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let path = PathBuf::from(DIR).join(&name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(sys(format!("creating shared memory {}", path.display())))?;
        let seg = ShmSegment { map: map(&file, &path, Some(bytes))?, name, owned_link: AtomicBool::new(true) };
        tracing::debug!("shm segment {} created, {bytes} B", seg.name);
        Ok(seg)
    }

    /// Maps a peer's segment, checking that it has the expected size.
    pub(crate) fn open(name: &str, bytes: usize) -> Result<ShmSegment> {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(Error::Internal(format!("bad shared memory name '{name}'")));
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
        Ok(ShmSegment { map: map(&file, &path, None)?, name: name.to_string(), owned_link: AtomicBool::new(false) })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
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

fn map(file: &File, path: &std::path::Path, set_len: Option<usize>) -> Result<MmapMut> {
    if let Some(bytes) = set_len {
        file.set_len(bytes as u64).map_err(sys(format!("sizing {}", path.display())))?;
    }
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
        let c = ShmSegment::create(4096).unwrap();
        let path = PathBuf::from(DIR).join(c.name());
        drop(c);
        assert!(!path.exists(), "a dropped segment must not leave its name behind");
    }
}
