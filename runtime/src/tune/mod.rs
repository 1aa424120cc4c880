//! Choosing how to run a collective: algorithm, protocol, channels and chunk size.
//!
//! Per call, in order: JITCCL_ALGO / JITCCL_PROTO (NCCL's grammar, `config::overrides`) say
//! which algorithms and protocols the collective may use at all; a tuner plugin (`plugin`,
//! NCCL's), given the model's costs of those in NCCL's table, may change them and the
//! channels, and the cheapest it leaves is taken, as NCCL takes it; where it changes
//! nothing, a tuning table row (`table`) for the call's size is taken if the overrides allow
//! it; otherwise the cost model (`model`) picks the fastest allowed candidate. Every input
//! is the same on every rank (rank 0's `plan`, and the plugin: checked at init), and the
//! choice is a pure function of them, so every rank makes the same choice (a plugin whose
//! answers are not a function of its inputs breaks that; nothing can check it per call).
//! A `Tuner` caches choices per (collective, bytes), so only the first call of a size
//! pays for the search and logs it (DEBUG: the choice and where it came from).
//!
//! Public for `jitccl tune`, `jitccl topo` and tools that read or write tuning tables: the
//! cost model ([`Machine`], [`Topology`], [`Constants`]), tables ([`Table`], [`Row`]) and
//! override sets ([`Overrides`], [`Set`]).

mod model;
mod plan;
mod plugin;
mod table;

use std::fmt;
use std::sync::Mutex;

use jitccl_codegen::abi::NPROTOS;
use jitccl_codegen::{Algorithm, Collective, Protocol, Wire};
use rustc_hash::FxHashMap;

use crate::config::overrides::{AlgoOverrides, ProtoOverrides};
pub use crate::config::overrides::{Overrides, Set};
use crate::config::Resolved;
use crate::error::{Error, Result};
pub use model::{Constants, Estimate, Machine, Scaling, Topology};
pub(crate) use plan::{from_plan, plan};
pub use table::{Row, Table, TableError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    pub algo: Algorithm,
    pub proto: Protocol,
    pub nchannels: usize,
    /// Elements per FIFO step.
    pub chunk_elems: u64,
}

/// Where a choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A tuning table row.
    Table,
    /// The cost model, unconstrained.
    Model,
    /// The cost model among what JITCCL_ALGO / JITCCL_PROTO allow, which excluded the
    /// model's own pick (or, for point-to-point, the protocol they force).
    Override,
    /// A fixed rule (point-to-point: see [`Tuner::choose`]).
    Rule,
    /// The tuner plugin's edits of the model's costs.
    Plugin,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Table => "tuning table",
            Source::Model => "cost model",
            Source::Override => "override",
            Source::Rule => "fixed rule",
            Source::Plugin => "tuner plugin",
        })
    }
}

/// Data bytes one FIFO step of `proto` carries.
pub(crate) fn step_capacity(proto: Protocol, slot_bytes: usize) -> usize {
    match proto {
        Protocol::Simple => slot_bytes,
        // A step's first line is its header (prims/host/ll.h).
        Protocol::LL => (slot_bytes / 16).saturating_sub(1) * 8,
        Protocol::LL128 => slot_bytes / 128 * 120,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    coll: Collective,
    bytes: usize,
    elem_size: usize,
    commutative: bool,
    /// Every buffer of the call is registered: the direct algorithms are candidates.
    direct: bool,
    /// The call's wire format (a wired call's choice is cached apart).
    wire: Wire,
}

impl Key {
    /// Whether the op can use `a`: a non-commutative op only the ring (the tree and
    /// one-shot combine in another order).
    fn usable(&self, a: Algorithm) -> bool {
        self.commutative || a == Algorithm::Ring
    }

    /// Whether the call's buffers let `a` run: the direct algorithms need them registered.
    fn eligible(&self, a: Algorithm) -> bool {
        self.direct || !a.is_direct()
    }
}

/// Distinct call shapes remembered before the cache starts over (real programs use a
/// handful of sizes; this only bounds a sweep's memory).
const CACHE_CAP: usize = 4096;

/// A communicator's tuning state: the topology and constants of the model, the table,
/// the overrides, the FIFO slot sizes, and the choices made so far.
pub(crate) struct Tuner {
    topo: Topology,
    consts: Constants,
    table: Option<Table>,
    algos: AlgoOverrides,
    protos: ProtoOverrides,
    slot_bytes: [usize; NPROTOS],
    /// The slots whose steps calls that only copy take (smaller than `slot_bytes` over the
    /// sockets: see [`with_copy_slots`](Self::with_copy_slots)).
    copy_slots: [usize; NPROTOS],
    /// "Comm 'NAME': " for a named communicator, so that the choices of several in one
    /// process can be told apart in the log.
    log_prefix: String,
    cache: Mutex<FxHashMap<Key, Choice>>,
    /// This communicator's context in the process's tuner plugin, if it has one.
    plugin: Option<plugin::Session>,
}

impl fmt::Debug for Tuner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tuner")
            .field("topo", &self.topo)
            .field("table_rows", &self.table.as_ref().map_or(0, |t| t.rows.len()))
            .field("algos", &self.algos)
            .field("protos", &self.protos)
            .field("plugin", &self.plugin)
            .finish()
    }
}

impl Tuner {
    /// `table` is rank 0's (every rank must pass the same one), `cfg` the agreed config.
    pub(crate) fn new(topo: Topology, consts: Constants, table: Option<Table>, cfg: &Resolved) -> Tuner {
        Tuner {
            topo,
            consts,
            table,
            algos: cfg.algos.clone(),
            protos: cfg.protos.clone(),
            slot_bytes: cfg.slot_bytes,
            copy_slots: cfg.slot_bytes,
            log_prefix: cfg.comm_name.as_ref().map_or_else(String::new, |n| format!("Comm '{n}': ")),
            cache: Mutex::new(FxHashMap::default()),
            plugin: None,
        }
    }

    /// The same, with the calls that only copy (no reduction) taking steps of `slots` where
    /// given, each within the communicator's slot of its protocol (over the sockets, where
    /// larger FIFOs serve the reductions, the copies keep the usual steps).
    pub(crate) fn with_copy_slots(self, slots: Option<[usize; NPROTOS]>) -> Tuner {
        let own = self.slot_bytes;
        Tuner { copy_slots: slots.map_or(own, |s| std::array::from_fn(|p| s[p].min(own[p]))), ..self }
    }

    /// The choice for `coll` moving `bytes` (NCCL's nBytes: the per-rank buffer; the whole
    /// buffer for AllGather / ReduceScatter) in elements of `elem_size` bytes, with an op
    /// that is `commutative` or not (a non-commutative op only gets the ring: the tree and
    /// one-shot combine in another order; if the overrides allow only those, the choice
    /// names one anyway and the kernel spec refuses it, naming the op).
    ///
    /// Errors (InvalidArgument) when JITCCL_ALGO / JITCCL_PROTO leave the collective no
    /// algorithm or no protocol.
    #[cfg(test)]
    pub fn choose(&self, coll: Collective, bytes: usize, elem_size: usize, commutative: bool) -> Result<Choice> {
        self.choose_for(coll, bytes, elem_size, commutative, false)
    }

    /// [`choose`](Self::choose) for a call whose buffers are all registered (`direct`): the
    /// direct algorithms join the candidates. Registration is collective, so every rank
    /// passes the same `direct` for the same call.
    pub fn choose_for(
        &self, coll: Collective, bytes: usize, elem_size: usize, commutative: bool, direct: bool,
    ) -> Result<Choice> {
        let key = Key { coll, bytes, elem_size: elem_size.max(1), commutative, direct, wire: Wire::Exact };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache.get(&key) {
            return Ok(*c);
        }
        let (choice, source, why) = self.decide(key)?;
        tracing::debug!(
            "{}{coll} {bytes} B x {} ranks: {}/{}, {} channel(s), {} elements/step, from the {source} ({why})",
            self.log_prefix,
            self.topo.nranks,
            choice.algo,
            choice.proto,
            choice.nchannels,
            choice.chunk_elems
        );
        if cache.len() >= CACHE_CAP {
            cache.clear();
        }
        cache.insert(key, choice);
        Ok(choice)
    }

    /// The cost model's time in microseconds of `coll` moving `bytes` (as
    /// [`choose_for`](Self::choose_for) counts them) with the choice this tuner makes for it;
    /// 0 for what the model does not cover (point to point).
    pub(crate) fn estimate_us(&self, coll: Collective, bytes: usize, elem_size: usize) -> Result<f64> {
        let c = self.choose_for(coll, bytes, elem_size, true, false)?;
        Ok(self.topo.estimate(&self.consts, coll, c.algo, c.proto, c.nchannels, bytes).unwrap_or(0.0))
    }

    /// The choice for the library's own exchanges: the ring with Simple on one channel,
    /// whatever the overrides say (they are the user's, for the user's calls).
    pub(crate) fn internal(&self, elem_size: usize) -> Choice {
        let cap = step_capacity(Protocol::Simple, self.slot_bytes[Protocol::Simple as usize]);
        Choice {
            algo: Algorithm::Ring,
            proto: Protocol::Simple,
            nchannels: 1,
            chunk_elems: (cap / elem_size.max(1)).max(1) as u64,
        }
    }

    /// The choice for a call whose elements travel in `wire` (other than exact): the
    /// table's row for that wire where one matches (`# wire` rows, which `jitccl tune
    /// --wire` writes) and names an algorithm whose kernel carries the wire
    /// ([`Wire::algorithms`]: the direct one only where the call's buffers are registered,
    /// `direct`) with the Simple protocol; else the usual choice's algorithm where it is one
    /// of those, else the model's best of those the overrides allow (all of them, where the
    /// overrides allow none). Logged at debug as the other choices are, with the wire.
    pub(crate) fn for_wire(
        &self, coll: Collective, bytes: usize, elem_size: usize, direct: bool, wire: Wire,
    ) -> Result<Choice> {
        let key = Key { coll, bytes, elem_size: elem_size.max(1), commutative: true, direct, wire };
        if let Some(c) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(*c);
        }
        let proto = Protocol::Simple;
        let usual = self.choose_for(coll, bytes, elem_size, true, direct)?;
        let carried: Vec<Algorithm> =
            Wire::algorithms(coll).iter().copied().filter(|a| direct || !a.is_direct()).collect();
        // Steps sized for fp32: partial sums cross hops in memory as fp32, whatever the
        // elements' own type.
        let steps = self.internal(elem_size.max(size_of::<f32>()));
        let row = self.table.as_ref().and_then(|t| t.lookup(coll, bytes, &self.topo, direct, wire));
        let (choice, source, why) = match row.filter(|r| carried.contains(&r.algo) && r.proto == proto) {
            Some(r) => {
                let nchannels = match r.channels {
                    Some(n) => n.min(self.topo.nchannels),
                    None => self.best(coll, &[r.algo], &[proto], bytes).map_or(1, |e| e.nchannels),
                };
                let chunk_elems = match r.chunk_bytes {
                    Some(b) => (b.min(steps.chunk_elems as usize * elem_size.max(4)) / elem_size.max(4)).max(1) as u64,
                    None => steps.chunk_elems,
                };
                let why = format!("row {}..={} B", r.min_bytes, r.max_bytes);
                (Choice { algo: r.algo, proto, nchannels, chunk_elems }, Source::Table, why)
            }
            None => {
                let allowed: Vec<Algorithm> =
                    carried.iter().copied().filter(|&a| self.algos.allowed(coll).contains(a)).collect();
                let candidates = match (carried.contains(&usual.algo), allowed.is_empty()) {
                    (true, _) => vec![usual.algo],
                    (false, false) => allowed,
                    (false, true) => carried,
                };
                let best = self.best(coll, &candidates, &[proto], bytes);
                let algo = best.as_ref().map_or(candidates[0], |e| e.algo);
                // Point to point keeps its every channel: its two sides may move different sizes.
                let nchannels = match (coll, best) {
                    (Collective::SendRecv, _) | (_, None) => usual.nchannels,
                    (_, Some(e)) => e.nchannels,
                };
                let why = match (usual.algo, usual.proto) == (algo, proto) {
                    true => "the usual choice".to_string(),
                    false => format!("instead of {}/{}, which carry elements exactly", usual.algo, usual.proto),
                };
                (Choice { algo, proto, nchannels, ..steps }, Source::Model, why)
            }
        };
        tracing::debug!(
            "{}{coll} {bytes} B x {} ranks in the {wire} wire: {}/{proto}, {} channel(s), {} elements/step, from the \
             {source} ({why})",
            self.log_prefix,
            self.topo.nranks,
            choice.algo,
            choice.nchannels,
            choice.chunk_elems
        );
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_CAP {
            cache.clear();
        }
        cache.insert(key, choice);
        Ok(choice)
    }

    /// Whether the overrides let `coll` run direct (whatever the size): the choice of calls
    /// whose ranks move different sizes (AlltoAllv, point-to-point), which must still agree.
    pub(crate) fn allows_direct(&self, coll: Collective) -> bool {
        self.algos.allowed(coll).contains(Algorithm::Direct)
    }

    /// The most channels a choice may use.
    pub(crate) fn max_channels(&self) -> usize {
        self.topo.nchannels
    }

    fn decide(&self, k: Key) -> Result<(Choice, Source, String)> {
        let coll = k.coll;
        let algos: Vec<Algorithm> =
            coll.algorithms().iter().copied().filter(|&a| self.algos.allowed(coll).contains(a)).collect();
        if algos.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{coll}: JITCCL_ALGO='{}' allows none of its algorithms ({})",
                self.algos,
                Set::of(coll.algorithms())
            )));
        }
        let eligible = |a: &Algorithm| k.eligible(*a);
        let algos: Vec<Algorithm> = algos.into_iter().filter(eligible).collect();
        // Point-to-point without addressable buffers has the FIFO alone, whatever the
        // overrides (see below).
        if algos.is_empty() && coll != Collective::SendRecv {
            return Err(Error::InvalidArgument(format!(
                "{coll}: JITCCL_ALGO='{}' allows only direct algorithms, which need every buffer of the \
                 call registered (Comm::alloc_symmetric, Comm::register, or plain buffers where every rank \
                 maps every rank's host arena) on ranks of one host",
                self.algos
            )));
        }
        let protos: Vec<Protocol> = self.protos.allowed(coll).iter().collect();
        if protos.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{coll}: JITCCL_PROTO='{}' allows none of its protocols ({})",
                self.protos,
                Set::<Protocol>::all()
            )));
        }
        let usable = |a: &Algorithm| k.usable(*a);
        let slots = if coll.reduces() { &self.slot_bytes } else { &self.copy_slots };
        let chunk = |proto: Protocol, want: Option<usize>| {
            let cap = step_capacity(proto, slots[proto as usize]);
            (want.unwrap_or(cap).min(cap) / k.elem_size).max(1) as u64
        };
        let make = |algo, proto, nchannels, chunk_bytes| Choice {
            algo,
            proto,
            nchannels,
            chunk_elems: chunk(proto, chunk_bytes),
        };

        // Point-to-point: sender and receiver each launch with their own byte count (the
        // larger of the pair's halves), so nothing may depend on it: on addressable
        // buffers the receiver's single copy (one channel: its records are per peer), else
        // every channel, and the first allowed protocol in Simple, LL128, LL order.
        if coll == Collective::SendRecv && algos.contains(&Algorithm::Direct) {
            let why = "point-to-point on addressable buffers: the receiver copies from the sender's";
            return Ok((make(Algorithm::Direct, Protocol::Simple, 1, None), Source::Rule, why.into()));
        }
        if coll == Collective::SendRecv {
            let proto = [Protocol::Simple, Protocol::LL128, Protocol::LL]
                .into_iter()
                .find(|p| protos.contains(p))
                .unwrap_or(protos[0]);
            let source = if proto == Protocol::Simple { Source::Rule } else { Source::Override };
            return Ok((
                make(Algorithm::Ring, proto, self.topo.nchannels, None),
                source,
                "point-to-point uses every channel".into(),
            ));
        }
        if !algos.iter().any(usable) {
            let algo = algos[0];
            let why = format!("JITCCL_ALGO forces {algo}, which this op (not commutative) cannot use");
            return Ok((make(algo, protos[0], 1, None), Source::Override, why));
        }
        let algos: Vec<Algorithm> = algos.into_iter().filter(usable).collect();

        let Some(plugin) = &self.plugin else {
            let (algo, proto, nch, chunk_bytes, source, why) = self.table_or_model(k, &algos, &protos)?;
            return Ok((make(algo, proto, nch, chunk_bytes), source, why));
        };
        // NCCL's order: the plugin edits the model's costs of what the overrides allow; the
        // cheapest it leaves runs (jitccl's algorithms outside NCCL's table compete at their
        // model cost); its channels, then its chunk size, apply to whatever was chosen.
        let candidates: Vec<Estimate> = algos
            .iter()
            .flat_map(|&a| protos.iter().filter_map(move |&p| self.best(coll, &[a], &[p], k.bytes)))
            .collect();
        let advice = plugin.advise(coll, k.bytes, &candidates);
        let (algo, proto, mut nch, chunk_bytes, source, mut why) = match advice.as_ref().and_then(|a| a.pick) {
            Some((algo, proto, cost)) => {
                let nch = self.best(coll, &[algo], &[proto], k.bytes).map_or(1, |e| e.nchannels);
                (algo, proto, nch, None, Source::Plugin, format!("cost {cost:.2} after its edits"))
            }
            None => self.table_or_model(k, &algos, &protos)?,
        };
        if let Some(n) = advice.as_ref().and_then(|a| a.nchannels) {
            nch = n.min(self.topo.nchannels);
            why += &format!("; {nch} channel(s) from the plugin");
            if n > nch {
                why += &format!(" (it asked {n}, the communicator has {nch})");
            }
        }
        let mut choice = make(algo, proto, nch, chunk_bytes);
        let ours = choice.chunk_elems as usize * k.elem_size;
        match plugin.chunk(coll, k.bytes, algo, proto, nch, ours) {
            Some(0) => why += "; the plugin's chunk size 0 ignored",
            Some(b) if b != ours => {
                choice = make(algo, proto, nch, Some(b));
                let got = choice.chunk_elems as usize * k.elem_size;
                why += &format!("; {got} B chunks from the plugin");
                if got != b {
                    why += &format!(" (it asked {b}: a FIFO step's whole elements)");
                }
            }
            _ => {}
        }
        if let Some(a) = &advice {
            tracing::info!(
                "{}tuner plugin {}: {coll} {} B: chose {}; runs {}/{}, {} channel(s)",
                self.log_prefix,
                plugin.label(),
                k.bytes,
                a.said,
                choice.algo,
                choice.proto,
                choice.nchannels
            );
        }
        Ok((choice, source, why))
    }

    /// The table's row for the call, if the overrides allow it, else the model's fastest
    /// allowed candidate: (algorithm, protocol, channels, chunk bytes, source, why).
    fn table_or_model(
        &self, k: Key, algos: &[Algorithm], protos: &[Protocol],
    ) -> Result<(Algorithm, Protocol, usize, Option<usize>, Source, String)> {
        let coll = k.coll;
        let mut overridden = None;
        if let Some(row) = self.table.as_ref().and_then(|t| t.lookup(coll, k.bytes, &self.topo, k.direct, k.wire)) {
            if algos.contains(&row.algo) && protos.contains(&row.proto) {
                let nch = match row.channels {
                    Some(n) => n.min(self.topo.nchannels),
                    None => self.best(coll, &[row.algo], &[row.proto], k.bytes).map_or(1, |e| e.nchannels),
                };
                let why = format!("row {}..={} B", row.min_bytes, row.max_bytes);
                return Ok((row.algo, row.proto, nch, row.chunk_bytes, Source::Table, why));
            }
            overridden = Some(format!("the table's {}/{} is not allowed here", row.algo, row.proto));
        }
        let all_algos: Vec<Algorithm> =
            coll.algorithms().iter().copied().filter(|&a| k.usable(a) && k.eligible(a)).collect();
        let Estimate { algo, proto, nchannels: nch, us: t } = self
            .best(coll, algos, protos, k.bytes)
            .ok_or_else(|| Error::Internal(format!("no {coll} candidate has a cost")))?;
        let unrestricted = self.best(coll, &all_algos, Protocol::ALL, k.bytes).map(|e| (e.algo, e.proto));
        let source = if unrestricted == Some((algo, proto)) { Source::Model } else { Source::Override };
        let mut why = format!("{t:.2} us estimated");
        // The runners-up, and across hosts what the network costs: why this one.
        let others: Vec<String> = algos
            .iter()
            .filter(|&&a| a != algo)
            .filter_map(|&a| self.best(coll, &[a], protos, k.bytes))
            .map(|e| format!("{} {:.2} us", e.algo, e.us))
            .collect();
        if !others.is_empty() {
            why += &format!(", beside {}", others.join(", "));
        }
        if self.topo.nnodes > 1 {
            why += &format!(
                "; {} hosts: {:.1} us a network hop, {:.2} GB/s a channel between them",
                self.topo.nnodes, self.topo.lat_inter, self.topo.bw_inter
            );
        }
        if !k.commutative {
            why += "; the op is not commutative: ring only";
        }
        if let Some(o) = overridden {
            why = format!("{o}; {why}");
        }
        Ok((algo, proto, nch, None, source, why))
    }

    fn best(&self, coll: Collective, algos: &[Algorithm], protos: &[Protocol], bytes: usize) -> Option<Estimate> {
        model::best(&self.topo, &self.consts, coll, algos, protos, bytes)
    }
}

#[cfg(test)]
mod tests;
