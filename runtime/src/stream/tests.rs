//! What a launch holds (its buffers, its communicator) is released by the `synchronize`
//! that waited for it, whoever ran it: the caller itself (a blocking call, or a batch) or
//! the stream's thread; and the ring of slots wraps around either way. A caller that
//! fills the ring runs the queued launches itself only where it shares the rank's one CPU,
//! and what it leaves queued still runs without a synchronize.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use jitccl_codegen::Protocol;

use super::launch::Owner;
use super::{KernelCall, Launch, OnCaller, DEPTH};
use crate::device::{CtaPool, Device, KernelRef};
use crate::error::Result;

/// An owner that counts its launches, and those that ran on the thread that made it (and
/// where the last of those ended: its index in the stream, plus one); each launch the
/// stream's thread runs takes `slow`.
struct Counting {
    on_caller: OnCaller,
    runs: AtomicUsize,
    caller: ThreadId,
    caller_runs: AtomicUsize,
    caller_end: AtomicUsize,
    slow: Duration,
}

impl Counting {
    fn new(on_caller: OnCaller, slow: Duration) -> Arc<Counting> {
        let (runs, caller_runs, caller_end) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        let caller = std::thread::current().id();
        Arc::new(Counting { on_caller, runs, caller, caller_runs, caller_end, slow })
    }
}

impl Owner for Counting {
    fn run(&self, _: &mut KernelCall, _: &mut CtaPool) -> Result<()> {
        let on_caller = std::thread::current().id() == self.caller;
        if !on_caller && !self.slow.is_zero() {
            std::thread::sleep(self.slow);
        }
        // Launches run one at a time, in queue order: the count is the launch's index.
        let index = self.runs.fetch_add(1, SeqCst);
        if on_caller {
            self.caller_end.store(index + 1, SeqCst);
            self.caller_runs.fetch_add(1, SeqCst);
        }
        Ok(())
    }

    fn on_caller(&self) -> OnCaller {
        self.on_caller
    }
}

/// A launch of `owner` holding `keep` (shared with the asynchronous queue's tests).
pub(super) fn launch<O: Owner + 'static>(owner: &Arc<O>, keep: &Arc<()>) -> Launch {
    Launch {
        owner: NonNull::from(&**owner as &dyn Owner),
        call: KernelCall {
            kernel: KernelRef::Host(std::ptr::null()),
            // SAFETY: every field is a number or a pointer, for which zero is a value; the
            // owner above reads none of them.
            args: unsafe { std::mem::zeroed() },
            nchannels: 1,
            proto: Protocol::Simple,
            name: "test",
        },
        _keep: [Some(keep.clone()), None],
        _direct: None,
        _comm: owner.clone(),
    }
}

#[test]
fn synchronize_releases_what_its_launches_held_whoever_ran_them() {
    for on_caller in [OnCaller::Allowed, OnCaller::Never] {
        let stream = Device::host(0).stream().unwrap();
        let owner = Counting::new(on_caller, Duration::ZERO);
        let keep = Arc::new(());
        let total = 3 * DEPTH as usize;
        for i in 1..=total {
            stream.enqueue(launch(&owner, &keep));
            // Blocking calls for the first lap of the ring, then batches of 7.
            if i <= DEPTH as usize || i % 7 == 0 || i == total {
                stream.synchronize().unwrap();
                assert_eq!(owner.runs.load(SeqCst), i, "on the caller: {on_caller:?}");
                let held = Arc::strong_count(&keep) - 1;
                assert_eq!(held, 0, "on the caller: {on_caller:?}: launches up to {i} still hold their buffers");
                assert_eq!(Arc::strong_count(&owner), 1, "on the caller: {on_caller:?}: and their owner");
            }
        }
    }
}

#[test]
fn a_caller_that_fills_the_ring_runs_its_launches_only_on_the_ranks_one_cpu() {
    // The stream's thread runs launches slower than the caller queues them, so the ring fills.
    for on_caller in [OnCaller::SameCpu, OnCaller::Allowed, OnCaller::Never] {
        let stream = Device::host(0).stream().unwrap();
        let owner = Counting::new(on_caller, Duration::from_micros(50));
        let keep = Arc::new(());
        let total = 2 * DEPTH as usize + 10;
        for _ in 0..total {
            stream.enqueue(launch(&owner, &keep));
        }
        let by_caller = owner.caller_runs.load(SeqCst);
        match on_caller {
            OnCaller::SameCpu => assert!(by_caller >= DEPTH as usize / 2, "the caller ran {by_caller} launches"),
            _ => assert_eq!(by_caller, 0, "{on_caller:?}: the caller waited for the stream's thread"),
        }
        // What the caller left queued runs without a synchronize (the dozing stream thread
        // takes it: within DEFER_MAX + DEFER once it stays unstarted).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stream.is_idle() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(owner.runs.load(SeqCst), total, "{on_caller:?}: queued launches left unrun");
        assert_eq!(owner.caller_runs.load(SeqCst), by_caller, "{on_caller:?}: run by the caller after it stopped");
        stream.synchronize().unwrap();
        assert_eq!(Arc::strong_count(&keep), 1, "{on_caller:?}: launches still hold their buffers");
    }
}

#[test]
fn a_caller_that_fills_the_ring_stops_running_at_a_multiple_of_its_depth() {
    // Ranks whose streams carry the same launches then switch between queuing and running
    // at the same launch, whatever the stream's thread ran before; a batch boundary that
    // differs between two ranks makes each wait for the other's queuing (see
    // `Shared::run_when_full`).
    let stream = Device::host(0).stream().unwrap();
    let owner = Counting::new(OnCaller::SameCpu, Duration::from_micros(50));
    let keep = Arc::new(());
    // An odd start, and the stream's thread awake and running the first launches.
    for _ in 0..10 {
        stream.enqueue(launch(&owner, &keep));
    }
    stream.synchronize().unwrap();
    // Until the caller has taken over twice: on a loaded machine the stream's thread may
    // keep the ring from filling for a while, or hold it when the caller looks.
    let (mut ends, mut queued) = (Vec::new(), 0);
    while queued < 64 * DEPTH && (queued < 4 * DEPTH || ends.len() < 2) {
        let before = owner.caller_end.load(SeqCst);
        stream.enqueue(launch(&owner, &keep));
        queued += 1;
        let end = owner.caller_end.load(SeqCst);
        if end != before {
            ends.push(end);
        }
    }
    stream.synchronize().unwrap();
    assert_eq!(owner.runs.load(SeqCst), 10 + queued as usize, "launches left unrun");
    assert!(ends.len() >= 2, "the caller ran launches only at {ends:?}");
    assert!(ends.iter().all(|e| e % DEPTH as usize == 0), "the caller's runs ended after launches {ends:?}");
}
