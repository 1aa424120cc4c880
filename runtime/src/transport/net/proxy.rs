//! The proxy of one rank (NCCL's proxy progress): moves posted steps out of the local
//! shadows of its peers' FIFOs and stores arriving steps into the rank's own FIFOs.
//!
//! What it moves is an [`Engine`] behind a lock, driven from two places. A host kernel of
//! the rank drives it from its own waits ([`progress`], which the kernel's back-off calls
//! before each round): a step then goes from the kernel that posts it to the socket, and
//! from the socket to the kernel that waits for it, on the kernel's own thread, as MPI
//! progresses its sockets inside the call. The proxy thread drives it whenever no such
//! kernel does: with no kernel running (what a kernel posted last still goes out), under
//! a GPU's kernels, and now and then beside a host kernel busy with something else.
//!
//! The proxy thread waits on its sockets' readiness (mio, edge-triggered) rather than
//! trying each one, and polls the FIFOs, which only kernels change, only while a kernel of
//! its rank runs: then it spins briefly after each piece of work and yields its core after
//! that, or, while host kernels drive the engine, naps. With no kernel running it sleeps
//! until a socket has something, a kernel starts or ends, or it is stopped.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use super::recv::RecvSide;
use super::send::SendSide;
use super::wire::linger;
use crate::error::{sys, Result};
use crate::fault::{Board, Notice, Seen};
use crate::transport::connect::Link;

/// How long a closing proxy keeps forwarding steps its kernels already posted (a send
/// completes once its data is in the local shadow FIFO, so they must still go out).
pub(super) const DRAIN: Duration = Duration::from_secs(10);
/// Idle passes spent spinning (a reply is often microseconds away), then yielding while a
/// kernel runs, before sleeping on the sockets.
const SPINS: u32 = 64;
const YIELDS: u32 = 20_000;
/// The longest sleep while a kernel runs: it may post a step without any socket stirring.
const BUSY_SLEEP: Duration = Duration::from_millis(1);
/// The longest sleep with no kernel running: a bound, not a mechanism (whatever the proxy
/// must act on wakes it).
const IDLE_SLEEP: Duration = Duration::from_millis(100);
/// The proxy thread's nap while host kernels drive the engine from their waits: it only
/// covers a kernel that does not wait for a while (a long fold), so it may be long.
const DRIVEN_NAP: Duration = Duration::from_millis(1);
const WAKE: Token = Token(usize::MAX);
/// How long after a peer's last link closed it is noted as gone.
const CLOSED_GRACE: Duration = Duration::from_millis(200);
/// The longest a failing rank waits for its fault frames to leave.
pub(super) const FAULT_FLUSH: Duration = Duration::from_millis(200);

/// What wakes the proxy besides its sockets: kernels of its rank starting, and stopping.
pub(crate) struct Activity {
    /// Kernels of this rank running now.
    pub(super) running: AtomicUsize,
    /// Of those, host kernels that drive the engine from their waits.
    driving: AtomicUsize,
    /// Passes those kernels have made: the proxy thread naps while they go on.
    driven: AtomicU64,
    /// The engine that host kernels drive from their waits, once the connectors are up.
    engine: OnceLock<Arc<Mutex<dyn Drive>>>,
    /// The proxy is (about to be) asleep and must be woken.
    pub(super) sleeping: AtomicBool,
    pub(super) stop: AtomicBool,
    /// 1 + the culprit of this rank's failure, to be reported to every net peer (0: none).
    pub(super) fault: AtomicUsize,
    /// Every peer has been sent the fault frame (or its connection is gone).
    pub(super) fault_sent: AtomicBool,
    pub(super) wake: Wake,
}

/// How the proxy is woken: the socket proxy sleeps in its poller (or naps, parked, while
/// its kernels drive it), a plugin's proxy (whose plugin offers nothing to wait on) parks.
pub(super) enum Wake {
    Poller(Waker, OnceLock<Thread>),
    Park(OnceLock<Thread>),
}

impl Activity {
    /// Marks a kernel running until the guard drops, waking the proxy if it sleeps.
    pub(crate) fn kernel_running(&self) -> Running<'_> {
        self.kernel_queued();
        Running { act: self, driving: false }
    }

    /// Marks a kernel running until `kernel_ended` (an asynchronous launch, which outlives
    /// the call that queued it), waking the proxy if it sleeps.
    pub(crate) fn kernel_queued(&self) {
        // SeqCst with the proxy's own pair (set `sleeping`, then read `running`): one of
        // the two sees the other, so no start goes unnoticed.
        self.running.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Ends what `kernel_queued` marked.
    pub(crate) fn kernel_ended(&self) {
        // Release: what the kernel posted is visible to a proxy that sees it ended.
        self.running.fetch_sub(1, Ordering::Release);
    }

    /// Marks a host kernel running that drives the engine from its waits, until the guard
    /// drops; the progress hook and its context for its launch arguments (none where no
    /// engine can be driven: the kernel then waits for the proxy thread as a GPU's does).
    pub(crate) fn kernel_driving(&self) -> (Running<'_>, Option<Hook>) {
        // Counted driving before running: a proxy woken by the start naps at once.
        let hook = self.engine.get().map(|_| {
            self.driving.fetch_add(1, Ordering::SeqCst);
            Hook { progress, ctx: self as *const Activity as *mut c_void }
        });
        self.kernel_queued();
        (Running { act: self, driving: hook.is_some() }, hook)
    }

    /// Tells every net peer that this rank's communicator failed, `culprit` having failed
    /// first as far as this rank knows.
    ///
    /// Waits (up to `FAULT_FLUSH`) until the frames are out: a process that exits on the
    /// error would otherwise close its connections first, and its peers would blame it.
    pub(crate) fn report_failure(&self, culprit: usize) {
        self.fault.store(culprit + 1, Ordering::SeqCst);
        self.wake();
        let end = Instant::now() + FAULT_FLUSH;
        while !self.fault_sent.load(Ordering::Acquire) && Instant::now() < end {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Takes back from the proxy every address in the callers' buffers that a failed
    /// kernel's steps left it (steps passed by reference, a landing), before the call
    /// returns its error and the caller may reuse those buffers.
    pub(crate) fn release_callers_buffers(&self) {
        if let Some(engine) = self.engine.get() {
            // The proxy thread may hold the engine while it polls: woken, it lets go.
            self.wake();
            engine.lock().unwrap_or_else(|p| p.into_inner()).release();
        }
    }

    /// Stops the proxy: it drains what its kernels posted, then closes.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        match &self.wake {
            Wake::Poller(w, t) => {
                if let Err(e) = w.wake() {
                    tracing::warn!("waking the net proxy failed: {e}");
                }
                if let Some(t) = t.get() {
                    t.unpark();
                }
            }
            Wake::Park(t) => {
                if let Some(t) = t.get() {
                    t.unpark();
                }
            }
        }
    }

    pub(super) fn new(wake: Wake) -> Activity {
        Activity {
            running: AtomicUsize::new(0),
            driving: AtomicUsize::new(0),
            driven: AtomicU64::new(0),
            engine: OnceLock::new(),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            fault: AtomicUsize::new(0),
            fault_sent: AtomicBool::new(false),
            wake,
        }
    }

    /// Hands the rank's host kernels the engine to drive from their waits; before any
    /// kernel of the rank runs.
    pub(super) fn set_engine(&self, engine: Arc<Mutex<dyn Drive>>) {
        if self.engine.set(engine).is_err() {
            tracing::warn!("the net proxy's engine was set twice; the first stays");
        }
    }
}

/// What a proxy moves, which its rank's host kernels also drive from their waits (one
/// thread at a time, under its lock): the step then goes between the kernel and the
/// network on the kernel's own thread, with no hand-off to a proxy thread that, with more
/// threads than cores, may be waiting for one.
pub(super) trait Drive: Send {
    /// One pass that does not wait; true if anything moved, an error only if the engine
    /// itself failed.
    fn drive(&mut self, act: &Activity) -> std::io::Result<bool>;
    /// Every step this rank posted went out: an ending kernel leaves nothing to the proxy
    /// thread.
    fn settled(&self) -> bool;
    /// Lets go of the callers' buffers that a failed kernel's steps pointed it to
    /// (`Activity::release_callers_buffers`).
    fn release(&mut self);
}

/// A kernel running on a rank with a proxy (see `Activity::kernel_running`).
pub(crate) struct Running<'a> {
    act: &'a Activity,
    driving: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.act.kernel_ended();
        if self.driving {
            self.act.driving.fetch_sub(1, Ordering::SeqCst);
            // What the kernel posted last goes out now, on its thread; only what the
            // sockets do not take at once is left to the proxy thread, woken for it.
            let quiet = self
                .act
                .engine
                .get()
                .and_then(|e| e.try_lock().ok())
                .is_some_and(|mut e| e.settled() || e.drive(self.act).is_ok_and(|_| e.settled()));
            if !quiet {
                self.act.wake();
            }
        }
    }
}

/// A launch's progress hook (`Args::progress`, `Args::progress_ctx`).
#[derive(Clone, Copy)]
pub(crate) struct Hook {
    pub progress: unsafe extern "C" fn(*mut c_void) -> i32,
    pub ctx: *mut c_void,
}

/// One pass of the engine of the `Activity` at `ctx`, from a waiting host kernel, unless
/// another thread is in one (that pass moves this kernel's traffic too); nonzero if it
/// moved anything.
///
/// # Safety
/// `ctx` must be an `Activity` that outlives the call (the executor holds it while the
/// kernel runs).
unsafe extern "C" fn progress(ctx: *mut c_void) -> i32 {
    // SAFETY: see above.
    let act = unsafe { &*(ctx as *const Activity) };
    let Some(Ok(mut engine)) = act.engine.get().map(|e| e.try_lock()) else { return 0 };
    act.driven.fetch_add(1, Ordering::Relaxed);
    // A panic must not unwind into the kernel's C frames: the pass counts as idle, and the
    // proxy thread meets the same state and reports it.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.drive(act)))
        .map_or(0, |r| r.unwrap_or(false) as i32)
}

/// Which socket a token stands for: (receive side?, side, socket).
type Place = (bool, usize, usize);

/// Starts the proxy of `rank`; it runs until stopped through the returned `Activity`,
/// then drains and closes. A failed link is noted on `board`, the rank's own failure board.
pub(super) fn spawn(
    rank: usize, sends: Vec<SendSide>, recvs: Vec<RecvSide>, board: Board,
) -> Result<(JoinHandle<()>, Arc<Activity>)> {
    let poll = Poll::new().map_err(sys("creating the net proxy's poller"))?;
    let mut places = Vec::new();
    let sockets = sends
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.socks.iter().enumerate().map(move |(j, w)| ((false, i, j), w)))
        .chain(
            recvs.iter().enumerate().flat_map(|(i, r)| r.socks.iter().enumerate().map(move |(j, w)| ((true, i, j), w))),
        );
    for (place, w) in sockets {
        use std::os::fd::AsRawFd;
        let fd = w.stream.as_raw_fd();
        poll.registry()
            .register(&mut SourceFd(&fd), Token(places.len()), Interest::READABLE | Interest::WRITABLE)
            .map_err(sys("registering a net socket"))?;
        places.push(place);
    }
    let waker = Waker::new(poll.registry(), WAKE).map_err(sys("creating the net proxy's waker"))?;
    let peers = Peers::new(sends.iter().map(|s| s.link.peer).chain(recvs.iter().map(|r| r.link.peer)));
    let events = Events::with_capacity(places.len() + 1);
    let engine = Arc::new(Mutex::new(Engine { rank, sends, recvs, poll, events, places, board, peers, failed: false }));
    let activity = Arc::new(Activity::new(Wake::Poller(waker, OnceLock::new())));
    activity.set_engine(engine.clone());
    let act = activity.clone();
    let thread = std::thread::Builder::new()
        .name(format!("jitccl-proxy{rank}"))
        .spawn(move || {
            if let Wake::Poller(_, t) = &act.wake {
                let _ = t.set(std::thread::current());
            }
            run(rank, &act, &engine)
        })
        .map_err(sys("starting the proxy thread"))?;
    Ok((thread, activity))
}

/// What a rank's proxy moves: its connectors' two sides, their sockets' poller, and what
/// it has noted of its peers.
pub(super) struct Engine {
    rank: usize,
    sends: Vec<SendSide>,
    recvs: Vec<RecvSide>,
    poll: Poll,
    events: Events,
    /// Which socket each token stands for.
    places: Vec<Place>,
    board: Board,
    peers: Peers,
    /// This rank's communicator failed (a fault frame went to the peers).
    failed: bool,
}

// SAFETY: the raw FIFO pointers in the sides stay valid while the communicator (which owns
// both the segments and the proxy) lives, and are accessed with the same atomics as kernels;
// the engine is used by one thread at a time (its lock).
unsafe impl Send for Engine {}

impl Engine {
    /// Moves posted steps out, waits up to `wait` for the sockets to stir, then moves what
    /// can move: posted steps out, arrived steps into the FIFOs. True if anything moved; an
    /// error only if the poller itself failed.
    fn pass(&mut self, wait: Duration, act: &Activity) -> std::io::Result<bool> {
        self.peers.note_due(&self.board);
        let fault = act.fault.swap(0, Ordering::AcqRel);
        if fault > 0 {
            self.failed = true;
            self.sends.iter_mut().for_each(|s| s.report_fault(fault - 1));
        }
        // Steps already posted go out before the poller is asked anything: a kernel that
        // just posted one drives a pass for it, and the socket, writable when it last
        // looked, takes it a system call sooner.
        let mut progressed = self.pump_sends();
        if let Err(e) = self.poll.poll(&mut self.events, Some(wait)) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        for e in self.events.iter().filter(|e| e.token() != WAKE) {
            let (recv, side, sock) = self.places[e.token().0];
            let w = if recv { &mut self.recvs[side].socks[sock] } else { &mut self.sends[side].socks[sock] };
            // Errors and closes surface on the next read or write.
            w.hangup |= e.is_read_closed() || e.is_error();
            w.readable |= e.is_readable() || w.hangup;
            w.writable |= e.is_writable() || e.is_write_closed() || e.is_error();
        }
        progressed |= self.pump_sends();
        progressed |= self.pump_recvs();
        if self.failed && !act.fault_sent.load(Ordering::Relaxed) && self.sends.iter().all(SendSide::settled) {
            act.fault_sent.store(true, Ordering::Release);
        }
        Ok(progressed)
    }

    /// Moves posted steps out on every live connector; true if anything moved.
    fn pump_sends(&mut self) -> bool {
        let mut progressed = false;
        for s in self.sends.iter_mut().filter(|s| !s.dead) {
            match s.pump() {
                Ok(p) => progressed |= p,
                Err(why) => {
                    // A peer that finished closes its connectors, and one that failed does
                    // too: noted on the board, it ends the kernel waits on that peer (and
                    // only those), whichever it was.
                    link_failed(self.rank, "to", s.link, &why.why, !s.flushed() || why.unreachable);
                    if why.unreachable {
                        self.board.note(s.link.peer, Notice::gone(s.link.peer, Seen::Unreachable));
                    }
                    self.peers.closed(s.link.peer);
                    close(&s.socks);
                    s.dead = true;
                }
            }
        }
        progressed
    }

    /// Stores arrived steps into the FIFOs on every live connector; true if anything moved.
    fn pump_recvs(&mut self) -> bool {
        let mut progressed = false;
        for r in self.recvs.iter_mut().filter(|r| !r.dead) {
            match r.pump() {
                Ok(p) => progressed |= p,
                Err(why) => {
                    link_failed(
                        self.rank,
                        "from",
                        r.link,
                        &why.why,
                        r.mid_frame() || r.fault.is_some() || why.unreachable,
                    );
                    match r.fault {
                        Some(culprit) => self.board.note(r.link.peer, Notice::reported(culprit)),
                        None => {
                            if why.unreachable {
                                self.board.note(r.link.peer, Notice::gone(r.link.peer, Seen::Unreachable));
                            }
                            self.peers.closed(r.link.peer);
                            close(&r.socks);
                        }
                    }
                    r.dead = true;
                }
            }
        }
        progressed
    }

    /// Closes every socket, lingering until `until` for the peers to take what was sent
    /// (not at all after a failure: a failed communicator owes its peers nothing).
    fn close(&mut self, until: Instant) {
        let until = if self.failed { Instant::now() } else { until };
        let sum = |f: &dyn Fn(&SendSide) -> u64| self.sends.iter().map(f).sum::<u64>();
        let got = |f: &dyn Fn(&RecvSide) -> u64| self.recvs.iter().map(f).sum::<u64>();
        tracing::info!(
            "rank {}: the net proxy wrote {} of {} steps from the callers' buffers, and read {} of {} into them",
            self.rank,
            sum(&|s| s.by_ref),
            sum(&|s| s.taken),
            got(&|r| r.landed),
            got(&|r| r.posted)
        );
        let socks =
            self.sends.iter_mut().flat_map(|s| &mut s.socks).chain(self.recvs.iter_mut().flat_map(|r| &mut r.socks));
        linger(socks.map(|w| &mut w.stream), until);
    }
}

impl Drive for Engine {
    fn drive(&mut self, act: &Activity) -> std::io::Result<bool> {
        self.pass(Duration::ZERO, act)
    }

    /// Every posted step went out (see `SendSide::settled`): a stopping proxy may close.
    fn settled(&self) -> bool {
        self.sends.iter().all(SendSide::settled)
    }

    fn release(&mut self) {
        self.sends.iter_mut().for_each(SendSide::release);
        self.recvs.iter_mut().for_each(RecvSide::release);
    }
}

/// The proxy thread: passes of the engine, paced by what its rank's kernels do.
fn run(rank: usize, act: &Activity, engine: &Mutex<Engine>) {
    let mut wait = Duration::ZERO;
    let mut pace = Pace::default();
    let mut drain_until = None;
    loop {
        let Some(mut e) = pace.lock(engine, act) else { continue };
        let progressed = match e.pass(wait, act) {
            Ok(p) => p,
            Err(err) => {
                tracing::error!("rank {rank}: the net proxy's poller failed, stopping: {err}");
                return;
            }
        };
        act.sleeping.store(false, Ordering::Relaxed);
        let mut busy = pace.busy(act);
        if act.stop.load(Ordering::Acquire) {
            busy = true;
            let until = *drain_until.get_or_insert_with(|| Instant::now() + DRAIN);
            let flushed = e.settled();
            if flushed || Instant::now() > until {
                if !flushed {
                    tracing::warn!("rank {rank}: closing with posted steps its peers never took");
                }
                e.close(until);
                return;
            }
        }
        let gone = e.peers.any_gone();
        drop(e);
        if pace.driven(progressed, act) {
            wait = Duration::ZERO;
            continue;
        }
        wait = pace.after(progressed, busy, gone, act).unwrap_or(Duration::ZERO);
    }
}

/// How a proxy paces itself between passes: while a kernel of its rank runs, it spins
/// briefly after each piece of work (a reply is often microseconds away), then yields its
/// core, then sleeps in short naps; with no kernel running it sleeps long.
#[derive(Default)]
pub(super) struct Pace {
    idle: u32,
    was_busy: bool,
    /// Passes host kernels had made by the last look (see `driven`).
    driven: u64,
    /// Never nap while busy: the proxy has nothing that wakes it when a request completes.
    polled: bool,
}

impl Pace {
    /// The pace of a proxy that can only poll what it waits for (a plugin's requests):
    /// while busy it spins, then yields, but never naps.
    pub fn polled() -> Pace {
        Pace { polled: true, ..Pace::default() }
    }

    /// While host kernels drive the engine from their waits, the proxy thread keeps off
    /// their cores, only covering a kernel that stopped waiting for a while: true if it
    /// did (having napped), and the caller passes again.
    pub fn driven(&mut self, progressed: bool, act: &Activity) -> bool {
        let now = act.driven.load(Ordering::Relaxed);
        let driving = self.kernels_drive(act);
        if driving && (now != self.driven || !progressed) {
            std::thread::park_timeout(DRIVEN_NAP);
        }
        self.driven = now;
        driving
    }

    /// Whether host kernels drive the engine from their waits (and the proxy is not
    /// closing, when it drives the engine itself).
    fn kernels_drive(&self, act: &Activity) -> bool {
        act.driving.load(Ordering::SeqCst) > 0 && !act.stop.load(Ordering::Acquire)
    }

    /// The proxy thread's hold on `engine` for a pass, or None where a host kernel holds it
    /// this moment (for a pass of its own): then the thread naps while kernels drive the
    /// engine, else gives its core away once, and the caller tries again. Never a wait for
    /// the lock: that would cost the kernel a wake-up call when it lets go, and put this
    /// thread on a core the ranks' kernels spin on, for nothing the kernel does not do
    /// itself.
    pub fn lock<'a, E: ?Sized>(&self, engine: &'a Mutex<E>, act: &Activity) -> Option<MutexGuard<'a, E>> {
        match engine.try_lock() {
            Ok(e) => Some(e),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => {
                match self.kernels_drive(act) {
                    true => std::thread::park_timeout(DRIVEN_NAP),
                    false => std::thread::yield_now(),
                }
                None
            }
        }
    }

    /// Whether a kernel runs, read before a pass (a kernel that ended before it posted
    /// nothing the pass misses).
    pub fn busy(&mut self, act: &Activity) -> bool {
        let busy = act.running.load(Ordering::Acquire) > 0;
        if busy && !self.was_busy {
            // A kernel started: its first step may be a moment away.
            self.idle = 0;
        }
        self.was_busy = busy;
        busy
    }

    /// After a pass: None to go on at once (having spun or yielded), or how long to sleep
    /// at most; `waiting` keeps the naps short (a peer's closing is being timed).
    pub fn after(&mut self, progressed: bool, busy: bool, waiting: bool, act: &Activity) -> Option<Duration> {
        self.idle = if progressed { 0 } else { self.idle.saturating_add(1) };
        if self.idle <= SPINS {
            std::hint::spin_loop();
            None
        } else if busy && (self.polled || self.idle <= YIELDS) {
            // Give the core to the kernels this proxy serves.
            std::thread::yield_now();
            None
        } else {
            act.sleeping.store(true, Ordering::SeqCst);
            let running = act.running.load(Ordering::SeqCst) > 0;
            if busy || !running {
                Some(if busy || waiting { BUSY_SLEEP } else { IDLE_SLEEP })
            } else {
                None
            }
        }
    }
}

/// Per peer, its links still open: a peer is noted closed only once all are, for data it
/// sent before closing may still be on its way on another link. Peers whose links have all
/// closed are noted on the board only after CLOSED_GRACE, for what a peer that finished
/// normally sent last may still be moving through this proxy (a notice would end a wait it
/// is about to satisfy).
pub(super) struct Peers {
    open: Vec<usize>,
    gone: Vec<(usize, Instant)>,
}

impl Peers {
    pub fn new(links: impl Iterator<Item = usize> + Clone) -> Peers {
        let mut open = vec![0usize; links.clone().max().map_or(0, |m| m + 1)];
        links.for_each(|p| open[p] += 1);
        Peers { open, gone: Vec::new() }
    }

    /// A link of `peer` closed.
    pub fn closed(&mut self, peer: usize) {
        self.open[peer] -= 1;
        if self.open[peer] == 0 {
            self.gone.push((peer, Instant::now()));
        }
    }

    /// Notes on `board` the peers gone for CLOSED_GRACE.
    pub fn note_due(&mut self, board: &Board) {
        self.gone.retain(|&(peer, at)| {
            let due = at.elapsed() >= CLOSED_GRACE;
            if due {
                board.note(peer, Notice::gone(peer, Seen::Closed));
            }
            !due
        });
    }

    pub fn any_gone(&self) -> bool {
        !self.gone.is_empty()
    }
}

/// Closes a closed link's sockets now: a peer that is closing lingers until this side
/// closes too. (A link that brought a fault frame stays open: its peer is alive, and a
/// close now would read to it as this rank's failure.)
fn close(socks: &[super::wire::Wire]) {
    for w in socks {
        let _ = w.stream.shutdown(std::net::Shutdown::Both);
    }
}

pub(super) fn link_failed(rank: usize, dir: &str, link: Link, why: &str, busy: bool) {
    if busy {
        tracing::warn!(
            "rank {rank}: net link {dir} rank {} (channel {}) failed with steps in flight: {why}",
            link.peer,
            link.chan
        );
    } else {
        tracing::debug!("rank {rank}: net link {dir} rank {} (channel {}) ended: {why}", link.peer, link.chan);
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use jitccl_codegen::abi::{ll128_flag_word, Conn, LAND_AT, LAND_TAG_SHIFT, LAND_WANT, REF_MIN, SIZE_REF, STEPS};

    use super::super::fifo::{atomic, slot, slot_ptr};
    use super::super::wire::{Opening, Wire, FRAME_HEADER};
    use super::*;
    use crate::auth::{JobKey, Tls};
    use crate::device::HostMemory;
    use crate::transport::layout::{Edge, Layout};

    fn pattern(k: u64, bytes: usize) -> Vec<u8> {
        (0..bytes).map(|i| (k as usize * 31 + i * 7) as u8).collect()
    }

    /// The proxy thread never waits for an engine another thread holds (a kernel's pass):
    /// it gets None at once, whether kernels drive the engine (it naps) or not (it yields),
    /// and the engine once free.
    #[test]
    fn the_proxy_thread_never_waits_for_an_engine_a_kernel_holds() {
        let act = Activity::new(Wake::Park(OnceLock::new()));
        let engine = Mutex::new(0u32);
        let pace = Pace::default();
        for driving in [1, 0] {
            act.driving.store(driving, Ordering::SeqCst);
            let held = engine.lock().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::scope(|s| {
                s.spawn(|| tx.send(pace.lock(&engine, &act).is_none()).unwrap());
                let looked = rx.recv_timeout(Duration::from_secs(5));
                // Let a waiting thread go, so that a failure ends the test instead of hanging it.
                drop(held);
                assert_eq!(looked, Ok(true), "driving {driving}: the proxy thread waited for, or got, a held engine");
            });
            assert!(pace.lock(&engine, &act).is_some(), "driving {driving}: a free engine was refused");
        }
    }

    /// Two proxies over two sockets, in the clear and through TLS: steps of all three
    /// protocols, each larger than what a socket reads ahead, arrive whole and in order
    /// while several are in flight, and the sender's slots are freed as they go out.
    #[test]
    fn steps_cross_whole_in_order_and_slots_free_as_they_go() {
        steps_cross(None);
        steps_cross(Some(Tls::new(&JobKey::from_secret("the proxy test's job key").unwrap()).unwrap()));
    }

    /// `n` connected sockets, in the clear or through TLS: the sending ends, the receiving ones.
    fn sockets(n: usize, tls: Option<Tls>) -> (Vec<Wire>, Vec<Wire>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        (0..n)
            .map(|_| {
                let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
                let t = Duration::from_secs(30);
                let (mut a, _) = listener.accept().unwrap();
                let (mut c, tls) = (c, tls.clone());
                let (out, inc) = match tls {
                    Some(tls) => {
                        let mine = tls.clone();
                        let client = std::thread::spawn(move || (mine.connect(&mut c).unwrap(), c));
                        let server = Box::new(tls.accept(&mut a).unwrap());
                        let (conn, c) = client.join().unwrap();
                        (Opening { stream: c, tls: Some(Box::new(conn)) }, Opening { stream: a, tls: Some(server) })
                    }
                    None => (Opening { stream: c, tls: None }, Opening { stream: a, tls: None }),
                };
                (Wire::new(out, t).unwrap(), Wire::new(inc, t).unwrap())
            })
            .unzip()
    }

    /// Two proxies over two sockets: rank 0's sends on `tx` (its shadow of rank 1's FIFO),
    /// rank 1's receives on `rx` (its own).
    struct Pair {
        layout: Layout,
        _memory: [HostMemory; 2],
        tx: Conn,
        rx: Conn,
        threads: Vec<JoinHandle<()>>,
        acts: [Arc<Activity>; 2],
    }

    impl Pair {
        fn new(slot_bytes: [usize; 3], tls: Option<Tls>) -> Pair {
            let layout = Layout { nranks: 2, nchannels: 1, slot_bytes, ll128_flag: ll128_flag_word(false) };
            let (shadow, own) = (
                HostMemory::zeroed(layout.segment_bytes()).unwrap(),
                HostMemory::zeroed(layout.segment_bytes()).unwrap(),
            );
            let tx: Conn = layout.end(shadow.ptr(), 0, Edge::Ring, 1);
            let rx: Conn = layout.end(own.ptr(), 0, Edge::Ring, 0);
            let (out, inc) = sockets(2, tls);
            let link = Link { peer: 1, chan: 0, edge: Edge::Ring };
            let (t0, a0) = spawn(0, vec![SendSide::new(link, tx, out)], vec![], layout.board(shadow.ptr())).unwrap();
            let rside = RecvSide::new(Link { peer: 0, ..link }, rx, layout.ll128_flag, inc);
            let (t1, a1) = spawn(1, vec![], vec![rside], layout.board(own.ptr())).unwrap();
            Pair { layout, _memory: [shadow, own], tx, rx, threads: vec![t0, t1], acts: [a0, a1] }
        }

        /// Stops both proxies; the FIFOs stay to be looked at.
        fn stop(&mut self) {
            self.acts.iter().for_each(|a| a.stop());
            self.threads.drain(..).for_each(|t| t.join().unwrap());
        }
    }

    fn steps_cross(tls: Option<Tls>) {
        let mut p = Pair::new([64 << 10, 8 << 10, 32 << 10], tls);
        let (layout, tx, rx) = (&p.layout, p.tx, p.rx);
        let (k0, k1) = (p.acts[0].kernel_running(), p.acts[1].kernel_running());

        let steps = 5 * STEPS as u64;
        let size = |k: u64| ((k % 3) as usize, layout.slot_bytes[(k % 3) as usize] - 128 * (k % 2) as usize);
        let (mut posted, mut consumed, mut most_in_flight) = (0, 0, 0);
        let end = Instant::now() + Duration::from_secs(30);
        while consumed < steps {
            assert!(Instant::now() < end, "stuck at {posted} posted, {consumed} consumed");
            if posted < steps && atomic(tx.head).load(Ordering::Acquire) + (STEPS as u64) > posted {
                let (proto, bytes) = size(posted);
                // SAFETY: the slot is free (the head passed it) and holds `bytes`.
                unsafe {
                    std::ptr::copy_nonoverlapping(pattern(posted, bytes).as_ptr(), slot_ptr(&tx, posted, proto), bytes);
                    *tx.sizes.add(slot(posted)) = (proto as u64) << 56 | bytes as u64;
                }
                posted += 1;
                atomic(tx.tail).store(posted, Ordering::Release);
            } else if atomic(rx.tail).load(Ordering::Acquire) > consumed {
                most_in_flight = most_in_flight.max(atomic(rx.tail).load(Ordering::Acquire) - consumed);
                let (proto, bytes) = size(consumed);
                // SAFETY: the tail passed the slot: it holds the step.
                let got = unsafe {
                    assert_eq!(*rx.sizes.add(slot(consumed)), (proto as u64) << 56 | bytes as u64);
                    std::slice::from_raw_parts(slot_ptr(&rx, consumed, proto), bytes)
                };
                assert!(got == pattern(consumed, bytes), "step {consumed} arrived damaged");
                consumed += 1;
                atomic(rx.head).store(consumed, Ordering::Release);
            } else {
                std::thread::yield_now();
            }
        }
        assert!(most_in_flight > 1, "steps crossed one at a time");
        drop((k0, k1));
        p.stop();
        assert_eq!(atomic(tx.head).load(Ordering::Acquire), steps, "every slot freed");
    }

    /// Steps passed by reference go out from the caller's buffer, and a step lands where the
    /// receiving kernel posted it only for exactly the step and size word it waits for (else
    /// in its slot); later large steps wait in the socket while a landing is posted.
    #[test]
    fn steps_by_reference_leave_from_and_land_in_the_callers_buffers() {
        let mut p = Pair::new([256 << 10, 8 << 10, 32 << 10], None);
        let (tx, rx) = (p.tx, p.rx);
        let (k0, k1) = (p.acts[0].kernel_running(), p.acts[1].kernel_running());

        // Steps 0-2 by reference from `src`; step 1 posted with a word the sender does not
        // send, step 2 not posted until step 1 is consumed.
        let bytes = REF_MIN + 1000;
        let src: Vec<u8> = (0..3).flat_map(|k| pattern(k, bytes)).collect();
        let mut dst = vec![0u8; 3 * bytes];
        let word = (bytes as u64) | 5 << 32;
        let land = |k: u64, want: u64, at: *mut u8| {
            // SAFETY: the landing line's words; the address stays valid while the step lands.
            unsafe {
                *rx.lands.add(LAND_WANT) = want;
                atomic(rx.lands.add(LAND_AT)).store(at as u64 | k << LAND_TAG_SHIFT, Ordering::Release);
            }
        };
        land(0, word, dst.as_mut_ptr());
        for k in 0..3u64 {
            // SAFETY: a fresh FIFO's slots are free; the slot holds the address of `bytes`.
            unsafe {
                *(slot_ptr(&tx, k, 0) as *mut *const u8) = src.as_ptr().add(k as usize * bytes);
                *tx.sizes.add(slot(k)) = word | SIZE_REF;
            }
            atomic(tx.tail).store(k + 1, Ordering::Release);
        }
        let arrived = |k: u64| {
            let end = Instant::now() + Duration::from_secs(30);
            while atomic(rx.tail).load(Ordering::Acquire) <= k {
                assert!(Instant::now() < end, "step {k} never arrived");
                std::thread::yield_now();
            }
            // SAFETY: the tail passed step k.
            unsafe { *rx.sizes.add(slot(k)) }
        };
        assert_eq!(arrived(0), word | SIZE_REF, "step 0 landed");
        assert!(dst[..bytes] == src[..bytes], "step 0 landed whole");
        land(1, word + 1, dst[bytes..].as_mut_ptr());
        atomic(rx.head).store(1, Ordering::Release);
        assert_eq!(arrived(1), word, "a step of another word than the posted one goes to its slot");
        // SAFETY: the tail passed step 1.
        let in_slot = unsafe { std::slice::from_raw_parts(slot_ptr(&rx, 1, 0), bytes) };
        assert!(in_slot == &src[bytes..2 * bytes] && dst[bytes..2 * bytes].iter().all(|&b| b == 0));
        // Step 1 is posted (under another word): step 2 waits in the socket.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(atomic(rx.tail).load(Ordering::Acquire), 2, "a later step was read ahead past a landing");
        land(2, word, dst[2 * bytes..].as_mut_ptr());
        atomic(rx.head).store(2, Ordering::Release);
        assert_eq!(arrived(2), word | SIZE_REF);
        assert!(dst[2 * bytes..] == src[2 * bytes..]);
        assert_eq!(atomic(tx.head).load(Ordering::Acquire), 3, "every step by reference written out");
        drop((k0, k1));
        p.stop();
    }

    /// A failed call's steps by reference that the socket has not taken yet are copied when
    /// the call lets go of its buffers: what the peer gets is what the call sent, whatever
    /// the caller writes into its buffer afterwards.
    #[test]
    fn a_failed_calls_steps_by_reference_are_copied_before_it_returns() {
        let frame = 48 << 20; // more than both sockets' buffers hold
        let layout = Layout { nranks: 2, nchannels: 1, slot_bytes: [frame, 8 << 10, 32 << 10], ll128_flag: 7 };
        let shadow = HostMemory::zeroed(layout.segment_bytes()).unwrap();
        let tx: Conn = layout.end(shadow.ptr(), 0, Edge::Ring, 1);
        let (out, mut inc) = sockets(1, None);
        let mut side = SendSide::new(Link { peer: 1, chan: 0, edge: Edge::Ring }, tx, out);
        let mut src = pattern(3, frame);
        // SAFETY: a fresh FIFO's slot is free; it holds the address of `frame` bytes.
        unsafe {
            *(slot_ptr(&tx, 0, 0) as *mut *const u8) = src.as_ptr();
            *tx.sizes.add(slot(0)) = frame as u64 | SIZE_REF;
        }
        atomic(tx.tail).store(1, Ordering::Release);
        while side.pump().unwrap() {}
        assert!(!side.flushed(), "the socket took the whole frame at once");
        side.release();
        src.iter_mut().for_each(|b| *b = !*b);
        let mut reader = inc.pop().unwrap().stream;
        let got = std::thread::spawn(move || {
            use std::io::Read;
            let mut got = vec![0u8; FRAME_HEADER + frame];
            reader.set_nonblocking(false).unwrap();
            reader.read_exact(&mut got).unwrap();
            got
        });
        let end = Instant::now() + Duration::from_secs(30);
        while !side.flushed() {
            assert!(Instant::now() < end, "the frame never went out");
            side.socks[0].writable = true;
            side.pump().unwrap();
            std::thread::yield_now();
        }
        let got = got.join().unwrap();
        assert!(got[FRAME_HEADER..] == pattern(3, frame)[..], "the peer got the caller's later bytes");
    }
}
