//! NVIDIA GPUs of the host: found on the PCI bus in `/sys` (vendor 0x10de, display or 3D
//! controller class), so their PCIe position is known without any driver; the CUDA driver,
//! when present, gives each its device number and compute capability, and NVML, when
//! `libnvidia-ml` is present, adds the NVLinks. Without NVML GPU links are PCI-only
//! (logged), never an error.
//!
//! GPUs the driver does not show (no driver, or hidden by `CUDA_VISIBLE_DEVICES`) are
//! numbered after the others in bus-id order: CUDA's order with
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and its default order on machines whose GPUs are alike.

use std::fs;

use super::nvml::{self, NvLink};
use super::{chain_of, find_pci, pci_chain, read, Roots};
use crate::topo::xml::Element;

const NVIDIA: &str = "0x10de";
/// PCI class of a GPU as NCCL's files write it, and of an NVSwitch (a bridge).
const CLASS_GPU: &str = "0x030200";
const CLASS_NVSWITCH: &str = "0x068000";

/// One GPU as detection sees it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Gpu {
    /// PCI bus ids from the root complex down to the GPU.
    pub chain: Vec<String>,
    /// The CUDA device number, where the driver shows this GPU.
    pub ordinal: Option<u32>,
    /// Compute capability as NCCL writes it (90 for 9.0); `None` without driver and NVML.
    pub sm: Option<u32>,
    pub nvlinks: Vec<NvLink>,
}

/// The host's NVIDIA GPUs in bus-id order, completed by NVML where it is present.
pub(super) fn detect(roots: &Roots) -> Vec<Gpu> {
    let dir = roots.sys.join("bus/pci/devices");
    let mut ids: Vec<String> = fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    ids.sort();
    let mut gpus: Vec<Gpu> = ids
        .iter()
        .filter(|id| {
            let vendor = read(dir.join(id).join("vendor"));
            let class = read(dir.join(id).join("class")).unwrap_or_default();
            vendor.as_deref() == Some(NVIDIA) && (class.starts_with("0x0302") || class.starts_with("0x0300"))
        })
        .map(|id| Gpu { chain: chain_of(&dir.join(id)), ordinal: None, sm: None, nvlinks: Vec::new() })
        .filter(|g| !g.chain.is_empty())
        .collect();
    if gpus.is_empty() {
        return gpus;
    }
    match crate::device::cuda_pci_devices() {
        Ok(devices) => {
            for d in devices {
                if let Some(g) = gpus.iter_mut().find(|g| g.chain.last() == Some(&d.busid)) {
                    (g.ordinal, g.sm) = (Some(d.ordinal), Some(d.arch));
                }
            }
        }
        Err(e) => tracing::info!(
            "topology: {} NVIDIA GPU(s) on PCI, no CUDA devices ({e}): numbered in bus order",
            gpus.len()
        ),
    }
    match nvml::Nvml::open() {
        Ok(nvml) => {
            for g in &mut gpus {
                let busid = g.chain.last().cloned().unwrap_or_default();
                match nvml.device(&busid) {
                    Ok(d) => {
                        let links: u32 = d.nvlinks.iter().map(|l| l.count).sum();
                        tracing::info!("topology: NVML: GPU {busid} sm {}, {links} active NVLink(s)", d.sm);
                        (g.sm, g.nvlinks) = (g.sm.or(Some(d.sm)), d.nvlinks);
                    }
                    Err(e) => tracing::info!("topology: NVML knows nothing of GPU {busid} ({e}): PCI links only"),
                }
            }
        }
        Err(e) => {
            tracing::info!("topology: {} NVIDIA GPU(s) on PCI, no NVML ({e}): GPU links are PCI-only", gpus.len())
        }
    }
    gpus
}

/// Puts each GPU into the tree as a `<pci class="0x030200">` with a `<gpu dev sm gdr>`
/// child and its `<nvlink>`s, under its NUMA domain. A GPU the tree (a topology file)
/// already has keeps what the file says; detection only adds what is missing.
pub(super) fn add(root: &mut Element, roots: &Roots, gpus: &[Gpu]) {
    let mut taken: Vec<u32> = count_gpu_devs(root);
    let drivers = gpus.iter().filter_map(|g| g.ordinal);
    let mut next_dev = taken.iter().copied().chain(drivers).max().map_or(0, |d| d + 1);
    for g in gpus {
        let Some(busid) = g.chain.last() else { continue };
        let known = find_pci(root, busid).is_some_and(|p| p.children_named("gpu").next().is_some());
        let Some(pci) = pci_chain(root, roots, &g.chain) else { continue };
        if known {
            continue;
        }
        pci.set("class", CLASS_GPU);
        // The driver's number unless the file gave it to another GPU.
        let dev = match g.ordinal.filter(|o| !taken.contains(o)) {
            Some(o) => o,
            None => {
                next_dev += 1;
                next_dev - 1
            }
        };
        taken.push(dev);
        let mut gpu = Element::new("gpu").with("dev", dev);
        if let Some(sm) = g.sm {
            gpu.set("sm", sm);
        }
        // GPUDirect RDMA needs a kernel module this detection cannot vouch for.
        gpu.set("gdr", 0);
        for l in &g.nvlinks {
            let tclass = if l.to_switch { CLASS_NVSWITCH } else { CLASS_GPU };
            gpu.children
                .push(Element::new("nvlink").with("target", &l.target).with("count", l.count).with("tclass", tclass));
        }
        pci.children.push(gpu);
    }
}

/// `dev` numbers of the GPUs the tree already has.
fn count_gpu_devs(el: &Element) -> Vec<u32> {
    let own = (el.name == "gpu").then(|| el.get("dev").and_then(|d| d.parse().ok())).flatten();
    own.into_iter().chain(el.children.iter().flat_map(count_gpu_devs)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topo::detect::tests::{fake_roots, write};
    use crate::topo::System;
    use std::os::unix::fs::symlink;

    /// Two NVIDIA GPUs behind one PCIe switch in NUMA domain 0, and an audio function of
    /// the same vendor that is not a GPU.
    fn fake_host() -> (tempfile::TempDir, Roots) {
        let (d, roots) = fake_roots();
        write(roots.sys.join("devices/system/node/node0/cpumap"), "ff\n");
        let bus = roots.sys.join("bus/pci/devices");
        fs::create_dir_all(&bus).unwrap();
        let sw = roots.sys.join("devices/pci0000:00/0000:00:02.0");
        write(sw.join("class"), "0x060400\n");
        symlink(&sw, bus.join("0000:00:02.0")).unwrap();
        for (id, class) in [("0000:17:00.0", "0x030200"), ("0000:18:00.0", "0x030000"), ("0000:18:00.1", "0x040300")] {
            let dev = sw.join(id);
            write(dev.join("vendor"), "0x10de\n");
            write(dev.join("class"), &format!("{class}\n"));
            write(dev.join("numa_node"), "0\n");
            symlink(&dev, bus.join(id)).unwrap();
        }
        (d, roots)
    }

    fn system(root: &Element) -> System {
        System::from_xml_str("detected", &crate::topo::xml::write(root)).unwrap()
    }

    #[test]
    fn gpus_on_the_pci_bus_are_found_in_bus_order_without_nvml() {
        let (_d, roots) = fake_host();
        let found = detect(&roots);
        let ids: Vec<&str> = found.iter().map(|g| g.chain.last().unwrap().as_str()).collect();
        assert_eq!(ids, ["0000:17:00.0", "0000:18:00.0"], "the audio function is no GPU");
        assert_eq!(found[0].chain, ["0000:00:02.0", "0000:17:00.0"]);
        let mut root = Element::new("system").with("version", 1);
        root.children.push(Element::new("cpu").with("numaid", 0));
        add(&mut root, &roots, &found);
        let sys = system(&root);
        assert_eq!(sys.gpus.len(), 2);
        assert_eq!((sys.gpus[0].dev, sys.gpus[1].dev), (0, 1));
        assert_eq!(sys.gpus[0].nvlinks, 0);
        // Both hang under the switch: their path is PIX (one switch), not PHB.
        let (a, b) = (sys.gpus[0].node, sys.gpus[1].node);
        assert_eq!(sys.path(a, b).unwrap().ty.to_string(), "PIX");
        // With a driver its numbers win over bus order.
        let mut found = found;
        (found[0].ordinal, found[1].ordinal) = (Some(1), Some(0));
        let mut root = Element::new("system").with("version", 1);
        add(&mut root, &roots, &found);
        let sys = system(&root);
        let devs: Vec<(&str, u32)> = sys.gpus.iter().map(|g| (g.busid.as_str(), g.dev)).collect();
        assert!(devs.contains(&("0000:17:00.0", 1)) && devs.contains(&("0000:18:00.0", 0)), "{devs:?}");
    }

    #[test]
    fn nvml_facts_become_sm_and_nvlinks_and_file_gpus_win() {
        let (_d, roots) = fake_host();
        let mut found = detect(&roots);
        // As the driver would say: the second GPU (by bus) is CUDA device 0.
        found[1].ordinal = Some(0);
        found[0].sm = Some(90);
        found[0].nvlinks = vec![NvLink { target: "0000:18:00.0".into(), count: 4, to_switch: false }];
        found[1].sm = Some(90);
        found[1].nvlinks = vec![NvLink { target: "0000:17:00.0".into(), count: 4, to_switch: false }];
        // A partial file that names the second GPU as device 5 with sm 80.
        let file = "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:18:00.0\" class=\"0x030200\"><gpu dev=\"5\" sm=\"80\"/></pci></cpu></system>";
        let mut root = crate::topo::xml::parse("f", file).unwrap();
        add(&mut root, &roots, &found);
        let sys = system(&root);
        let by_bus = |b: &str| sys.gpus.iter().find(|g| g.busid == b).unwrap();
        assert_eq!((by_bus("0000:18:00.0").dev, by_bus("0000:18:00.0").sm), (5, 80), "the file wins");
        assert_eq!((by_bus("0000:17:00.0").dev, by_bus("0000:17:00.0").sm), (6, 90), "numbered after the file's");
        assert_eq!(by_bus("0000:17:00.0").nvlinks, 4);
        let (a, b) = (by_bus("0000:17:00.0").node, by_bus("0000:18:00.0").node);
        assert_eq!(sys.path(a, b).unwrap().ty.to_string(), "NVL");
        // Completing again changes nothing.
        let before = root.clone();
        add(&mut root, &roots, &found);
        assert_eq!(root, before);
    }
}
