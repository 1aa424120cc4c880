//! A server with a key serves only clients that prove that they know it: jitccl's client
//! given the key gets in; a client speaking PyTorch's protocol (PyTorch's, or jitccl's
//! without a key), one with another key and one replaying a recorded handshake are refused,
//! and nothing they send reaches the store. A client with a key refuses a server without it.

use jitccl_runtime::auth::{Initiator, JobKey, Refusal, Service, REPLY_LEN};

use super::*;

fn key(secret: &str) -> JobKey {
    JobKey::from_secret(secret).unwrap()
}

/// The bytes of a SET of `key` to `value`.
fn set(key: &str, value: &[u8]) -> Vec<u8> {
    let mut b = vec![1u8];
    for part in [key.as_bytes(), value] {
        b.extend_from_slice(&(part.len() as u64).to_le_bytes());
        b.extend_from_slice(part);
    }
    b
}

#[test]
fn a_keyed_server_serves_only_clients_with_its_key() {
    capture_logs();
    let job = key("the store test's job secret");
    let server = Server::bind_keyed("127.0.0.1:0", Some(job)).unwrap();
    let addr = server.local_addr();
    let good = TcpStore::connect_keyed(addr, TIMEOUT, Some(job)).unwrap();
    good.set("rank0", b"real").unwrap();

    // PyTorch's protocol without the handshake: refused at once, nothing set.
    let t0 = Instant::now();
    match TcpStore::connect(addr, TIMEOUT) {
        Err(StoreError::Connect { .. }) => {}
        other => panic!("a client without the key must be refused: {:?}", other.map(|_| ())),
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "refused after {:?}", t0.elapsed());
    let mut plain = raw(&server);
    plain.write_all(&[VALIDATE.as_slice(), &set("rank0", b"forged")].concat()).unwrap();
    assert_closed(&mut plain, "a PyTorch-protocol client");

    // Another key: the client finds out, and says so.
    match TcpStore::connect_keyed(addr, TIMEOUT, Some(key("another job's secret key"))) {
        Err(e @ StoreError::Auth { why: Refusal::KeysDiffer, .. }) => {
            assert!(e.to_string().contains("keys differ"), "{e}")
        }
        other => panic!("another key must be refused: {:?}", other.map(|_| ())),
    }

    // A handshake recorded on the wire, replayed on a new connection.
    let mut recorded = raw(&server);
    let (me, hello) = Initiator::start(&job, Service::Store).unwrap();
    recorded.write_all(&hello).unwrap();
    let mut reply = [0u8; REPLY_LEN];
    recorded.read_exact(&mut reply).unwrap();
    let proof = me.finish(&reply).unwrap();
    recorded.write_all(&proof).unwrap();
    let mut replay = raw(&server);
    replay.write_all(&[hello.as_slice(), &proof, &VALIDATE, &set("rank0", b"replayed")].concat()).unwrap();
    assert_closed(&mut replay, "a replayed handshake");

    assert_eq!(good.get("rank0").unwrap(), b"real");
    assert_eq!(good.num_keys().unwrap(), 1);

    // A client with a key refuses a server without one (PyTorch's, or jitccl's unkeyed).
    let open = Server::bind("127.0.0.1:0").unwrap();
    match TcpStore::connect_keyed(open.local_addr(), TIMEOUT, Some(job)) {
        Err(StoreError::Auth { why: Refusal::Closed, .. }) => {}
        other => panic!("a server without the key must be refused: {:?}", other.map(|_| ())),
    }
}
