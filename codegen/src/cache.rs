//! The on-disk kernel cache: compiled objects stored under a key made of the source hash,
//! the target and the compiler's identity, so a second process reuses them and any change
//! to the templates, the op's source or the compiler misses.
//!
//! Each entry has a sidecar (`<entry>.sum`: its length and SHA-256) written after it, both
//! atomically (by rename), so a truncated, emptied or altered entry (a full disk, a killed
//! copy, a stray edit) is found before it is loaded, and compiled again. Files being written
//! are named `.build-*`; those a killed process left behind are removed later.
//!
//! Processes that miss the same entry at once (the ranks of one job, started together)
//! compile it once: each takes the entry's lock (`<entry>.lock`, an advisory `flock` the
//! system releases when its holder dies), and looks again before compiling.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jitccl_settings::CACHE_DIR;
use sha2::{Digest, Sha256};

/// Prefix of the folders and files of entries being built or written.
pub const BUILD_PREFIX: &str = ".build-";
/// Age after which a `.build-*` leftover belongs to a killed process: a kernel compiles in
/// seconds, and a folder's time changes as its files are written.
const STALE_BUILD: Duration = Duration::from_secs(10 * 60);

/// How long a process waits for another to finish compiling an entry before it compiles
/// the entry itself: far longer than a compile takes, short of a hang.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// An entry's lock, held while one process compiles and stores it; released when dropped.
#[derive(Debug)]
pub struct EntryLock {
    _file: std::fs::File,
}

/// What the cache holds at a path.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Missing,
    /// The entry's bytes, as recorded when it was stored.
    Hit(Vec<u8>),
    /// A damaged or unverifiable entry, and why.
    Bad(String),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sidecar's content for an entry: `<length> <sha256>`.
fn record(bytes: &[u8]) -> String {
    format!("{} {}\n", bytes.len(), hex(&Sha256::digest(bytes)))
}

fn sum_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".sum");
    p.into()
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename: a
/// reader sees the old file or the whole new one.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().ok_or(std::io::ErrorKind::InvalidInput)?;
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(BUILD_PREFIX).tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Where compiled kernels are kept (`JITCCL_CACHE_DIR`, else `<user cache dir>/jitccl`).
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskCache { dir: dir.into() }
    }

    /// The cache the environment asks for: `JITCCL_CACHE_DIR` (empty disables it), else the
    /// user's cache folder, else none.
    pub fn from_env() -> Option<Self> {
        match CACHE_DIR.given_os() {
            Some(d) if d.is_empty() => None,
            Some(d) => Some(DiskCache::new(d)),
            None => dirs::cache_dir().map(|d| DiskCache::new(d.join("jitccl"))),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the artifact for `source` built by `compiler_id` for `target`, with extension `ext`.
    pub fn path(&self, source: &str, target: &str, compiler_id: &str, ext: &str) -> PathBuf {
        let mut h = Sha256::new();
        for part in [source, target, compiler_id] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        let key = hex(&h.finalize()[..16]);
        let sub = target.replace(':', "-");
        self.dir.join(sub).join(format!("{key}.{ext}"))
    }

    /// Reads the entry at `path` and checks it against its recorded length and SHA-256.
    pub fn lookup(&self, path: &Path) -> Lookup {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Lookup::Missing,
            Err(e) => return Lookup::Bad(format!("unreadable: {e}")),
        };
        let Ok(want) = std::fs::read_to_string(sum_path(path)) else {
            return Lookup::Bad("no length and checksum recorded (an interrupted write?)".into());
        };
        let have = record(&bytes);
        if want == have {
            return Lookup::Hit(bytes);
        }
        match want.split(' ').next() {
            Some(len) if len != bytes.len().to_string() => {
                Lookup::Bad(format!("{} bytes instead of the {len} recorded", bytes.len()))
            }
            _ => Lookup::Bad("the content does not match the recorded SHA-256".into()),
        }
    }

    /// Stores `bytes` at `path`, then its length and checksum (both atomically).
    pub fn store(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        write_atomic(path, bytes)?;
        write_atomic(&sum_path(path), record(bytes).as_bytes())
    }

    /// Takes the lock of the entry at `path`, waiting while another process holds it (it is
    /// compiling the entry): at most `LOCK_WAIT`, after which (or where locks cannot be
    /// taken) `None` says to go on without it, at the cost of a second compile.
    pub fn lock(&self, path: &Path) -> Option<EntryLock> {
        self.lock_within(path, LOCK_WAIT)
    }

    fn lock_within(&self, path: &Path, wait: Duration) -> Option<EntryLock> {
        use std::os::fd::AsRawFd;
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        let open = || {
            std::fs::create_dir_all(path.parent()?).ok()?;
            std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&name).ok()
        };
        let Some(file) = open() else {
            tracing::debug!("cannot open the lock of {}: compiling without it", path.display());
            return None;
        };
        let start = std::time::Instant::now();
        loop {
            // SAFETY: a plain call on an open descriptor.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Some(EntryLock { _file: file });
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                tracing::debug!("cannot lock {}: {e}: compiling without the lock", path.display());
                return None;
            }
            if start.elapsed() >= wait {
                tracing::warn!(
                    "another process has been compiling {} for {} s: compiling it here too",
                    path.display(),
                    wait.as_secs()
                );
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Removes `.build-*` leftovers of processes killed while compiling or writing an entry
    /// (only old ones: a recent one may be another process's work in progress).
    pub fn remove_stale_builds(&self) {
        let Ok(subdirs) = std::fs::read_dir(&self.dir) else { return };
        for sub in subdirs.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            let Ok(entries) = std::fs::read_dir(sub.path()) else { continue };
            for e in entries.flatten() {
                if !e.file_name().to_string_lossy().starts_with(BUILD_PREFIX) {
                    continue;
                }
                let age = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
                if age.is_none_or(|a| a <= STALE_BUILD) {
                    continue;
                }
                let path = e.path();
                let res = if e.file_type().is_ok_and(|t| t.is_dir()) {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                match res {
                    Ok(()) => tracing::info!(path = %path.display(), "removed the leftover of an interrupted compile"),
                    Err(e) => tracing::debug!(path = %path.display(), "cannot remove a stale build: {e}"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lock_is_held_by_one_at_a_time_and_waits_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path());
        let path = cache.path("src", "host", "cc", "so");
        let held = cache.lock(&path).expect("a free lock");
        // Another holder (another open file, as in another process) waits, then gives up.
        let start = std::time::Instant::now();
        assert!(cache.lock_within(&path, Duration::from_millis(100)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(100));
        // Released on drop: the next one takes it at once.
        drop(held);
        assert!(cache.lock_within(&path, Duration::ZERO).is_some());
        // Entries and their locks are separate files.
        assert_eq!(cache.lookup(&path), Lookup::Missing);
    }
}
