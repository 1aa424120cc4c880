//! NCCL network plugins (`libnccl-net*.so`) behind one interface: finding them by
//! `JITCCL_NET_PLUGIN` as NCCL does (`plugin`), taking each library's newest table from
//! `ncclNetPlugin_v12` down to `_v8` (`abi`: the layouts; `table`: the versions adapted to
//! one set of calls), initializing them and choosing the network a communicator uses
//! (`select`: by `net_name`, else the first plugin with a device, else the built-in
//! `Socket`), and the comms, registrations and requests a transport drives (`comm`).
//!
//! A [`Network`] is one communicator's use of a plugin: from v11 it owns the context that
//! `init` returned and finalizes it when its last clone, and the last comm it opened, are
//! gone.

mod abi;
mod comm;
mod envguard;
mod select;
mod table;
#[cfg(test)]
mod tests;

use std::ffi::c_int;
use std::sync::Arc;

pub(crate) use abi::{PTR_CUDA, PTR_DMABUF, PTR_HOST};
pub(crate) use comm::{Flushing, ListenComm, Mr, RecvComm, Request, SendComm};
pub(crate) use select::{check, libraries, select};

use select::Plugin;
use table::{Context, Fail};

/// The network of the plugin library at `path` (its newest table), for the tests of the
/// transports above: they drive a plugin of their own without the setting that every
/// communicator of the process would read.
#[cfg(test)]
pub(crate) fn of_library(path: &str, comm_id: u64) -> Network {
    let lib = crate::plugin::open(path, &[path.to_string()]).expect("the plugin loads");
    let p = select::plugin_of(lib, None).expect("a table of a version jitccl speaks");
    select::choose(None, comm_id, &[p]).expect("the plugin initializes").expect("a device")
}

/// `NCCL_NET_HANDLE_MAXSIZE`: what `listen` fills, for the peer's `connect`.
pub(crate) const HANDLE_BYTES: usize = 128;
/// The handle a receiver's `listen` gives and its sender's `connect` takes (through the
/// bootstrap).
pub(crate) type Handle = [u8; HANDLE_BYTES];
/// `NCCL_NET_MAX_REQUESTS`: requests a comm may have in flight.
pub(crate) const MAX_REQUESTS: usize = 32;

/// The memory a region lies in, as `regMr`'s type says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemKind {
    /// `NCCL_PTR_HOST`.
    Host,
    /// `NCCL_PTR_CUDA`: GPU memory.
    Cuda,
}

impl MemKind {
    fn bits(self) -> u32 {
        match self {
            MemKind::Host => PTR_HOST,
            MemKind::Cuda => PTR_CUDA,
        }
    }
}

/// What a plugin says of one of its devices, whatever its version.
#[derive(Debug, Clone)]
pub(crate) struct DeviceProps {
    pub name: String,
    /// The device's PCI function in sysfs, if the plugin knows it.
    pub pci_path: Option<String>,
    pub guid: u64,
    /// `NCCL_PTR_*` bits: the memory the device reaches ([`PTR_HOST`], [`PTR_CUDA`], [`PTR_DMABUF`]).
    pub ptr_support: u32,
    pub speed_mbps: u32,
    pub latency_us: f32,
    pub max_comms: u32,
    /// Receives one `irecv` may group (at least 1).
    pub max_recvs: u32,
    /// Registrations are not tied to the comm that made them.
    pub reg_is_global: bool,
    /// Received GPU data needs `iflush` (v9+; false for v8).
    pub force_flush: bool,
}

/// A call a plugin refused, or that could not be made on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{network}: {call} failed with {code} ({what})")]
pub(crate) struct NetError {
    /// The network's name (the plugin's `name`).
    pub network: String,
    /// The plugin call (`isend`, `connect`, ...).
    pub call: &'static str,
    /// The `ncclResult_t`.
    pub code: i32,
    /// The code's name, and what went wrong where the host refused the call itself.
    pub what: &'static str,
}

/// One communicator's network over a plugin. Cheap to clone; the plugin's context (v11+)
/// is finalized when the last clone and the last of its comms are gone.
#[derive(Clone)]
pub(crate) struct Network(Arc<Session>);

/// What a network's clones and comms share.
struct Session {
    plugin: Arc<Plugin>,
    ctx: Context,
    devices: Arc<[DeviceProps]>,
}

// SAFETY: the context is the plugin's, which NCCL's contract has used from any thread (the
// proxy threads of a communicator); jitccl's own state in it is not changed after init.
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(f) = self.plugin.table.finalize(&self.ctx) {
            tracing::warn!("NET/Plugin: {}", self.error(f));
        }
    }
}

impl Session {
    fn error(&self, f: Fail) -> NetError {
        NetError { network: self.plugin.name.clone(), call: f.call, code: f.code, what: f.what }
    }

    /// Device `dev` as the plugin's `int`, if the network has it.
    fn device(&self, call: &'static str, dev: usize) -> Result<c_int, NetError> {
        match c_int::try_from(dev) {
            Ok(d) if dev < self.devices.len() => Ok(d),
            _ => {
                Err(self.error(Fail { call, code: abi::INVALID_ARGUMENT, what: "ncclInvalidArgument: no such device" }))
            }
        }
    }
}

impl Network {
    /// The network's name, as `net_name` chooses it.
    pub fn name(&self) -> &str {
        &self.0.plugin.name
    }

    /// The interface version the plugin is driven by (8 to 12).
    pub fn version(&self) -> u32 {
        self.0.plugin.table.version()
    }

    /// The library file it came from.
    pub fn library(&self) -> &str {
        &self.0.plugin.library
    }

    pub fn devices(&self) -> &[DeviceProps] {
        &self.0.devices
    }

    /// Whether the plugin's table has `iflush` (a receive into GPU memory that needs a flush
    /// cannot be made without it).
    pub fn has_iflush(&self) -> bool {
        self.0.plugin.table.has_iflush()
    }

    /// Listens on device `dev`: the handle for the peer's `connect`, and the comm that
    /// accepts it.
    pub fn listen(&self, dev: usize) -> Result<(Handle, ListenComm), NetError> {
        let d = self.0.device("listen", dev)?;
        let mut handle = [0u8; HANDLE_BYTES];
        let raw = self.0.plugin.table.listen(&self.0.ctx, d, &mut handle).map_err(|f| self.0.error(f))?;
        Ok((handle, ListenComm::new(self.0.clone(), raw)))
    }

    /// Connects to the peer whose `listen` gave `handle`. Non-blocking: `Ok(None)` = call
    /// again, with the same handle (the plugin may keep its progress in it).
    pub fn connect(&self, dev: usize, handle: &mut Handle) -> Result<Option<SendComm>, NetError> {
        let d = self.0.device("connect", dev)?;
        let raw = self.0.plugin.table.connect(&self.0.ctx, d, handle).map_err(|f| self.0.error(f))?;
        Ok((!raw.is_null()).then(|| SendComm::new(self.0.clone(), raw)))
    }
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (v{}, {})", self.name(), self.version(), self.library())
    }
}
