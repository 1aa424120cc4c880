//! Detection of the local host from `/sys` and `/proc`: NUMA domains with their CPUs, the
//! CPU model, network ports with their speed and PCIe position, and the host's identity.
//! It completes an XML tree (empty, or a partial file): what the tree already says wins,
//! detection only adds what is missing. A file or directory that is absent or unreadable
//! is skipped, never an error: containers and VMs hide much of `/sys`.

use std::fs;
use std::path::{Path, PathBuf};

use super::xml::Element;

mod gpus;
mod nvml;

/// Where detection reads from; tests point it at a fake tree.
#[derive(Debug, Clone)]
pub(crate) struct Roots {
    pub sys: PathBuf,
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Roots {
        Roots { sys: "/sys".into(), proc: "/proc".into() }
    }
}

fn read(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Completes `root` (a `<system>`) with what the host shows.
pub(crate) fn complete(root: &mut Element, roots: &Roots) {
    let hash = host_hash(roots);
    for (numaid, mask) in numa_domains(roots) {
        let cpu = cpu_element(root, numaid);
        if let Some(mask) = mask {
            cpu.set_default("affinity", mask);
        }
    }
    let cpu_attrs = cpu_identity(roots);
    for cpu in root.children.iter_mut().filter(|c| c.name == "cpu") {
        cpu.set_default("host_hash", format!("{hash:#018x}"));
        for (k, v) in &cpu_attrs {
            cpu.set_default(k, v);
        }
    }
    for port in net_ports(roots) {
        add_port(root, roots, port);
    }
    gpus::add(root, roots, &gpus::detect(roots));
}

/// FNV-1a of hostname and boot id: stable across processes and Rust versions, and unlike
/// the hostname alone it differs between two machines given the same name.
pub(crate) fn host_hash(roots: &Roots) -> u64 {
    let hostname = read(roots.proc.join("sys/kernel/hostname")).unwrap_or_default();
    let boot_id = read(roots.proc.join("sys/kernel/random/boot_id")).unwrap_or_default();
    format!("{hostname}/{boot_id}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// NUMA node ids with their cpumask, in id order; one domain 0 when `/sys` shows none.
fn numa_domains(roots: &Roots) -> Vec<(u32, Option<String>)> {
    let dir = roots.sys.join("devices/system/node");
    let mut ids: Vec<u32> = fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("node")?.parse().ok()).collect())
        .unwrap_or_default();
    ids.sort_unstable();
    if ids.is_empty() {
        return vec![(0, None)];
    }
    ids.into_iter().map(|id| (id, read(dir.join(format!("node{id}/cpumap"))))).collect()
}

/// The `<cpu>` of NUMA domain `numaid`, appended when the tree has none.
fn cpu_element(root: &mut Element, numaid: u32) -> &mut Element {
    let want = numaid.to_string();
    let pos = root.children.iter().position(|c| c.name == "cpu" && c.get("numaid") == Some(&want));
    let pos = pos.unwrap_or_else(|| {
        root.children.push(Element::new("cpu").with("numaid", numaid));
        root.children.len() - 1
    });
    &mut root.children[pos]
}

/// arch, vendor, familyid, modelid of the first processor in /proc/cpuinfo.
fn cpu_identity(roots: &Roots) -> Vec<(&'static str, String)> {
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        "powerpc64" => "ppc64",
        a => a,
    };
    let mut out = vec![("arch", arch.to_string())];
    let info = read(roots.proc.join("cpuinfo")).unwrap_or_default();
    for (key, attr) in [("vendor_id", "vendor"), ("cpu family", "familyid"), ("model", "modelid")] {
        let value = info.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        });
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.push((attr, v));
        }
    }
    out
}

/// A network port seen in /sys.
#[derive(Debug)]
struct Port {
    name: String,
    /// PCI bus ids from the root complex down to the port's own function.
    pci_chain: Vec<String>,
    speed_mbps: Option<u64>,
    guid: Option<String>,
}

fn is_busid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// InfiniBand devices, then network interfaces backed by a PCI device (loopback and
/// virtual interfaces have none), each in name order.
fn net_ports(roots: &Roots) -> Vec<Port> {
    let mut ports = Vec::new();
    for class in ["infiniband", "net"] {
        let dir = roots.sys.join("class").join(class);
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        for name in names {
            let pci_chain = chain_of(&dir.join(&name).join("device"));
            if pci_chain.is_empty() {
                continue;
            }
            let (speed_mbps, guid) = if class == "infiniband" {
                let rate = read(dir.join(&name).join("ports/1/rate"));
                let gbps = rate.and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok());
                let guid = read(dir.join(&name).join("node_guid")).map(|g| format!("0x{}", g.replace(':', "")));
                (gbps.map(|g| (g * 1000.0) as u64), guid)
            } else {
                let speed = read(dir.join(&name).join("speed")).and_then(|s| s.parse::<i64>().ok());
                (speed.filter(|s| *s > 0).map(|s| s as u64), None)
            };
            ports.push(Port { name, pci_chain, speed_mbps, guid });
        }
    }
    ports
}

/// Finds the `<pci>` with `busid` anywhere under `el`.
fn find_pci<'a>(el: &'a mut Element, busid: &str) -> Option<&'a mut Element> {
    if el.name == "pci" && el.get("busid").is_some_and(|b| b.eq_ignore_ascii_case(busid)) {
        return Some(el);
    }
    el.children.iter_mut().find_map(|c| find_pci(c, busid))
}

/// A new `<pci>` for `busid` with what sysfs says of it.
fn pci_element(roots: &Roots, busid: &str) -> Element {
    let dir = roots.sys.join("bus/pci/devices").join(busid);
    let mut el = Element::new("pci").with("busid", busid);
    for (file, attr) in [
        ("class", "class"),
        ("vendor", "vendor"),
        ("device", "device"),
        ("subsystem_vendor", "subsystem_vendor"),
        ("subsystem_device", "subsystem_device"),
        ("current_link_speed", "link_speed"),
        ("current_link_width", "link_width"),
    ] {
        if let Some(v) = read(dir.join(file)) {
            el.set(attr, v);
        }
    }
    el
}

/// Puts `port` into the tree: as a `<net>` of its PCI device's `<nic>` when the tree has
/// that device, else with its chain of PCI elements under its NUMA domain's `<cpu>`.
fn add_port(root: &mut Element, roots: &Roots, port: Port) {
    let Some(own) = port.pci_chain.last().cloned() else { return };
    pci_chain(root, roots, &port.pci_chain);
    let next_dev = count_nets(root);
    let Some(pci) = find_pci(root, &own) else { return };
    if pci.children_named("nic").next().is_none() {
        pci.children.push(Element::new("nic"));
    }
    let Some(nic) = pci.children.iter_mut().find(|c| c.name == "nic") else { return };
    if nic.children_named("net").any(|n| n.get("name") == Some(port.name.as_str())) {
        return;
    }
    let mut net = Element::new("net").with("name", &port.name).with("dev", next_dev);
    if let Some(s) = port.speed_mbps {
        net.set("speed", s);
    }
    net.set("port", 1);
    if let Some(g) = &port.guid {
        net.set("guid", g);
    }
    nic.children.push(net);
}

/// The `<pci>` element of the last bus id of `chain` (root complex down to the function),
/// with the elements of the chain that the tree lacks inserted under the function's NUMA
/// domain; an element the tree already has anywhere is used where it is.
fn pci_chain<'a>(root: &'a mut Element, roots: &Roots, chain: &[String]) -> Option<&'a mut Element> {
    let own = chain.last()?;
    if find_pci(root, own).is_none() {
        let numa = read(roots.sys.join("bus/pci/devices").join(own).join("numa_node"))
            .and_then(|n| n.parse::<i64>().ok())
            .and_then(|n| u32::try_from(n).ok());
        // Domain -1 (unknown) goes to the first domain, as the OS treats it.
        let numa = numa.unwrap_or_else(|| first_numaid(root));
        let mut parent = cpu_element(root, numa);
        for busid in chain {
            let pos = parent.children.iter().position(|c| c.name == "pci" && c.get("busid") == Some(busid.as_str()));
            let pos = pos.unwrap_or_else(|| {
                parent.children.push(pci_element(roots, busid));
                parent.children.len() - 1
            });
            parent = &mut parent.children[pos];
        }
    }
    find_pci(root, own)
}

/// PCI bus ids from the root complex down to the device whose sysfs folder is `dev`.
fn chain_of(dev: &Path) -> Vec<String> {
    let Ok(dev) = fs::canonicalize(dev) else { return Vec::new() };
    dev.components()
        .filter_map(|c| c.as_os_str().to_str().filter(|s| is_busid(s)).map(str::to_ascii_lowercase))
        .collect()
}

fn first_numaid(root: &Element) -> u32 {
    root.children_named("cpu").find_map(|c| c.get("numaid")?.parse().ok()).unwrap_or(0)
}

fn count_nets(el: &Element) -> usize {
    (el.name == "net") as usize + el.children.iter().map(count_nets).sum::<usize>()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    pub(in crate::topo::detect) fn write(path: PathBuf, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// Empty `/sys` and `/proc` trees in a temporary folder.
    pub(in crate::topo::detect) fn fake_roots() -> (tempfile::TempDir, Roots) {
        let d = tempfile::tempdir().unwrap();
        let roots = Roots { sys: d.path().join("sys"), proc: d.path().join("proc") };
        (d, roots)
    }

    /// A fake host: two NUMA nodes, eth0 on a PCI function behind a bridge in domain 1.
    fn fake_host() -> (tempfile::TempDir, Roots) {
        let (d, roots) = fake_roots();
        write(roots.sys.join("devices/system/node/node0/cpumap"), "00000003\n");
        write(roots.sys.join("devices/system/node/node1/cpumap"), "0000000c\n");
        write(
            roots.proc.join("cpuinfo"),
            "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n",
        );
        write(roots.proc.join("sys/kernel/hostname"), "h1\n");
        let fdev = roots.sys.join("devices/pci0000:00/0000:00:01.0/0000:01:00.0");
        write(fdev.join("net/eth0/x"), "");
        let bus = roots.sys.join("bus/pci/devices");
        fs::create_dir_all(&bus).unwrap();
        for (id, dir) in [("0000:00:01.0", fdev.parent().unwrap().to_path_buf()), ("0000:01:00.0", fdev.clone())] {
            symlink(&dir, bus.join(id)).unwrap();
        }
        write(fdev.join("class"), "0x020000\n");
        write(fdev.join("numa_node"), "1\n");
        write(fdev.parent().unwrap().join("class"), "0x060400\n");
        fs::create_dir_all(roots.sys.join("class/net/eth0")).unwrap();
        symlink(&fdev, roots.sys.join("class/net/eth0/device")).unwrap();
        write(roots.sys.join("class/net/eth0/speed"), "25000\n");
        fs::create_dir_all(roots.sys.join("class/net/lo")).unwrap();
        (d, roots)
    }

    #[test]
    fn fake_host_is_detected() {
        let (_d, roots) = fake_host();
        let mut root = Element::new("system").with("version", 1);
        complete(&mut root, &roots);
        let cpus: Vec<&Element> = root.children_named("cpu").collect();
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[1].get("affinity"), Some("0000000c"));
        assert_eq!(cpus[0].get("vendor"), Some("AuthenticAMD"));
        assert_eq!(cpus[0].get("familyid"), Some("25"));
        assert_eq!(cpus[0].get("host_hash"), cpus[1].get("host_hash"));
        let bridge = &cpus[1].children[0];
        assert_eq!((bridge.get("busid"), bridge.get("class")), (Some("0000:00:01.0"), Some("0x060400")));
        let net = &bridge.children[0].children[0].children[0];
        assert_eq!((net.get("name"), net.get("speed"), net.get("dev")), (Some("eth0"), Some("25000"), Some("0")));
        // Completing again adds nothing.
        let before = root.clone();
        complete(&mut root, &roots);
        assert_eq!(root, before);
    }

    #[test]
    fn file_values_win_and_ports_join_known_devices() {
        let (_d, roots) = fake_host();
        let file = "<system version=\"1\"><cpu numaid=\"1\" vendor=\"X\"><pci busid=\"0000:01:00.0\" class=\"0x020700\"/></cpu></system>";
        let mut root = super::super::xml::parse("f", file).unwrap();
        complete(&mut root, &roots);
        let cpu1 = &root.children[0];
        assert_eq!(cpu1.get("vendor"), Some("X"));
        assert_eq!(cpu1.children[0].children[0].children[0].get("name"), Some("eth0"));
        assert_eq!(root.children.len(), 2, "domain 0 added");
    }

    #[test]
    fn empty_roots_give_one_domain() {
        let d = tempfile::tempdir().unwrap();
        let roots = Roots { sys: d.path().join("none"), proc: d.path().join("none") };
        let mut root = Element::new("system");
        complete(&mut root, &roots);
        assert_eq!(root.children.len(), 1);
        assert_eq!(root.children[0].get("numaid"), Some("0"));
    }
}
