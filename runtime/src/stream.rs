//! Streams: ordered, asynchronous work queues. On the host a stream is a dispatcher thread
//! with persistent CTA worker threads: a kernel launch hands CTA 0 to the dispatcher itself
//! and CTA i > 0 to worker i, so no thread is spawned per launch.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::device::Device;
use crate::error::{Error, Result};

/// One CTA's body: takes the CTA index, returns its status code.
pub(crate) type Cta = Arc<dyn Fn(usize) -> i32 + Send + Sync>;
/// A queued operation; it runs its CTAs through the pool.
pub(crate) type Task = Box<dyn FnOnce(&mut CtaPool) -> Result<()> + Send>;

#[derive(Default)]
struct State {
    pending: usize,
    error: Option<Error>,
}

struct Shared {
    state: Mutex<State>,
    done: Condvar,
}

/// An ordered queue of operations on a device (cf. a CUDA stream).
#[derive(Clone)]
pub struct Stream {
    device: Device,
    tx: mpsc::Sender<Task>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream on {:?}", self.device)
    }
}

impl Stream {
    pub(crate) fn new(device: Device) -> Result<Stream> {
        let (tx, rx) = mpsc::channel::<Task>();
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), done: Condvar::new() });
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("jitccl-stream".into())
            .spawn(move || {
                let mut pool = CtaPool { workers: Vec::new() };
                for task in rx {
                    let res = task(&mut pool);
                    let mut st = sh.state.lock().unwrap_or_else(|e| e.into_inner());
                    if let Err(e) = res {
                        tracing::warn!("stream operation failed: {e}");
                        st.error.get_or_insert(e);
                    }
                    st.pending -= 1;
                    // Waiters only care about an empty queue: waking them per task costs
                    // a context switch per operation on busy cores.
                    if st.pending == 0 {
                        sh.done.notify_all();
                    }
                }
            })
            .map_err(|e| Error::System { context: "starting a stream thread".into(), source: e })?;
        Ok(Stream { device, tx, shared })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn enqueue(&self, task: Task) -> Result<()> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).pending += 1;
        self.tx.send(task).map_err(|_| Error::Internal("stream thread is gone".into()))
    }

    /// Waits for every queued operation; returns the first error since the last call.
    /// Operations end by themselves (every kernel wait is bounded), so this returns.
    pub fn synchronize(&self) -> Result<()> {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.pending > 0 {
            st = self.shared.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.error.take().map_or(Ok(()), Err)
    }

    /// Like [`Stream::synchronize`], giving up after `timeout` with `Ok(false)`.
    pub fn synchronize_timeout(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            st = self.shared.done.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        st.error.take().map_or(Ok(true), Err)
    }

    /// Whether all queued work has finished.
    pub fn is_idle(&self) -> bool {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).pending == 0
    }
}

struct Latch {
    left: Mutex<(usize, Vec<i32>)>,
    done: Condvar,
}

struct Worker {
    tx: mpsc::Sender<(Cta, usize, Arc<Latch>)>,
}

/// The stream's CTA worker threads, grown on demand.
pub(crate) struct CtaPool {
    workers: Vec<Worker>,
}

impl CtaPool {
    /// Runs `ncta` CTAs concurrently, CTA 0 on the calling thread; returns their codes.
    pub(crate) fn run(&mut self, ncta: usize, cta: Cta) -> Result<Vec<i32>> {
        while self.workers.len() + 1 < ncta {
            let (tx, rx) = mpsc::channel::<(Cta, usize, Arc<Latch>)>();
            std::thread::Builder::new()
                .name(format!("jitccl-cta{}", self.workers.len() + 1))
                .spawn(move || {
                    for (f, i, latch) in rx {
                        let code = f(i);
                        let mut l = latch.left.lock().unwrap_or_else(|e| e.into_inner());
                        l.1[i] = code;
                        l.0 -= 1;
                        latch.done.notify_all();
                    }
                })
                .map_err(|e| Error::System { context: "starting a CTA thread".into(), source: e })?;
            self.workers.push(Worker { tx });
        }
        let latch = Arc::new(Latch { left: Mutex::new((ncta.saturating_sub(1), vec![0; ncta])), done: Condvar::new() });
        for i in 1..ncta {
            self.workers[i - 1]
                .tx
                .send((cta.clone(), i, latch.clone()))
                .map_err(|_| Error::Internal("CTA worker is gone".into()))?;
        }
        let first = if ncta > 0 { cta(0) } else { 0 };
        let mut l = latch.left.lock().unwrap_or_else(|e| e.into_inner());
        while l.0 > 0 {
            l = latch.done.wait(l).unwrap_or_else(|e| e.into_inner());
        }
        if ncta > 0 {
            l.1[0] = first;
        }
        Ok(std::mem::take(&mut l.1))
    }
}
