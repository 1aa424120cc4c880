//! The typed system model of one host, built from its XML tree: NUMA domains (CPUs), PCIe
//! switches, GPUs, NVSwitches and NICs as nodes, links with bandwidths between them, and
//! the best path between every pair. Building it validates the tree: a bad value is
//! refused with the file and line it came from.

use std::collections::HashMap;

use super::nodes::{Link, LinkKind, Node, NodeKind};
use super::paths::{self, Path};
use super::xml::{bad_attr, float_attr, int_attr, num_attr, Element};
use super::TopoError;

/// A NUMA domain.
#[derive(Debug, Clone, PartialEq)]
pub struct Cpu {
    pub node: usize,
    pub numaid: u32,
    /// CPUs of the domain, from its affinity mask.
    pub cpus: Vec<usize>,
    pub arch: Option<String>,
    pub vendor: Option<String>,
    pub family: Option<u32>,
    pub model: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub node: usize,
    /// Device index (CUDA/NVML order).
    pub dev: u32,
    pub busid: String,
    /// Compute capability ×10 (90 for H100); 0 when the file does not say.
    pub sm: u32,
    pub rank: Option<u32>,
    /// NVLinks of the GPU, all targets together.
    pub nvlinks: u32,
}

/// One network port (NCCL's `<net>`): what a channel sends over.
#[derive(Debug, Clone, PartialEq)]
pub struct Nic {
    /// The card's node (ports of one card share it).
    pub node: usize,
    pub dev: u32,
    pub name: String,
    pub busid: Option<String>,
    pub speed_mbps: u64,
    pub port: u32,
    pub guid: Option<u64>,
}

impl Nic {
    /// GB/s each way.
    pub fn bw(&self) -> f64 {
        self.speed_mbps as f64 / 8000.0
    }
}

/// One host's system.
#[derive(Debug, Clone)]
pub struct System {
    /// Where it came from (a file name, or "detected").
    pub source: String,
    /// Identifies the host; `None` when the file does not say.
    pub host_hash: Option<u64>,
    pub cpus: Vec<Cpu>,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    pub(crate) paths: Vec<Vec<Path>>,
    pub(crate) xml: Element,
}

/// PCIe bandwidth when a file gives no usable link speed, GB/s.
const PCI_DEFAULT_BW: f64 = 12.0;
/// NIC speed when a file gives none (NCCL's default), Mb/s.
const NET_DEFAULT_MBPS: u64 = 10_000;
const CLASS_BRIDGE_NVSWITCH: u64 = 0x068000;
const CLASS_CPU: u64 = 0x068001;

/// GB/s of one NVLink of a GPU with compute capability `sm` (×10).
fn nvlink_bw(sm: u32) -> f64 {
    match sm {
        100.. => 40.1,
        90.. => 20.6,
        _ => 20.0,
    }
}

/// GB/s of a PCIe link: lanes × transfer rate, less line encoding and ~25% protocol overhead.
fn pci_bw(speed: Option<&str>, width: Option<u64>) -> f64 {
    let gts = speed.and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse::<f64>().ok());
    let Some(gts) = gts.filter(|g| *g > 0.0) else { return PCI_DEFAULT_BW };
    // A width of 0 is what some VMs report for a device behind a switch: assume x16.
    let lanes = width.filter(|w| *w > 0).unwrap_or(16) as f64;
    let encoding = if gts < 8.0 { 0.8 } else { 128.0 / 130.0 };
    lanes * gts * encoding / 8.0 * 0.75
}

/// GB/s between two NUMA domains, by CPU generation.
fn sys_bw(cpu: &Cpu) -> f64 {
    match (cpu.vendor.as_deref(), cpu.model) {
        (Some("GenuineIntel"), Some(m)) if m >= 143 => 22.0,
        (Some("GenuineIntel"), _) => 10.0,
        (Some("AuthenticAMD"), _) => 16.0,
        _ => 12.0,
    }
}

/// CPU numbers in a Linux cpumask ("0000ffff,ffffffff": 32-bit words, most significant first).
pub(crate) fn parse_cpumask(mask: &str) -> Option<Vec<usize>> {
    let words: Vec<&str> = mask.trim().split(',').collect();
    let mut cpus = Vec::new();
    for (i, w) in words.iter().rev().enumerate() {
        let bits = u32::from_str_radix(w.trim(), 16).ok()?;
        cpus.extend((0..32).filter(|b| bits >> b & 1 == 1).map(|b| i * 32 + b));
    }
    Some(cpus)
}

/// Builds the typed model from an XML tree (`file` names it in errors).
pub(crate) fn build(file: &str, root: Element) -> Result<System, TopoError> {
    if root.name != "system" {
        let reason = format!("the root element is <{}>, expected <system>", root.name);
        return Err(TopoError::Malformed { file: file.into(), line: root.line, reason });
    }
    let mut b = Builder { file, sys: empty(file, root.clone()), by_busid: HashMap::new(), nvlinks: Vec::new() };
    for el in root.children_named("cpu") {
        b.cpu(el)?;
    }
    b.finish()
}

fn empty(source: &str, xml: Element) -> System {
    let (cpus, gpus, nics, nodes, links, paths) = Default::default();
    System { source: source.into(), host_hash: None, cpus, gpus, nics, nodes, links, paths, xml }
}

struct Builder<'a> {
    file: &'a str,
    sys: System,
    by_busid: HashMap<String, usize>,
    /// (gpu index, target bus id, count, target class) to resolve once every node exists.
    nvlinks: Vec<(usize, String, u32, Option<u64>)>,
}

impl Builder<'_> {
    fn node(&mut self, kind: NodeKind, name: String, cpu: usize) -> usize {
        self.sys.nodes.push(Node { kind, name, cpu });
        self.sys.nodes.len() - 1
    }

    fn link(&mut self, a: usize, b: usize, kind: LinkKind, bw: f64) {
        self.sys.links.push(Link { a, b, kind, bw });
    }

    fn u32_attr(&self, el: &Element, key: &str) -> Result<Option<u32>, TopoError> {
        match num_attr(self.file, el, key)? {
            Some(v) => u32::try_from(v).map(Some).map_err(|_| bad_attr(self.file, el, key, "too large")),
            None => Ok(None),
        }
    }

    fn cpu(&mut self, el: &Element) -> Result<(), TopoError> {
        let idx = self.sys.cpus.len();
        let numaid = self.u32_attr(el, "numaid")?.unwrap_or(idx as u32);
        if self.sys.cpus.iter().any(|c| c.numaid == numaid) {
            return Err(bad_attr(self.file, el, "numaid", "a second <cpu> with this NUMA id"));
        }
        if let Some(h) = num_attr(self.file, el, "host_hash")? {
            self.sys.host_hash.get_or_insert(h);
        }
        let cpus = match el.get("affinity") {
            Some(m) => parse_cpumask(m).ok_or_else(|| bad_attr(self.file, el, "affinity", "expected a hex cpumask"))?,
            None => Vec::new(),
        };
        let node = self.node(NodeKind::Cpu, format!("cpu{numaid}"), idx);
        let (family, model) = (self.u32_attr(el, "familyid")?, self.u32_attr(el, "modelid")?);
        let (arch, vendor) = (el.get("arch").map(String::from), el.get("vendor").map(String::from));
        self.sys.cpus.push(Cpu { node, numaid, cpus, arch, vendor, family, model });
        for child in &el.children {
            match child.name.as_str() {
                "pci" => self.pci(child, node, idx)?,
                "nic" => self.nic(child, node, idx, None, PCI_DEFAULT_BW)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn pci(&mut self, el: &Element, parent: usize, cpu: usize) -> Result<(), TopoError> {
        let busid = el
            .get("busid")
            .map(|b| b.trim().to_ascii_lowercase())
            .ok_or_else(|| bad_attr(self.file, el, "busid", "missing"))?;
        if self.by_busid.contains_key(&busid) {
            return Err(bad_attr(self.file, el, "busid", "a second <pci> with this bus id"));
        }
        let class = num_attr(self.file, el, "class")?.unwrap_or(0);
        let gpu = el.children_named("gpu").next();
        let nic = el.children_named("nic").next();
        let kind = if gpu.is_some() || class >> 16 == 0x03 {
            NodeKind::Gpu
        } else if nic.is_some() || class >> 16 == 0x02 {
            NodeKind::Nic
        } else if class == CLASS_BRIDGE_NVSWITCH {
            NodeKind::NvSwitch
        } else {
            NodeKind::Pci
        };
        let node = self.node(kind, busid.clone(), cpu);
        self.by_busid.insert(busid.clone(), node);
        let bw = pci_bw(el.get("link_speed"), num_attr(self.file, el, "link_width")?);
        self.link(parent, node, LinkKind::Pci, bw);
        match kind {
            NodeKind::Gpu => self.gpu(gpu.unwrap_or(&Element::new("gpu")), node, busid)?,
            NodeKind::Nic => match nic {
                Some(n) => self.nic(n, node, cpu, Some(busid), bw)?,
                // A PCI-only hint file: one port of unknown name and speed.
                None => self.net(&Element::new("net"), node, Some(busid))?,
            },
            _ => {}
        }
        for child in el.children_named("pci") {
            self.pci(child, node, cpu)?;
        }
        Ok(())
    }

    fn gpu(&mut self, el: &Element, node: usize, busid: String) -> Result<(), TopoError> {
        let idx = self.sys.gpus.len();
        let mut total = 0;
        for l in el.children_named("nvlink") {
            let target = l.get("target").map(|t| t.trim().to_ascii_lowercase());
            let target = target.ok_or_else(|| bad_attr(self.file, l, "target", "missing"))?;
            let count = self.u32_attr(l, "count")?.unwrap_or(1);
            total += count;
            self.nvlinks.push((idx, target, count, num_attr(self.file, l, "tclass")?));
        }
        let rank = match int_attr(self.file, el, "rank")? {
            Some(r) => u32::try_from(r).ok(),
            None => None,
        };
        // A missing dev is numbered after the file's explicit ones, in `finish`.
        let dev = self.u32_attr(el, "dev")?.unwrap_or(u32::MAX);
        let sm = self.u32_attr(el, "sm")?.unwrap_or(0);
        self.sys.gpus.push(Gpu { node, dev, busid, sm, rank, nvlinks: total });
        Ok(())
    }

    /// A `<nic>`: its node (made here when it hangs under a CPU) and its ports.
    fn nic(&mut self, el: &Element, node: usize, cpu: usize, busid: Option<String>, bw: f64) -> Result<(), TopoError> {
        let node = match self.sys.nodes[node].kind {
            NodeKind::Cpu => {
                let n = self.node(NodeKind::Nic, format!("nic{}", self.sys.nics.len()), cpu);
                self.link(node, n, LinkKind::Pci, bw);
                n
            }
            _ => node,
        };
        let nets: Vec<&Element> = el.children_named("net").collect();
        if nets.is_empty() {
            return self.net(&Element::new("net"), node, busid);
        }
        for net in nets {
            self.net(net, node, busid.clone())?;
        }
        Ok(())
    }

    fn net(&mut self, el: &Element, node: usize, busid: Option<String>) -> Result<(), TopoError> {
        let speed = int_attr(self.file, el, "speed")?.filter(|s| *s > 0).map_or(NET_DEFAULT_MBPS, |s| s as u64);
        let dev = self.u32_attr(el, "dev")?.unwrap_or(u32::MAX);
        let name = el.get("name").map(String::from).or_else(|| busid.clone()).unwrap_or_default();
        let port = self.u32_attr(el, "port")?.unwrap_or(1);
        let guid = num_attr(self.file, el, "guid")?;
        float_attr(self.file, el, "latency")?;
        self.sys.nics.push(Nic { node, dev, name, busid, speed_mbps: speed, port, guid });
        Ok(())
    }

    fn finish(mut self) -> Result<System, TopoError> {
        number_missing(self.sys.gpus.iter_mut().map(|g| &mut g.dev));
        number_missing(self.sys.nics.iter_mut().map(|n| &mut n.dev));
        self.resolve_nvlinks();
        let cpus = self.sys.cpus.clone();
        for (i, a) in cpus.iter().enumerate() {
            for b in &cpus[i + 1..] {
                self.link(a.node, b.node, LinkKind::Sys, sys_bw(a).min(sys_bw(b)));
            }
        }
        self.sys.paths = paths::all_pairs(&self.sys.nodes, &self.sys.links);
        Ok(self.sys)
    }

    /// NVLinks become links to their target GPU, CPU or the (one, merged) NVSwitch node;
    /// a GPU pair that lists each other keeps one link. Targets not in the file are ignored.
    fn resolve_nvlinks(&mut self) {
        let mut nvswitch = None;
        let mut per_pair: HashMap<(usize, usize), f64> = HashMap::new();
        for (g, target, count, tclass) in std::mem::take(&mut self.nvlinks) {
            let gpu = &self.sys.gpus[g];
            let (from, cpu, bw) = (gpu.node, self.sys.nodes[gpu.node].cpu, count as f64 * nvlink_bw(gpu.sm));
            let found = self.by_busid.get(&target).copied();
            let to = match (found.map(|n| self.sys.nodes[n].kind), tclass) {
                (Some(NodeKind::Gpu), _) => found,
                (_, Some(CLASS_CPU)) => Some(self.sys.cpus.get(cpu).map_or(from, |c| c.node)),
                (Some(NodeKind::NvSwitch), _) | (_, Some(CLASS_BRIDGE_NVSWITCH)) => {
                    Some(*nvswitch.get_or_insert_with(|| self.node(NodeKind::NvSwitch, "nvswitch".into(), cpu)))
                }
                _ => None,
            };
            if let Some(to) = to.filter(|t| *t != from) {
                let key = (from.min(to), from.max(to));
                let is_gpu_pair = self.sys.nodes[to].kind == NodeKind::Gpu;
                let e = per_pair.entry(key).or_insert(0.0);
                // Both ends of a GPU pair list the same links; to a switch, counts add up.
                *e = if is_gpu_pair { e.max(bw) } else { *e + bw };
            }
        }
        let mut pairs: Vec<_> = per_pair.into_iter().collect();
        pairs.sort_by_key(|(k, _)| *k);
        for ((a, b), bw) in pairs {
            self.link(a, b, LinkKind::NvLink, bw);
        }
    }
}

/// Gives `u32::MAX` entries the numbers after the largest given one, in order.
fn number_missing<'a>(devs: impl Iterator<Item = &'a mut u32>) {
    let devs: Vec<&mut u32> = devs.collect();
    let mut next = devs.iter().filter(|d| ***d != u32::MAX).map(|d| d.saturating_add(1)).max().unwrap_or(0);
    for d in devs {
        if *d == u32::MAX {
            *d = next;
            next = next.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpumask_words() {
        assert_eq!(parse_cpumask("00000000,0000000f").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_cpumask("1,00000001").unwrap(), vec![0, 32]);
        assert!(parse_cpumask("zz").is_none());
    }

    #[test]
    fn pcie_bandwidths() {
        assert!((pci_bw(Some("16.0 GT/s PCIe"), Some(16)) - 23.6).abs() < 0.1);
        assert!((pci_bw(Some("32.0 GT/s PCIe"), Some(0)) - 47.3).abs() < 0.1);
        assert_eq!(pci_bw(None, Some(16)), PCI_DEFAULT_BW);
        assert_eq!(pci_bw(Some("Unknown"), None), PCI_DEFAULT_BW);
    }

    #[test]
    fn missing_devs_numbered_after_given() {
        let mut v = [3, u32::MAX, 0, u32::MAX];
        number_missing(v.iter_mut());
        assert_eq!(v, [3, 4, 0, 5]);
    }
}
