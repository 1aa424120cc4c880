//! What asynchronous launches need beside the stream: events (a launch's completion, seen
//! without a host synchronize), the order of one communicator's kernels across streams,
//! and CUDA graphs captured from a stream.

use std::sync::Arc;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::{driver, CudaStream, Gpu};
use crate::error::{Error, Result};

/// A CUDA event without timing (the cheapest kind to record and query). Events are
/// reused: a dropped one goes back to its GPU's spares (see `Gpu::spare_events`), so that
/// a launch costs no event creation.
pub(crate) struct Event {
    gpu: Arc<Gpu>,
    ev: sys::CUevent,
}

// SAFETY: an event handle may be used from any thread with its context current.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

/// Spare events kept per GPU at most (more are destroyed).
const SPARES: usize = 4096;

impl Event {
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Result<Event> {
        if let Some(ev) = gpu.spare_events.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(Event { gpu: gpu.clone(), ev: ev as sys::CUevent });
        }
        gpu.bind()?;
        let ev = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(driver(format_args!("creating an event on cuda:{}", gpu.ordinal)))?;
        Ok(Event { gpu: gpu.clone(), ev })
    }

    /// Marks the point of `s` reached by what is queued on it now.
    pub(crate) fn record(&self, s: &CudaStream) -> Result<()> {
        // SAFETY: an event and a stream of this context (bound by the caller's launch).
        unsafe { cu::event::record(self.ev, s.raw()) }.map_err(driver("recording an event"))
    }

    /// Whether the work before the last record has finished (a never-recorded event has).
    pub(crate) fn done(&self) -> Result<bool> {
        self.gpu.bind()?;
        // SAFETY: an event of this context.
        match unsafe { cu::event::query(self.ev) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(Error::Device(format!("CUDA: asking whether a launch finished: {e}"))),
        }
    }

    /// Makes what is queued on `s` from now on wait for this event's point.
    fn wait_on(&self, s: &CudaStream) -> Result<()> {
        // SAFETY: an event and a stream of this context.
        unsafe { cu::stream::wait_event(s.raw(), self.ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
            .map_err(driver("ordering a stream after another"))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // A spare may still be pending: its next record replaces the point it marks.
        let mut spares = self.gpu.spare_events.lock().unwrap_or_else(|e| e.into_inner());
        if spares.len() < SPARES {
            spares.push(self.ev as usize);
        } else if self.gpu.bind().is_ok() {
            // SAFETY: created in `new`; the driver releases a pending event once it completes.
            let _ = unsafe { cu::event::destroy(self.ev) };
        }
    }
}

/// One communicator's kernels run one at a time (they share its connectors' state): on one
/// stream the stream orders them, and a launch on another stream than the last one first
/// waits for the last one's end, on the GPU.
#[derive(Default)]
pub(crate) struct LaunchOrder {
    /// The stream of the last launch, and the event recorded after it.
    last: Option<(usize, Arc<Event>)>,
}

impl LaunchOrder {
    /// Orders what is queued on `s` next after this communicator's last launch.
    pub(crate) fn before(&self, s: &CudaStream, capturing: bool) -> Result<()> {
        match &self.last {
            Some((raw, ev)) if *raw != s.raw() as usize => {
                if capturing {
                    // A captured stream may not wait for an event recorded outside the capture.
                    return Err(Error::Unsupported(
                        "a captured call on another stream than the communicator's previous call: capture on the \
                         stream its eager calls use"
                            .into(),
                    ));
                }
                ev.wait_on(s)
            }
            _ => Ok(()),
        }
    }

    /// Notes the launch just queued on `s`, and `done`, recorded after it. (A captured
    /// launch is not noted: an event recorded while capturing cannot be waited for
    /// outside the capture.)
    pub(crate) fn after(&mut self, s: &CudaStream, done: Arc<Event>) {
        self.last = Some((s.raw() as usize, done));
    }
}

/// A CUDA graph captured from a stream, instantiated: replayed by `launch`.
pub(crate) struct Graph {
    gpu: Arc<Gpu>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: graph handles may be used from any thread with their context current.
unsafe impl Send for Graph {}
unsafe impl Sync for Graph {}

impl Graph {
    /// Starts capturing what is queued on `s` (relaxed mode: jitccl's own calls on other
    /// threads, such as another rank's launch, stay allowed meanwhile).
    pub(crate) fn begin(s: &CudaStream) -> Result<()> {
        s.gpu().bind()?;
        // SAFETY: a stream of this context.
        unsafe { cu::stream::begin_capture(s.raw(), sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }
            .map_err(driver("beginning a graph capture"))
    }

    /// Ends the capture begun on `s` and instantiates what it captured.
    pub(crate) fn end(s: &CudaStream) -> Result<Graph> {
        let gpu = s.gpu().clone();
        gpu.bind()?;
        // SAFETY: a stream of this context, capturing.
        let graph = unsafe { cu::stream::end_capture(s.raw()) }.map_err(driver("ending a graph capture"))?;
        // SAFETY: the graph just captured.
        match unsafe { cu::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(Graph { gpu, graph, exec }),
            Err(e) => {
                // SAFETY: as above, used by nothing else.
                let _ = unsafe { cu::graph::destroy(graph) };
                Err(Error::Device(format!("CUDA: instantiating a captured graph: {e}")))
            }
        }
    }

    /// An event of the graph's context, to mark where its replays end.
    pub(crate) fn event(&self) -> Result<Event> {
        Event::new(&self.gpu)
    }

    /// Queues one replay of the graph on `s`.
    pub(crate) fn launch(&self, s: &CudaStream) -> Result<()> {
        self.gpu.bind()?;
        // SAFETY: an instantiated graph and a stream of its context.
        unsafe { cu::graph::launch(self.exec, s.raw()) }.map_err(driver("launching a graph"))
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: made in `end`; the driver finishes queued replays before it frees them.
            unsafe {
                let _ = cu::graph::exec_destroy(self.exec);
                let _ = cu::graph::destroy(self.graph);
            }
        }
    }
}
