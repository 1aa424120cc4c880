//! The bootstrap wire format. Every message, on every connection, starts with a 40-byte
//! header (all integers little-endian):
//!
//! | offset | size | field                                                        |
//! |--------|------|--------------------------------------------------------------|
//! | 0      | 8    | magic [`MAGIC`] (`b"JTCCLBS1"`)                              |
//! | 8      | 8    | nonce: the unique id's session number                        |
//! | 16     | 4    | kind ([`Kind`])                                              |
//! | 20     | 4    | rank: the sender's rank (ring data: the origin rank; root: `u32::MAX`) |
//! | 24     | 8    | tag (send/recv tag; ring data: step; else 0)                 |
//! | 32     | 8    | len: payload bytes that follow                               |
//!
//! A message whose magic or nonce is wrong is dropped (and logged), never trusted.
//!
//! A rank's connection to its root (its *link*) stays open until every rank of the root
//! has finished init; it carries, with the id's nonce:
//! - `Hello` (rank → root, 52 B): nranks u32, iroot u32 (the index of the root's id in the
//!   rank's list), timeout_ms u64, listen address (20 B), nroots u32, flags u32 (bit 0: the
//!   root runs in this rank's process), comm nonce u64 (the session of the communicator's
//!   ring: the one id's nonce, or a digest of all ids).
//! - `HelloAck` (root → rank, 4 B): the rank running the root plus one (0: not known yet).
//!   The first one answers the hello, so a `JITCCL_COMM_ID` that points at some other
//!   service fails with `WrongMagic` at once; another follows when the root learns it.
//! - `RootReply` (root → rank, 28 B): nranks u32, 0 u32, the ring successor's address (20 B).
//! - `RootError` (root → rank): code u32, nmissing u32, a u64, b u64, c u64, after_ms u64,
//!   nmissing × u32, then the rest of a rank's failure in UTF-8 (see [`encode_error`]):
//!   the communicator cannot form, or a rank died or failed before init ended everywhere.
//! - `Done` (rank → root, empty): this rank's init is complete.
//! - `Failed` (rank → root): this rank's init failed: the rank that failed first u32
//!   (`u32::MAX`: this one), then how, in UTF-8 (see [`encode_failure`]).
//! - `AllDone` (root → rank, empty): every rank is done; the root stops watching.
//! - `StartTls` (rank → root, then root → rank, empty; `JITCCL_TLS=1`): the rank asks for
//!   TLS on its link, and the root's answer is the last byte either sends in the clear:
//!   the rank then opens the session (as its client), and every later byte is in it.
//!
//! Between ranks:
//! - `RingConnect` (rank → its ring successor): empty.
//! - `RingData`: one all-gather contribution (any length).
//! - `P2p`: one send/recv message (any length).
//!
//! An address is 20 bytes: family u8 (4 or 6), 0 u8, port u16, 16 address bytes (IPv4 in
//! the first 4).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::error::{BootstrapError, Result};

/// Magic of unique ids and of every bootstrap message.
pub const MAGIC: u64 = u64::from_le_bytes(*b"JTCCLBS1");
/// Size of the message header.
pub const HEADER_BYTES: usize = 40;
/// Size of an encoded socket address.
pub const ADDR_BYTES: usize = 20;
/// `rank` field of messages sent by the root.
pub const ROOT_RANK: u32 = u32::MAX;
/// Largest payload of a message on a link (a rank's failure is cut to fit).
pub const MAX_CONTROL_PAYLOAD: u64 = 4096;
/// `Hello` flag: the root runs in the sending rank's process.
pub const HOSTS_ROOT: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    // On the wire: Hello is 1, the others count on from it.
    Hello = 1,
    RootReply,
    RootError,
    RingConnect,
    RingData,
    P2p,
    HelloAck,
    Done,
    Failed,
    AllDone,
    StartTls,
}

impl Kind {
    const ALL: [Kind; 11] = [
        Kind::Hello,
        Kind::RootReply,
        Kind::RootError,
        Kind::RingConnect,
        Kind::RingData,
        Kind::P2p,
        Kind::HelloAck,
        Kind::Done,
        Kind::Failed,
        Kind::AllDone,
        Kind::StartTls,
    ];

    fn from_u32(v: u32) -> Option<Self> {
        Kind::ALL.into_iter().find(|k| *k as u32 == v)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub nonce: u64,
    pub kind: Kind,
    pub rank: u32,
    pub tag: u64,
    pub len: u64,
}

impl Header {
    pub fn new(nonce: u64, kind: Kind, rank: u32, tag: u64, len: usize) -> Self {
        Self { nonce, kind, rank, tag, len: len as u64 }
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.nonce.to_le_bytes());
        b[16..20].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[20..24].copy_from_slice(&self.rank.to_le_bytes());
        b[24..32].copy_from_slice(&self.tag.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes and checks a header: the magic first (`WrongMagic`), then the nonce
    /// (`expected_nonce`, a `Protocol` error naming both), then the kind.
    pub fn decode(b: &[u8; HEADER_BYTES], expected_nonce: u64, from: &dyn Fn() -> String) -> Result<Self> {
        let magic = u64_at(b, 0);
        if magic != MAGIC {
            return Err(BootstrapError::WrongMagic { from: from(), got: magic });
        }
        let nonce = u64_at(b, 8);
        if nonce != expected_nonce {
            return Err(BootstrapError::Protocol {
                from: from(),
                detail: format!(
                    "message of another communicator (id nonce {nonce:#018x}, expected {expected_nonce:#018x})"
                ),
            });
        }
        let kind_raw = u32_at(b, 16);
        let kind = Kind::from_u32(kind_raw).ok_or_else(|| BootstrapError::Protocol {
            from: from(),
            detail: format!("unknown message kind {kind_raw}"),
        })?;
        Ok(Self { nonce, kind, rank: u32_at(b, 20), tag: u64_at(b, 24), len: u64_at(b, 32) })
    }
}

/// Concatenates a header and its payload into one buffer.
pub fn message(header: Header, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_BYTES + payload.len());
    v.extend_from_slice(&header.encode());
    v.extend_from_slice(payload);
    v
}

pub fn encode_addr(addr: &SocketAddr, out: &mut Vec<u8>) {
    let mut b = [0u8; ADDR_BYTES];
    match addr.ip() {
        IpAddr::V4(ip) => {
            b[0] = 4;
            b[4..8].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            b[0] = 6;
            b[4..20].copy_from_slice(&ip.octets());
        }
    }
    b[2..4].copy_from_slice(&addr.port().to_le_bytes());
    out.extend_from_slice(&b);
}

pub fn decode_addr(b: &[u8]) -> Option<SocketAddr> {
    if b.len() < ADDR_BYTES {
        return None;
    }
    let port = u16::from_le_bytes([b[2], b[3]]);
    let ip = match b[0] {
        4 => IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[4..20]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

pub const HELLO_BYTES: usize = 32 + ADDR_BYTES;

/// What a rank tells the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub nranks: u32,
    pub iroot: u32,
    pub timeout_ms: u64,
    pub listen: SocketAddr,
    pub nroots: u32,
    /// [`HOSTS_ROOT`] or 0.
    pub flags: u32,
    pub comm_nonce: u64,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HELLO_BYTES);
        v.extend_from_slice(&self.nranks.to_le_bytes());
        v.extend_from_slice(&self.iroot.to_le_bytes());
        v.extend_from_slice(&self.timeout_ms.to_le_bytes());
        encode_addr(&self.listen, &mut v);
        v.extend_from_slice(&self.nroots.to_le_bytes());
        v.extend_from_slice(&self.flags.to_le_bytes());
        v.extend_from_slice(&self.comm_nonce.to_le_bytes());
        v
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        const TAIL: usize = 16 + ADDR_BYTES;
        if b.len() != HELLO_BYTES {
            return None;
        }
        Some(Self {
            nranks: u32_at(b, 0),
            iroot: u32_at(b, 4),
            timeout_ms: u64_at(b, 8),
            listen: decode_addr(&b[16..TAIL])?,
            nroots: u32_at(b, TAIL),
            flags: u32_at(b, TAIL + 4),
            comm_nonce: u64_at(b, TAIL + 8),
        })
    }
}

/// What the root tells each rank once all have arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootReply {
    pub nranks: u32,
    pub next: SocketAddr,
}

impl RootReply {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + ADDR_BYTES);
        v.extend_from_slice(&self.nranks.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        encode_addr(&self.next, &mut v);
        v
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != 8 + ADDR_BYTES {
            return None;
        }
        Some(Self { nranks: u32_at(b, 0), next: decode_addr(&b[8..])? })
    }
}

const E_DUPLICATE: u32 = 1;
const E_NRANKS: u32 = 2;
const E_INVALID_RANK: u32 = 3;
const E_MISSING: u32 = 4;
const E_ABORTED: u32 = 5;
const E_IDS: u32 = 6;
const E_GONE: u32 = 7;

/// Encodes a communicator-wide error the root sends to the ranks. Errors that are not
/// about the communicator (I/O, ...) are not sent.
pub fn encode_error(e: &BootstrapError) -> Option<Vec<u8>> {
    let mut how: &[u8] = &[];
    let (code, a, b, c, after, missing): (u32, u64, u64, u64, Duration, &[usize]) = match e {
        BootstrapError::DuplicateRank { rank } => (E_DUPLICATE, *rank as u64, 0, 0, Duration::ZERO, &[]),
        BootstrapError::NranksMismatch { expected, got, rank } => {
            (E_NRANKS, *expected as u64, *got as u64, *rank as u64, Duration::ZERO, &[])
        }
        BootstrapError::InvalidRank { rank, nranks } => {
            (E_INVALID_RANK, *rank as u64, *nranks as u64, 0, Duration::ZERO, &[])
        }
        BootstrapError::MissingRanks { missing, nranks, after, .. } => {
            (E_MISSING, *nranks as u64, 0, 0, *after, missing)
        }
        BootstrapError::Aborted { .. } => (E_ABORTED, 0, 0, 0, Duration::ZERO, &[]),
        BootstrapError::IdsMismatch { rank, iroot } => (E_IDS, *rank as u64, *iroot as u64, 0, Duration::ZERO, &[]),
        BootstrapError::PeerGone { culprit, how: text, .. } => {
            how = text.as_bytes();
            (E_GONE, *culprit as u64, 0, 0, Duration::ZERO, &[])
        }
        _ => return None,
    };
    let mut v = Vec::with_capacity(40 + 4 * missing.len() + how.len());
    v.extend_from_slice(&code.to_le_bytes());
    v.extend_from_slice(&(missing.len() as u32).to_le_bytes());
    for x in [a, b, c, u64::try_from(after.as_millis()).unwrap_or(u64::MAX)] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    for &m in missing {
        v.extend_from_slice(&(m as u32).to_le_bytes());
    }
    v.extend_from_slice(how);
    Some(v)
}

/// Decodes a `RootError` payload back into the error it describes (as the root reports it:
/// a `PeerGone` or `MissingRanks` names no rank, a `PeerGone` has op "init"; the receiving
/// rank names its own).
pub fn decode_error(p: &[u8], from: &str) -> BootstrapError {
    let bad = || BootstrapError::Protocol { from: from.to_string(), detail: "malformed root error message".into() };
    if p.len() < 40 {
        return bad();
    }
    let code = u32_at(p, 0);
    let nmissing = u32_at(p, 4) as usize;
    let (a, b, c) = (u64_at(p, 8) as usize, u64_at(p, 16) as usize, u64_at(p, 24) as usize);
    let after = Duration::from_millis(u64_at(p, 32));
    let fixed = nmissing.checked_mul(4).and_then(|m| m.checked_add(40)).filter(|&n| n <= p.len());
    let Some(fixed) = fixed.filter(|&n| code == E_GONE || n == p.len()) else { return bad() };
    match code {
        E_DUPLICATE => BootstrapError::DuplicateRank { rank: a },
        E_NRANKS => BootstrapError::NranksMismatch { expected: a, got: b, rank: c },
        E_INVALID_RANK => BootstrapError::InvalidRank { rank: a, nranks: b },
        E_MISSING => BootstrapError::MissingRanks {
            rank: None,
            missing: (0..nmissing).map(|i| u32_at(p, 40 + 4 * i) as usize).collect(),
            nranks: a,
            after,
        },
        E_ABORTED => BootstrapError::Aborted { op: "root (aborted)" },
        E_IDS => BootstrapError::IdsMismatch { rank: a, iroot: b },
        E_GONE => BootstrapError::PeerGone {
            op: "init",
            rank: None,
            culprit: a,
            how: String::from_utf8_lossy(&p[fixed..]).into_owned(),
        },
        _ => bad(),
    }
}

/// A `Failed` payload: `culprit` ([`ROOT_RANK`]: the sender itself) and how it failed,
/// cut to fit [`MAX_CONTROL_PAYLOAD`].
pub fn encode_failure(culprit: u32, how: &str) -> Vec<u8> {
    let mut cut = how.len().min(MAX_CONTROL_PAYLOAD as usize - 4);
    while !how.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut v = Vec::with_capacity(4 + cut);
    v.extend_from_slice(&culprit.to_le_bytes());
    v.extend_from_slice(&how.as_bytes()[..cut]);
    v
}

/// Decodes [`encode_failure`]: the rank that failed first (`None`: the sender), and how.
pub fn decode_failure(p: &[u8]) -> Option<(Option<usize>, String)> {
    let culprit = (p.len() >= 4).then(|| u32_at(p, 0))?;
    Some(((culprit != ROOT_RANK).then_some(culprit as usize), String::from_utf8_lossy(&p[4..]).into_owned()))
}

pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_checks() {
        let h = Header::new(7, Kind::P2p, 3, 99, 12);
        let b = h.encode();
        assert_eq!(Header::decode(&b, 7, &|| "t".into()).unwrap(), h);
        assert!(matches!(Header::decode(&b, 8, &|| "t".into()), Err(BootstrapError::Protocol { .. })));
        let mut bad = b;
        bad[0] ^= 1;
        assert!(matches!(Header::decode(&bad, 7, &|| "t".into()), Err(BootstrapError::WrongMagic { .. })));
    }

    #[test]
    fn payload_roundtrips() {
        let a: SocketAddr = "[::1]:4242".parse().unwrap();
        let hello =
            Hello { nranks: 5, iroot: 2, timeout_ms: 1234, listen: a, nroots: 3, flags: HOSTS_ROOT, comm_nonce: 99 };
        assert_eq!(Hello::decode(&hello.encode()).unwrap(), hello);
        let r = RootReply { nranks: 5, next: "10.1.2.3:7".parse().unwrap() };
        assert_eq!(RootReply::decode(&r.encode()).unwrap(), r);
        let e = BootstrapError::MissingRanks {
            rank: None,
            missing: vec![1, 4],
            nranks: 5,
            after: Duration::from_millis(1500),
        };
        match decode_error(&encode_error(&e).unwrap(), "root") {
            BootstrapError::MissingRanks { missing, nranks, after, .. } => {
                assert_eq!((missing, nranks, after), (vec![1, 4], 5, Duration::from_millis(1500)))
            }
            other => panic!("{other}"),
        }
        let e = BootstrapError::NranksMismatch { expected: 4, got: 3, rank: 2 };
        assert!(matches!(
            decode_error(&encode_error(&e).unwrap(), "root"),
            BootstrapError::NranksMismatch { expected: 4, got: 3, rank: 2 }
        ));
        let e = BootstrapError::IdsMismatch { rank: 7, iroot: 1 };
        assert!(matches!(
            decode_error(&encode_error(&e).unwrap(), "root"),
            BootstrapError::IdsMismatch { rank: 7, iroot: 1 }
        ));
        let e = BootstrapError::PeerGone { op: "root", rank: None, culprit: 3, how: "is gone: ünïcode".into() };
        match decode_error(&encode_error(&e).unwrap(), "root") {
            BootstrapError::PeerGone { culprit: 3, how, rank: None, .. } => assert_eq!(how, "is gone: ünïcode"),
            other => panic!("{other}"),
        }
        let long = "é".repeat(3000);
        let (culprit, how) = decode_failure(&encode_failure(ROOT_RANK, &long)).unwrap();
        assert_eq!(culprit, None);
        assert!(long.starts_with(&how) && how.len() <= MAX_CONTROL_PAYLOAD as usize - 4, "cut at a char boundary");
        assert_eq!(decode_failure(&encode_failure(3, "is gone")), Some((Some(3), "is gone".to_string())));
        assert_eq!(decode_failure(&[1, 2]), None);
        // Truncated or padded payloads of the fixed-size errors are refused.
        let mut p = encode_error(&BootstrapError::DuplicateRank { rank: 1 }).unwrap();
        p.push(0);
        assert!(matches!(decode_error(&p, "root"), BootstrapError::Protocol { .. }));
        assert!(matches!(decode_error(&p[..39], "root"), BootstrapError::Protocol { .. }));
    }
}
