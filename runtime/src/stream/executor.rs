//! What runs a communicator's launches (`Executor`): everything the stream needs of the
//! rank at run time, owned here so that the stream runs a launch without calling up into
//! its communicator. One kernel of the rank at a time; the statuses its kernels write and
//! the abort flag they poll (`tables`); its failure state (`failure`): a failed kernel
//! fails the communicator here, where it ran, and tells the peers at once; and the count
//! of launches queued and not yet run, which `finalize` waits for.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::failure::Failure;
use super::launch::{KernelCall, OnCaller, Owner, Started};
use super::tables::Tables;
use crate::affinity::{self, CpuSet, Running};
use crate::device::{self, CtaPool, KernelRef, LaunchOrder};
use crate::error::{Error, Result};
use crate::transport::net::Activity;
use crate::wait;

/// One rank's launches as the stream runs them (see the module comment).
pub(crate) struct Executor {
    rank: usize,
    /// The wait policy's spin setting (`Config::spin`) and the rank's kernel CPUs.
    spin: Option<u64>,
    cpus: Option<Arc<CpuSet>>,
    /// The communicator's timeout: every wait inside a kernel ends within one.
    timeout: Duration,
    pub tables: Tables,
    pub failure: Failure,
    /// The net proxy serving this rank's connectors, if any: it watches the FIFOs only
    /// while a kernel runs.
    net: Option<Arc<Activity>>,
    /// One kernel of this rank at a time: they share connector state.
    one_at_a_time: Mutex<()>,
    /// The same for asynchronous CUDA launches, on the GPU (see `device::LaunchOrder`).
    order: Mutex<LaunchOrder>,
    /// Launches queued and not yet run, and whether the communicator is finalized: plain
    /// atomics, for they are touched on every launch by the caller and the stream, and a
    /// lock or a wake-up there costs a launch's latency. SeqCst on both sides (count, then
    /// flag; flag, then count) keeps a submit from slipping past a finalize unseen.
    queued: AtomicUsize,
    finalized: AtomicBool,
}

/// One queued launch, counted until it has run.
struct Queued<'a>(&'a Executor);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Executor {
    pub(crate) fn new(
        rank: usize, spin: Option<u64>, cpus: Option<Arc<CpuSet>>, timeout: Duration, tables: Tables, failure: Failure,
        net: Option<Arc<Activity>>,
    ) -> Executor {
        Executor {
            rank,
            spin,
            cpus,
            timeout,
            tables,
            failure,
            net,
            one_at_a_time: Mutex::new(()),
            order: Mutex::default(),
            queued: AtomicUsize::new(0),
            finalized: AtomicBool::new(false),
        }
    }

    /// This executor as its launches' owner: borrowed, each launch keeping its
    /// communicator, which holds the executor, alive (`Launch::_comm`).
    pub(crate) fn as_owner(&self) -> NonNull<dyn Owner> {
        NonNull::from(self as &dyn Owner)
    }

    pub(crate) fn finalized_error(name: &str, rank: usize) -> Error {
        Error::InvalidUsage(format!("{name} on rank {rank}: the communicator was finalized"))
    }

    pub(crate) fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::SeqCst)
    }

    /// Counts a launch about to be queued; refused once finalized. The count goes down
    /// when the launch has run or was not queued ([`Executor::unqueue`]).
    pub(crate) fn queue(&self, name: &str) -> Result<()> {
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self.finalized.load(Ordering::SeqCst) {
            self.unqueue();
            return Err(Self::finalized_error(name, self.rank));
        }
        Ok(())
    }

    /// Undoes [`Executor::queue`] for a call that queued nothing.
    pub(crate) fn unqueue(&self) {
        drop(Queued(self));
    }

    /// Held while a queued launch runs: its end uncounts it.
    fn running(&self) -> Queued<'_> {
        Queued(self)
    }

    /// Refuses new launches, then waits up to `timeout` for the queued ones to run.
    /// Returns whether they all did.
    pub(crate) fn finalize(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        self.finalized.store(true, Ordering::SeqCst);
        // Rare and short: polling spares every launch a wake-up.
        while self.queued.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

impl Owner for Executor {
    /// Runs one CTA per channel on the stream's pool; a failing channel's status becomes
    /// the error, and the error fails the communicator.
    fn run(&self, l: &mut KernelCall, pool: &mut CtaPool) -> Result<()> {
        let _counted = self.running();
        let _one_at_a_time = self.one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
        // Behind a failed operation, nothing runs: it would pair with stale FIFO steps.
        if let Some(e) = self.failure.error() {
            return Err(e);
        }
        // SAFETY: statuses are only written by this rank's kernels, not running now.
        unsafe { self.tables.reset_statuses(l.nchannels)? };
        // A host kernel drives its rank's net traffic from its own waits; a GPU's cannot.
        let _net = self.net.as_ref().map(|a| match l.kernel {
            KernelRef::Host(_) => {
                let (running, hook) = a.kernel_driving();
                l.args.progress = hook.map(|h| h.progress);
                l.args.progress_ctx = hook.map_or(std::ptr::null_mut(), |h| h.ctx);
                running
            }
            KernelRef::Cuda(_) => a.kernel_running(),
        });
        // The wait policy's spin budget, from what competes for the CPUs now.
        let _running = Running::new();
        let cpus = self.cpus.as_deref();
        l.args.spin = wait::spin_budget(self.spin, cpus, l.args.progress.is_some());
        // SAFETY: the kernel is borrowed from its communicator's table (`enqueue::plan`),
        // which the launch keeps alive.
        let failed = unsafe { device::launch(l.kernel, &l.args, l.nchannels, l.proto, pool, cpus) };
        let err = match failed {
            Ok(None) => return Ok(()),
            // SAFETY: the kernels have finished.
            Ok(Some(_)) => self.failure.kernel_error(l.name, unsafe { self.tables.statuses(l.nchannels)? }),
            // A launch that could not run (a device error) fails the communicator too: its
            // peers' kernels wait for this one.
            Err(e) => e,
        };
        // The caller may reuse its buffers once the error is back: the proxy must not keep
        // them, as it does for a step passed by reference until the socket takes it.
        if let Some(a) = &self.net {
            a.release_callers_buffers();
        }
        self.failure.fail(&err);
        Err(err)
    }

    /// Queues one CTA per channel on a CUDA stream. Statuses are not reset: a kernel
    /// writes its channel's only on failure, after which the communicator runs nothing more
    /// (its later kernels, queued before the host saw the failure, end at their start: see
    /// templates/kernel.c).
    fn start(&self, l: &mut KernelCall, pool: &CtaPool) -> Result<Started> {
        let _counted = self.running();
        if let Some(e) = self.failure.error() {
            return Err(e);
        }
        let capturing = pool.capturing()?;
        if capturing && self.net.is_some() {
            return Err(Error::Unsupported(format!(
                "{} on rank {}: a call over the net proxy cannot be captured into a CUDA graph (the proxy moves \
                 its data only while the host knows the kernel runs)",
                l.name, self.rank
            )));
        }
        l.args.spin = wait::spin_budget(self.spin, self.cpus.as_deref(), false);
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the kernel is borrowed from its communicator's table, which the launch
        // keeps alive; the launch (holding it and the buffers) stays in flight until it has
        // finished, or, captured, as long as its graph.
        let queued = unsafe { device::queue(l.kernel, &l.args, l.nchannels, l.proto, pool, capturing, &mut order) };
        match queued {
            Ok(None) => Ok(Started::Captured),
            Ok(Some(done)) => {
                if let Some(a) = &self.net {
                    a.kernel_queued();
                }
                Ok(Started::Queued(Box::new(done)))
            }
            Err(e) => {
                // Its peers' kernels wait for this one.
                self.failure.fail(&e);
                Err(e)
            }
        }
    }

    fn finish(&self, l: &KernelCall, hung: bool) -> Result<()> {
        if let (Some(a), false) = (&self.net, hung) {
            a.kernel_ended();
        }
        let rank = self.rank;
        let err = if hung {
            // Its kernel ends at its next look at the abort flag (kept in flight till then).
            // No wait inside it gave up, so no peer is to blame: the rank itself is named,
            // and its peers are told it failed.
            self.tables.abort().store(1, Ordering::Release);
            Error::Timeout {
                op: l.name.to_string(),
                rank,
                channel: 0,
                peer: rank as i32,
                waiting: "the end of its own kernel (hung on the GPU) on",
                timeout_s: self.bound().as_secs_f64(),
            }
        } else {
            // Every channel's, not only this launch's: a launch queued behind a failure
            // ends at its start without a status of its own (templates/kernel.c).
            // SAFETY: the launch has finished; statuses of later kernels only go from OK to
            // a failure, which fails the communicator either way.
            let statuses = unsafe { self.tables.statuses(usize::MAX)? };
            if statuses.iter().all(|s| s.code == 0) {
                return Ok(());
            }
            self.failure.kernel_error(l.name, statuses)
        };
        self.failure.fail(&err);
        Err(err)
    }

    /// Twice the communicator's timeout: every wait inside a kernel ends within one.
    fn bound(&self) -> Duration {
        self.timeout.saturating_mul(2).max(Duration::from_secs(10))
    }

    fn on_caller(&self) -> OnCaller {
        match self.cpus.as_deref() {
            None => OnCaller::Allowed,
            Some(set) if !affinity::on_current_cpu(set) => OnCaller::Never,
            Some(set) if set.cpus().len() == 1 => OnCaller::SameCpu,
            Some(_) => OnCaller::Allowed,
        }
    }
}
