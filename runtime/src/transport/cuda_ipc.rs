//! CUDA IPC: ranks of separate processes of one machine, on GPUs. Beside its shared-memory
//! segment, a GPU rank has a device segment of the same layout: the FIFOs its CUDA IPC
//! peers send into are there, in its GPU's memory. It exports that segment as an IPC handle
//! in its endpoint; a peer process opens the handle in its own context and closes it when
//! the communicator goes. The shared-memory segment keeps what the host polls and writes
//! (the failure board) and the FIFOs the net proxy fills, page-locked and mapped into the
//! GPU so that kernels reach them too. Ranks of one process (threads calling `init_rank`)
//! cannot open each other's handles: they use the device address, with peer access.
//!
//! Several processes may share one GPU (NCCL refuses it): allowed with a warning, so that
//! every kernel can be tested on one GPU. Without MPS the GPU time-slices the processes'
//! contexts, so a kernel waiting for a peer's waits for the next slice: correct, and every
//! wait is bounded, but slow.

use crate::device::{Device, Gpu, HostRegistration, IpcHandle, IpcMapping, Memory};
use crate::error::{Error, Result};
use crate::transport::layout::Layout;
use crate::transport::shm::{Shm, ShmSegment};
use crate::transport::{AttachCtx, Attached, Endpoint, Transport};

/// GPU ranks on one host: the peer's device FIFOs opened through its IPC handle.
pub(crate) struct CudaIpc;

/// What a rank on a GPU tells its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CudaEnd {
    /// Its device in its own process (for peers of the same process).
    pub ordinal: usize,
    /// Its GPU's PCI address: the same in every process of the machine.
    pub busid: String,
    /// Its device segment's address in its own process.
    pub ptr: u64,
    /// Its device segment, for peers in other processes.
    pub handle: IpcHandle,
}

impl CudaEnd {
    /// The wire form: ordinal, bus id, address (hex) and handle (hex), comma-separated.
    pub(crate) fn encode(&self) -> String {
        format!("{},{},{:x},{}", self.ordinal, self.busid, self.ptr, self.handle.encode())
    }

    pub(crate) fn decode(s: &str) -> std::result::Result<CudaEnd, String> {
        let f: Vec<&str> = s.split(',').collect();
        let [ordinal, busid, ptr, handle] = f[..] else {
            return Err(format!("a GPU endpoint of {} field(s), 4 expected", f.len()));
        };
        let ordinal = ordinal.parse().map_err(|_| format!("a GPU ordinal '{ordinal}'"))?;
        let ptr = u64::from_str_radix(ptr, 16).map_err(|_| format!("a device address '{ptr}'"))?;
        Ok(CudaEnd { ordinal, busid: busid.to_string(), ptr, handle: IpcHandle::decode(handle)? })
    }
}

impl Transport for CudaIpc {
    fn name(&self) -> &'static str {
        "cuda_ipc"
    }

    fn can_connect(&self, me: &Endpoint, peer: &Endpoint) -> Option<&'static str> {
        let gpus = me.cuda.is_some() && peer.cuda.is_some();
        (gpus && me.host == peer.host && !me.net_only && !peer.net_only).then_some("same host, GPUs: CUDA IPC")
    }

    fn attach(&self, ctx: &AttachCtx, peer: usize) -> Result<Attached> {
        let missing =
            || Error::Internal(format!("rank {}: CUDA IPC to rank {peer} without a GPU on both ends", ctx.rank));
        let end = ctx.endpoints[peer].cuda.as_ref().ok_or_else(missing)?;
        let gpu = ctx.device.gpu()?.ok_or_else(missing)?;
        if ctx.endpoints[peer].pid == std::process::id() {
            gpu.enable_peer_access(&*Gpu::get(end.ordinal)?)?;
            return Ok((end.ptr as *mut u8, None));
        }
        let what = format!("rank {}: rank {peer}'s FIFOs on the GPU at {}", ctx.rank, end.busid);
        let mapping = IpcMapping::open(&gpu, &end.handle, &what)?;
        Ok((mapping.ptr(), Some(Box::new(mapping))))
    }

    /// The peer's board is in its shared-memory segment, which the host can write.
    fn attach_board(&self, ctx: &AttachCtx, peer: usize) -> Result<Option<Attached>> {
        Shm.attach(ctx, peer).map(Some)
    }

    fn receives_in_device(&self) -> bool {
        true
    }
}

/// A GPU rank's device FIFOs (exported for its CUDA IPC peers), and its shared-memory
/// segment page-locked and mapped into the GPU while this lives.
pub(crate) struct DeviceSegment {
    /// Unregistered on drop, before the communicator unmaps the shared segment.
    _host: HostRegistration,
    fifos: Memory,
    end: CudaEnd,
}

impl DeviceSegment {
    /// `rank`'s device segment when `device` is a GPU (None on the host target); `host` is
    /// its shared-memory segment of the same layout.
    pub(crate) fn new(rank: usize, device: &Device, layout: &Layout, host: &ShmSegment) -> Result<Option<Self>> {
        let Some(gpu) = device.gpu()? else { return Ok(None) };
        let bytes = layout.segment_bytes();
        let _host = HostRegistration::new(&gpu, host.ptr(), bytes)?;
        let fifos = Memory::zeroed(device, bytes, true)?;
        let end = CudaEnd {
            ordinal: gpu.ordinal,
            busid: gpu.busid.clone(),
            ptr: fifos.ptr() as u64,
            handle: fifos.ipc_handle()?,
        };
        tracing::info!("rank {rank}: {gpu:?}: {bytes} B of FIFOs in device memory, exported for CUDA IPC");
        Ok(Some(DeviceSegment { _host, fifos, end }))
    }

    pub(crate) fn end(&self) -> CudaEnd {
        self.end.clone()
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.fifos.ptr()
    }
}

/// Checks `rank`'s device before any rendezvous: a GPU it cannot use (no driver, no such
/// device) is an error naming the rank, not a wait for peers.
pub(crate) fn check_device(rank: usize, device: &Device) -> Result<()> {
    device.gpu().map(drop).map_err(|e| match e {
        Error::Unsupported(m) => Error::Unsupported(format!("rank {rank}: {m}")),
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("rank {rank}: {m}")),
        e => e,
    })
}

/// Checks that the ranks are all on GPUs or all on the host (the kernels of one
/// communicator are of one target), and warns, once, when processes share a GPU.
pub(crate) fn check_targets(rank: usize, endpoints: &[Endpoint]) -> Result<()> {
    let me = &endpoints[rank];
    let target = |e: &Endpoint| if e.cuda.is_some() { "a GPU" } else { "the host" };
    if let Some(q) = endpoints.iter().position(|e| e.cuda.is_some() != me.cuda.is_some()) {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is on {} but rank {q} on {}: the ranks of one communicator must all be on host or all on CUDA devices",
            target(me),
            target(&endpoints[q])
        )));
    }
    let Some(mine) = &me.cuda else { return Ok(()) };
    let on_my_gpu = |e: &Endpoint| e.host == me.host && e.cuda.as_ref().is_some_and(|c| c.busid == mine.busid);
    let sharing: Vec<usize> = (0..endpoints.len()).filter(|&q| on_my_gpu(&endpoints[q])).collect();
    if sharing.len() > 1 && sharing[0] == rank {
        tracing::warn!(
            "rank processes {sharing:?} share the GPU at {}: allowed for testing, but without MPS the GPU time-slices them, so their collectives are slow",
            mine.busid
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::pick_agreed;

    fn end(busid: &str) -> CudaEnd {
        let handle = IpcHandle::decode(&"5a".repeat(64)).unwrap();
        CudaEnd { ordinal: 1, busid: busid.into(), ptr: 0x7f00_dead_b000, handle }
    }

    fn ep(host: &str, pid: u32, cuda: Option<CudaEnd>, net_only: bool) -> Endpoint {
        Endpoint { host: host.into(), group: None, segment: format!("jitccl-{pid}-0-0"), net_only, pid, cuda }
    }

    #[test]
    fn a_gpu_endpoint_round_trips_and_a_malformed_one_is_refused_saying_why() {
        let e = ep("h/ns", 42, Some(end("0000:17:00.0")), false);
        assert_eq!(Endpoint::decode(1, &e.encode()).unwrap(), e);
        let wire = end("0000:17:00.0").encode();
        assert_eq!(CudaEnd::decode(&wire), Ok(end("0000:17:00.0")));
        let short = CudaEnd::decode(&wire[..wire.len() - 2]).unwrap_err();
        assert!(short.contains("126 hex digits, 128 expected"), "{short}");
        assert!(CudaEnd::decode("1,0000:17:00.0,zz,00").unwrap_err().contains("device address 'zz'"));
        assert!(CudaEnd::decode("1,2").unwrap_err().contains("2 field(s), 4 expected"));
        let mut bytes = e.encode();
        bytes.truncate(bytes.len() - 10);
        let err = Endpoint::decode(5, &bytes).unwrap_err().to_string();
        assert!(err.contains("rank 5 sent a malformed endpoint") && err.contains("hex digits"), "{err}");
    }

    #[test]
    fn gpus_of_one_host_use_cuda_ipc_and_others_shm_or_net_alike_on_both_ends() {
        let pick = pick_agreed;
        let gpu = |host, pid, bus| ep(host, pid, Some(end(bus)), false);
        assert_eq!(pick(&gpu("h", 1, "0000:17:00.0"), &gpu("h", 2, "0000:17:00.0")), "cuda_ipc", "one GPU shared");
        assert_eq!(pick(&gpu("h", 1, "0000:17:00.0"), &gpu("h", 2, "0000:65:00.0")), "cuda_ipc");
        assert_eq!(pick(&gpu("h", 1, "0000:17:00.0"), &gpu("other", 2, "0000:17:00.0")), "net");
        let forced = ep("h", 1, Some(end("0000:17:00.0")), true);
        assert_eq!(pick(&forced, &gpu("h", 2, "0000:17:00.0")), "net", "JITCCL_TRANSPORT=net");
        assert_eq!(pick(&ep("h", 1, None, false), &ep("h", 2, None, false)), "shm");
        assert!(CudaIpc.receives_in_device() && !Shm.receives_in_device());
    }

    #[test]
    fn a_communicator_mixing_gpus_and_host_is_refused_naming_both_ranks() {
        let eps = [ep("h", 1, Some(end("0000:17:00.0")), false), ep("h", 2, None, false)];
        let e = check_targets(0, &eps).unwrap_err().to_string();
        assert!(e.contains("rank 0 is on a GPU but rank 1 on the host"), "{e}");
        let e = check_targets(1, &eps).unwrap_err().to_string();
        assert!(e.contains("rank 1 is on the host but rank 0 on a GPU"), "{e}");
        let shared = [ep("h", 1, Some(end("0000:17:00.0")), false), ep("h", 2, Some(end("0000:17:00.0")), false)];
        assert!(check_targets(0, &shared).is_ok() && check_targets(1, &shared).is_ok(), "one GPU may be shared");
    }

    #[test]
    fn without_a_driver_a_gpu_rank_is_refused_naming_it_and_the_driver() {
        if crate::device::cuda_device_count().is_ok() {
            return; // a GPU machine: tests/cuda.rs runs process ranks there
        }
        let e = check_device(3, &Device::Cuda { ordinal: 0 }).unwrap_err().to_string();
        assert!(e.contains("rank 3") && e.contains("CUDA device 0") && e.contains("libcuda.so"), "{e}");
        assert!(check_device(3, &Device::host(0)).is_ok());
    }
}
