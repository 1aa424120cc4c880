//! Which network a communicator uses, as NCCL chooses: the plugins `JITCCL_NET_PLUGIN`
//! names, in order (each library's newest table), then the built-in `Socket`. A name asked
//! (`net_name`, case-insensitive) takes the plugin of that name or `Socket`; without one,
//! the first plugin that initializes and has a device wins. A plugin whose `init` fails or
//! that has no device is skipped, with the reason logged, and stays skipped for the rest
//! of the process (NCCL disables it).

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::envguard::Snapshot;
use super::table::{Context, Fail, Table, VERSIONS};
use super::{DeviceProps, Network, Session, PTR_CUDA, PTR_DMABUF, PTR_HOST};
use crate::error::{Error, Result};
use crate::plugin::{self, Library, Request};
use crate::settings;

/// One plugin table of a loaded library, process-wide.
pub(super) struct Plugin {
    /// The network's name (the table's `name`).
    pub name: String,
    /// The file it was loaded from.
    pub library: String,
    pub table: Table,
    /// The first `init` and device query: `None` before; an error once the plugin is
    /// skipped for good. Up to v10 that init is the process's only one.
    first: Mutex<Option<std::result::Result<Arc<[DeviceProps]>, String>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Plugin {
    pub(super) fn new(library: &str, table: Table) -> Plugin {
        Plugin { name: table.name(), library: library.to_string(), table, first: Mutex::new(None) }
    }

    /// A network for one communicator: `init` (per communicator from v11, else only the
    /// first time) and, the first time, the devices. The error says why it is skipped.
    fn open(self: &Arc<Self>, comm_id: u64) -> std::result::Result<Network, String> {
        let mut first = lock(&self.first);
        if let Some(Err(why)) = &*first {
            return Err(why.clone());
        }
        let mut ctx = Context::new();
        if first.is_none() || self.table.per_comm() {
            let snapshot = Snapshot::take();
            let r = self.table.init(&mut ctx, comm_id);
            snapshot.restore(&self.name);
            if let Err(f) = r {
                let why = failed(f);
                *first = Some(Err(why.clone()));
                return Err(why);
            }
        }
        let devices = match &*first {
            Some(Ok(d)) => d.clone(),
            _ => match self.query() {
                Ok(d) => {
                    *first = Some(Ok(d.clone()));
                    d
                }
                Err(why) => {
                    if let Err(f) = self.table.finalize(&ctx) {
                        tracing::warn!("NET/Plugin: {}: {}", self.name, failed(f));
                    }
                    *first = Some(Err(why.clone()));
                    return Err(why);
                }
            },
        };
        Ok(Network(Arc::new(Session { plugin: self.clone(), ctx, devices })))
    }

    /// The devices and their properties; none is a reason to skip the plugin.
    fn query(&self) -> std::result::Result<Arc<[DeviceProps]>, String> {
        let n = self.table.devices().map_err(failed)?;
        if n == 0 {
            return Err("it has no device".into());
        }
        (0..n).map(|d| self.table.properties(d as c_int).map_err(|f| format!("device {d}: {}", failed(f)))).collect()
    }
}

fn failed(f: Fail) -> String {
    format!("{} failed with {} ({})", f.call, f.code, f.what)
}

/// The plugin of `lib` at `version` (its newest if `None`), made once per process.
pub(super) fn plugin_of(lib: &'static Library, version: Option<u32>) -> Option<Arc<Plugin>> {
    static PLUGINS: OnceLock<Mutex<Vec<Arc<Plugin>>>> = OnceLock::new();
    let table = match version {
        Some(v) => Table::of(lib, v)?,
        None => Table::find(lib)?,
    };
    let mut all = lock(PLUGINS.get_or_init(Default::default));
    if let Some(p) = all.iter().find(|p| p.library == lib.file && p.table.version() == table.version()) {
        return Some(p.clone());
    }
    let p = Arc::new(Plugin::new(&lib.file, table));
    let asked = if lib.entry == lib.file { String::new() } else { format!(", for '{}'", lib.entry) };
    tracing::info!("NET/Plugin: loaded {} from {} (interface v{}{asked})", p.name, p.library, table.version());
    all.push(p.clone());
    Some(p)
}

/// The libraries `setting` (`JITCCL_NET_PLUGIN`) names that load, in order, each once. One
/// that does not load is left out with a log line (a DEBUG one for the default library,
/// which most machines do not have).
fn loaded_libraries(setting: Option<&str>) -> Vec<&'static Library> {
    let Request::Entries(entries) = plugin::request("net", setting) else { return Vec::new() };
    let mut out: Vec<&'static Library> = Vec::new();
    for (entry, files) in entries {
        match plugin::open(&entry, &files) {
            Ok(lib) if out.iter().any(|o| std::ptr::eq(*o, lib)) => {}
            Ok(lib) => out.push(lib),
            Err(why) if setting.is_none() => tracing::debug!("NET/Plugin: no {entry}: {why}"),
            Err(why) => tracing::info!("NET/Plugin: {entry} did not load: {why}"),
        }
    }
    out
}

/// The network plugins' libraries, as `JITCCL_NET_PLUGIN` names them: where NCCL looks for
/// the other plugin kinds (a tuner) when none of their own is found.
pub(crate) fn libraries() -> Result<Vec<&'static Library>> {
    Ok(loaded_libraries(settings::NET_PLUGIN.text()?.as_deref()))
}

/// The plugins `setting` (`JITCCL_NET_PLUGIN`) names, in order, each library once. A library
/// that exports no table jitccl speaks is left out with a log line.
pub(super) fn candidates(setting: Option<&str>) -> Vec<Arc<Plugin>> {
    let mut out: Vec<Arc<Plugin>> = Vec::new();
    for lib in loaded_libraries(setting) {
        match plugin_of(lib, None) {
            Some(p) => out.push(p),
            None => tracing::info!(
                "NET/Plugin: {} exports none of {}; skipped",
                lib.file,
                VERSIONS.map(|v| format!("ncclNetPlugin_v{v}")).join(", ")
            ),
        }
    }
    out
}

/// Checks that the network `asked` exists, for a communicator that reaches no peer through
/// a network: a name that could not be used fails init there too, as it would across hosts.
pub(crate) fn check(asked: Option<&str>) -> Result<()> {
    match asked {
        Some(name) if !name.eq_ignore_ascii_case("socket") => select(asked, 0).map(drop),
        _ => Ok(()),
    }
}

/// Loads the plugins and chooses the network of a communicator: `None` = the built-in
/// `Socket`. `asked` is its `net_name` (`None`: no name asked); `comm_id`, the same on
/// every rank of the communicator, lets a v11+ plugin group its connections.
pub(crate) fn select(asked: Option<&str>, comm_id: u64) -> Result<Option<Network>> {
    choose(asked, comm_id, &candidates(settings::NET_PLUGIN.text()?.as_deref()))
}

/// Plugin inits and what they change run one at a time, as in NCCL: a plugin's changes to
/// the environment are undone before another starts.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    lock(&ONE)
}

/// [`select`] among `plugins`.
pub(super) fn choose(asked: Option<&str>, comm_id: u64, plugins: &[Arc<Plugin>]) -> Result<Option<Network>> {
    let _one = one_at_a_time();
    let mut skipped = Vec::new();
    for p in plugins.iter().filter(|p| asked.is_none_or(|a| a.eq_ignore_ascii_case(&p.name))) {
        match p.open(comm_id) {
            Ok(net) => {
                say_chosen(&net);
                return Ok(Some(net));
            }
            Err(why) => {
                tracing::info!("NET/Plugin: {} (v{}, {}) skipped: {why}", p.name, p.table.version(), p.library);
                skipped.push(format!("{} (v{}, {}): {why}", p.name, p.table.version(), p.library));
            }
        }
    }
    match asked {
        None => {
            tracing::info!("NET: using the built-in Socket (no network plugin with a device)");
            Ok(None)
        }
        Some(a) if a.eq_ignore_ascii_case("Socket") => {
            tracing::info!("NET: using the built-in Socket, as asked");
            Ok(None)
        }
        Some(a) if !skipped.is_empty() => Err(Error::InvalidUsage(format!(
            "the network '{a}' asked (Config.net_name / JITCCL_NET) cannot be used: {}",
            skipped.join("; ")
        ))),
        Some(a) => {
            let mut names = vec!["Socket (built in)".to_string()];
            names.extend(plugins.iter().map(|p| format!("{} (v{}, {})", p.name, p.table.version(), p.library)));
            Err(Error::InvalidArgument(format!(
                "no network is named '{a}' (Config.net_name / JITCCL_NET); the networks available are: {}",
                names.join(", ")
            )))
        }
    }
}

/// The INFO lines of a choice: the network, its library and version, its devices.
fn say_chosen(net: &Network) {
    tracing::info!("NET: using {} from {} (interface v{})", net.name(), net.library(), net.version());
    for (i, d) in net.devices().iter().enumerate() {
        let kinds: Vec<&str> = [(PTR_HOST, "host"), (PTR_CUDA, "cuda"), (PTR_DMABUF, "dmabuf")]
            .into_iter()
            .filter(|(bit, _)| d.ptr_support & bit != 0)
            .map(|(_, k)| k)
            .collect();
        tracing::info!(
            "NET:   device {i}: {} speed {} Mbps, latency {} us, pci {}, memory {}, guid {:#x}, up to {} comms, \
             {} grouped receive(s){}{}",
            d.name,
            d.speed_mbps,
            d.latency_us,
            d.pci_path.as_deref().unwrap_or("unknown"),
            kinds.join("|"),
            d.guid,
            d.max_comms,
            d.max_recvs,
            if d.reg_is_global { ", global registrations" } else { "" },
            if d.force_flush { ", flush after GPU receives" } else { "" },
        );
    }
}
