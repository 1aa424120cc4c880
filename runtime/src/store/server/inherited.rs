//! The socket `jitccl launch` reserved for rank 0's store and handed down to it
//! (`JITCCL_MASTER_FD`): bound to `MASTER_ADDR:MASTER_PORT` before the ranks started, it
//! keeps the port from every other process until the store listens on it.

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use socket2::{SockRef, Socket, Type};
use tracing::debug;

use crate::settings::MASTER_FD;

/// Set once a server has taken the socket: a second one would own the same descriptor.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The inherited socket, when the variable names one bound to one of `addrs`; `None`
/// (the caller binds as usual) when it is unset, or names something else: the variable
/// reached a process the launcher did not start as rank 0 (a program rank 0 started),
/// which has no such socket, or one it uses otherwise.
pub(super) fn take(addrs: &[SocketAddr]) -> Option<Socket> {
    let fd = match MASTER_FD.whole_opt::<u64>(None) {
        Ok(fd) => fd? as RawFd,
        Err(e) => {
            debug!("store: {e}; binding the address instead");
            return None;
        }
    };
    adopt(fd, addrs)
}

/// [`take`] for a descriptor number already read.
pub(super) fn adopt(fd: RawFd, addrs: &[SocketAddr]) -> Option<Socket> {
    // SAFETY: fcntl on any number is sound; it fails on one that is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        debug!("store: {} names descriptor {fd}, which is not open", MASTER_FD.name);
        return None;
    }
    // SAFETY: open (checked above), and only borrowed for the checks below.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let sock = SockRef::from(&borrowed);
    let bound = sock.r#type().ok() == Some(Type::STREAM)
        && sock.local_addr().ok().and_then(|a| a.as_socket()).is_some_and(|a| addrs.contains(&a));
    if !bound {
        debug!("store: descriptor {fd} ({}) is no TCP socket bound to {addrs:?}", MASTER_FD.name);
        return None;
    }
    if TAKEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    // SAFETY: a socket this process inherited for this server alone, taken once (TAKEN).
    let socket = unsafe { Socket::from_raw_fd(fd) };
    // The launcher cleared close-on-exec for this process only; its own children must not
    // hold the store's port.
    if let Err(e) = socket.set_cloexec(true) {
        debug!("store: descriptor {fd}: setting close-on-exec: {e}");
    }
    Some(socket)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, TcpStream};
    use std::os::fd::{AsRawFd, IntoRawFd};

    use socket2::{Domain, Protocol};

    use super::*;

    /// A socket bound as the launcher binds it, not listening.
    fn reserved() -> (Socket, SocketAddr) {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        s.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).unwrap();
        s.set_reuse_address(true).unwrap();
        let addr = s.local_addr().unwrap().as_socket().unwrap();
        (s, addr)
    }

    /// The socket named for the store's own address is taken (once), listens and serves;
    /// one bound elsewhere, a closed descriptor and a file are left alone.
    #[test]
    fn only_the_socket_bound_to_the_stores_address_is_taken() {
        let (other, other_addr) = reserved();
        let (_, addr) = reserved();
        assert!(adopt(other.as_raw_fd(), &[addr]).is_none(), "a socket bound to {other_addr}");
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(adopt(file.as_raw_fd(), &[addr]).is_none(), "a file");
        let closed = reserved().0.into_raw_fd();
        // SAFETY: closing the descriptor this test owns.
        unsafe { libc::close(closed) };
        assert!(adopt(closed, &[addr]).is_none(), "a closed descriptor");

        let fd = other.into_raw_fd();
        let taken = adopt(fd, &[other_addr]).expect("the socket bound to the store's address");
        taken.listen(1).unwrap();
        // SAFETY: fcntl on a descriptor the socket owns.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        TcpStream::connect(other_addr).expect("a client of the adopted socket");
        assert!(adopt(fd, &[other_addr]).is_none(), "taken twice");
    }
}
