//! The rendezvous store: every command through the client, the exact wire bytes of
//! PyTorch's TCPStore protocol over raw sockets, many concurrent clients, multi-key waits,
//! timeouts and cancellation, malformed input that must only ever cost the sender its own
//! connection, and a server with a key that serves only clients given it. Every socket read has a timeout, so no test can hang.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use jitccl_runtime::store::{PrefixStore, Server, Store, StoreError, TcpStore};

const TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// VALIDATE and the magic 0x3C85F7CE, little-endian.
const VALIDATE: [u8; 5] = [0x00, 0xCE, 0xF7, 0x85, 0x3C];

/// Sends the store's log lines to each test's captured output, shown when it fails.
fn capture_logs() {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("warn,jitccl_runtime=debug").try_init();
}

fn server() -> Server {
    capture_logs();
    Server::bind("127.0.0.1:0").unwrap()
}

fn client(server: &Server) -> TcpStore {
    TcpStore::connect(server.local_addr(), TIMEOUT).unwrap()
}

/// A raw connection that has not sent anything yet.
fn raw(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.local_addr()).unwrap();
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A raw connection that has sent VALIDATE.
fn validated(server: &Server) -> TcpStream {
    let mut stream = raw(server);
    stream.write_all(&VALIDATE).unwrap();
    stream
}

/// A key or value on the wire: u64 little-endian length, then the bytes.
fn lp(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

fn msg(command: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![command];
    for part in parts {
        out.extend_from_slice(part);
    }
    out
}

fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    stream.read_exact(&mut buf).unwrap();
    buf
}

/// Sends PING and checks the echo, which also proves no stray reply bytes were pending.
fn ping(stream: &mut TcpStream, nonce: u32) {
    stream.write_all(&msg(13, &[&nonce.to_le_bytes()])).unwrap();
    assert_eq!(read_n(stream, 4), nonce.to_le_bytes(), "PING echo");
}

/// Nothing arrives within `wait`.
fn assert_silent(stream: &mut TcpStream, wait: Duration) {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0];
    match stream.read(&mut byte) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected no reply, got {other:?} {byte:?}"),
    }
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
}

/// The server closes the connection (EOF, or a reset when it had unread input).
fn assert_closed(stream: &mut TcpStream, what: &str) {
    let mut buf = [0; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: the server did not close the connection: {e}"),
        }
    }
}

fn assert_timeout(err: StoreError, want_op: &str, want_keys: &[&str], want_after: Duration) {
    match err {
        StoreError::Timeout { op, keys, after } => {
            assert_eq!(op, want_op);
            assert_eq!(keys, want_keys);
            assert_eq!(after, want_after);
        }
        other => panic!("expected a timeout, got {other}"),
    }
}

mod auth;
mod client;
mod waits;
mod wire;
