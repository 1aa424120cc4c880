//! Where a kernel runs: the host, or one CUDA architecture with NVRTC's output kind. A
//! target carries everything that tells two compiled artifacts of one spec apart.

use std::fmt;
use std::str::FromStr;

use super::{invalid, InvalidSpec};

/// A CUDA compute capability, e.g. `sm_90` is `CudaArch(90)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CudaArch(pub u32);

impl CudaArch {
    /// The oldest architecture the CUDA templates support (bf16 conversions need sm_80).
    pub const MIN: CudaArch = CudaArch(80);
    /// fp8 conversion instructions exist from sm_89 on.
    pub const FP8: CudaArch = CudaArch(89);
}

impl fmt::Display for CudaArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.0)
    }
}

impl FromStr for CudaArch {
    type Err = InvalidSpec;
    fn from_str(s: &str) -> Result<Self, InvalidSpec> {
        let digits = s.trim_start_matches("sm_").trim_start_matches("compute_");
        let n: u32 = digits.parse().map_err(|_| invalid(format!("bad CUDA arch '{s}' (expected e.g. sm_90)")))?;
        if CudaArch(n) < CudaArch::MIN {
            return Err(invalid(format!("CUDA arch {s} is older than the minimum {}", CudaArch::MIN)));
        }
        Ok(CudaArch(n))
    }
}

/// What NVRTC produces for a CUDA target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaOutput {
    /// Machine code for exactly one architecture (`sm_XX`): no driver JIT at load time.
    Cubin,
    /// Virtual ISA (`compute_XX`) text, JIT-compiled by the driver for the device.
    Ptx,
}

impl CudaOutput {
    /// The file extension of this output in the disk cache.
    pub fn ext(self) -> &'static str {
        match self {
            CudaOutput::Cubin => "cubin",
            CudaOutput::Ptx => "ptx",
        }
    }
}

/// Where a kernel runs, with everything target-specific that tells two compiled artifacts of
/// one spec apart (so a cache key is just `(KernelSpec, Target)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// The system C compiler; one OS thread per CTA.
    Host,
    /// NVRTC for one GPU architecture, producing `output`.
    Cuda { arch: CudaArch, output: CudaOutput },
}

impl Target {
    /// CUBIN for `arch`: the usual CUDA target (no driver JIT at load time).
    pub fn cubin(arch: CudaArch) -> Target {
        Target::Cuda { arch, output: CudaOutput::Cubin }
    }

    /// PTX for `arch` (the fallback when no CUBIN fits the device).
    pub fn ptx(arch: CudaArch) -> Target {
        Target::Cuda { arch, output: CudaOutput::Ptx }
    }
}

/// `host`, `cuda:sm_90` (CUBIN) or `cuda:sm_90:ptx`.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Host => f.write_str("host"),
            Target::Cuda { arch, output: CudaOutput::Cubin } => write!(f, "cuda:{arch}"),
            Target::Cuda { arch, output: CudaOutput::Ptx } => write!(f, "cuda:{arch}:ptx"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_display_and_differ_by_output() {
        assert_eq!(Target::Host.to_string(), "host");
        assert_eq!(Target::cubin(CudaArch(90)).to_string(), "cuda:sm_90");
        assert_eq!(Target::ptx(CudaArch(90)).to_string(), "cuda:sm_90:ptx");
        assert_ne!(Target::cubin(CudaArch(90)), Target::ptx(CudaArch(90)));
        assert_ne!(Target::cubin(CudaArch(80)), Target::cubin(CudaArch(90)));
    }
}
