//! What rank 0 hands every rank so that all tune alike, and what every rank then makes of
//! it: its tuner, with its context in the tuner plugin, which every rank must share.

use super::{model::Machine, plugin, Table, Tuner};
use crate::config::Resolved;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::Graph;

/// Online CPUs of this machine: the same in every process on it, unlike the affinity mask.
fn machine_cores() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// What rank 0 tells every rank so that all tune alike: the machine its ranks run on (for
/// the host, its core count: the host topology's one machine-dependent input besides the
/// graph, which every rank searched alike), an id for the communicator (NCCL's `commId`
/// for the tuner plugin), the tuner plugin it loaded, and the table it found for that
/// topology (see [`Table::load`]), if any.
pub(crate) fn plan(graph: &Graph, cfg: &Resolved, device: &Device) -> Result<Vec<u8>> {
    let machine = if device.is_cuda() { Machine::Gpus } else { Machine::Host { cores: machine_cores() } };
    let (topo, _) = machine.model(graph);
    let label = plugin::loaded().map(|_| plugin::identity());
    let table = Table::load(&topo, cfg.tuner_table.as_deref(), label.as_deref())
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    // 0 and the core count for the host, 1 for GPUs.
    let mut plan = match machine {
        Machine::Host { cores } => [&[0u8][..], &(cores as u64).to_le_bytes()].concat(),
        Machine::Gpus => vec![1],
    };
    plan.extend(new_comm_id().to_le_bytes());
    let who = plugin::identity();
    let who = &who.as_bytes()[..who.len().min(u16::MAX as usize)];
    plan.extend((who.len() as u16).to_le_bytes());
    plan.extend(who);
    plan.extend(table.map_or(Vec::new(), |t| t.to_bytes()));
    Ok(plan)
}

/// An id for a new communicator, unlike any other of this process or, very likely, of
/// another (time, process id and a counter, mixed).
fn new_comm_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h = now ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The tuner of every rank, from rank 0's [`plan`]. A rank whose tuner plugin is not rank
/// 0's cannot tune as it does: an error naming both.
pub(crate) fn from_plan(plan: &[u8], graph: &Graph, cfg: &Resolved) -> Result<Tuner> {
    let bad = || Error::Internal(format!("rank 0's tuning plan is malformed ({} bytes)", plan.len()));
    let (machine, rest) = match plan.split_first() {
        Some((0, rest)) => {
            let (cores, rest) = rest.split_at_checked(8).ok_or_else(bad)?;
            let cores = u64::from_le_bytes(cores.try_into().map_err(|_| bad())?) as usize;
            (Machine::Host { cores: cores.max(1) }, rest)
        }
        Some((1, rest)) => (Machine::Gpus, rest),
        _ => return Err(bad()),
    };
    let (id, rest) = rest.split_at_checked(8).ok_or_else(bad)?;
    let comm_id = u64::from_le_bytes(id.try_into().map_err(|_| bad())?);
    let (len, rest) = rest.split_at_checked(2).ok_or_else(bad)?;
    let (theirs, table) = rest.split_at_checked(u16::from_le_bytes([len[0], len[1]]) as usize).ok_or_else(bad)?;
    let (theirs, mine) = (String::from_utf8_lossy(theirs), plugin::identity());
    if theirs != mine {
        return Err(Error::InvalidUsage(format!(
            "rank 0 tunes with tuner plugin {theirs}, this rank with {mine}: {} must give every rank the same plugin",
            crate::settings::TUNER_PLUGIN.name
        )));
    }
    let (topo, constants) = machine.model(graph);
    let table = if table.is_empty() {
        None
    } else {
        Some(Table::from_bytes(table, "rank 0's tuning table").map_err(|e| Error::InvalidArgument(e.to_string()))?)
    };
    let plugin = plugin::Session::start(comm_id, &topo);
    Ok(Tuner { plugin, ..Tuner::new(topo, constants, table, cfg) })
}

impl Tuner {
    /// Leaves the tuner plugin out on every rank where one rank could not start it, so that
    /// all still choose alike; `gather` hands every rank's byte to every rank, by rank. No
    /// exchange where the process has no plugin (nor then any rank: see [`from_plan`]).
    pub(crate) fn agreed(self, gather: impl FnOnce(&[u8]) -> Result<Vec<Vec<u8>>>) -> Result<Tuner> {
        let loaded = plugin::loaded().is_some();
        self.agreed_on(loaded, gather)
    }

    /// [`agreed`](Self::agreed), `loaded` saying whether the process has a plugin.
    pub(super) fn agreed_on(
        mut self, loaded: bool, gather: impl FnOnce(&[u8]) -> Result<Vec<Vec<u8>>>,
    ) -> Result<Tuner> {
        if !loaded {
            return Ok(self);
        }
        let started = gather(&[u8::from(self.plugin.is_some())])?;
        let failed: Vec<usize> = (0..started.len()).filter(|&q| started[q] != [1]).collect();
        if failed.is_empty() {
            return Ok(self);
        }
        if let Some(p) = self.plugin.take() {
            tracing::warn!(
                "{}tuner plugin {} did not start on rank(s) {failed:?}: no rank of this communicator uses it",
                self.log_prefix,
                p.label()
            );
        }
        Ok(self)
    }
}
