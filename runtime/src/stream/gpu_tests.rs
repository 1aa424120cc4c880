//! The asynchronous queue's bookkeeping, with an owner whose "GPU" is a flag per launch:
//! launches retire in order once finished (not before), releasing what they hold; a
//! failure is returned by the next synchronize; a launch past its bound is declared hung
//! once, and a wait on one that still does not end gives up a bound later; points of the
//! queue (a process group's works) are passed in order and learn of failures before them,
//! from a watched point on.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::gpu::{Completion, GpuQueue};
use super::launch::Owner;
use super::tests::launch;
use super::{KernelCall, OnCaller, Started};
use crate::device::CtaPool;
use crate::error::{Error, Result};

struct Flag(Arc<AtomicBool>);

impl Completion for Flag {
    fn done(&self) -> Result<bool> {
        Ok(self.0.load(SeqCst))
    }
}

/// Each launch's completion flag, in start order; launch `fail_at` ends with an error.
struct FakeGpu {
    flags: Mutex<Vec<Arc<AtomicBool>>>,
    finished: AtomicUsize,
    hung: AtomicUsize,
    fail_at: Option<usize>,
    bound: Duration,
}

impl FakeGpu {
    fn new(fail_at: Option<usize>, bound: Duration) -> Arc<FakeGpu> {
        Arc::new(FakeGpu {
            flags: Mutex::default(),
            finished: AtomicUsize::new(0),
            hung: AtomicUsize::new(0),
            fail_at,
            bound,
        })
    }

    fn end(&self, i: usize) {
        self.flags.lock().unwrap()[i].store(true, SeqCst);
    }
}

impl Owner for FakeGpu {
    fn run(&self, _: &mut KernelCall, _: &mut CtaPool) -> Result<()> {
        Err(Error::Internal("a GPU queue never runs launches through the ring".into()))
    }

    fn on_caller(&self) -> OnCaller {
        OnCaller::Allowed
    }

    fn start(&self, _: &mut KernelCall, _: &CtaPool) -> Result<Started> {
        let flag = Arc::new(AtomicBool::new(false));
        self.flags.lock().unwrap().push(flag.clone());
        Ok(Started::Queued(Box::new(Flag(flag))))
    }

    fn finish(&self, _: &KernelCall, hung: bool) -> Result<()> {
        if hung {
            self.hung.fetch_add(1, SeqCst);
            return Err(Error::Internal("hung".into()));
        }
        let i = self.finished.fetch_add(1, SeqCst);
        match self.fail_at {
            Some(f) if f == i => Err(Error::Internal(format!("launch {i} failed"))),
            _ => Ok(()),
        }
    }

    fn bound(&self) -> Duration {
        self.bound
    }
}

fn queue() -> GpuQueue {
    GpuQueue::new(CtaPool::Host(Default::default()))
}

#[test]
fn launches_retire_in_order_once_finished_and_release_what_they_hold() {
    let (q, gpu, keep) = (queue(), FakeGpu::new(None, Duration::from_secs(60)), Arc::new(()));
    for _ in 0..5 {
        q.launch(launch(&gpu, &keep)).unwrap();
    }
    assert!(!q.is_idle());
    assert_eq!(Arc::strong_count(&keep), 6, "nothing finished yet, all five hold their buffers");
    // The third finishing first retires nothing: launches end in order on one stream, and
    // the first two still run.
    gpu.end(2);
    assert!(!q.is_idle());
    assert_eq!(gpu.finished.load(SeqCst), 0);
    gpu.end(0);
    gpu.end(1);
    assert!(!q.is_idle());
    assert_eq!(gpu.finished.load(SeqCst), 3, "the first three retire, in order");
    assert_eq!(Arc::strong_count(&keep), 3);
    // A synchronize waits for the rest (ended from another thread meanwhile).
    let g = gpu.clone();
    let ender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        g.end(3);
        g.end(4);
    });
    assert!(q.synchronize(None).unwrap());
    ender.join().unwrap();
    assert!(q.is_idle());
    assert_eq!(gpu.finished.load(SeqCst), 5);
    assert_eq!(Arc::strong_count(&keep), 1, "finished launches still hold their buffers");
}

#[test]
fn a_failed_launch_is_returned_by_the_next_synchronize_only() {
    let (q, gpu, keep) = (queue(), FakeGpu::new(Some(1), Duration::from_secs(60)), Arc::new(()));
    for i in 0..3 {
        q.launch(launch(&gpu, &keep)).unwrap();
        gpu.end(i);
    }
    let e = q.synchronize(None).expect_err("launch 1 failed").to_string();
    assert!(e.contains("launch 1 failed"), "{e}");
    assert_eq!(Arc::strong_count(&keep), 1);
    q.synchronize(None).expect("the failure was returned once");
}

#[test]
fn a_synchronize_with_a_deadline_gives_up_at_it() {
    let (q, gpu, keep) = (queue(), FakeGpu::new(None, Duration::from_secs(60)), Arc::new(()));
    q.launch(launch(&gpu, &keep)).unwrap();
    let t0 = Instant::now();
    assert!(!q.synchronize(Some(t0 + Duration::from_millis(30))).unwrap());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(Arc::strong_count(&keep), 2, "an unfinished launch keeps its buffers");
    gpu.end(0);
    assert!(q.synchronize(None).unwrap());
}

#[test]
fn a_launch_past_its_bound_is_declared_hung_once_and_a_wait_on_it_ends() {
    let bound = Duration::from_millis(50);
    let (q, gpu, keep) = (queue(), FakeGpu::new(None, bound), Arc::new(()));
    q.launch(launch(&gpu, &keep)).unwrap();
    let t0 = Instant::now();
    let e = q.synchronize(None).expect_err("the launch never ends").to_string();
    assert!(e.contains("hung"), "{e}");
    assert!(t0.elapsed() >= 2 * bound && t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(gpu.hung.load(SeqCst), 1, "declared hung once");
    // Its memory is still the kernel's until it ends (as its abort makes it do), and a
    // later wait on it ends with an error too, never a success.
    assert_eq!(Arc::strong_count(&keep), 2);
    let e = q.synchronize(None).expect_err("still not ended").to_string();
    assert!(e.contains("still not ended") && e.contains("test"), "{e}");
    assert_eq!(gpu.hung.load(SeqCst), 1, "declared hung once");
    gpu.end(0);
    q.synchronize(None).unwrap();
    assert_eq!(Arc::strong_count(&keep), 1);
}

#[test]
fn points_of_the_queue_are_passed_in_order_and_keep_the_failures_before_them() {
    let (q, gpu, keep) = (queue(), FakeGpu::new(Some(1), Duration::from_secs(60)), Arc::new(()));
    let mut marks = Vec::new();
    for _ in 0..3 {
        q.launch(launch(&gpu, &keep)).unwrap();
        marks.push(q.queued());
    }
    assert_eq!(marks, [1, 2, 3]);
    assert!(!q.passed(1) && !q.wait_for(1, Some(Instant::now() + Duration::from_millis(20))));
    gpu.end(0);
    assert!(q.passed(1) && !q.passed(2));
    assert!(q.failure_between(0, 1).is_none());
    gpu.end(1);
    gpu.end(2);
    assert!(q.wait_for(3, None));
    assert!(q.failure_between(0, 1).is_none(), "the point before the failed launch is clean");
    let e = q.failure_between(0, 2).expect("launch 1 failed before point 2").to_string();
    assert!(e.contains("launch 1 failed"), "{e}");
    // Unlike synchronize's error, it stays for every later point, but not for a point
    // watched after it (a process group made later on the stream).
    assert!(q.synchronize(None).is_err());
    assert!(q.failure_between(0, 3).is_some());
    let from = q.watch();
    q.launch(launch(&gpu, &keep)).unwrap();
    gpu.end(3);
    assert!(q.wait_for(4, None));
    assert!(q.failure_between(from, 4).is_none());
}
