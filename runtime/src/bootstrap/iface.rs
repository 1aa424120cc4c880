//! Choice of the network interface (and so the IP address) the bootstrap listens on.
//!
//! `JITCCL_SOCKET_IFNAME` works as NCCL_SOCKET_IFNAME: a comma-separated list of name
//! prefixes (`eth,ib`); a leading `^` excludes the listed ones instead (`^docker,lo`); a
//! leading `=` (after any `^`) makes the names exact (`=eth0`). Without it, an interface in
//! the same subnet as the root (loopback when the root is on loopback) is preferred, else
//! the first up, non-loopback, non-docker IPv4 interface, else such an IPv6 one, else
//! loopback. IPv6 link-local addresses are never chosen (the wire format carries no scope).

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::error::{BootstrapError, Result};

/// One address of one network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub addr: IpAddr,
    pub netmask: Option<IpAddr>,
    pub up: bool,
    pub loopback: bool,
}

/// Every IPv4/IPv6 address of every interface of this machine (getifaddrs order).
pub fn list_interfaces() -> io::Result<Vec<Interface>> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifap` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_addr / ifa_netmask are null or point to a sockaddr of the family they say.
        if let Some(addr) = unsafe { sockaddr_ip(ifa.ifa_addr) } {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
            let flags = ifa.ifa_flags as libc::c_int;
            out.push(Interface {
                name,
                addr,
                netmask: unsafe { sockaddr_ip(ifa.ifa_netmask) },
                up: flags & libc::IFF_UP != 0,
                loopback: flags & libc::IFF_LOOPBACK != 0,
            });
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `ifap` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(ifap) };
    Ok(out)
}

/// # Safety
/// `sa` is null or points to a valid sockaddr whose length fits its `sa_family`.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    match (*sa).sa_family as libc::c_int {
        libc::AF_INET => {
            let sin = &*(sa as *const libc::sockaddr_in);
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            let sin6 = &*(sa as *const libc::sockaddr_in6);
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// A parsed `JITCCL_SOCKET_IFNAME` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfnameFilter {
    /// `^`: the names are excluded rather than selected.
    pub exclude: bool,
    /// `=`: names match exactly rather than as prefixes.
    pub exact: bool,
    pub names: Vec<String>,
}

impl IfnameFilter {
    pub fn parse(spec: &str) -> Self {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names = s.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect();
        Self { exclude, exact, names }
    }

    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| if self.exact { name == n } else { name.starts_with(n.as_str()) });
        hit != self.exclude
    }
}

fn usable(i: &Interface) -> bool {
    i.up && !is_v6_link_local(&i.addr)
}

fn is_v6_link_local(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

fn in_subnet(addr: &IpAddr, mask: &Option<IpAddr>, peer: &IpAddr) -> bool {
    match (addr, mask, peer) {
        (IpAddr::V4(a), Some(IpAddr::V4(m)), IpAddr::V4(p)) => {
            let m = u32::from(*m);
            u32::from(*a) & m == u32::from(*p) & m
        }
        (IpAddr::V6(a), Some(IpAddr::V6(m)), IpAddr::V6(p)) => {
            let m = u128::from(*m);
            u128::from(*a) & m == u128::from(*p) & m
        }
        _ => false,
    }
}

/// The first of `cands` with an IPv4 address, else the first.
fn prefer_v4<'a>(cands: impl Iterator<Item = &'a Interface> + Clone) -> Option<&'a Interface> {
    cands.clone().find(|i| i.addr.is_ipv4()).or_else(|| cands.clone().next())
}

/// The choice rule on a given list of interfaces; returns the interface and why it was
/// chosen. `filter` is a `JITCCL_SOCKET_IFNAME` value; `peer` an address the chosen
/// interface should reach (the root's), if known.
pub fn choose_from(
    ifaces: &[Interface], filter: Option<&str>, peer: Option<IpAddr>,
) -> Result<(Interface, &'static str)> {
    if let Some(spec) = filter.filter(|s| !s.trim().is_empty()) {
        let f = IfnameFilter::parse(spec);
        return match prefer_v4(ifaces.iter().filter(|i| usable(i) && f.matches(&i.name))) {
            Some(i) => Ok((i.clone(), "JITCCL_SOCKET_IFNAME")),
            None => Err(BootstrapError::NoInterface {
                filter: spec.to_string(),
                available: ifaces.iter().map(|i| format!("{} {}", i.name, i.addr)).collect::<Vec<_>>().join(", "),
            }),
        };
    }
    if let Some(peer) = peer {
        if peer.is_loopback() {
            let lo = ifaces.iter().filter(|i| usable(i) && i.loopback);
            if let Some(i) = lo.clone().find(|i| i.addr.is_ipv4() == peer.is_ipv4()).or_else(|| lo.clone().next()) {
                return Ok((i.clone(), "the root is on loopback"));
            }
        } else if let Some(i) =
            ifaces.iter().find(|i| usable(i) && !i.loopback && in_subnet(&i.addr, &i.netmask, &peer))
        {
            return Ok((i.clone(), "same subnet as the root"));
        }
    }
    let external = ifaces.iter().filter(|i| usable(i) && !i.loopback && !i.name.starts_with("docker"));
    if let Some(i) = prefer_v4(external) {
        return Ok((i.clone(), "first up non-loopback interface"));
    }
    if let Some(i) = prefer_v4(ifaces.iter().filter(|i| usable(i) && i.loopback)) {
        return Ok((i.clone(), "no other interface is up"));
    }
    Ok((
        Interface {
            name: "lo".into(),
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            netmask: Some(IpAddr::V4(Ipv4Addr::new(255, 0, 0, 0))),
            up: true,
            loopback: true,
        },
        "no interface found",
    ))
}

/// Chooses the interface of this machine to listen on (see the module doc) and logs the
/// choice.
pub fn choose_interface(filter: Option<&str>, peer: Option<IpAddr>) -> Result<Interface> {
    let ifaces = list_interfaces().map_err(|e| BootstrapError::io("list network interfaces (getifaddrs)", e))?;
    let (i, why) = choose_from(&ifaces, filter, peer)?;
    tracing::info!(interface = %i.name, addr = %i.addr, reason = why, "jitccl bootstrap: listening interface");
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(name: &str, addr: &str, mask: &str, up: bool) -> Interface {
        Interface {
            name: name.into(),
            addr: addr.parse().unwrap(),
            netmask: Some(mask.parse().unwrap()),
            up,
            loopback: name == "lo",
        }
    }

    fn list() -> Vec<Interface> {
        vec![
            i("lo", "127.0.0.1", "255.0.0.0", true),
            i("docker0", "172.17.0.1", "255.255.0.0", true),
            i("eth0", "fe80::1", "ffff:ffff:ffff:ffff::", true),
            i("eth0", "192.0.2.2", "255.255.255.0", true),
            i("eth1", "198.51.100.7", "255.255.255.0", false),
            i("ib0", "203.0.113.5", "255.255.255.0", true),
            i("lo", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true),
        ]
    }

    fn pick(filter: Option<&str>, peer: Option<&str>) -> String {
        let (i, _) = choose_from(&list(), filter, peer.map(|p| p.parse().unwrap())).unwrap();
        format!("{} {}", i.name, i.addr)
    }

    #[test]
    fn filter_syntax() {
        let f = IfnameFilter::parse("^=eth0, lo");
        assert!(f.exclude && f.exact);
        assert_eq!(f.names, vec!["eth0", "lo"]);
        assert!(!f.matches("eth0") && f.matches("eth01"));
        assert!(IfnameFilter::parse("eth").matches("eth1"));
        assert!(!IfnameFilter::parse("^eth").matches("eth1"));
    }

    #[test]
    fn choices() {
        assert_eq!(pick(None, None), "eth0 192.0.2.2");
        assert_eq!(pick(Some("lo"), None), "lo 127.0.0.1");
        assert_eq!(pick(Some("ib"), None), "ib0 203.0.113.5");
        assert_eq!(pick(Some("^eth,lo"), None), "docker0 172.17.0.1");
        assert_eq!(pick(None, Some("127.0.0.1")), "lo 127.0.0.1");
        assert_eq!(pick(None, Some("::1")), "lo ::1");
        assert_eq!(pick(None, Some("203.0.113.200")), "ib0 203.0.113.5");
        assert_eq!(pick(None, Some("8.8.8.8")), "eth0 192.0.2.2");
        let e = choose_from(&list(), Some("=eth"), None).unwrap_err();
        assert!(matches!(e, BootstrapError::NoInterface { .. }), "{e}");
        assert!(choose_from(&list(), Some("eth1"), None).is_err(), "eth1 is down");
        let only_lo: Vec<_> = list().into_iter().filter(|i| i.loopback).collect();
        assert_eq!(choose_from(&only_lo, None, None).unwrap().0.addr.to_string(), "127.0.0.1");
    }
}
