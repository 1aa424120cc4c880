//! The C types of `nccl.h` and their values, as NCCL 2.30.7 lays them out: results, data
//! types, reduction ops and the configuration struct (read by NCCL's size, magic and
//! version rule).

use std::ffi::{c_char, c_int, c_uint, CStr};

use jitccl::{Config, DataType, Op};

pub type NcclResult = c_int;
pub const SUCCESS: NcclResult = 0;
pub const UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const SYSTEM_ERROR: NcclResult = 2;
pub const INTERNAL_ERROR: NcclResult = 3;
pub const INVALID_ARGUMENT: NcclResult = 4;
pub const INVALID_USAGE: NcclResult = 5;
pub const REMOTE_ERROR: NcclResult = 6;
pub const IN_PROGRESS: NcclResult = 7;
pub const TIMEOUT: NcclResult = 8;

/// A failed call: its code and the text `ncclGetLastError` gives.
#[derive(Debug)]
pub struct Failure {
    pub code: NcclResult,
    pub text: String,
}

pub fn fail(code: NcclResult, text: impl Into<String>) -> Failure {
    Failure { code, text: text.into() }
}

/// NCCL_VERSION_CODE of the API served: programs gate features on it.
pub const VERSION_CODE: c_int = 23007;
/// `ncclNumOps`: ids from this one up are ops made by ncclRedOpCreatePreMulSum.
pub const NUM_BUILTIN_OPS: c_int = 5;
pub const API_MAGIC: c_uint = 0xcafe_beef;
pub const SIM_INFO_MAGIC: c_uint = 0x7468_5283;
pub const UNDEF_INT: c_int = c_int::MIN;

/// `ncclDataType_t` to jitccl's type; `None` for a value NCCL does not define.
pub fn data_type(v: c_int) -> Option<DataType> {
    Some(match v {
        0 => DataType::I8,
        1 => DataType::U8,
        2 => DataType::I32,
        3 => DataType::U32,
        4 => DataType::I64,
        5 => DataType::U64,
        6 => DataType::F16,
        7 => DataType::F32,
        8 => DataType::F64,
        9 => DataType::BF16,
        10 => DataType::F8E4M3,
        11 => DataType::F8E5M2,
        _ => return None,
    })
}

/// A built-in `ncclRedOp_t`; `None` for user ops and unknown values.
pub fn builtin_op(v: c_int) -> Option<Op> {
    Some(match v {
        0 => Op::Sum,
        1 => Op::Prod,
        2 => Op::Max,
        3 => Op::Min,
        4 => Op::Avg,
        _ => return None,
    })
}

/// `ncclConfig_t` of NCCL 2.30.7 (`struct ncclConfig_v23000`, 96 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclConfig {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
    pub graph_usage_mode: c_int,
    pub num_rma_ctx: c_int,
    pub max_p2p_peers: c_int,
    pub graph_stream_ordering: c_int,
}

const _: () = assert!(size_of::<NcclConfig>() == 96);

/// Which version added each field past `version` (NCCL's rule: a caller of an older
/// version did not set the newer fields, whatever its struct holds there).
fn reset_newer(c: &mut NcclConfig, version: c_uint) {
    let undef = |f: &mut c_int, since: c_uint| {
        if version < since {
            *f = UNDEF_INT;
        }
    };
    undef(&mut c.blocking, 21400);
    for f in [&mut c.cga_cluster_size, &mut c.min_ctas, &mut c.max_ctas] {
        undef(f, 21700);
    }
    if version < 21700 {
        c.net_name = std::ptr::null();
    }
    undef(&mut c.split_share, 21800);
    if version < 21900 {
        c.comm_name = std::ptr::null();
    }
    undef(&mut c.traffic_class, 22500);
    for f in [&mut c.collnet_enable, &mut c.cta_policy, &mut c.shrink_share, &mut c.nvls_ctas] {
        undef(f, 22700);
    }
    for f in [&mut c.n_channels_per_net_peer, &mut c.nvlink_centric_sched] {
        undef(f, 22800);
    }
    for f in [&mut c.graph_usage_mode, &mut c.num_rma_ctx] {
        undef(f, 22900);
    }
    undef(&mut c.max_p2p_peers, 23000);
    undef(&mut c.graph_stream_ordering, 23005);
}

impl NcclConfig {
    fn undefined() -> NcclConfig {
        NcclConfig {
            size: size_of::<NcclConfig>(),
            magic: API_MAGIC,
            version: VERSION_CODE as c_uint,
            blocking: UNDEF_INT,
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: UNDEF_INT,
            traffic_class: UNDEF_INT,
            comm_name: std::ptr::null(),
            collnet_enable: UNDEF_INT,
            cta_policy: UNDEF_INT,
            shrink_share: UNDEF_INT,
            nvls_ctas: UNDEF_INT,
            n_channels_per_net_peer: UNDEF_INT,
            nvlink_centric_sched: UNDEF_INT,
            graph_usage_mode: UNDEF_INT,
            num_rma_ctx: UNDEF_INT,
            max_p2p_peers: UNDEF_INT,
            graph_stream_ordering: UNDEF_INT,
        }
    }

    /// The caller's config as NCCL reads it: `size` first, then at most that many bytes
    /// (an older, smaller struct is accepted), a wrong magic refused, fields newer than its
    /// `version` ignored. NULL: every field undefined.
    pub unsafe fn read(p: *const NcclConfig) -> Result<NcclConfig, Failure> {
        let mut c = NcclConfig::undefined();
        if p.is_null() {
            return Ok(c);
        }
        let size = std::ptr::read_unaligned(p.cast::<usize>());
        if size < 16 {
            return Err(fail(INVALID_ARGUMENT, format!("ncclConfig_t of size {size}: too small to be one")));
        }
        let n = size.min(size_of::<NcclConfig>());
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut c as *mut NcclConfig).cast::<u8>(), n);
        if c.magic != API_MAGIC {
            return Err(fail(
                INVALID_ARGUMENT,
                format!(
                    "ncclConfig_t magic {:#x} is not {API_MAGIC:#x}: initialize it with NCCL_CONFIG_INITIALIZER",
                    c.magic
                ),
            ));
        }
        let version = c.version;
        reset_newer(&mut c, version);
        c.size = size_of::<NcclConfig>();
        Ok(c)
    }

    /// The jitccl configuration it asks for (undefined fields: jitccl's defaults and
    /// `JITCCL_*` settings). Values jitccl has no use for are accepted and named in the log.
    pub unsafe fn config(&self) -> Result<Config, Failure> {
        let flag = |v: c_int, name: &str| -> Result<Option<bool>, Failure> {
            match v {
                UNDEF_INT => Ok(None),
                0 | 1 => Ok(Some(v == 1)),
                _ => Err(fail(INVALID_ARGUMENT, format!("ncclConfig_t.{name} is {v}; expected 0 or 1"))),
            }
        };
        let ctas = |v: c_int, name: &str| -> Result<Option<usize>, Failure> {
            match v {
                UNDEF_INT => Ok(None),
                v if v >= 1 => Ok(Some(v as usize)),
                _ => Err(fail(INVALID_ARGUMENT, format!("ncclConfig_t.{name} is {v}; expected at least 1"))),
            }
        };
        let text = |p: *const c_char, name: &str| -> Result<Option<String>, Failure> {
            if p.is_null() {
                return Ok(None);
            }
            CStr::from_ptr(p)
                .to_str()
                .map(|s| Some(s.to_string()))
                .map_err(|_| fail(INVALID_ARGUMENT, format!("ncclConfig_t.{name} is not UTF-8")))
        };
        let unused = [
            ("cgaClusterSize", self.cga_cluster_size),
            ("trafficClass", self.traffic_class),
            ("collnetEnable", self.collnet_enable),
            ("CTAPolicy", self.cta_policy),
            ("shrinkShare", self.shrink_share),
            ("nvlsCTAs", self.nvls_ctas),
            ("nChannelsPerNetPeer", self.n_channels_per_net_peer),
            ("nvlinkCentricSched", self.nvlink_centric_sched),
            ("graphUsageMode", self.graph_usage_mode),
            ("numRmaCtx", self.num_rma_ctx),
            ("maxP2pPeers", self.max_p2p_peers),
            ("graphStreamOrdering", self.graph_stream_ordering),
        ];
        for (name, v) in unused.iter().filter(|(_, v)| *v != UNDEF_INT) {
            tracing::info!("ncclConfig_t.{name} = {v}: accepted; jitccl has no use for it");
        }
        Ok(Config {
            blocking: flag(self.blocking, "blocking")?,
            min_ctas: ctas(self.min_ctas, "minCTAs")?,
            max_ctas: ctas(self.max_ctas, "maxCTAs")?,
            net_name: text(self.net_name, "netName")?,
            split_share: flag(self.split_share, "splitShare")?,
            comm_name: text(self.comm_name, "commName")?,
            ..Config::default()
        })
    }
}

/// `ncclSimInfo_t` (`struct ncclSimInfo_v22200`).
#[repr(C)]
pub struct SimInfo {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimated_time: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_config_keeps_its_fields_and_drops_newer_ones() {
        let mut c = NcclConfig::undefined();
        c.blocking = 0;
        c.max_ctas = 2;
        c.max_p2p_peers = 4;
        c.version = 21700;
        // SAFETY: a whole struct.
        let read = unsafe { NcclConfig::read(&c) }.expect("accepted");
        assert_eq!((read.blocking, read.max_ctas, read.max_p2p_peers), (0, 2, UNDEF_INT));
        c.magic = 1;
        // SAFETY: a whole struct.
        assert!(unsafe { NcclConfig::read(&c) }.is_err());
    }

    #[test]
    fn a_smaller_struct_is_read_up_to_its_size() {
        let mut c = NcclConfig::undefined();
        c.size = 24;
        c.blocking = 0;
        c.max_ctas = 3;
        // SAFETY: the first 24 bytes are read.
        let read = unsafe { NcclConfig::read(&c) }.expect("accepted");
        assert_eq!((read.blocking, read.max_ctas), (0, UNDEF_INT));
    }
}
