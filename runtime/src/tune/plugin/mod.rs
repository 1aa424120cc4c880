//! NCCL's tuner plugins (`JITCCL_TUNER_PLUGIN` / `NCCL_TUNER_PLUGIN`), loaded as NCCL loads
//! them: once per process, through the shared finder (`crate::plugin`), the newest of
//! `ncclTunerPlugin_v6` .. `_v2` the library exports (where no tuner library loads, the
//! network plugins' libraries are looked in, as NCCL looks in its network plugin's); one context per communicator
//! (`init` when the tuner is made, `finalize` when it goes). For each collective NCCL asks
//! its tuner about, the plugin gets the cost model's table in NCCL's algorithm and protocol
//! order and may lower, raise or remove entries and set the channel count (v6 also sizes
//! chunks); [`Session::advise`] reads what it did. A plugin that fails to load, to start
//! or to answer is left out with a warning, as NCCL goes on without it.

mod abi;
mod costs;

use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use jitccl_codegen::{Algorithm, Collective, Protocol};

use self::abi::{Api, Constants, Ctx, NvlDomains, SYMBOLS};
use super::{Estimate, Topology};
use crate::plugin::{self, logger, Request};
use crate::settings::TUNER_PLUGIN;

/// The process's plugin.
pub(crate) struct Loaded {
    api: Api,
    /// "'name' (vN)", for logs.
    label: String,
}

/// The process's tuner plugin, loaded by the first communicator that asks.
pub(crate) fn loaded() -> Option<&'static Loaded> {
    static LOADED: OnceLock<Option<Loaded>> = OnceLock::new();
    LOADED.get_or_init(load).as_ref()
}

/// What every rank of a communicator must share: the plugin's name and version, or "none".
pub(super) fn identity() -> String {
    loaded().map_or_else(|| "none".to_string(), |l| l.label.clone())
}

fn load() -> Option<Loaded> {
    let setting = match TUNER_PLUGIN.lookup() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("{e}: tuning without a tuner plugin");
            return None;
        }
    };
    let entries = match plugin::request("tuner", setting.as_ref().map(|(v, _)| v.as_str())) {
        Request::Disabled => {
            tracing::info!("tuner plugin: none ({}=none)", setting.map_or(TUNER_PLUGIN.name, |(_, var)| var));
            return None;
        }
        Request::Entries(e) => e,
    };
    let mut opened = false;
    for (entry, files) in &entries {
        let lib = match plugin::open(entry, files) {
            Ok(lib) => lib,
            // Unset: the default name is only tried, as NCCL tries it.
            Err(why) if setting.is_none() => {
                tracing::debug!("tuner plugin: no {entry} ({why})");
                continue;
            }
            Err(why) => {
                tracing::warn!("tuner plugin '{entry}' did not load: {why}");
                continue;
            }
        };
        opened = true;
        match Api::find(lib) {
            Ok(Some(api)) => return Some(Loaded::new(api, format!("{} (asked as '{}')", lib.file, lib.entry))),
            Ok(None) => {
                tracing::warn!("tuner plugin '{entry}' ({}) exports none of {}: skipped", lib.file, SYMBOLS.join(", "))
            }
            Err(why) => tracing::warn!("tuner plugin '{entry}' ({}): {why}: skipped", lib.file),
        }
    }
    // As NCCL: where no tuner library of its own loads, the network plugin's library may
    // carry the tuner.
    if !opened {
        if let Some(l) = from_network_library(&setting) {
            return Some(l);
        }
    }
    if let Some((v, var)) = setting {
        tracing::warn!("no tuner plugin of {var}={v} could be used: tuning without one");
    }
    None
}

/// The tuner exported by the first network plugin library (`JITCCL_NET_PLUGIN`) that has
/// one; `setting` is the tuner setting, for the log.
fn from_network_library(setting: &Option<(String, &str)>) -> Option<Loaded> {
    let libs = crate::netplugin::libraries()
        .inspect_err(|e| tracing::warn!("{e}: no tuner plugin from a network plugin's library"))
        .ok()?;
    let why = setting
        .as_ref()
        .map_or_else(|| format!("{} is unset", TUNER_PLUGIN.name), |(v, var)| format!("no library of {var}={v} loads"));
    for lib in libs {
        match Api::find(lib) {
            Ok(Some(api)) => {
                return Some(Loaded::new(api, format!("{}, the network plugin's library ({why})", lib.file)))
            }
            Ok(None) => tracing::debug!("tuner plugin: the network plugin library {} exports none", lib.file),
            Err(why) => tracing::warn!("tuner plugin in the network plugin library {}: {why}: skipped", lib.file),
        }
    }
    None
}

impl Loaded {
    /// The plugin of `api`, with where it came from (`from`) logged.
    fn new(api: Api, from: String) -> Loaded {
        let label = format!("'{}' (v{})", api.name(), api.version());
        tracing::info!("tuner plugin {label} from {from}");
        Loaded { api, label }
    }
}

/// A communicator's context in the process's plugin.
pub(crate) struct Session {
    plugin: &'static Loaded,
    /// Calls into one context are made one at a time, as NCCL makes them.
    ctx: Mutex<Ctx>,
}

// SAFETY: the context is the plugin's, used only under the mutex and ended once (Drop).
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tuner plugin {}", self.plugin.label)
    }
}

/// What a plugin made of one call, where it made anything of it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Advice {
    /// The cheapest candidate after its edits: an entry of the table at the plugin's
    /// cost, or one of jitccl's algorithms outside the table at the model's. `None` where
    /// it only set the channels, or left nothing jitccl can run.
    pub pick: Option<(Algorithm, Protocol, f64)>,
    /// The channels it asked for.
    pub nchannels: Option<usize>,
    /// What it chose, in NCCL's names, and what of it jitccl cannot run: for the log.
    pub said: String,
}

impl Session {
    /// Starts the plugin's context for a communicator of `topo`'s ranks and nodes, `comm_id`
    /// the same on every rank; `None` (with a warning) where it fails or none is loaded.
    pub(super) fn start(comm_id: u64, topo: &Topology) -> Option<Session> {
        Session::start_with(loaded()?, comm_id, topo)
    }

    fn start_with(plugin: &'static Loaded, comm_id: u64, topo: &Topology) -> Option<Session> {
        let nnodes = topo.nnodes.max(1);
        // NCCL's NVLink domains are its nodes; jitccl counts hosts and ranks, not which
        // ranks share a host, so the per-host counts are the even split's (exact where
        // hosts hold equal counts).
        let mut nvl = NvlDomains {
            count: nnodes as c_int,
            min_ranks: (topo.nranks / nnodes) as c_int,
            max_ranks: topo.nranks.div_ceil(nnodes) as c_int,
        };
        // jitccl's model has constants of its own: NCCL's come zeroed, and what the plugin
        // writes there is not used.
        let mut constants = Constants::default();
        // SAFETY: NCCL's init contract: the structures live through the call.
        let started =
            unsafe { plugin.api.init(comm_id, topo.nranks, nnodes, logger::logger(), &mut nvl, &mut constants) };
        match started {
            Ok(ctx) => {
                if constants != Constants::default() {
                    tracing::info!(
                        "tuner plugin {}: set NCCL's model constants, which jitccl's cost model does not use",
                        plugin.label
                    );
                }
                tracing::debug!(
                    "tuner plugin {}: started for {} rank(s) on {nnodes} node(s), communicator {comm_id:016x}",
                    plugin.label,
                    topo.nranks
                );
                Some(Session { plugin, ctx: Mutex::new(ctx) })
            }
            Err(status) => {
                tracing::warn!(
                    "tuner plugin {} failed to start (init returned {status}): this communicator tunes without it",
                    plugin.label
                );
                None
            }
        }
    }

    pub(super) fn label(&self) -> &str {
        &self.plugin.label
    }

    fn ctx(&self) -> std::sync::MutexGuard<'_, Ctx> {
        self.ctx.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands the plugin the table of `candidates` (the model's best per allowed algorithm
    /// and protocol of `coll` over `bytes`) and reads what it did; `None` where NCCL does
    /// not ask its tuner about `coll`, where the plugin failed (a warning) or changed
    /// nothing.
    pub(super) fn advise(&self, coll: Collective, bytes: usize, candidates: &[Estimate]) -> Option<Advice> {
        let func = costs::func(coll)?;
        let before = costs::fill(candidates);
        let (mut after, mut nch) = (before, 0);
        // SAFETY: the context is this session's, not finalized; the table and the count
        // outlive the call.
        let status = unsafe { self.plugin.api.coll_info(*self.ctx(), func, bytes, &mut after, &mut nch) };
        if status != 0 {
            tracing::warn!(
                "tuner plugin {}: getCollInfo for {coll} {bytes} B returned {status}: jitccl tunes the call alone",
                self.plugin.label
            );
            return None;
        }
        let edited = costs::read(&before, &after);
        if !edited.changed && nch <= 0 && edited.refused.is_empty() {
            return None;
        }
        let mut said = cheapest_entry(&after)
            .map_or_else(|| "no entry".to_string(), |(a, p, c)| format!("{} ({c:.2})", costs::entry_name(a, p)));
        for &(a, p) in &edited.refused {
            said += &format!("; {} ignored: {}", costs::entry_name(a, p), costs::why_not(a, p, coll));
        }
        let outside =
            candidates.iter().filter(|e| costs::algo_index(e.algo).is_none()).map(|e| (e.algo, e.proto, e.us));
        let all = edited.runnable.iter().map(|&(a, p, c)| (a, p, c as f64)).chain(outside);
        let pick = match edited.changed {
            true => all.fold(None, |best: Option<(Algorithm, Protocol, f64)>, c| match best {
                Some(b) if b.2 <= c.2 => Some(b),
                _ => Some(c),
            }),
            false => None,
        };
        if edited.changed && pick.is_none() {
            said += "; nothing left that jitccl can run: the model decides";
        }
        Some(Advice { pick, nchannels: usize::try_from(nch).ok().filter(|&n| n > 0), said })
    }

    /// The plugin's chunk size in bytes for the choice (v6's `getChunkSize`), given jitccl's
    /// `chunk`; `None` where it has no say (older versions, algorithms outside NCCL's table,
    /// a failed call: a warning).
    pub(super) fn chunk(
        &self, coll: Collective, bytes: usize, algo: Algorithm, proto: Protocol, nchannels: usize, chunk: usize,
    ) -> Option<usize> {
        let (func, a) = (costs::func(coll)?, costs::algo_index(algo)?);
        let p = costs::proto_index(proto);
        let mut size = chunk;
        // SAFETY: as in `advise`.
        let status = unsafe {
            self.plugin.api.chunk_size(*self.ctx(), func, bytes, a as c_int, p as c_int, nchannels as c_int, &mut size)
        }?;
        if status != 0 {
            tracing::warn!(
                "tuner plugin {}: getChunkSize for {coll} {bytes} B returned {status}: jitccl's chunk size stays",
                self.plugin.label
            );
            return None;
        }
        Some(size)
    }
}

/// The cheapest available entry of a table, for the log.
fn cheapest_entry(t: &costs::CostTable) -> Option<(usize, usize, f32)> {
    let mut best: Option<(usize, usize, f32)> = None;
    for (a, row) in t.iter().enumerate() {
        for (p, &c) in row.iter().enumerate() {
            if c >= 0.0 && best.is_none_or(|b| c < b.2) {
                best = Some((a, p, c));
            }
        }
    }
    best
}

impl Drop for Session {
    fn drop(&mut self) {
        let ctx = *self.ctx();
        // SAFETY: the context is ended once, here, and not used after.
        let status = unsafe { self.plugin.api.finalize(ctx) };
        if status != 0 {
            tracing::warn!("tuner plugin {}: finalize returned {status}", self.plugin.label);
        }
    }
}

#[cfg(test)]
mod tests;
