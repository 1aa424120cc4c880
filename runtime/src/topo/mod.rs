//! Topology: the system model of a host — NUMA domains, PCIe tree, GPUs, NVLinks and
//! NVSwitches, NICs — with link bandwidths and the path type between every pair of nodes.
//!
//! It is read from an NCCL topology XML file (`JITCCL_TOPO_FILE`, else `NCCL_TOPO_FILE`),
//! detected from `/sys` and `/proc`, or both: detection completes a partial file. It is
//! written in the same format (`JITCCL_TOPO_DUMP_FILE`), so NCCL reads what jitccl writes
//! and the other way round.

mod detect;
mod nodes;
mod paths;
mod system;
pub(crate) mod xml;

use std::path::Path as FsPath;

use crate::settings;

pub use nodes::{Link, LinkKind, Node, NodeKind};
pub use paths::{Hop, Path, PathType, LOC_BW};
pub use system::{Cpu, Gpu, Nic, System};

/// A topology (or graph) file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// Not well-formed XML, or a value that makes no sense.
    #[error("{file}:{line}: {reason}")]
    Malformed { file: String, line: u32, reason: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// Well-formed input that does not fit what it is used for.
    #[error("{0}")]
    Invalid(String),
}

impl From<TopoError> for crate::Error {
    fn from(e: TopoError) -> crate::Error {
        match e {
            TopoError::Io { path, source } => crate::Error::System { context: path, source },
            other => crate::Error::InvalidArgument(other.to_string()),
        }
    }
}

/// Reads `path` as text, naming it in the error.
pub(crate) fn read_file(path: &FsPath) -> Result<String, TopoError> {
    std::fs::read_to_string(path).map_err(|source| TopoError::Io { path: path.display().to_string(), source })
}

/// Writes `text` to `path`, naming it in the error.
pub(crate) fn write_file(path: &FsPath, text: &str) -> Result<(), TopoError> {
    std::fs::write(path, text).map_err(|source| TopoError::Io { path: path.display().to_string(), source })
}

impl System {
    /// The system described by an NCCL topology XML file, as written (nothing detected).
    pub fn from_xml_file(path: impl AsRef<FsPath>) -> Result<System, TopoError> {
        let path = path.as_ref();
        System::from_xml_str(&path.display().to_string(), &read_file(path)?)
    }

    /// The system described by XML `text`; `file` names it in errors.
    pub fn from_xml_str(file: &str, text: &str) -> Result<System, TopoError> {
        system::build(file, xml::parse(file, text)?)
    }

    /// This host: the topology file named by `JITCCL_TOPO_FILE` (else `NCCL_TOPO_FILE`),
    /// completed by detection, or detection alone. Written to `JITCCL_TOPO_DUMP_FILE` when set.
    pub fn local() -> Result<System, TopoError> {
        crate::logging::init();
        let (sys, how) = match settings::TOPO_FILE.path() {
            Some(p) => {
                let file = p.display().to_string();
                let root = xml::parse(&file, &read_file(&p)?)?;
                (System::completed(&file, root, &detect::Roots::default())?, " completed by detection")
            }
            None => (System::completed("detected", empty_root(), &detect::Roots::default())?, ""),
        };
        tracing::debug!(
            "topology: {}{how}: {} NUMA domain(s), {} GPU(s), {} NIC(s)",
            sys.source,
            sys.cpus.len(),
            sys.gpus.len(),
            sys.nics.len()
        );
        if let Some(p) = settings::TOPO_DUMP_FILE.path() {
            write_file(&p, &sys.to_xml())?;
        }
        Ok(sys)
    }

    /// `root` completed with what detection finds under `roots`.
    fn completed(file: &str, mut root: xml::Element, roots: &detect::Roots) -> Result<System, TopoError> {
        detect::complete(&mut root, roots);
        system::build(file, root)
    }

    /// The topology as NCCL topology XML.
    pub fn to_xml(&self) -> String {
        xml::write(&self.xml)
    }

    /// The best path from node `from` to node `to` (indices into [`System::nodes`]).
    pub fn path(&self, from: usize, to: usize) -> Option<&Path> {
        self.paths.get(from)?.get(to)
    }

    /// The GPU with device index `dev`.
    pub fn gpu(&self, dev: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.dev == dev)
    }

    /// The NUMA domain with id `numaid`.
    pub fn cpu(&self, numaid: u32) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.numaid == numaid)
    }
}

fn empty_root() -> xml::Element {
    xml::Element::new("system").with("version", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topo");

    fn fixture(name: &str) -> System {
        System::from_xml_file(format!("{FIXTURES}/{name}")).unwrap()
    }

    #[test]
    fn h100_fixture_model() {
        let s = fixture("hgx-h100-8gpu-8nic.xml");
        assert_eq!((s.cpus.len(), s.gpus.len(), s.nics.len()), (2, 8, 8));
        assert_eq!(s.host_hash, Some(0xa5f31daa95182da8));
        assert_eq!(s.cpus[0].cpus.len(), 80);
        assert_eq!(s.nics[7].name, "mlx5_0");
        assert_eq!(s.nics[7].bw(), 25.0);
        let nvs = s.nodes.iter().filter(|n| n.kind == NodeKind::NvSwitch).count();
        assert_eq!(nvs, 1, "the four NVSwitches are one fabric");
        let g0 = s.gpu(0).unwrap();
        assert_eq!((g0.sm, g0.nvlinks, g0.busid.as_str()), (90, 18, "0000:a4:00.0"));
        for a in &s.gpus {
            for b in &s.gpus {
                let p = s.path(a.node, b.node).unwrap();
                let want = if a.dev == b.dev { PathType::Loc } else { PathType::Nvl };
                assert_eq!(p.ty, want);
                if a.dev != b.dev {
                    assert!((p.bw - 18.0 * 20.6).abs() < 1e-9, "{}", p.bw);
                }
            }
        }
        // mlx5_7 shares GPU 0's switch; mlx5_0 is on the other socket.
        let nic = |name: &str| s.nics.iter().find(|n| n.name == name).unwrap().node;
        assert_eq!(s.path(g0.node, nic("mlx5_7")).unwrap().ty, PathType::Pix);
        assert_eq!(s.path(g0.node, nic("mlx5_0")).unwrap().ty, PathType::Sys);
    }

    #[test]
    fn pci_only_fixture_model() {
        let s = fixture("ndv4-a100-pci-only.xml");
        assert_eq!((s.cpus.len(), s.gpus.len(), s.nics.len()), (4, 8, 8));
        assert_eq!(s.gpus.iter().map(|g| g.dev).collect::<Vec<_>>(), (0..8).collect::<Vec<_>>());
        assert_eq!(s.gpus[2].busid, "0001:00:00.0");
        assert_eq!(s.nics[0].name, "0103:00:00.0");
        let (g, n) = (s.gpus[0].node, s.nics[0].node);
        assert_eq!(s.path(g, n).unwrap().ty, PathType::Pix);
        assert_eq!(s.path(g, s.gpus[2].node).unwrap().ty, PathType::Sys);
        assert_eq!(s.path(g, s.gpus[1].node).unwrap().ty, PathType::Pix);
    }

    #[test]
    fn dump_load_dump_is_stable() {
        for name in ["hgx-h100-8gpu-8nic.xml", "ndv4-a100-pci-only.xml"] {
            let once = fixture(name).to_xml();
            let twice = System::from_xml_str("dump", &once).unwrap().to_xml();
            assert_eq!(once, twice);
        }
    }

    #[test]
    fn bad_values_name_file_and_line() {
        let text = "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\" class=\"zz\"/>\n  </cpu>\n</system>\n";
        let e = System::from_xml_str("t.xml", text).unwrap_err().to_string();
        assert!(e.starts_with("t.xml:3: <pci> attribute class=\"zz\""), "{e}");
        let e = System::from_xml_str("t.xml", "<graphs/>").unwrap_err().to_string();
        assert!(e.contains("expected <system>"), "{e}");
        let dup = "<system>\n<cpu numaid=\"0\"/>\n<cpu numaid=\"0\"/>\n</system>";
        assert!(System::from_xml_str("d.xml", dup).unwrap_err().to_string().starts_with("d.xml:3:"));
        let e = System::from_xml_file("/nonexistent/x.xml").unwrap_err().to_string();
        assert!(e.starts_with("/nonexistent/x.xml: "), "{e}");
    }

    #[test]
    fn fixture_dump_matches_nccl_layout() {
        let path = format!("{FIXTURES}/hgx-h100-8gpu-8nic.xml");
        let original = std::fs::read_to_string(&path).unwrap();
        assert_eq!(fixture("hgx-h100-8gpu-8nic.xml").to_xml().trim_end(), original.trim_end());
    }

    #[test]
    fn this_host_is_detected() {
        let s = System::local().unwrap();
        assert!(!s.cpus.is_empty());
        assert!(s.host_hash.is_some());
        System::from_xml_str("dump", &s.to_xml()).unwrap();
    }

    #[test]
    fn empty_system_has_nothing() {
        let s = System::from_xml_str("e", "<system version=\"1\"/>").unwrap();
        assert!(s.cpus.is_empty() && s.gpus.is_empty() && s.nics.is_empty());
    }

    #[test]
    fn completed_partial_file() {
        let d = tempfile::tempdir().unwrap();
        let roots = detect::Roots { sys: d.path().join("s"), proc: d.path().join("p") };
        let root = xml::parse("f", "<system version=\"1\"><cpu numaid=\"0\" vendor=\"V\"/></system>").unwrap();
        let s = System::completed("f", root, &roots).unwrap();
        assert_eq!(s.cpus.len(), 1);
        assert!(s.host_hash.is_some());
        assert_eq!(s.cpus[0].vendor.as_deref(), Some("V"));
    }
}
