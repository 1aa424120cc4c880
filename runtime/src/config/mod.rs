//! Communicator configuration: what the caller sets, completed from the environment
//! (the `settings` table: each field's variable, default and bounds) and checked once at
//! init.

use std::path::PathBuf;
use std::time::Duration;

use jitccl_codegen::abi::{NPROTOS, STEPS};
use jitccl_codegen::{Algorithm, Protocol, Wire};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::settings::{self, Setting, MAX_BUFFSIZE, MIN_BUFFSIZE, MIN_SIMPLE_SLOT};
use overrides::{AlgoOverrides, Item, Overrides, ProtoOverrides};

mod agree;
pub mod overrides;

/// What a communicator is created with. `None` fields come from the environment, then
/// from defaults.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Channels (CTAs) per rank; `JITCCL_NCHANNELS`. Default: the cores per rank (each
    /// host channel is a thread; more than the cores only adds switching), 1 to 4.
    pub nchannels: Option<usize>,
    /// Force an algorithm on the collectives that have it (the others keep their
    /// choice). Set this, or `algos`, or neither (then `JITCCL_ALGO` applies).
    pub algo: Option<Algorithm>,
    /// Force a protocol on every collective. Set this, or `protos`, or neither (then
    /// `JITCCL_PROTO` applies).
    pub proto: Option<Protocol>,
    /// The algorithms each collective may use, as `JITCCL_ALGO` in NCCL's grammar
    /// (`ring,tree;allreduce:oneshot`, `allreduce:^tree`); a collective left none fails.
    pub algos: Option<AlgoOverrides>,
    /// The protocols each collective may use, as `JITCCL_PROTO` (`^ll128;allreduce:ll`).
    pub protos: Option<ProtoOverrides>,
    /// Longest wait on a peer without progress before an operation fails; `JITCCL_TIMEOUT`
    /// (seconds). Default 300 s.
    pub timeout: Option<Duration>,
    /// Longest a network link to a peer may carry nothing back (no acknowledgement of what
    /// was sent to it, no answer to keepalive probes) before the operations waiting on that
    /// peer fail, naming it as unreachable; `JITCCL_LINK_TIMEOUT` (seconds). Default 30 s.
    /// A link cut shorter than this is survived (TCP resends what was lost); a peer that is
    /// alive but slow is left to `timeout`. Each rank may set its own. The bootstrap's
    /// connections, made before the configuration is read, take the variable.
    pub link_timeout: Option<Duration>,
    /// FIFO slot size in bytes per protocol (Simple, LL, LL128); `JITCCL_BUFFSIZE` sets
    /// Simple's (the others scale with it).
    pub slot_bytes: Option<[usize; NPROTOS]>,
    /// TCP sockets per connector of the network transport, steps striped across them;
    /// `JITCCL_NSOCKS_PERTHREAD` (NCCL's NCCL_NSOCKS_PERTHREAD: jitccl has one proxy thread
    /// per rank). Default 1, at most 16.
    pub nsocks: Option<usize>,
    /// A name for the communicator in logs and its `Debug`; `JITCCL_COMM_NAME`. Part of
    /// the configuration every rank must agree on. Children of a split inherit it.
    pub comm_name: Option<String>,
    /// Blocking mode (NCCL's `blocking`); `JITCCL_COMM_BLOCKING` (0 or 1). Default true.
    /// With `false`, init (`init_rank`, `init_from_store`, `init_from_env`) returns at once
    /// and every operation is queued to the communicator's progress thread: calls return
    /// at once and [`Comm::async_error`](crate::Comm::async_error) tells when the work is
    /// done, as with `ncclCommGetAsyncError`.
    pub blocking: Option<bool>,
    /// Fewest channels (CTAs) a rank uses, as NCCL's `minCTAs`; `JITCCL_MIN_CTAS`, 1 to
    /// [`MAX_CHANNELS`](crate::MAX_CHANNELS). Default 1.
    pub min_ctas: Option<usize>,
    /// Most channels (CTAs) a rank uses, as NCCL's `maxCTAs`; `JITCCL_MAX_CTAS`, 1 to
    /// [`MAX_CHANNELS`](crate::MAX_CHANNELS). Default [`MAX_CHANNELS`](crate::MAX_CHANNELS). The default channel count is clamped
    /// into `min_ctas..=max_ctas`; an explicit `nchannels` outside it is an error.
    pub max_ctas: Option<usize>,
    /// The network peers on other hosts use, by name, as NCCL's `netName` / `NCCL_NET`;
    /// `JITCCL_NET`. Case-insensitive: `Socket` (the built-in TCP transport, driven by the
    /// net proxy) or the name of a network plugin `JITCCL_NET_PLUGIN` loaded. Unset: the
    /// first plugin that initializes with a device, else `Socket`. A name no network has
    /// fails init with an error listing those available.
    pub net_name: Option<String>,
    /// NCCL's `splitShare`; `JITCCL_COMM_SPLIT_SHARE_RESOURCES` (0 or 1). Accepted and
    /// agreed on, but it changes nothing: what a parent could share with its split children
    /// safely (compiled kernels) is already shared process-wide, and sharing the rest
    /// (segments, connectors, the proxy) would let the parent's abort or destroy corrupt
    /// the children, which the split contract rules out.
    pub split_share: Option<bool>,
    /// On [`Comm::abort`](crate::Comm::abort), tell the peers, so that their operations
    /// waiting on this rank fail at once naming it, instead of by their timeout;
    /// `JITCCL_ABORT_PROPAGATE` (0 or 1). Default false (NCCL's abort is local).
    pub abort_propagates: Option<bool>,
    /// TLS on the bootstrap's ring and the network transport's sockets; `JITCCL_TLS` (0 or
    /// 1). Default false. Needs a job key; every rank must agree.
    pub tls: Option<bool>,
    /// Busy-poll rounds (pause instructions, tens of nanoseconds each) a kernel's wait on a
    /// peer makes before it starts yielding its core; `JITCCL_SPIN`, 0 to 10^9. Default:
    /// chosen per rank by whether it has cores of its own (docs/guide.md, "Waiting").
    /// Each rank may set its own.
    pub spin: Option<u64>,
    /// The tuning table file (NCCL's example-tuner CSV), as `JITCCL_TUNER_CONFIG_FILE`,
    /// which it takes precedence over. Only rank 0's counts: its table is every rank's.
    pub tuner_table: Option<PathBuf>,
    /// Run kernels specialized for the communicator's rank count (a constant in their code,
    /// so that their loops over ranks unroll), where one fits (up to 64 ranks): the same
    /// results, compiled once per rank count; `JITCCL_SPECIALIZE_RANKS` (0 or 1). Default:
    /// on GPUs, where unrolled loops over ranks ran the direct kernels faster; off on the
    /// host. Each rank may set its own.
    pub specialize_ranks: Option<bool>,
    /// The wire format the communicator's float AllReduce, ReduceScatter, AllGather,
    /// Broadcast and Reduce calls carry their elements in where it fits (f32, f16 or bf16
    /// elements wider than its codes; sum or avg), as if each asked for it with
    /// [`Comm::wired`](crate::Comm::wired); other calls stay exact; `JITCCL_WIRE` (a name
    /// as `Wire` parses it). Default [`Wire::Exact`]. Every rank must give the same.
    pub wire: Option<Wire>,
    /// What a wire format does in a communicator whose ranks all reach each other through
    /// memory (one host, no network transport): there compression cannot pay, so by
    /// default ([`WireLocal::Exact`]) its wired calls run exactly, as said once in the info
    /// log; [`WireLocal::Encode`] runs the wire's kernels anyway. `JITCCL_WIRE_LOCAL`
    /// (`exact` or `encode`). Every rank must give the same.
    pub wire_local: Option<WireLocal>,
    /// Where this rank lives, for the inits of one rank per call (`init_rank`,
    /// `init_from_store`, `init_from_env`); default: the host. `Comm::init_all_on` takes
    /// each rank's device instead. Ranks of one communicator may differ in it.
    pub device: Option<Device>,
}

/// What a wire format does where a communicator's ranks all reach each other through
/// memory ([`Config::wire_local`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WireLocal {
    /// The wired calls run exactly: memory bandwidth is the wire there, and encoding only
    /// adds work.
    #[default]
    Exact,
    /// The wired calls run the wire's kernels, as between hosts.
    Encode,
}

impl WireLocal {
    /// The name `JITCCL_WIRE_LOCAL` gives it.
    pub fn name(self) -> &'static str {
        match self {
            WireLocal::Exact => "exact",
            WireLocal::Encode => "encode",
        }
    }
}

impl Config {
    /// This configuration with the fields it leaves unset taken from `base`; the two ways
    /// of restricting algorithms (`algo`, `algos`), and protocols, count as one field each.
    pub(crate) fn or(self, base: Config) -> Config {
        let (algo, algos) =
            if self.algo.is_some() || self.algos.is_some() { (self.algo, self.algos) } else { (base.algo, base.algos) };
        let (proto, protos) = if self.proto.is_some() || self.protos.is_some() {
            (self.proto, self.protos)
        } else {
            (base.proto, base.protos)
        };
        Config {
            nchannels: self.nchannels.or(base.nchannels),
            algo,
            proto,
            algos,
            protos,
            timeout: self.timeout.or(base.timeout),
            link_timeout: self.link_timeout.or(base.link_timeout),
            slot_bytes: self.slot_bytes.or(base.slot_bytes),
            nsocks: self.nsocks.or(base.nsocks),
            comm_name: self.comm_name.or(base.comm_name),
            blocking: self.blocking.or(base.blocking),
            min_ctas: self.min_ctas.or(base.min_ctas),
            max_ctas: self.max_ctas.or(base.max_ctas),
            net_name: self.net_name.or(base.net_name),
            split_share: self.split_share.or(base.split_share),
            abort_propagates: self.abort_propagates.or(base.abort_propagates),
            tls: self.tls.or(base.tls),
            spin: self.spin.or(base.spin),
            tuner_table: self.tuner_table.or(base.tuner_table),
            specialize_ranks: self.specialize_ranks.or(base.specialize_ranks),
            wire: self.wire.or(base.wire),
            wire_local: self.wire_local.or(base.wire_local),
            device: self.device.or(base.device),
        }
    }
}

/// Declares `Resolved` and `Resolved::values`, every field by name (for the agreement at
/// init, which `settings` tells which of them the ranks must agree on).
macro_rules! resolved {
    ($($field:ident: $ty:ty,)*) => {
        /// A complete configuration.
        #[derive(Debug, Clone, PartialEq)]
        pub(crate) struct Resolved {
            $(pub $field: $ty,)*
        }

        impl Resolved {
            /// Every field as (name, value).
            fn values(&self) -> Vec<(&'static str, String)> {
                vec![$((stringify!($field), format!("{:?}", self.$field)),)*]
            }
        }
    };
}

resolved! {
    nchannels: usize,
    algos: AlgoOverrides,
    protos: ProtoOverrides,
    timeout: Duration,
    link_timeout: Duration,
    slot_bytes: [usize; NPROTOS],
    nsocks: usize,
    comm_name: Option<String>,
    blocking: bool,
    min_ctas: usize,
    max_ctas: usize,
    net_name: Option<String>,
    split_share: bool,
    abort_propagates: bool,
    tls: bool,
    spin: Option<u64>,
    tuner_table: Option<PathBuf>,
    specialize_ranks: bool,
    wire: Wire,
    wire_local: WireLocal,
}

impl Resolved {
    /// The same with the FIFOs of ranks whose steps cross a network (`settings::NET_BUFFSIZE`).
    pub(crate) fn with_network_fifos(&self) -> Resolved {
        Resolved { slot_bytes: slots_from_simple(settings::NET_BUFFSIZE / STEPS), ..self.clone() }
    }
}

/// Per protocol (Simple, LL, LL128), what every slot is a multiple of (a line), and the
/// smallest slot: LL's holds a header line and a data line.
const SLOT_UNIT: [usize; NPROTOS] = [MIN_SIMPLE_SLOT, 16, 128];
const MIN_SLOT: [usize; NPROTOS] = [MIN_SIMPLE_SLOT, 32, 128];
// The settings table sits below the kernel ABI, so it states JITCCL_BUFFSIZE's least value
// in bytes: STEPS of the smallest Simple slot.
const _: () = assert!(MIN_BUFFSIZE == STEPS * MIN_SIMPLE_SLOT);

/// Slot sizes of the three protocols from Simple's: LL and LL128 slots carry less data
/// per byte and are latency protocols, so they get smaller slots (NCCL's ratio is ~1:8).
fn slots_from_simple(simple: usize) -> [usize; NPROTOS] {
    let ll = (simple / 8).max(MIN_SLOT[1]) / SLOT_UNIT[1] * SLOT_UNIT[1];
    let ll128 = (simple / 2).max(128) / 128 * 128;
    [simple, ll, ll128]
}

/// The overrides from a forced value, else from typed overrides, else from the variable
/// (`setting`, NCCL's grammar); `fields` name the two Config fields for the error when
/// both are set.
fn overrides<T: Item>(
    one: Option<T>, set: &Option<Overrides<T>>, setting: &Setting, fields: (&str, &str),
) -> Result<Overrides<T>> {
    match (one, set) {
        (Some(_), Some(_)) => {
            Err(Error::InvalidArgument(format!("Config.{} and Config.{} are both set; set one", fields.0, fields.1)))
        }
        (Some(item), None) => Ok(Overrides::force_where_available(item)),
        (None, Some(o)) => Ok(o.clone()),
        (None, None) => Ok(setting.parse_with(|v| Overrides::parse(v).map_err(|e| e.to_string()))?.unwrap_or_default()),
    }
}

/// The network asked for: the field, else `JITCCL_NET`; blank is none. Checked against the
/// networks there are at init, once the plugins are loaded; `Socket` is spelled as the
/// built-in's name, so ranks that write it differently agree.
fn net_name(field: Option<&str>) -> Result<Option<String>> {
    let name = match field {
        Some(n) => Some(n.trim().to_string()),
        None => settings::NET.text()?,
    };
    Ok(name.filter(|n| !n.is_empty()).map(|n| if n.eq_ignore_ascii_case("socket") { "Socket".into() } else { n }))
}

impl Config {
    /// Whether the communicator is created in blocking mode (the field, else
    /// `JITCCL_COMM_BLOCKING`, else true).
    pub(crate) fn is_blocking(&self) -> Result<bool> {
        Ok(settings::COMM_BLOCKING.flag(self.blocking)?)
    }

    /// Completes the configuration for `nranks` ranks on the host, sharing its cores.
    pub(crate) fn resolve(&self, nranks: usize) -> Result<Resolved> {
        self.resolve_on(nranks, &Device::host(0))
    }

    /// The channels a communicator of `nranks` ranks on devices of `device`'s kind gets
    /// from this configuration and the environment (what `jitccl tune` tries up to).
    pub fn nchannels_on(&self, nranks: usize, device: &Device) -> Result<usize> {
        Ok(self.resolve_on(nranks, device)?.nchannels)
    }

    /// The channels each rank of `Comm::init_all_on(devices, self)` gets (what `jitccl tune`
    /// of ranks as threads tries up to): by default within the SMs of GPUs ranks share.
    /// Asks the GPUs for their SMs.
    pub fn nchannels_on_devices(&self, devices: &[Device]) -> Result<usize> {
        let first = devices.first().ok_or_else(|| Error::InvalidArgument("no devices".into()))?;
        let budget = crate::device::cta_budget(&crate::device::sharing(devices)?);
        Ok(self.resolve_within(devices.len(), first, budget)?.nchannels)
    }

    /// Completes the configuration for `nranks` ranks on devices of `device`'s kind: each
    /// field, else its variable, else its default, as `settings` declares them.
    pub(crate) fn resolve_on(&self, nranks: usize, device: &Device) -> Result<Resolved> {
        self.resolve_within(nranks, device, None)
    }

    /// Whether the FIFO's size is set (`slot_bytes`, `JITCCL_BUFFSIZE`) rather than left to
    /// its default.
    pub(crate) fn fifo_size_set(&self) -> Result<bool> {
        Ok(self.slot_bytes.is_some() || settings::BUFFSIZE.whole_opt::<usize>(None)?.is_some())
    }

    /// [`Config::resolve_on`] where each rank's kernels may have at most `cta_budget` CTAs
    /// resident at once on its GPU (ranks sharing one, see `comm::init::threads`): the
    /// default channel count stays within it; a value set explicitly is kept.
    pub(crate) fn resolve_within(&self, nranks: usize, device: &Device, cta_budget: Option<usize>) -> Result<Resolved> {
        let min_ctas = settings::MIN_CTAS.whole(self.min_ctas)?;
        let max_ctas = settings::MAX_CTAS.whole(self.max_ctas)?;
        if min_ctas > max_ctas {
            return Err(Error::InvalidArgument(format!(
                "min_ctas (JITCCL_MIN_CTAS) {min_ctas} is above max_ctas (JITCCL_MAX_CTAS) {max_ctas}"
            )));
        }
        let nchannels = match settings::NCHANNELS.whole_opt(self.nchannels)? {
            Some(n) if !(min_ctas..=max_ctas).contains(&n) => {
                return Err(Error::InvalidArgument(format!(
                    "nchannels (JITCCL_NCHANNELS) {n} is outside min_ctas..=max_ctas ({min_ctas}..={max_ctas})"
                )))
            }
            Some(n) => n,
            // A GPU channel is a CTA, one of many SMs, so a large call needs many to fill
            // the device (docs/performance.md, "The GPU kernels"); the model gives small
            // calls fewer.
            None if device.is_cuda() => {
                let n = match cta_budget {
                    Some(budget) => crate::settings::SHARED_GPU_CHANNELS.min(budget.max(1)),
                    None => crate::settings::GPU_CHANNELS,
                };
                n.clamp(min_ctas, max_ctas)
            }
            None => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                // Ranks that share cores get a second channel, which the model gives to
                // large calls only: its worker keeps the call's share of the cores
                // beside other busy processes, and costs nothing on a quiet machine.
                let n = if nranks > cores { 2 } else { cores / nranks.max(1) };
                n.clamp(1, 4).clamp(min_ctas, max_ctas)
            }
        };
        let slot_bytes = match self.slot_bytes {
            Some(s) => s,
            None => {
                let buffsize = settings::BUFFSIZE.whole_opt::<usize>(None)?.unwrap_or(settings::DEFAULT_BUFFSIZE);
                slots_from_simple(buffsize / STEPS / SLOT_UNIT[0] * SLOT_UNIT[0])
            }
        };
        for p in 0..NPROTOS {
            if slot_bytes[p] < MIN_SLOT[p] || slot_bytes[p] % SLOT_UNIT[p] != 0 || slot_bytes[p] > MAX_BUFFSIZE / STEPS
            {
                return Err(Error::InvalidArgument(format!(
                    "{} slot size {} (JITCCL_BUFFSIZE / 8 for simple) must be a multiple of {} bytes, from {} to {}",
                    Protocol::ALL[p],
                    slot_bytes[p],
                    SLOT_UNIT[p],
                    MIN_SLOT[p],
                    MAX_BUFFSIZE / STEPS
                )));
            }
        }
        let comm_name = match &self.comm_name {
            Some(n) => Some(n.clone()),
            None => settings::COMM_NAME.text()?,
        };
        Ok(Resolved {
            nchannels,
            algos: overrides(self.algo, &self.algos, &settings::ALGO, ("algo", "algos"))?,
            protos: overrides(self.proto, &self.protos, &settings::PROTO, ("proto", "protos"))?,
            timeout: settings::TIMEOUT.seconds(self.timeout)?,
            link_timeout: settings::LINK_TIMEOUT.seconds(self.link_timeout)?,
            slot_bytes,
            nsocks: settings::NSOCKS_PERTHREAD.whole(self.nsocks)?,
            comm_name,
            blocking: self.is_blocking()?,
            min_ctas,
            max_ctas,
            net_name: net_name(self.net_name.as_deref())?,
            split_share: settings::COMM_SPLIT_SHARE_RESOURCES.flag(self.split_share)?,
            abort_propagates: settings::ABORT_PROPAGATE.flag(self.abort_propagates)?,
            tls: settings::TLS.flag(self.tls)?,
            spin: settings::SPIN.whole_opt(self.spin)?,
            tuner_table: self.tuner_table.clone(),
            specialize_ranks: settings::SPECIALIZE_RANKS.flag_opt(self.specialize_ranks)?.unwrap_or(device.is_cuda()),
            wire: match self.wire {
                Some(w) => w,
                None => {
                    settings::WIRE.parse_with(|v| v.parse::<Wire>().map_err(|e| e.to_string()))?.unwrap_or_default()
                }
            },
            wire_local: match settings::WIRE_LOCAL.choice(self.wire_local.map(WireLocal::name))? {
                "encode" => WireLocal::Encode,
                _ => WireLocal::Exact,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_fifos_change_the_fifo_size_alone() {
        let local = Config::default().resolve(2).unwrap();
        assert_eq!(local.slot_bytes, slots_from_simple(settings::DEFAULT_BUFFSIZE / STEPS));
        let net = local.with_network_fifos();
        assert_eq!(net.slot_bytes[0] * STEPS, settings::NET_BUFFSIZE);
        assert_eq!(Resolved { slot_bytes: local.slot_bytes, ..net }, local, "nothing else changes");
        assert!(Config { slot_bytes: Some([4096, 512, 2048]), ..Config::default() }.fifo_size_set().unwrap());
    }
}
