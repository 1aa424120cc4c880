//! The on-disk kernel cache: compiled objects stored under a key made of the source hash,
//! the target and the compiler's identity, so a second process reuses them and any change
//! to the templates, the op's source or the compiler misses.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

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
        match std::env::var_os("JITCCL_CACHE_DIR") {
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
        let key: String = h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect();
        let sub = target.replace(':', "-");
        self.dir.join(sub).join(format!("{key}.{ext}"))
    }
}
