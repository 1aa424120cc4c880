//! The MASTER_PORT `jitccl launch` chooses when none is given, and holds for the job.
//!
//! A port found free and let go until rank 0 binds it can be taken in between: the kernel
//! hands ports of its ephemeral range (`ip_local_port_range`) to every `bind` to port 0
//! and every outgoing connection, and rank 0 may bind only seconds later (PyTorch's, after
//! its imports). So the port is chosen outside that range, and a socket stays bound to it:
//! bound without SO_REUSEADDR, so that no other launcher's choice lands on it, then marked
//! reusable and left not listening, so that rank 0's own server can bind beside it as
//! PyTorch's TCPStore and jitccl's store do (both set SO_REUSEADDR). Rank 0 inherits it
//! (`JITCCL_MASTER_FD`), and jitccl's store listens on it without binding again.

use std::hash::BuildHasher;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::ops::RangeInclusive;
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

/// The address the ranks are given as MASTER_ADDR.
pub(super) const MASTER_ADDR: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Where the kernel's ephemeral range cannot be read: Linux's default.
const DEFAULT_EPHEMERAL: (u16, u16) = (32768, 60999);

/// Ports below this need privileges.
const FIRST_UNPRIVILEGED: u16 = 1024;

/// A port bound for rank 0 and held until the launcher hands it over.
pub(super) struct Reserved {
    socket: Socket,
    port: u16,
}

impl Reserved {
    /// A free port outside the ephemeral range, tried from a random start.
    pub(super) fn new() -> Result<Reserved, String> {
        let ranges = outside(ephemeral_range());
        let total: u32 = ranges.iter().map(|r| u32::from(r.end() - r.start()) + 1).sum();
        if total == 0 {
            return Err("no port is left outside the ephemeral range (ip_local_port_range): pass --master-port".into());
        }
        let start =
            (std::collections::hash_map::RandomState::new().hash_one(std::process::id()) % u64::from(total)) as u32;
        for i in 0..total {
            let port = nth(&ranges, (start + i) % total);
            match bind_exclusive(port) {
                Ok(socket) => {
                    // Now rank 0's server may bind beside it (it sets SO_REUSEADDR too).
                    socket.set_reuse_address(true).map_err(|e| format!("reserving port {port}: {e}"))?;
                    return Ok(Reserved { socket, port });
                }
                Err(e) if matches!(e.kind(), ErrorKind::AddrInUse | ErrorKind::PermissionDenied) => continue,
                Err(e) => return Err(format!("reserving a port for MASTER_PORT: {e}")),
            }
        }
        Err("every port outside the ephemeral range (ip_local_port_range) is taken: pass --master-port".into())
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// The descriptor rank 0 inherits (close-on-exec cleared in its child only).
    pub(super) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

/// Binds `port` on [`MASTER_ADDR`] without SO_REUSEADDR: refused while any socket holds it,
/// another launcher's reservation included.
fn bind_exclusive(port: u16) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SocketAddrV4::new(MASTER_ADDR, port).into())?;
    Ok(socket)
}

/// The kernel's ephemeral port range, both ends included.
fn ephemeral_range() -> (u16, u16) {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut ends = text.split_whitespace().map(str::parse::<u16>);
    match (ends.next(), ends.next()) {
        (Some(Ok(lo)), Some(Ok(hi))) if lo <= hi => (lo, hi),
        _ => DEFAULT_EPHEMERAL,
    }
}

/// The unprivileged ports outside `lo..=hi`.
fn outside((lo, hi): (u16, u16)) -> Vec<RangeInclusive<u16>> {
    let mut ranges = Vec::new();
    if lo > FIRST_UNPRIVILEGED {
        ranges.push(FIRST_UNPRIVILEGED..=lo - 1);
    }
    if hi < u16::MAX {
        ranges.push(hi.max(FIRST_UNPRIVILEGED - 1) + 1..=u16::MAX);
    }
    ranges
}

/// The `i`th port of `ranges` taken one after the other.
fn nth(ranges: &[RangeInclusive<u16>], mut i: u32) -> u16 {
    for r in ranges {
        let len = u32::from(r.end() - r.start()) + 1;
        if i < len {
            return r.start() + i as u16;
        }
        i -= len;
    }
    unreachable!("i is below the ranges' total")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_outside_the_ephemeral_range() {
        assert_eq!(outside((32768, 60999)), vec![1024..=32767, 61000..=65535]);
        assert_eq!(outside((1024, 65535)), vec![]);
        assert_eq!(outside((10, 40000)), vec![40001..=65535]);
        assert_eq!(outside((2000, 65535)), vec![1024..=1999]);
        let r = outside((32768, 60999));
        assert_eq!([nth(&r, 0), nth(&r, 31743), nth(&r, 31744), nth(&r, 36279)], [1024, 32767, 61000, 65535]);
    }

    /// The reserved port is outside the range and taken for any other exclusive bind (another
    /// launcher's), while a server that sets SO_REUSEADDR binds and listens beside it.
    #[test]
    fn a_reserved_port_is_held_for_rank_zeros_server_alone() {
        let (lo, hi) = ephemeral_range();
        let r = Reserved::new().unwrap();
        assert!(!(lo..=hi).contains(&r.port()), "{} is in the ephemeral range {lo}-{hi}", r.port());
        let e = bind_exclusive(r.port()).expect_err("a second exclusive bind of a reserved port");
        assert_eq!(e.kind(), ErrorKind::AddrInUse, "{e}");
        let server = std::net::TcpListener::bind(SocketAddrV4::new(MASTER_ADDR, r.port()));
        assert!(server.is_ok(), "a reusing server beside the reservation: {server:?}");
    }
}
