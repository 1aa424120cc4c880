//! What a host's system model is made of: its nodes (NUMA domains, PCIe switches, GPUs,
//! NICs, the NVSwitch fabric) and the full-duplex links between them, over which `paths`
//! finds the best route between every pair.

/// What a node of the system is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A NUMA domain: its CPUs and memory, the root of a PCIe tree.
    Cpu,
    /// A PCIe switch or bridge (or a device jitccl does not model).
    Pci,
    Gpu,
    /// A network card (its ports are the system's [`Nic`](super::Nic)s).
    Nic,
    /// The NVSwitch fabric the GPUs' NVLinks go to.
    NvSwitch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkKind {
    NvLink,
    Pci,
    /// Between two NUMA domains.
    Sys,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    /// PCI bus id, `cpu<numaid>` or `nvswitch`.
    pub name: String,
    /// Index in [`System::cpus`](super::System::cpus) of the NUMA domain the node hangs under.
    pub cpu: usize,
}

/// A full-duplex link: `bw` GB/s each way.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub a: usize,
    pub b: usize,
    pub kind: LinkKind,
    pub bw: f64,
}
