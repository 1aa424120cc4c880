//! [`UniqueId`]: the 128 bytes every rank of one communicator is given, naming the root.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::SystemTime;

use super::error::{BootstrapError, Result};
use super::wire::{decode_addr, encode_addr, u64_at, ADDR_BYTES, MAGIC};
use crate::auth::{JobKey, KEY_BYTES};

/// Size of a [`UniqueId`] in bytes (as NCCL_UNIQUE_ID_BYTES).
pub const UNIQUE_ID_BYTES: usize = 128;

/// Identifies one communicator's bootstrap: the root's address, a session nonce and the
/// job's key, if it has one.
///
/// Bytes (see [`to_bytes`](Self::to_bytes)): 0..8 magic `b"JTCCLBS1"`, 8..16 nonce (u64
/// LE), 16..36 the root's address (family u8, 0, port u16 LE, 16 address bytes), 36 flags
/// ([`CARRIES_KEY`]), 40..72 the key, then zeros. The nonce is repeated in every bootstrap
/// message, so a rank or stray message of another communicator (a stale job on the same
/// port) is rejected; with a key, every connection of the communicator proves that it
/// knows it ([`crate::auth`]). The key is a secret: pass the id only to the job's ranks.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    nonce: u64,
    root: SocketAddr,
    key: Option<JobKey>,
}

/// Flag byte bit: bytes 40..72 hold the job's key.
const CARRIES_KEY: u8 = 1;
const FLAGS_AT: usize = 16 + ADDR_BYTES;
const KEY_AT: usize = 40;

impl UniqueId {
    /// The bytes to give a rank that knows the job's key `job` (which it then puts back
    /// with [`with_job_key`](Self::with_job_key)): without the key when there is one, so
    /// that a channel read by others (a store, a bootstrap's messages) does not carry it.
    pub(crate) fn without_key(&self, job: Option<JobKey>) -> [u8; UNIQUE_ID_BYTES] {
        match job {
            Some(_) => self.with_key(None).to_bytes(),
            None => self.to_bytes(),
        }
    }

    /// The id of [`without_key`](Self::without_key)'s bytes, given the same `job` key.
    pub(crate) fn with_job_key(self, job: Option<JobKey>) -> Self {
        match job {
            Some(_) => self.with_key(job),
            None => self,
        }
    }

    /// The id of a root at `root`, without starting anything and without a key. Every
    /// process computes the same id from the same address (the nonce is derived from it).
    pub(crate) fn for_address(root: SocketAddr) -> Self {
        // FNV-1a over the encoded address: deterministic across processes.
        let mut b = Vec::with_capacity(ADDR_BYTES);
        encode_addr(&root, &mut b);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for x in b {
            h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
        }
        Self { nonce: h, root, key: None }
    }

    /// An id with a fresh random nonce and a fresh key for a root at `root`.
    pub(crate) fn random(root: SocketAddr) -> Result<Self> {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
        h.write_u32(std::process::id());
        h.write(root.to_string().as_bytes());
        Ok(Self { nonce: h.finish(), root, key: Some(JobKey::random()?) })
    }

    /// Whether the root was listening before this id existed: a running root made it (its
    /// nonce is random), rather than every rank computing it from an address where the
    /// root may not be up yet. A refused connection to such a root means it is gone.
    pub(crate) fn root_was_listening(&self) -> bool {
        self.nonce != Self::for_address(self.root).nonce
    }

    /// The root's listening address.
    pub fn root_addr(&self) -> SocketAddr {
        self.root
    }

    pub(crate) fn nonce(&self) -> u64 {
        self.nonce
    }

    /// This id with `key` (`None`: without one).
    pub(crate) fn with_key(self, key: Option<JobKey>) -> Self {
        Self { key, ..self }
    }

    /// The job's key, if the id has one.
    pub(crate) fn key(&self) -> Option<JobKey> {
        self.key
    }

    /// The 128 bytes of the id.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.nonce.to_le_bytes());
        let mut a = Vec::with_capacity(ADDR_BYTES);
        encode_addr(&self.root, &mut a);
        b[16..16 + ADDR_BYTES].copy_from_slice(&a);
        if let Some(k) = &self.key {
            b[FLAGS_AT] = CARRIES_KEY;
            b[KEY_AT..KEY_AT + KEY_BYTES].copy_from_slice(k.as_bytes());
        }
        b
    }

    /// Parses bytes made by [`to_bytes`](Self::to_bytes): `WrongMagic` if they do not start
    /// with the magic, `InvalidArgument` if the length or the address is wrong.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        if b.len() != UNIQUE_ID_BYTES {
            return Err(BootstrapError::InvalidArgument(format!(
                "a unique id is {UNIQUE_ID_BYTES} bytes, got {}",
                b.len()
            )));
        }
        let magic = u64_at(b, 0);
        if magic != MAGIC {
            return Err(BootstrapError::WrongMagic { from: "unique id bytes".into(), got: magic });
        }
        let root = decode_addr(&b[16..16 + ADDR_BYTES])
            .filter(|a| a.port() != 0)
            .ok_or_else(|| BootstrapError::InvalidArgument("unique id holds no valid root address".into()))?;
        let key = (b[FLAGS_AT] & CARRIES_KEY != 0)
            .then(|| JobKey::from_bytes(b[KEY_AT..KEY_AT + KEY_BYTES].try_into().expect("32 bytes")));
        Ok(Self { nonce: u64_at(b, 8), root, key })
    }

    /// The id as 256 lowercase hex digits (to pass in an environment variable or a file).
    pub fn to_hex(&self) -> String {
        self.to_bytes().iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Parses [`to_hex`](Self::to_hex).
    pub fn from_hex(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.len() != 2 * UNIQUE_ID_BYTES || !s.is_ascii() {
            return Err(BootstrapError::InvalidArgument(format!(
                "a hex unique id is {} hex digits, got {} characters",
                2 * UNIQUE_ID_BYTES,
                s.len()
            )));
        }
        let bytes = (0..UNIQUE_ID_BYTES)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16))
            .collect::<std::result::Result<Vec<u8>, _>>()
            .map_err(|e| BootstrapError::InvalidArgument(format!("hex unique id: {e}")))?;
        Self::from_bytes(&bytes)
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.key.is_some() { "carried, not shown" } else { "none" };
        write!(f, "UniqueId {{ root: {}, nonce: {:#018x}, key: {key} }}", self.root, self.nonce)
    }
}

/// Resolves `host:port` / `[v6]:port` to one socket address (IPv4 preferred).
pub(crate) fn resolve(spec: &str, var: &'static str) -> Result<SocketAddr> {
    let bad = |problem: String| BootstrapError::EnvVar { var, problem };
    let (host, port) = spec.rsplit_once(':').ok_or_else(|| bad(format!("{spec:?} is not host:port")))?;
    let port: u16 = port.parse().map_err(|_| bad(format!("{spec:?}: port {port:?} is not a number in 0..65536")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad(format!("{spec:?} has no host")));
    }
    let addrs: Vec<SocketAddr> =
        (host, port).to_socket_addrs().map_err(|e| bad(format!("cannot resolve host {host:?}: {e}")))?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| bad(format!("host {host:?} has no address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_roundtrip() {
        for a in ["127.0.0.1:29500", "[::1]:80"] {
            let id = UniqueId::random(a.parse().unwrap()).unwrap();
            assert!(id.key().is_some(), "an id made with its root carries a fresh key");
            assert_ne!(id.key(), UniqueId::random(a.parse().unwrap()).unwrap().key());
            assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
            assert_eq!(UniqueId::from_hex(&id.to_hex()).unwrap(), id);
            assert!(!format!("{id:?}").contains(&id.to_hex()[80..144]), "the key is not shown");
        }
        let id = UniqueId::for_address("10.0.0.1:1234".parse().unwrap());
        assert_eq!(id, UniqueId::for_address("10.0.0.1:1234".parse().unwrap()));
        assert!(!id.root_was_listening(), "a root named by an address may not be up yet");
        assert!(UniqueId::random(id.root_addr()).unwrap().root_was_listening());
        assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap().key(), None, "an address's id has no key");
        let mut b = id.to_bytes();
        b[3] ^= 0xff;
        assert!(matches!(UniqueId::from_bytes(&b), Err(BootstrapError::WrongMagic { .. })));
        assert!(matches!(UniqueId::from_bytes(&b[..64]), Err(BootstrapError::InvalidArgument(_))));
    }

    /// Ranks that know the job's key get an id without it, and put it back.
    #[test]
    fn ids_given_to_a_keyed_job_do_not_carry_its_key() {
        let job = JobKey::from_secret("the job's key, known to every rank").unwrap();
        let id = UniqueId::random("127.0.0.1:29500".parse().unwrap()).unwrap().with_key(Some(job));
        let bytes = id.without_key(Some(job));
        assert!(!bytes.windows(KEY_BYTES).any(|w| w == job.as_bytes()), "the key travels with the id");
        assert_eq!(UniqueId::from_bytes(&bytes).unwrap().key(), None);
        assert_eq!(UniqueId::from_bytes(&bytes).unwrap().with_job_key(Some(job)), id);
        // Without a job key, the id's own (fresh) key is all the ranks have: it travels.
        let fresh = UniqueId::random("127.0.0.1:29500".parse().unwrap()).unwrap();
        assert_eq!(UniqueId::from_bytes(&fresh.without_key(None)).unwrap().with_job_key(None), fresh);
    }

    #[test]
    fn resolve_specs() {
        assert_eq!(resolve("127.0.0.1:5", "X").unwrap(), "127.0.0.1:5".parse().unwrap());
        assert_eq!(resolve("[::1]:6", "X").unwrap(), "[::1]:6".parse().unwrap());
        assert!(resolve("localhost:7", "X").unwrap().ip().is_loopback());
        for bad in ["127.0.0.1", "127.0.0.1:x", ":5", "127.0.0.1:70000"] {
            assert!(matches!(resolve(bad, "X"), Err(BootstrapError::EnvVar { .. })), "{bad}");
        }
    }
}
