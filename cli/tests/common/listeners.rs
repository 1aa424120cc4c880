//! The TCP listeners of running processes, read from /proc (each in its own network
//! namespace), and clients that speak jitccl's handshake at them: what a process that
//! knows the protocol, but maybe not the job's key, can try.

#![allow(dead_code)] // each test binary uses some

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use jitccl::auth::{Initiator, JobKey, Service, REPLY_LEN};

/// `root` and every process below it.
pub fn tree(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command's name, in parentheses: state, then the parent's pid.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(pid, _)| *pid));
        i += 1;
    }
    out
}

/// The addresses the processes `pids` listen on (a wildcard address as loopback).
pub fn of(pids: &[u32]) -> HashSet<SocketAddr> {
    let mut out = HashSet::new();
    for pid in pids {
        let mut listening: HashMap<u64, SocketAddr> = HashMap::new();
        for (file, v6) in [("tcp", false), ("tcp6", true)] {
            let text = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")).unwrap_or_default();
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                // local address, state (0A: listen), inode.
                if f.len() > 9 && f[3] == "0A" {
                    if let (Some(addr), Ok(inode)) = (parse(f[1], v6), f[9].parse()) {
                        listening.insert(inode, addr);
                    }
                }
            }
        }
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten();
        out.extend(fds.filter_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()?;
            listening.get(&inode).copied()
        }));
    }
    out
}

/// A connection to `addr`, reads bounded by 5 s; `None` once nothing listens there.
pub fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    Some(s)
}

/// The handshake of a client with `key` for `service` at `addr`: its hello and proof, and
/// the connection, open, when the listener proved that it serves `service` with `key`;
/// `None` when it proved something else, or did not answer.
pub fn handshake(addr: SocketAddr, key: &JobKey, service: Service) -> Option<(Vec<u8>, TcpStream)> {
    let mut s = connect(addr)?;
    let (me, hello) = Initiator::start(key, service).unwrap();
    s.write_all(&hello).ok()?;
    let mut reply = [0u8; REPLY_LEN];
    s.read_exact(&mut reply).ok()?;
    let proof = me.finish(&reply).ok()?;
    s.write_all(&proof).ok()?;
    Some(([hello.as_slice(), &proof].concat(), s))
}

/// What a listener did, within 1.5 s, with a connection that must not get in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Closed it: refused.
    Closed,
    /// Closed it after a TLS alert saying why: refused by a TLS session.
    Alerted,
    /// Nothing: not read any further (a listener not accepting at the time).
    Silent,
    /// Sent something else: let in.
    Answered,
}

/// What the listener does with `s` within 1.5 s. A connection let in and then left silent
/// is closed only later (each listener gives a silent connection at least 2 s).
pub fn fate(mut s: TcpStream) -> Fate {
    /// A TLS record's content type for an alert.
    const ALERT: u8 = 21;
    s.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() <= buf.len() {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            // Still open at the end of the wait.
            Err(_) if got.is_empty() => return Fate::Silent,
            Err(_) => return Fate::Answered,
        }
    }
    match got.first() {
        None => Fate::Closed,
        Some(&ALERT) if got.len() < buf.len() => Fate::Alerted,
        Some(_) => Fate::Answered,
    }
}

/// An address as /proc/net/tcp{,6} writes it: hex, each 32-bit word in host order.
fn parse(hex: &str, v6: bool) -> Option<SocketAddr> {
    let (ip, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> =
        (0..ip.len() / 8).map(|i| u32::from_str_radix(&ip[8 * i..8 * i + 8], 16)).collect::<Result<_, _>>().ok()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip = match v6 {
        false => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        true => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
    };
    let ip = match ip {
        ip if ip.is_unspecified() && v6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        ip => ip,
    };
    Some(SocketAddr::new(ip, port))
}
