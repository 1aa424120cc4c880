//! Bootstrap tests: ranks as threads (1, 2, 5, 17, 130), as separate processes (this test
//! binary re-run as children), every error the root or a rank must report, and ranks or
//! roots that go away during init. Loopback only.
//! They live in the crate because they drive its internals ([`Bootstrap`], [`Root`], the
//! wire format), which are not public.

mod auth;
mod deaths;
mod failures;
mod processes;
mod scalable;
mod threads;

use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use super::join::{reply_grace, stagger_delay};
use super::root::{Root, RootReport};
use super::{wire, Bootstrap, BootstrapConfig, BootstrapError, UniqueId};
use crate::auth::{initiate, Service};

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn cfg(timeout: Duration) -> BootstrapConfig {
    BootstrapConfig::default().with_timeout(timeout).with_ifname("lo")
}

/// Starts a root and `ranks.len()` rank threads (`ranks[i]` = (rank, nranks) claimed by
/// thread i, started `delays[i]` after the root), each running `f` on its bootstrap.
fn run<T: Send>(
    config: &BootstrapConfig, ranks: &[(usize, usize)], delays: &[Duration], f: impl Fn(Bootstrap) -> T + Sync,
) -> (Vec<Result<T, BootstrapError>>, Result<RootReport, BootstrapError>) {
    log();
    let root = Root::start(config).expect("start root");
    let id = root.id();
    assert!(id.root_addr().ip().is_loopback(), "tests stay on loopback: {id:?}");
    let results = thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(i, &(rank, nranks))| {
                let f = &f;
                let delay = delays.get(i).copied().unwrap_or_default();
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(s, move || {
                        thread::sleep(delay);
                        Bootstrap::init(&id, rank, nranks, config).map(f)
                    })
                    .unwrap()
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    (results, root.join())
}

fn all_ranks(n: usize) -> Vec<(usize, usize)> {
    (0..n).map(|r| (r, n)).collect()
}

/// A connection to `addr` (the root or a rank) that has proved that it knows `id`'s key,
/// as a rank's does; reads time out after 5 s.
fn connect_as_rank(addr: SocketAddr, id: &UniqueId) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    if let Some(key) = id.key() {
        initiate(&mut s, &key, Service::Bootstrap).unwrap();
    }
    s
}

/// The hello of a rank of `nranks` (one root, `id`'s) that listens at `listen`.
fn hello_of(id: &UniqueId, nranks: u32, listen: SocketAddr) -> wire::Hello {
    wire::Hello { nranks, iroot: 0, timeout_ms: 30_000, listen, nroots: 1, flags: 0, comm_nonce: id.nonce() }
}

/// Opens `n` connections to `addr` that never send anything.
fn silent_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

#[test]
fn stagger() {
    assert_eq!(stagger_delay(100, 128), Duration::ZERO);
    assert_eq!(stagger_delay(129, 130), Duration::from_millis(129));
    assert!(stagger_delay(9999, 10000) <= Duration::from_secs(2));
    assert_eq!(reply_grace(Duration::from_secs(120)), Duration::from_secs(10));
    assert_eq!(reply_grace(Duration::from_secs(2)), Duration::from_secs(1));
}

/// The example of the module's documentation (a doctest while the module was public).
#[test]
fn module_doc_example() -> Result<(), BootstrapError> {
    let config = BootstrapConfig::from_env()?;
    let id = UniqueId::with_config(&config)?; // on rank 0, then send id.to_bytes() to the others
    let boot = Bootstrap::init(&id, 0, 1, &config)?;
    let all = boot.all_gather(b"hello")?;
    assert_eq!(all, vec![b"hello".to_vec()]);
    Ok(())
}
