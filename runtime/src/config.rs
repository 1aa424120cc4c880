//! Communicator configuration: what the caller sets, completed from the environment
//! (JITCCL_* variables, as NCCL_* ones for NCCL) and checked once at init.

use std::path::PathBuf;
use std::time::Duration;

use jitccl_codegen::abi::{NPROTOS, STEPS};
use jitccl_codegen::{Algorithm, Protocol};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::tune::overrides::{Item, Overrides};
use crate::tune::{AlgoOverrides, ProtoOverrides};

mod agree;

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
    /// [`MAX_CHANNELS`]. Default 1.
    pub min_ctas: Option<usize>,
    /// Most channels (CTAs) a rank uses, as NCCL's `maxCTAs`; `JITCCL_MAX_CTAS`, 1 to
    /// [`MAX_CHANNELS`]. Default [`MAX_CHANNELS`]. The default channel count is clamped
    /// into `min_ctas..=max_ctas`; an explicit `nchannels` outside it is an error.
    pub max_ctas: Option<usize>,
    /// The network transport peers on other hosts use, by name, as NCCL's `netName` /
    /// `NCCL_NET`; `JITCCL_NET`. Case-insensitive; jitccl has one: `Socket` (TCP, driven by
    /// the net proxy). An unknown name is an error naming it.
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
    /// Busy-poll rounds (pause instructions, tens of nanoseconds each) a kernel's wait on a
    /// peer makes before it starts yielding its core; `JITCCL_SPIN`, 0 to 10^9. Default:
    /// chosen per rank by whether it has cores of its own (see the README's wait policy).
    /// Each rank may set its own.
    pub spin: Option<u64>,
    /// The tuning table file (NCCL's example-tuner CSV), as `JITCCL_TUNER_CONFIG_FILE`,
    /// which it takes precedence over. Only rank 0's counts: its table is every rank's.
    pub tuner_table: Option<PathBuf>,
    /// Where this rank lives, for the inits of one rank per call (`init_rank`,
    /// `init_from_store`, `init_from_env`); default: the host. `Comm::init_all_on` takes
    /// each rank's device instead. Ranks of one communicator may differ in it.
    pub device: Option<Device>,
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
            slot_bytes: self.slot_bytes.or(base.slot_bytes),
            nsocks: self.nsocks.or(base.nsocks),
            comm_name: self.comm_name.or(base.comm_name),
            blocking: self.blocking.or(base.blocking),
            min_ctas: self.min_ctas.or(base.min_ctas),
            max_ctas: self.max_ctas.or(base.max_ctas),
            net_name: self.net_name.or(base.net_name),
            split_share: self.split_share.or(base.split_share),
            abort_propagates: self.abort_propagates.or(base.abort_propagates),
            spin: self.spin.or(base.spin),
            tuner_table: self.tuner_table.or(base.tuner_table),
            device: self.device.or(base.device),
        }
    }
}

/// The network transports `net_name` may name.
pub const NET_NAMES: &[&str] = &["Socket"];

/// A complete configuration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    pub nchannels: usize,
    pub algos: AlgoOverrides,
    pub protos: ProtoOverrides,
    pub timeout: Duration,
    pub slot_bytes: [usize; NPROTOS],
    pub nsocks: usize,
    pub comm_name: Option<String>,
    pub blocking: bool,
    pub min_ctas: usize,
    pub max_ctas: usize,
    pub net_name: &'static str,
    pub split_share: bool,
    pub abort_propagates: bool,
    pub spin: Option<u64>,
    pub tuner_table: Option<PathBuf>,
}

/// Most channels a rank may use (each is a CTA: a thread on the host).
pub const MAX_CHANNELS: usize = 32;
/// Default channels of ranks on GPUs: on an H200 (ranks sharing it), 16 channels reached
/// 122 GB/s at 64 MiB (2 ranks) and 32 channels no more; each channel costs every rank a
/// FIFO per peer, so the default stops at 16 (`JITCCL_NCHANNELS` goes to 32).
const CUDA_CHANNELS: usize = 16;
const DEFAULT_SIMPLE_SLOT: usize = 128 << 10;
/// Per protocol (Simple, LL, LL128), the smallest slot and what every slot is a multiple of.
const MIN_SLOT: [usize; NPROTOS] = [64, 16, 128];
/// The largest FIFO (all STEPS slots of one protocol): a rank's segment holds one per
/// channel and peer, so this bounds what a bad value can ask of /dev/shm.
const MAX_BUFFSIZE: usize = 1 << 30;
/// The longest timeout (about 31 years): deadlines computed from it never overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(1_000_000_000);
/// Most sockets per net connector.
const MAX_NSOCKS: usize = 16;
/// Most busy-poll rounds of a kernel's wait (about half a minute).
const MAX_SPIN: u64 = 1_000_000_000;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn parse_env<T>(name: &str, parse: impl FnOnce(&str) -> std::result::Result<T, String>) -> Result<Option<T>> {
    env(name).map(|v| parse(v.trim()).map_err(|e| Error::InvalidArgument(format!("{name}='{v}': {e}")))).transpose()
}

/// Slot sizes of the three protocols from Simple's: LL and LL128 slots carry less data
/// per byte and are latency protocols, so they get smaller slots (NCCL's ratio is ~1:8).
fn slots_from_simple(simple: usize) -> [usize; NPROTOS] {
    let ll = (simple / 8).max(16) / 16 * 16;
    let ll128 = (simple / 2).max(128) / 128 * 128;
    [simple, ll, ll128]
}

/// The overrides from a forced value, else from typed overrides, else from the variable
/// (`T::VAR`, NCCL's grammar); `fields` name the two Config fields for the error when
/// both are set.
fn overrides<T: Item>(one: Option<T>, set: &Option<Overrides<T>>, fields: (&str, &str)) -> Result<Overrides<T>> {
    match (one, set) {
        (Some(_), Some(_)) => {
            Err(Error::InvalidArgument(format!("Config.{} and Config.{} are both set; set one", fields.0, fields.1)))
        }
        (Some(item), None) => Ok(Overrides::force_where_available(item)),
        (None, Some(o)) => Ok(o.clone()),
        (None, None) => Ok(parse_env(T::VAR, |v| Overrides::parse(v).map_err(|e| e.to_string()))?.unwrap_or_default()),
    }
}

/// A boolean setting: the field if set, else the variable (0/1, true/false), else `default`.
fn flag(field: Option<bool>, var: &str, default: bool) -> Result<bool> {
    Ok(match field {
        Some(b) => b,
        None => parse_env(var, |v| match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err("expected 0 or 1".into()),
        })?
        .unwrap_or(default),
    })
}

/// A CTA bound: the field if set, else the variable, else `default`; within 1..=MAX_CHANNELS.
fn ctas(field: Option<usize>, name: &str, var: &str, default: usize) -> Result<usize> {
    let n = match field {
        Some(n) => n,
        None => parse_env(var, |v| v.parse::<usize>().map_err(|e| e.to_string()))?.unwrap_or(default),
    };
    if n == 0 || n > MAX_CHANNELS {
        return Err(Error::InvalidArgument(format!("{name} ({var}) must be 1..={MAX_CHANNELS}, got {n}")));
    }
    Ok(n)
}

/// The network transport named by `net_name` or `JITCCL_NET` (default: the only one).
fn net_name(field: &Option<String>) -> Result<&'static str> {
    let Some(name) = field.clone().or_else(|| env("JITCCL_NET")) else { return Ok(NET_NAMES[0]) };
    NET_NAMES.iter().find(|n| n.eq_ignore_ascii_case(name.trim())).copied().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "net_name (JITCCL_NET) '{name}' is no network transport here; known: {NET_NAMES:?}"
        ))
    })
}

impl Config {
    /// Whether the communicator is created in blocking mode (the field, else
    /// `JITCCL_COMM_BLOCKING`, else true).
    pub(crate) fn is_blocking(&self) -> Result<bool> {
        flag(self.blocking, "JITCCL_COMM_BLOCKING", true)
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

    /// Completes the configuration for `nranks` ranks on devices of `device`'s kind.
    pub(crate) fn resolve_on(&self, nranks: usize, device: &Device) -> Result<Resolved> {
        let min_ctas = ctas(self.min_ctas, "min_ctas", "JITCCL_MIN_CTAS", 1)?;
        let max_ctas = ctas(self.max_ctas, "max_ctas", "JITCCL_MAX_CTAS", MAX_CHANNELS)?;
        if min_ctas > max_ctas {
            return Err(Error::InvalidArgument(format!(
                "min_ctas (JITCCL_MIN_CTAS) {min_ctas} is above max_ctas (JITCCL_MAX_CTAS) {max_ctas}"
            )));
        }
        let nchannels = match self.nchannels {
            Some(n) => Some(n),
            None => parse_env("JITCCL_NCHANNELS", |v| v.parse::<usize>().map_err(|e| e.to_string()))?,
        };
        let nchannels = match nchannels {
            Some(n) if n == 0 || n > MAX_CHANNELS => {
                return Err(Error::InvalidArgument(format!(
                    "nchannels (JITCCL_NCHANNELS) must be 1..={MAX_CHANNELS}, got {n}"
                )))
            }
            Some(n) if !(min_ctas..=max_ctas).contains(&n) => {
                return Err(Error::InvalidArgument(format!(
                    "nchannels (JITCCL_NCHANNELS) {n} is outside min_ctas..=max_ctas ({min_ctas}..={max_ctas})"
                )))
            }
            Some(n) => n,
            // A GPU channel is a CTA, which moved about 9 GB/s (the CUDA model's
            // `CUDA_BW`), so large calls want many; the model gives small ones fewer.
            None if device.is_cuda() => CUDA_CHANNELS.clamp(min_ctas, max_ctas),
            None => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                // Ranks that share cores get a second channel, which the model gives to
                // large calls only: its worker keeps the call's share of the cores
                // beside other busy processes (4 ranks on 2 cores, 64-256 MiB, a busy
                // loop per core: 0.53-0.66 GB/s with one channel, 0.87-1.25 with two;
                // level on a quiet machine).
                let n = if nranks > cores { 2 } else { cores / nranks.max(1) };
                n.clamp(1, 4).clamp(min_ctas, max_ctas)
            }
        };
        let algos = overrides(self.algo, &self.algos, ("algo", "algos"))?;
        let protos = overrides(self.proto, &self.protos, ("proto", "protos"))?;
        let timeout = match self.timeout {
            Some(t) => t,
            None => parse_env("JITCCL_TIMEOUT", |v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && *s <= MAX_TIMEOUT.as_secs_f64())
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| format!("expected seconds, more than 0 and at most {}", MAX_TIMEOUT.as_secs()))
            })?
            .unwrap_or(Duration::from_secs(300)),
        };
        if timeout.is_zero() || timeout > MAX_TIMEOUT {
            return Err(Error::InvalidArgument(format!(
                "timeout (JITCCL_TIMEOUT) must be more than 0 and at most {} s, got {timeout:?}",
                MAX_TIMEOUT.as_secs()
            )));
        }
        let min_buffsize = MIN_SLOT[0] * STEPS;
        let slot_bytes = match self.slot_bytes {
            Some(s) => s,
            None => slots_from_simple(
                parse_env("JITCCL_BUFFSIZE", |v| {
                    v.parse::<usize>()
                        .ok()
                        .filter(|&b| (min_buffsize..=MAX_BUFFSIZE).contains(&b))
                        .ok_or_else(|| format!("expected bytes, {min_buffsize} to {MAX_BUFFSIZE}"))
                })?
                .map(|b| b / STEPS / MIN_SLOT[0] * MIN_SLOT[0])
                .unwrap_or(DEFAULT_SIMPLE_SLOT),
            ),
        };
        for p in 0..NPROTOS {
            if slot_bytes[p] < MIN_SLOT[p] || slot_bytes[p] % MIN_SLOT[p] != 0 || slot_bytes[p] > MAX_BUFFSIZE / STEPS {
                return Err(Error::InvalidArgument(format!(
                    "{} slot size {} (JITCCL_BUFFSIZE / 8 for simple) must be a positive multiple of {} bytes, at most {}",
                    Protocol::ALL[p],
                    slot_bytes[p],
                    MIN_SLOT[p],
                    MAX_BUFFSIZE / STEPS
                )));
            }
        }
        let nsocks = match self.nsocks {
            Some(n) => n,
            None => parse_env("JITCCL_NSOCKS_PERTHREAD", |v| {
                v.parse::<usize>().map_err(|_| format!("expected a number of sockets per connector, 1..={MAX_NSOCKS}"))
            })?
            .unwrap_or(1),
        };
        if nsocks == 0 || nsocks > MAX_NSOCKS {
            return Err(Error::InvalidArgument(format!(
                "nsocks (JITCCL_NSOCKS_PERTHREAD) must be 1..={MAX_NSOCKS} sockets per connector, got {nsocks}"
            )));
        }
        let spin = match self.spin {
            Some(n) => Some(n),
            None => parse_env("JITCCL_SPIN", |v| v.parse::<u64>().map_err(|e| e.to_string()))?,
        };
        if let Some(n) = spin.filter(|&n| n > MAX_SPIN) {
            return Err(Error::InvalidArgument(format!("spin (JITCCL_SPIN) must be 0..={MAX_SPIN} rounds, got {n}")));
        }
        let comm_name = self.comm_name.clone().or_else(|| env("JITCCL_COMM_NAME").map(|n| n.trim().to_string()));
        Ok(Resolved {
            nchannels,
            algos,
            protos,
            timeout,
            slot_bytes,
            nsocks,
            comm_name,
            blocking: self.is_blocking()?,
            min_ctas,
            max_ctas,
            net_name: net_name(&self.net_name)?,
            split_share: flag(self.split_share, "JITCCL_COMM_SPLIT_SHARE_RESOURCES", false)?,
            abort_propagates: flag(self.abort_propagates, "JITCCL_ABORT_PROPAGATE", false)?,
            spin,
            tuner_table: self.tuner_table.clone(),
        })
    }
}
