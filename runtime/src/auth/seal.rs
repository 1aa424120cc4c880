//! One-way messages that must not wait for their receiver to answer a handshake (the
//! bootstrap's send, which returns once the message is handed to the OS): each carries a
//! seal, the HMAC of the receiver's session nonce, a sequence number and the message. The
//! session nonce is drawn by the receiver for one communicator and reaches the senders over
//! connections that did authenticate; the receiver takes each sequence number of a sender
//! once ([`Seen`]). So a stranger cannot make a seal, and a recorded message is refused
//! when replayed, in this communicator or another.

use std::collections::HashSet;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::handshake::{nonce, Refusal, NONCE};
use super::key::JobKey;

/// Size of a seal: the sequence number (u64 LE) and the HMAC.
pub const SEAL_LEN: usize = 8 + 32;

/// A receiver's session nonce.
pub type Session = [u8; NONCE];

/// A fresh session nonce.
pub fn new_session() -> std::io::Result<Session> {
    nonce()
}

fn mac(key: &JobKey, session: &Session, seq: u64, parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    m.update(b"jitccl seal 1\0");
    m.update(session);
    m.update(&seq.to_le_bytes());
    for p in parts {
        m.update(&(p.len() as u64).to_le_bytes());
        m.update(p);
    }
    m
}

/// The seal of message `parts` (in order) with sequence number `seq`, for the receiver
/// whose session nonce is `session`.
pub fn seal(key: &JobKey, session: &Session, seq: u64, parts: &[&[u8]]) -> [u8; SEAL_LEN] {
    let mut out = [0u8; SEAL_LEN];
    out[..8].copy_from_slice(&seq.to_le_bytes());
    out[8..].copy_from_slice(&mac(key, session, seq, parts).finalize().into_bytes());
    out
}

/// The sequence numbers taken from each sender.
#[derive(Default)]
pub struct Seen {
    taken: HashSet<(usize, u64)>,
}

impl Seen {
    /// Checks the seal of `parts` from `sender` against this receiver's `session`, and takes
    /// its sequence number: a wrong seal, or a number taken before, is refused.
    pub fn check(
        &mut self, key: &JobKey, session: &Session, sender: usize, parts: &[&[u8]], sealed: &[u8; SEAL_LEN],
    ) -> Result<(), Refusal> {
        let seq = u64::from_le_bytes(sealed[..8].try_into().expect("8 bytes"));
        mac(key, session, seq, parts).verify_slice(&sealed[8..]).map_err(|_| Refusal::BadProof)?;
        if !self.taken.insert((sender, seq)) {
            return Err(Refusal::Replayed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_open_once_for_their_receiver_only() {
        let key = JobKey::from_secret("sealing test key of the job").unwrap();
        let (mine, theirs) = (new_session().unwrap(), new_session().unwrap());
        let s = seal(&key, &mine, 1, &[b"header", b"payload"]);
        let mut seen = Seen::default();
        assert_eq!(seen.check(&key, &mine, 3, &[b"header", b"payload"], &s), Ok(()));
        assert_eq!(seen.check(&key, &mine, 3, &[b"header", b"payload"], &s), Err(Refusal::Replayed));
        let mut fresh = Seen::default();
        assert_eq!(fresh.check(&key, &theirs, 3, &[b"header", b"payload"], &s), Err(Refusal::BadProof));
        assert_eq!(fresh.check(&key, &mine, 3, &[b"header", b"payloaD"], &s), Err(Refusal::BadProof));
        assert_eq!(fresh.check(&key, &mine, 3, &[b"headerp", b"ayload"], &s), Err(Refusal::BadProof));
        let other = JobKey::from_secret("another key, another job").unwrap();
        assert_eq!(fresh.check(&other, &mine, 3, &[b"header", b"payload"], &s), Err(Refusal::BadProof));
        assert_eq!(fresh.check(&key, &mine, 4, &[b"header", b"payload"], &s), Ok(()), "per sender");
    }
}
