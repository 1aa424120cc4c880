//! What one rank of a communicator holds: its side of the launch path (`enqueue::Rank`),
//! its failure state, and what init set up for it (bootstrap, store, transports, the
//! memory the connectors point into). It runs its launches for the streams (`Owner`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::affinity::{self, Running};
use crate::bootstrap::Bootstrap;
use crate::comm::failure::Failure;
use crate::comm::life::Life;
use crate::device::{self, CtaPool, LaunchOrder};
use crate::enqueue;
use crate::error::{Error, Result};
use crate::store::Server;
use crate::stream::{KernelCall, OnCaller, Owner, Started};
use crate::transport::net::Activity;
use crate::wait;

pub(crate) struct CommInner {
    pub enq: enqueue::Rank,
    pub failure: Failure,
    /// Finalize and split state.
    pub life: Life,
    /// One kernel of this communicator at a time: they share connector state.
    exec: Mutex<()>,
    /// The same for asynchronous CUDA launches, on the GPU (see `device::LaunchOrder`).
    order: Mutex<LaunchOrder>,
    /// Ranks in other processes: the bootstrap (kept for later exchanges) and its abort
    /// flag, and the rendezvous store this rank serves, if any.
    pub bootstrap: Option<(Bootstrap, Arc<AtomicBool>)>,
    _store_server: Option<Server>,
    /// The net proxy serving this rank's connectors, if any: it watches the FIFOs only
    /// while a kernel runs.
    net: Option<Arc<Activity>>,
    /// Keeps every segment the connectors point into alive (declared last: dropped after
    /// everything that uses it).
    _segments: Arc<dyn Send + Sync>,
}

impl CommInner {
    pub(crate) fn new(
        enq: enqueue::Rank, failure: Failure, net: Option<Arc<Activity>>, segments: Arc<dyn Send + Sync>,
    ) -> CommInner {
        CommInner {
            enq,
            failure,
            life: Life::default(),
            exec: Mutex::new(()),
            order: Mutex::default(),
            bootstrap: None,
            _store_server: None,
            net,
            _segments: segments,
        }
    }

    pub(crate) fn with_bootstrap(
        self, bs: Bootstrap, abort: Arc<AtomicBool>, store_server: Option<Server>,
    ) -> CommInner {
        CommInner { bootstrap: Some((bs, abort)), _store_server: store_server, ..self }
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.enq.abort().load(Ordering::Acquire) != 0
    }

    /// Whether a new operation may be queued: not after an abort or a failure. Inlined
    /// down to three loads: every call asks.
    #[inline]
    pub(crate) fn usable(&self, name: &str) -> Result<()> {
        if self.is_aborted() || self.life.is_finalized() || self.failure.failed() {
            return self.unusable(name);
        }
        Ok(())
    }

    #[cold]
    fn unusable(&self, name: &str) -> Result<()> {
        if self.is_aborted() {
            return Err(Error::InvalidUsage(format!(
                "{name} on rank {}: the communicator was aborted",
                self.enq.group.rank
            )));
        }
        if self.life.is_finalized() {
            return Err(Life::finalized_error(name, self.enq.group.rank));
        }
        self.failure.error().map_or(Ok(()), Err)
    }
}

impl Owner for CommInner {
    /// Runs one CTA per channel on the stream's pool; a failing channel's status becomes
    /// the error, and the error fails the communicator.
    fn run(&self, l: &mut KernelCall, pool: &mut CtaPool) -> Result<()> {
        let _counted = self.life.running();
        let _one_at_a_time = self.exec.lock().unwrap_or_else(|e| e.into_inner());
        // Behind a failed operation, nothing runs: it would pair with stale FIFO steps.
        if let Some(e) = self.failure.error() {
            return Err(e);
        }
        // SAFETY: statuses are only written by this communicator's kernels, not running now.
        unsafe { self.enq.tables.reset_statuses(l.nchannels)? };
        let _net = self.net.as_ref().map(|a| a.kernel_running());
        // The wait policy's spin budget, from what competes for the CPUs now.
        let _running = Running::new();
        let cpus = self.enq.cpus.as_deref();
        l.args.spin = wait::spin_budget(self.enq.cfg.spin, cpus);
        // SAFETY: the kernel is borrowed from this communicator's table (`enqueue::plan`),
        // which lives as long as `self`.
        let failed = unsafe { device::launch(l.kernel, &l.args, l.nchannels, l.proto, pool, cpus) };
        let err = match failed {
            Ok(None) => return Ok(()),
            // SAFETY: the kernels have finished.
            Ok(Some(_)) => self.failure.kernel_error(l.name, unsafe { self.enq.tables.statuses(l.nchannels)? }),
            // A launch that could not run (a device error) fails the communicator too: its
            // peers' kernels wait for this one.
            Err(e) => e,
        };
        self.failure.fail(&err);
        Err(err)
    }

    /// Queues one CTA per channel on a CUDA stream. Statuses are not reset: a kernel
    /// writes its channel's only on failure, after which the communicator runs nothing more
    /// (its later kernels, queued before the host saw the failure, end at their start: see
    /// templates/kernel.c).
    fn start(&self, l: &mut KernelCall, pool: &CtaPool) -> Result<Started> {
        let _counted = self.life.running();
        if let Some(e) = self.failure.error() {
            return Err(e);
        }
        let capturing = pool.capturing()?;
        if capturing && self.net.is_some() {
            return Err(Error::Unsupported(format!(
                "{} on rank {}: a call over the net proxy cannot be captured into a CUDA graph (the proxy moves \
                 its data only while the host knows the kernel runs)",
                l.name, self.enq.group.rank
            )));
        }
        l.args.spin = wait::spin_budget(self.enq.cfg.spin, self.enq.cpus.as_deref());
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the kernel is borrowed from this communicator's table, which lives as long
        // as `self`; the launch (holding `self` and the buffers) stays in flight until it has
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
        let rank = self.enq.group.rank;
        let err = if hung {
            // Its kernel ends at its next look at the abort flag (kept in flight till then).
            // No wait inside it gave up, so no peer is to blame: the rank itself is named,
            // and its peers are told it failed.
            self.enq.abort().store(1, Ordering::Release);
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
            let statuses = unsafe { self.enq.tables.statuses(usize::MAX)? };
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
        self.enq.cfg.timeout.saturating_mul(2).max(Duration::from_secs(10))
    }

    fn on_caller(&self) -> OnCaller {
        match self.enq.cpus.as_deref() {
            None => OnCaller::Allowed,
            Some(set) if !affinity::on_current_cpu(set) => OnCaller::Never,
            Some(set) if set.cpus().len() == 1 => OnCaller::SameCpu,
            Some(_) => OnCaller::Allowed,
        }
    }
}
