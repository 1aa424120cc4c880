//! The handshake a connection of a job opens with: a mutual challenge and response with
//! HMAC-SHA-256 over the job's key, in three messages.
//!
//! 1. hello (initiator → responder, [`HELLO_LEN`] bytes): magic, the initiator's nonce.
//! 2. reply (responder → initiator, [`REPLY_LEN`] bytes): magic, the responder's nonce, the
//!    responder's proof. The initiator checks it before it sends anything more.
//! 3. proof (initiator → responder, [`PROOF_LEN`] bytes): the initiator's proof; what the
//!    connection carries next may follow at once. The responder uses nothing before it.
//!
//! A proof is the HMAC of the service, the prover's role and both nonces: each side's is
//! bound to a nonce the other side just drew (32 random bytes), so a recorded handshake is
//! worth nothing on another connection, a proof of one service nothing on another, and
//! neither side can be made to answer its own challenge.

use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::key::{fill_random, JobKey, KeyError};

/// First bytes of a hello and a reply. Its first byte is no command of PyTorch's TCPStore,
/// which closes the connection of a client that sends it.
const MAGIC: [u8; 8] = *b"JCAUTH01";
pub(super) const NONCE: usize = 32;
/// Size of a proof (an HMAC-SHA-256).
pub const PROOF_LEN: usize = 32;
/// Size of the initiator's hello.
pub const HELLO_LEN: usize = MAGIC.len() + NONCE;
/// Size of the responder's reply.
pub const REPLY_LEN: usize = MAGIC.len() + NONCE + PROOF_LEN;

/// What the connection is for: a proof made for one service never opens another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Bootstrap = 1,
    Store = 2,
    Net = 3,
}

/// Why a handshake refused its peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The responder's proof is wrong (seen by the initiator).
    #[error("it does not prove that it knows this rank's job key: the keys differ")]
    KeysDiffer,
    /// The initiator's proof is wrong (seen by the responder).
    #[error(
        "its proof is wrong: it does not know the job's key (the keys differ), or it replays a recorded handshake"
    )]
    BadProof,
    /// The first bytes were no handshake.
    #[error("it sent no authentication: a process without the job's key, or not of this job")]
    NoHandshake,
    /// A sealed message that was taken before ([`super::seal`]).
    #[error("it replays a message taken before")]
    Replayed,
    /// The peer closed the connection during the handshake.
    #[error(
        "it closed the connection instead of authenticating: it has no job key or another one, or is not of this job"
    )]
    Closed,
}

/// A blocking handshake that did not complete.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Io(#[from] io::Error),
}

type HmacSha256 = Hmac<Sha256>;

fn proof(key: &JobKey, service: Service, role: u8, initiator: &[u8; NONCE], responder: &[u8; NONCE]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    m.update(b"jitccl auth 1\0");
    m.update(&[service as u8, role]);
    m.update(initiator);
    m.update(responder);
    m
}

const INITIATOR: u8 = b'i';
const RESPONDER: u8 = b'r';

pub(super) fn nonce() -> io::Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    fill_random(&mut n).map_err(|e: KeyError| io::Error::other(e.to_string()))?;
    Ok(n)
}

/// The initiator's side, between its hello and the responder's reply.
pub struct Initiator {
    key: JobKey,
    service: Service,
    nonce: [u8; NONCE],
}

impl Initiator {
    /// Draws a nonce; the hello to send.
    pub fn start(key: &JobKey, service: Service) -> io::Result<(Initiator, [u8; HELLO_LEN])> {
        let me = Initiator { key: *key, service, nonce: nonce()? };
        let mut hello = [0u8; HELLO_LEN];
        hello[..MAGIC.len()].copy_from_slice(&MAGIC);
        hello[MAGIC.len()..].copy_from_slice(&me.nonce);
        Ok((me, hello))
    }

    /// Checks the responder's reply; the proof to send.
    pub fn finish(self, reply: &[u8; REPLY_LEN]) -> Result<[u8; PROOF_LEN], Refusal> {
        if reply[..MAGIC.len()] != MAGIC {
            return Err(Refusal::NoHandshake);
        }
        let theirs: [u8; NONCE] = reply[MAGIC.len()..MAGIC.len() + NONCE].try_into().expect("sizes");
        proof(&self.key, self.service, RESPONDER, &self.nonce, &theirs)
            .verify_slice(&reply[MAGIC.len() + NONCE..])
            .map_err(|_| Refusal::KeysDiffer)?;
        Ok(proof(&self.key, self.service, INITIATOR, &self.nonce, &theirs).finalize().into_bytes().into())
    }
}

/// The responder's side, fed what arrives: the hello, then the proof. Made at accept, so
/// servers driven by readiness (a poll loop) read exactly [`wants`](Self::wants) bytes at a
/// time and never into what follows the handshake.
pub struct Gate {
    key: JobKey,
    service: Service,
    nonce: [u8; NONCE],
    stage: Stage,
}

enum Stage {
    Hello,
    Proof([u8; NONCE]),
    Open,
}

impl Gate {
    /// Draws this connection's nonce.
    pub fn new(key: &JobKey, service: Service) -> io::Result<Gate> {
        Ok(Gate { key: *key, service, nonce: nonce()?, stage: Stage::Hello })
    }

    /// Bytes the gate needs next (0 once the peer has proved that it knows the key).
    pub fn wants(&self) -> usize {
        match self.stage {
            Stage::Hello => HELLO_LEN,
            Stage::Proof(_) => PROOF_LEN,
            Stage::Open => 0,
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self.stage, Stage::Open)
    }

    /// Whether `start`, the first bytes of a connection (any number), can begin a hello: a
    /// stranger is refused without waiting for a whole one.
    pub fn may_begin(start: &[u8]) -> bool {
        start.iter().zip(MAGIC).all(|(a, b)| *a == b)
    }

    /// Takes the [`wants`](Self::wants) bytes that arrived: after the hello, the reply to
    /// send back; after the proof, nothing (the gate is open). A refusal leaves it shut.
    pub fn take(&mut self, bytes: &[u8]) -> Result<Option<[u8; REPLY_LEN]>, Refusal> {
        match self.stage {
            Stage::Hello if bytes.len() == HELLO_LEN && bytes[..MAGIC.len()] == MAGIC => {
                let theirs: [u8; NONCE] = bytes[MAGIC.len()..].try_into().expect("sizes");
                let mut reply = [0u8; REPLY_LEN];
                reply[..MAGIC.len()].copy_from_slice(&MAGIC);
                reply[MAGIC.len()..MAGIC.len() + NONCE].copy_from_slice(&self.nonce);
                let mine = proof(&self.key, self.service, RESPONDER, &theirs, &self.nonce).finalize().into_bytes();
                reply[MAGIC.len() + NONCE..].copy_from_slice(&mine);
                self.stage = Stage::Proof(theirs);
                Ok(Some(reply))
            }
            Stage::Hello => Err(Refusal::NoHandshake),
            Stage::Proof(theirs) => {
                proof(&self.key, self.service, INITIATOR, &theirs, &self.nonce)
                    .verify_slice(bytes)
                    .map_err(|_| Refusal::BadProof)?;
                self.stage = Stage::Open;
                Ok(None)
            }
            Stage::Open => Ok(None),
        }
    }
}

fn closed_is_refusal(e: io::Error) -> Failure {
    match e.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            Failure::Refused(Refusal::Closed)
        }
        _ => Failure::Io(e),
    }
}

/// The initiator's handshake on a blocking stream (its timeouts bound it).
pub fn initiate(io: &mut (impl Read + Write), key: &JobKey, service: Service) -> Result<(), Failure> {
    let (me, hello) = Initiator::start(key, service)?;
    io.write_all(&hello).map_err(closed_is_refusal)?;
    let mut reply = [0u8; REPLY_LEN];
    io.read_exact(&mut reply).map_err(closed_is_refusal)?;
    let proof = me.finish(&reply)?;
    io.write_all(&proof).map_err(closed_is_refusal)
}

/// The responder's handshake on a blocking stream (its timeouts bound it).
pub fn respond(io: &mut (impl Read + Write), key: &JobKey, service: Service) -> Result<(), Failure> {
    let mut gate = Gate::new(key, service)?;
    let mut buf = [0u8; HELLO_LEN];
    while !gate.is_open() {
        let n = gate.wants();
        io.read_exact(&mut buf[..n]).map_err(closed_is_refusal)?;
        if let Some(reply) = gate.take(&buf[..n])? {
            io.write_all(&reply).map_err(closed_is_refusal)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> JobKey {
        JobKey::from_secret(&format!("{s} of sixteen characters")).unwrap()
    }

    /// One whole handshake in memory: the initiator's result and the responder's.
    fn run(ki: &JobKey, kr: &JobKey, si: Service, sr: Service) -> (Result<(), Refusal>, Result<(), Refusal>) {
        let (me, hello) = Initiator::start(ki, si).unwrap();
        let mut gate = Gate::new(kr, sr).unwrap();
        let reply = gate.take(&hello).unwrap().unwrap();
        match me.finish(&reply) {
            Ok(p) => (Ok(()), gate.take(&p).map(|r| assert!(r.is_none() && gate.is_open()))),
            Err(e) => (Err(e), Ok(())),
        }
    }

    #[test]
    fn same_key_opens_other_keys_and_services_do_not() {
        let (a, b) = (key("a"), key("b"));
        assert_eq!(run(&a, &a, Service::Net, Service::Net), (Ok(()), Ok(())));
        assert_eq!(run(&a, &b, Service::Net, Service::Net).0, Err(Refusal::KeysDiffer));
        assert_eq!(run(&a, &a, Service::Net, Service::Store).0, Err(Refusal::KeysDiffer));
    }

    #[test]
    fn a_recorded_handshake_does_not_open_another_connection() {
        let k = key("k");
        let (me, hello) = Initiator::start(&k, Service::Bootstrap).unwrap();
        let mut first = Gate::new(&k, Service::Bootstrap).unwrap();
        let proof = me.finish(&first.take(&hello).unwrap().unwrap()).unwrap();
        first.take(&proof).unwrap();
        // Replayed as recorded: the new connection's nonce differs.
        let mut second = Gate::new(&k, Service::Bootstrap).unwrap();
        second.take(&hello).unwrap().unwrap();
        assert_eq!(second.take(&proof), Err(Refusal::BadProof));
        assert!(!second.is_open());
        // A reply cannot be answered with itself (the roles differ).
        let mut third = Gate::new(&k, Service::Bootstrap).unwrap();
        let reply = third.take(&hello).unwrap().unwrap();
        assert_eq!(third.take(&reply[REPLY_LEN - PROOF_LEN..]), Err(Refusal::BadProof));
    }

    #[test]
    fn strangers_bytes_are_no_handshake() {
        let mut gate = Gate::new(&key("k"), Service::Store).unwrap();
        assert_eq!(gate.take(&[0u8; HELLO_LEN]), Err(Refusal::NoHandshake));
        let (me, _) = Initiator::start(&key("k"), Service::Store).unwrap();
        assert_eq!(me.finish(&[7u8; REPLY_LEN]), Err(Refusal::NoHandshake));
    }

    #[test]
    fn blocking_sides_meet_over_a_socket() {
        for (ki, kr) in [(key("a"), key("a")), (key("a"), key("b"))] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let server = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                respond(&mut s, &kr, Service::Net).map_err(|e| e.to_string())
            });
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let mine = initiate(&mut c, &ki, Service::Net).map_err(|e| e.to_string());
            drop(c);
            let theirs = server.join().unwrap();
            if ki == kr {
                assert_eq!((mine, theirs), (Ok(()), Ok(())));
            } else {
                assert!(mine.unwrap_err().contains("keys differ"));
                assert!(theirs.unwrap_err().contains("closed the connection"));
            }
        }
    }
}
