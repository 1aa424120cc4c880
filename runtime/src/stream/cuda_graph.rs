//! CUDA graphs of a stream's launches: between `Stream::begin_capture` and
//! `Stream::end_capture`, the collectives called on a CUDA stream are recorded, not run;
//! the graph then replays them (`CudaGraph::launch`), as nccl-tests' `-G` and PyTorch's CUDA
//! graphs do. Only asynchronous launches can be captured (not with `JITCCL_CUDA_SYNC=1`,
//! whose waits a capture forbids), and a captured call must be on the stream its
//! communicator's eager calls used (see `device::LaunchOrder`).

use std::sync::Arc;
use std::time::Duration;

use crate::device::{CudaEvent, CudaGraph as DeviceGraph};
use crate::error::{Error, Result};
use crate::stream::{Launch, Stream};

/// A captured, instantiated CUDA graph of collectives. It holds what its launches touch
/// (buffers, communicators) as long as it lives.
pub struct CudaGraph {
    graph: DeviceGraph,
    launches: Vec<Launch>,
    /// Recorded after each replay, so that the stream's `synchronize` waits for it.
    replayed: Arc<CudaEvent>,
}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaGraph")
    }
}

impl Stream {
    fn capture_queue(&self, what: &str) -> Result<&super::gpu::GpuQueue> {
        match &self.gpu {
            Some(q) => Ok(q),
            None if self.device().is_cuda() => Err(Error::Unsupported(format!(
                "{what}: CUDA graph capture needs asynchronous launches; JITCCL_CUDA_SYNC=1 waits for every launch, \
                 which a capture forbids"
            ))),
            None => Err(Error::Unsupported(format!(
                "{what}: CUDA graphs are for streams of CUDA devices, not {:?}",
                self.device()
            ))),
        }
    }

    /// Starts recording this stream's launches into a CUDA graph instead of running them.
    /// Launches queued before are waited for first (the capture must not start behind
    /// them, nor leave their completion unobserved).
    pub fn begin_capture(&self) -> Result<()> {
        let q = self.capture_queue("begin_capture")?;
        self.synchronize()?;
        // Kept from before the capture begins: a launch recorded into it is never missed.
        q.begin_captured();
        q.with_pool(|p| DeviceGraph::begin(p.cuda()?)).inspect_err(|_| drop(q.end_captured()))
    }

    /// Ends the capture begun by [`Stream::begin_capture`]: the graph of what was recorded.
    pub fn end_capture(&self) -> Result<CudaGraph> {
        let q = self.capture_queue("end_capture")?;
        let graph = q.with_pool(|p| DeviceGraph::end(p.cuda()?));
        let launches = q.end_captured();
        let graph = graph?;
        let replayed = Arc::new(graph.event()?);
        Ok(CudaGraph { graph, launches, replayed })
    }
}

impl CudaGraph {
    /// Queues one replay of the graph on `stream` (a stream of the graph's device);
    /// `stream.synchronize()` waits for it, then [`CudaGraph::check`] says how it ended.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        let q = stream.capture_queue("CudaGraph::launch")?;
        q.with_pool(|p| {
            let s = p.cuda()?;
            self.graph.launch(s)?;
            self.replayed.record(s)
        })?;
        // Each recorded collective's kernel ends within its owner's bound; so does the replay.
        let bound = self.launches.iter().map(|l| l.owner().bound()).sum::<Duration>();
        q.replayed(self.replayed.clone(), bound);
        Ok(())
    }

    /// How the replays waited for so far ended: the first failure of a recorded
    /// collective (its communicator then fails), as a synchronize reports an eager one's.
    pub fn check(&self) -> Result<()> {
        self.launches.iter().try_for_each(|l| l.owner().finish(&l.call, false))
    }

    /// How many collectives the graph replays.
    pub fn len(&self) -> usize {
        self.launches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.launches.is_empty()
    }
}
