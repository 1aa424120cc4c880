//! [`JobKey`]: the secret a job's connections prove that they know.

use std::fmt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::settings::{SettingError, AUTH_KEY, AUTH_KEY_FILE};

/// Size of a job key in bytes.
pub const KEY_BYTES: usize = 32;
/// Shortest secret `JITCCL_AUTH_KEY` (or its file) may hold.
pub const MIN_SECRET_CHARS: usize = 16;

/// A job's key: 256 bits, made fresh from the OS's randomness or derived from a secret the
/// ranks were given. Never printed (its `Debug` shows nothing of it).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobKey([u8; KEY_BYTES]);

/// Why no key could be had from the environment, or made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// `JITCCL_AUTH_KEY` is refused (too short, not UTF-8); the error never holds its value.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// The key file cannot be used.
    #[error("JITCCL_AUTH_KEY_FILE={path}: {problem}")]
    File { path: String, problem: String },
    #[error("JITCCL_AUTH_KEY and JITCCL_AUTH_KEY_FILE are both set: set one")]
    Both,
    #[error("no randomness from the OS for a key or a nonce: {0}")]
    Random(String),
}

impl JobKey {
    /// A fresh key from the OS's randomness.
    pub fn random() -> Result<JobKey, KeyError> {
        let mut b = [0u8; KEY_BYTES];
        fill_random(&mut b)?;
        Ok(JobKey(b))
    }

    /// The key every process given `secret` derives (SHA-256 of it, in a domain of its
    /// own): `Err` saying why when it is shorter than [`MIN_SECRET_CHARS`].
    pub fn from_secret(secret: &str) -> Result<JobKey, String> {
        let secret = secret.trim();
        let n = secret.chars().count();
        if n < MIN_SECRET_CHARS {
            return Err(format!("a job secret is at least {MIN_SECRET_CHARS} characters, this one has {n}"));
        }
        let mut h = Sha256::new();
        h.update(b"jitccl job key\0");
        h.update(secret.as_bytes());
        Ok(JobKey(h.finalize().into()))
    }

    /// The key of `JITCCL_AUTH_KEY` or `JITCCL_AUTH_KEY_FILE` (a file readable and writable
    /// by its owner only); `None` when neither is set.
    pub fn from_env() -> Result<Option<JobKey>, KeyError> {
        match (AUTH_KEY.parse_with(JobKey::from_secret)?, AUTH_KEY_FILE.path()) {
            (Some(_), Some(_)) => Err(KeyError::Both),
            (Some(key), None) => Ok(Some(key)),
            (None, Some(path)) => Self::from_file(&path).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The key of the secret in the file at `path`, which only its owner may read or write.
    pub fn from_file(path: &Path) -> Result<JobKey, KeyError> {
        use std::os::unix::fs::PermissionsExt;
        let fail = |problem: String| KeyError::File { path: path.display().to_string(), problem };
        let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if !meta.is_file() {
            return Err(fail("not a regular file".into()));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o066 != 0 {
            return Err(fail(format!(
                "group or others may read or write it (mode {mode:04o}); a key file must be its owner's only: \
                 chmod 600 {}",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        JobKey::from_secret(&text).map_err(fail)
    }

    /// The key of a unique id's bytes.
    pub(crate) fn from_bytes(b: [u8; KEY_BYTES]) -> JobKey {
        JobKey(b)
    }

    pub(crate) fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// One key standing for `keys` (in order): itself for one key.
    pub(crate) fn combine(keys: &[JobKey]) -> JobKey {
        if let [one] = keys {
            return *one;
        }
        let mut h = Sha256::new();
        h.update(b"jitccl combined key\0");
        keys.iter().for_each(|k| h.update(k.0));
        JobKey(h.finalize().into())
    }
}

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobKey(not shown)")
    }
}

/// A fresh secret for the ranks of a job (`jitccl launch` gives its ranks one in
/// `JITCCL_AUTH_KEY`): 64 hex digits of the OS's randomness.
pub fn new_secret() -> Result<String, KeyError> {
    let mut b = [0u8; KEY_BYTES];
    fill_random(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

pub(super) fn fill_random(b: &mut [u8]) -> Result<(), KeyError> {
    getrandom::fill(b).map_err(|e| KeyError::Random(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn secrets_derive_one_key_and_short_ones_are_refused() {
        let a = JobKey::from_secret("correct horse battery staple").unwrap();
        assert_eq!(a, JobKey::from_secret(" correct horse battery staple\n").unwrap(), "trimmed");
        assert_ne!(a, JobKey::from_secret("correct horse battery stapled").unwrap());
        assert!(JobKey::from_secret("short").unwrap_err().contains("at least 16"));
        assert_eq!(format!("{a:?}"), "JobKey(not shown)");
        let s = new_secret().unwrap();
        assert_eq!(s.len(), 64);
        assert_ne!(s, new_secret().unwrap());
        assert_ne!(JobKey::random().unwrap(), JobKey::random().unwrap());
    }

    #[test]
    fn key_files_must_be_their_owners_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = JobKey::from_file(&path).unwrap_err().to_string();
            assert!(e.contains("group or others may read or write it") && e.contains("chmod 600"), "{mode:o}: {e}");
            assert!(!e.contains("0123456789abcdef"), "the secret is never shown: {e}");
        }
        for mode in [0o600, 0o400, 0o700] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                JobKey::from_file(&path).unwrap(),
                JobKey::from_secret("0123456789abcdef0123456789abcdef").unwrap()
            );
        }
        std::fs::write(&path, "too short").unwrap();
        assert!(JobKey::from_file(&path).unwrap_err().to_string().contains("at least 16"));
        assert!(matches!(JobKey::from_file(dir.path()), Err(KeyError::File { .. })));
        assert!(matches!(JobKey::from_file(&dir.path().join("missing")), Err(KeyError::File { .. })));
    }
}
