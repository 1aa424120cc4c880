//! NCCL's tuner plugin tables, versions 2 to 6, laid out as C lays them out, and one
//! interface over all of them ([`Api`]): v6's, which the older tables are adapted to as
//! NCCL adapts them (v2 named its algorithm and protocol instead of editing a cost table;
//! v2 to v4 have no communicator id, NVLink domains or constants; only v6 sizes chunks).

use std::ffi::{c_char, c_int, c_void, CStr};

use super::costs::{CostTable, NUM_ALGOS, NUM_PROTOS};
use crate::plugin::logger::Logger;
use crate::plugin::Library;

/// `ncclResult_t`: 0 is success.
pub(super) type Status = c_int;
/// A plugin's per-communicator context.
pub(super) type Ctx = *mut c_void;

/// `ncclNvlDomainInfo_v5_t` (v6 the same).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct NvlDomains {
    pub count: c_int,
    pub min_ranks: c_int,
    pub max_ranks: c_int,
}

/// `ncclTunerConstants_v5_t` (v6 the same): NCCL's model constants, by algorithm,
/// protocol, link kind, GPU generation and node-count scale.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Constants {
    pub base_latencies: [[f64; NUM_PROTOS]; NUM_ALGOS],
    pub hw_latencies: [[[f64; NUM_PROTOS]; NUM_ALGOS]; 3],
    pub ll_max_bws: [[f64; 3]; 4],
    pub per_ch_max_ring_ll128_bws: [[f64; 3]; 4],
    pub per_ch_max_tree_ll128_bws: [[f64; 3]; 4],
    pub per_ch_max_tree_bws: [[f64; 3]; 4],
    pub per_ch_max_nvls_tree_bws: [[f64; 3]; 4],
}

type InitOld = unsafe extern "C" fn(n_ranks: usize, n_nodes: usize, log: Logger, ctx: *mut Ctx) -> Status;
type InitNew = unsafe extern "C" fn(
    ctx: *mut Ctx,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    log: Logger,
    nvl: *mut NvlDomains,
    constants: *mut Constants,
) -> Status;
type CollInfoV2 = unsafe extern "C" fn(
    ctx: Ctx,
    coll: c_int,
    n_bytes: usize,
    collnet_support: c_int,
    nvls_support: c_int,
    pipe_ops: c_int,
    algo: *mut c_int,
    proto: *mut c_int,
    n_channels: *mut c_int,
) -> Status;
type CollInfoV3 = unsafe extern "C" fn(
    ctx: Ctx,
    coll: c_int,
    n_bytes: usize,
    pipe_ops: c_int,
    table: *mut *mut f32,
    n_algo: c_int,
    n_proto: c_int,
    n_channels: *mut c_int,
) -> Status;
type CollInfo = unsafe extern "C" fn(
    ctx: Ctx,
    coll: c_int,
    n_bytes: usize,
    pipe_ops: c_int,
    table: *mut *mut f32,
    n_algo: c_int,
    n_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> Status;
type Finish = unsafe extern "C" fn(ctx: Ctx) -> Status;
type ChunkSize = unsafe extern "C" fn(
    ctx: Ctx,
    coll: c_int,
    n_bytes: usize,
    algo: c_int,
    proto: c_int,
    n_channels: c_int,
    chunk: *mut usize,
) -> Status;

/// `ncclTuner_v2_t` .. `ncclTuner_v6_t`, member for member. Every function may be null in
/// a broken library: they are checked when the table is found.
#[repr(C)]
pub(super) struct V2 {
    pub(super) name: *const c_char,
    pub(super) init: Option<InitOld>,
    pub(super) coll_info: Option<CollInfoV2>,
    pub(super) destroy: Option<Finish>,
}
#[repr(C)]
pub(super) struct V3 {
    pub(super) name: *const c_char,
    pub(super) init: Option<InitOld>,
    pub(super) coll_info: Option<CollInfoV3>,
    pub(super) destroy: Option<Finish>,
}
#[repr(C)]
pub(super) struct V4 {
    pub(super) name: *const c_char,
    pub(super) init: Option<InitOld>,
    pub(super) coll_info: Option<CollInfo>,
    pub(super) destroy: Option<Finish>,
}
#[repr(C)]
pub(super) struct V5 {
    pub(super) name: *const c_char,
    pub(super) init: Option<InitNew>,
    pub(super) coll_info: Option<CollInfo>,
    pub(super) finalize: Option<Finish>,
}
#[repr(C)]
pub(super) struct V6 {
    pub(super) name: *const c_char,
    pub(super) init: Option<InitNew>,
    pub(super) coll_info: Option<CollInfo>,
    pub(super) finalize: Option<Finish>,
    pub(super) chunk_size: Option<ChunkSize>,
}

/// The plugin's table, by version: what the rest of the tuner calls through.
#[derive(Clone, Copy)]
pub(super) enum Api {
    V2(&'static V2),
    V3(&'static V3),
    V4(&'static V4),
    V5(&'static V5),
    V6(&'static V6),
}

// SAFETY: the tables are constant data of a library that stays loaded for the life of the
// process; the functions they point to are called under the rules of NCCL's interface.
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

/// The symbols NCCL looks for, newest first.
pub(super) const SYMBOLS: [&str; 5] =
    ["ncclTunerPlugin_v6", "ncclTunerPlugin_v5", "ncclTunerPlugin_v4", "ncclTunerPlugin_v3", "ncclTunerPlugin_v2"];

/// `table[COLLNET_CHAIN][SIMPLE]` and the NVLS entries: what v2 was told as its
/// collNetSupport and nvlsSupport flags.
fn v2_support(t: &CostTable) -> (c_int, c_int) {
    use super::costs::{COLLNET_CHAIN, NVLS, NVLS_TREE, SIMPLE};
    let on = |a: usize| t[a][SIMPLE] >= 0.0;
    (on(COLLNET_CHAIN) as c_int, (on(NVLS) || on(NVLS_TREE)) as c_int)
}

impl Api {
    /// The newest table `lib` exports; an error names a table that lacks a function NCCL
    /// requires. `Ok(None)`: none of the symbols.
    pub fn find(lib: &Library) -> Result<Option<Api>, String> {
        for (i, sym) in SYMBOLS.iter().enumerate() {
            let Some(p) = lib.symbol(sym) else { continue };
            // SAFETY: the symbol's name promises this layout (NCCL's tuner interface); the
            // library stays loaded, so the reference lives as long as the process.
            let api = unsafe {
                match 6 - i {
                    6 => Api::V6(&*(p as *const V6)),
                    5 => Api::V5(&*(p as *const V5)),
                    4 => Api::V4(&*(p as *const V4)),
                    3 => Api::V3(&*(p as *const V3)),
                    _ => Api::V2(&*(p as *const V2)),
                }
            };
            let complete = match api {
                Api::V2(t) => t.init.is_some() && t.coll_info.is_some() && t.destroy.is_some(),
                Api::V3(t) => t.init.is_some() && t.coll_info.is_some() && t.destroy.is_some(),
                Api::V4(t) => t.init.is_some() && t.coll_info.is_some() && t.destroy.is_some(),
                Api::V5(t) => t.init.is_some() && t.coll_info.is_some() && t.finalize.is_some(),
                Api::V6(t) => t.init.is_some() && t.coll_info.is_some() && t.finalize.is_some(),
            };
            if !complete {
                return Err(format!("its {sym} lacks init, getCollInfo or finalize/destroy"));
            }
            return Ok(Some(api));
        }
        Ok(None)
    }

    pub fn version(self) -> u32 {
        match self {
            Api::V2(_) => 2,
            Api::V3(_) => 3,
            Api::V4(_) => 4,
            Api::V5(_) => 5,
            Api::V6(_) => 6,
        }
    }

    /// The plugin's own name for itself.
    pub fn name(self) -> String {
        let p = match self {
            Api::V2(t) => t.name,
            Api::V3(t) => t.name,
            Api::V4(t) => t.name,
            Api::V5(t) => t.name,
            Api::V6(t) => t.name,
        };
        if p.is_null() {
            return "(unnamed)".into();
        }
        // SAFETY: a plugin's name is a NUL-terminated string of the loaded library.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Starts a context for one communicator.
    ///
    /// # Safety
    /// Runs the plugin's code; `nvl` and `constants` are read and may be written by it.
    pub unsafe fn init(
        self, comm_id: u64, nranks: usize, nnodes: usize, log: Logger, nvl: &mut NvlDomains, constants: &mut Constants,
    ) -> Result<Ctx, Status> {
        let mut ctx: Ctx = std::ptr::null_mut();
        let (old, new) = match self {
            Api::V2(t) => (t.init, None),
            Api::V3(t) => (t.init, None),
            Api::V4(t) => (t.init, None),
            Api::V5(t) => (None, t.init),
            Api::V6(t) => (None, t.init),
        };
        let status = match (old, new) {
            (Some(f), _) => f(nranks, nnodes, log, &mut ctx),
            (_, Some(f)) => f(&mut ctx, comm_id, nranks, nnodes, log, nvl, constants),
            _ => -1,
        };
        if status == 0 {
            Ok(ctx)
        } else {
            Err(status)
        }
    }

    /// Lets the plugin edit `table` (NCCL's cost table for `coll` over `n_bytes`, one op,
    /// unregistered buffers) and set `n_channels`. v2, which names one algorithm and
    /// protocol instead, gets that entry set to 0 (the cheapest), even where it was
    /// unavailable, so that the caller sees and reports the request.
    ///
    /// # Safety
    /// `ctx` is this plugin's, from `init` and not finalized.
    pub unsafe fn coll_info(
        self, ctx: Ctx, coll: c_int, n_bytes: usize, table: &mut CostTable, n_channels: &mut c_int,
    ) -> Status {
        let (na, np) = (NUM_ALGOS as c_int, NUM_PROTOS as c_int);
        // NCCL passes the `float[algos][protos]` array as `float**`.
        let tp = table.as_mut_ptr() as *mut *mut f32;
        match self {
            Api::V2(t) => {
                let (collnet, nvls) = v2_support(table);
                let (mut algo, mut proto) = (-1, -1);
                let Some(f) = t.coll_info else { return -1 };
                let status = f(ctx, coll, n_bytes, collnet, nvls, 1, &mut algo, &mut proto, n_channels);
                if status == 0 && (0..na).contains(&algo) && (0..np).contains(&proto) {
                    table[algo as usize][proto as usize] = 0.0;
                }
                status
            }
            Api::V3(t) => t.coll_info.map_or(-1, |f| f(ctx, coll, n_bytes, 1, tp, na, np, n_channels)),
            Api::V4(t) => t.coll_info.map_or(-1, |f| f(ctx, coll, n_bytes, 1, tp, na, np, 0, n_channels)),
            Api::V5(t) => t.coll_info.map_or(-1, |f| f(ctx, coll, n_bytes, 1, tp, na, np, 0, n_channels)),
            Api::V6(t) => t.coll_info.map_or(-1, |f| f(ctx, coll, n_bytes, 1, tp, na, np, 0, n_channels)),
        }
    }

    /// The plugin's chunk size for the choice (v6 with `getChunkSize`), given jitccl's in
    /// `chunk`; `None` where the plugin has no say.
    ///
    /// # Safety
    /// As [`coll_info`](Self::coll_info).
    #[allow(clippy::too_many_arguments)] // getChunkSize's own
    pub unsafe fn chunk_size(
        self, ctx: Ctx, coll: c_int, n_bytes: usize, algo: c_int, proto: c_int, n_channels: c_int, chunk: &mut usize,
    ) -> Option<Status> {
        match self {
            Api::V6(t) => t.chunk_size.map(|f| f(ctx, coll, n_bytes, algo, proto, n_channels, chunk)),
            _ => None,
        }
    }

    /// Ends a context (`finalize`, or `destroy` before v5).
    ///
    /// # Safety
    /// As [`coll_info`](Self::coll_info); `ctx` is not used again.
    pub unsafe fn finalize(self, ctx: Ctx) -> Status {
        let f = match self {
            Api::V2(t) => t.destroy,
            Api::V3(t) => t.destroy,
            Api::V4(t) => t.destroy,
            Api::V5(t) => t.finalize,
            Api::V6(t) => t.finalize,
        };
        f.map_or(-1, |f| f(ctx))
    }
}
