//! The disk cache survives damage: bad entries are recompiled, leftovers of killed compiles
//! are cleaned up.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use jitccl_codegen::cache::DiskCache;
use jitccl_codegen::compile::nvrtc::{nvrtc, CudaOutput};
use jitccl_codegen::{CudaArch, Generator, KernelSpec, Provenance};

fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(files_ending(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            found.push(p);
        }
    }
    found
}

/// Truncated, emptied, one byte changed.
const DAMAGES: [fn(&mut Vec<u8>); 3] = [
    |b| b.truncate(b.len() / 2),
    |b| b.clear(),
    |b| {
        let m = b.len() / 2;
        b[m] ^= 0xff
    },
];

fn damage(path: &Path, how: fn(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    how(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn damaged_host_objects_are_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let spec: KernelSpec = "all_gather.ring.ll.u8".parse().unwrap();
    let gen = || Generator::new(Some(DiskCache::new(dir.path())));
    assert_eq!(gen().host_kernel(&spec).unwrap().1, Provenance::Compiled);
    let so = files_ending(dir.path(), ".so");
    assert_eq!(so.len(), 1);
    for how in DAMAGES {
        damage(&so[0], how);
        assert_eq!(gen().host_kernel(&spec).unwrap().1, Provenance::Compiled);
        assert_eq!(gen().host_kernel(&spec).unwrap().1, Provenance::Disk);
    }
}

#[test]
fn damaged_cuda_images_are_recompiled() {
    if let Err(e) = nvrtc() {
        assert!(!jitccl_settings::REQUIRE_NVRTC.flag_or_warn(), "{e}");
        println!("skipping: {e}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec: KernelSpec = "all_gather.ring.ll.u8".parse().unwrap();
    let gen = || Generator::new(Some(DiskCache::new(dir.path())));
    for (output, ext) in [(CudaOutput::Cubin, ".cubin"), (CudaOutput::Ptx, ".ptx")] {
        let (good, prov) = gen().cuda_image(&spec, CudaArch(90), output).unwrap();
        assert_eq!(prov, Provenance::Compiled);
        let file = files_ending(dir.path(), ext);
        assert_eq!(file.len(), 1);
        for how in DAMAGES {
            damage(&file[0], how);
            let (img, prov) = gen().cuda_image(&spec, CudaArch(90), output).unwrap();
            assert_eq!((prov, &img.bytes), (Provenance::Compiled, &good.bytes));
            assert_eq!(gen().cuda_image(&spec, CudaArch(90), output).unwrap().1, Provenance::Disk);
        }
    }
}

#[test]
fn stale_build_folders_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host");
    let (old_dir, old_file, fresh) = (host.join(".build-old"), host.join(".build-oldfile"), host.join(".build-fresh"));
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::write(old_dir.join("kernel.so"), b"partial").unwrap();
    std::fs::write(&old_file, b"partial").unwrap();
    std::fs::create_dir_all(&fresh).unwrap();
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for p in [&old_dir, &old_file] {
        std::fs::File::open(p).unwrap().set_modified(hour_ago).unwrap();
    }
    let spec: KernelSpec = "all_gather.ring.ll.u8".parse().unwrap();
    Generator::new(Some(DiskCache::new(dir.path()))).host_kernel(&spec).unwrap();
    assert!(!old_dir.exists() && !old_file.exists(), "stale build leftovers remain");
    assert!(fresh.exists(), "a build in progress (recent) must be kept");
}
