//! The few NVML calls topology detection makes, with `libnvidia-ml` loaded at run time
//! (it ships with the driver, not with CUDA's toolkit): a GPU's compute capability and,
//! per NVLink, whether it is up and what is at its other end. Every failure is an error
//! string for the caller to log; nothing here panics when the library is absent or old.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// The links from a GPU to one peer (another GPU or an NVSwitch).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct NvLink {
    pub target: String,
    pub count: u32,
    pub to_switch: bool,
}

type Ret = c_uint;
type Handle = *mut c_void;
const SUCCESS: Ret = 0;
/// NVML_NVLINK_MAX_LINKS: the most links any GPU has (18 on Hopper).
const MAX_LINKS: c_uint = 18;
/// nvmlIntNvLinkDeviceType_t's NVML_NVLINK_DEVICE_TYPE_SWITCH.
const REMOTE_SWITCH: c_uint = 2;

/// nvmlPciInfo_t (the v3 layout: legacy bus id, ids, then the full bus id).
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

/// What NVML says of one GPU.
pub(super) struct Device {
    pub sm: u32,
    pub nvlinks: Vec<NvLink>,
}

/// An initialized NVML; shut down on drop.
pub(super) struct Nvml {
    lib: libloading::Library,
}

impl Nvml {
    pub fn open() -> Result<Nvml, String> {
        // SAFETY: loading the driver's NVML runs only its library constructors.
        let lib =
            unsafe { libloading::Library::new("libnvidia-ml.so.1") }.map_err(|e| format!("libnvidia-ml.so.1: {e}"))?;
        let nvml = Nvml { lib };
        // SAFETY: nvmlInit_v2 takes no arguments.
        let ret = unsafe { nvml.sym::<unsafe extern "C" fn() -> Ret>("nvmlInit_v2")?() };
        if ret != SUCCESS {
            // No shutdown is owed for a failed init.
            std::mem::forget(nvml);
            return Err(format!("nvmlInit_v2 returned {ret}"));
        }
        Ok(nvml)
    }

    fn sym<T: Copy>(&self, name: &str) -> Result<T, String> {
        // SAFETY: each caller names the symbol with its C signature.
        unsafe { self.lib.get::<T>(name.as_bytes()).map(|s| *s).map_err(|e| format!("{name}: {e}")) }
    }

    /// The GPU at PCI `busid` ("0000:17:00.0").
    pub fn device(&self, busid: &str) -> Result<Device, String> {
        let by_bus: unsafe extern "C" fn(*const c_char, *mut Handle) -> Ret =
            self.sym("nvmlDeviceGetHandleByPciBusId_v2")?;
        let cc: unsafe extern "C" fn(Handle, *mut c_int, *mut c_int) -> Ret =
            self.sym("nvmlDeviceGetCudaComputeCapability")?;
        let c_bus = CString::new(busid).map_err(|_| format!("bad bus id {busid}"))?;
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: a NUL-terminated id and an out pointer NVML fills.
        let ret = unsafe { by_bus(c_bus.as_ptr(), &mut h) };
        if ret != SUCCESS {
            return Err(format!("nvmlDeviceGetHandleByPciBusId_v2 returned {ret}"));
        }
        let (mut major, mut minor) = (0, 0);
        // SAFETY: a handle NVML gave and two out pointers.
        let ret = unsafe { cc(h, &mut major, &mut minor) };
        if ret != SUCCESS {
            return Err(format!("nvmlDeviceGetCudaComputeCapability returned {ret}"));
        }
        Ok(Device { sm: (major.max(0) * 10 + minor.max(0)) as u32, nvlinks: self.nvlinks(h) })
    }

    /// The device's active NVLinks grouped by what is at their far end. A GPU without
    /// NVLink (or an NVML without these calls) has none.
    fn nvlinks(&self, h: Handle) -> Vec<NvLink> {
        type State = unsafe extern "C" fn(Handle, c_uint, *mut c_uint) -> Ret;
        type Remote = unsafe extern "C" fn(Handle, c_uint, *mut PciInfo) -> Ret;
        let (Ok(state), Ok(remote)) =
            (self.sym::<State>("nvmlDeviceGetNvLinkState"), self.sym::<Remote>("nvmlDeviceGetNvLinkRemotePciInfo_v2"))
        else {
            return Vec::new();
        };
        let kind = self.sym::<State>("nvmlDeviceGetNvLinkRemoteDeviceType").ok();
        let mut out: Vec<NvLink> = Vec::new();
        for link in 0..MAX_LINKS {
            let mut active = 0;
            // SAFETY: handle, link index, out pointer; past the last link NVML returns an error.
            if unsafe { state(h, link, &mut active) } != SUCCESS || active == 0 {
                continue;
            }
            // SAFETY: an all-zero PciInfo is valid; NVML fills it.
            let mut pci: PciInfo = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { remote(h, link, &mut pci) } != SUCCESS {
                continue;
            }
            pci.bus_id[31] = 0;
            // SAFETY: NUL-terminated just above.
            let target = unsafe { CStr::from_ptr(pci.bus_id.as_ptr()) }.to_string_lossy().to_ascii_lowercase();
            // NVML writes 8 hex digits of domain; NCCL's files use 4.
            let target = if target.len() == 16 { target[4..].to_string() } else { target };
            let mut remote_kind = 0;
            // SAFETY: as above.
            let to_switch = kind
                .is_some_and(|k| unsafe { k(h, link, &mut remote_kind) } == SUCCESS && remote_kind == REMOTE_SWITCH);
            match out.iter_mut().find(|l| l.target == target) {
                Some(l) => l.count += 1,
                None => out.push(NvLink { target, count: 1, to_switch }),
            }
        }
        out
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        if let Ok(shutdown) = self.sym::<unsafe extern "C" fn() -> Ret>("nvmlShutdown") {
            // SAFETY: paired with the successful nvmlInit_v2 of `open`.
            unsafe { shutdown() };
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pci_info_has_nvmls_size() {
        // 16 + 5 x 4 + 32: a different size would make NVML write past it.
        assert_eq!(size_of::<super::PciInfo>(), 68);
    }

    #[test]
    fn no_nvml_is_an_error_not_a_panic() {
        // This machine (and CI) has no NVIDIA driver; where one is, opening succeeds.
        if let Err(e) = super::Nvml::open() {
            assert!(e.contains("nvidia-ml") || e.contains("nvmlInit"), "{e}");
        }
    }
}
