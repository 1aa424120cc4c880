"""NVIDIA's NCCL 2.30 for the GPU machine, within what can be carried there (64 MiB in all).

PyTorch 2.11 (the GPU machine's) bundles NCCL 2.28.9, which refuses several ranks on one
GPU; 2.30 added that (NCCL_MULTI_RANK_GPU_ENABLE=1). Its libnccl.so.2 (PyPI wheel
nvidia-nccl-cu13) is 252 MB: mostly device code for sm_75 ... sm_120, in the fatbinaries of
the sections .nv_fatbin and __nv_relfatbin. The GPU machine is an H100 or H200 (sm_90), so
this rewrites each fatbin to hold its sm_90 machine code alone, at the same address, with
zeroes after it (the file's size, its sections and every address unchanged, so the library
loads as before), then xz-compresses it: the zeroes cost next to nothing. cuobjdump (CUDA
13.2) lists the result's 28 sm_90 images, and they extract byte for byte as from the wheel.

    python3 tools/nccl_sm90.py [--version 2.30.7] [--out DIR] [--cache DIR]

writes OUT/libnccl.so.2.xz (36 MiB) and NCCL's license beside it; tools/gpu-extras.sh runs
it for `gpu-check.sh build`. Needs pip and PyPI (the wheel: 216 MB, kept in CACHE)."""

import argparse
import collections
import glob
import lzma
import os
import struct
import subprocess
import sys
import zipfile

FATBIN_MAGIC = 0xBA55ED50
ELF_ENTRY = 2  # entry kinds: 1 PTX, 2 ELF (machine code)


def sections(data, names):
    """{name: (offset, size)} of the ELF64 sections named."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx][4]
    found = {}
    for name_off, _type, _flags, _addr, off, size in heads:
        end = data.index(b"\0", strtab + name_off)
        name = data[strtab + name_off:end].decode()
        if name in names:
            found[name] = (off, size)
    return found


Entry = collections.namedtuple("Entry", "start head fat_size entry kind sm payload size")


def entries(data, off, size):
    """Each entry of each fatbin in the section: where its fatbin starts, that fatbin's
    header and body sizes, where the entry and its payload start, its kind, sm and size."""
    pos, end = off, off + size
    while pos + 16 <= end:
        magic, _ver, head, fat = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-byte aligned, with padding between them
            continue
        e, fend = pos + head, pos + head + fat
        while e < fend:
            kind, _ever, ehead, payload = struct.unpack_from("<HHIQ", data, e)
            sm, = struct.unpack_from("<I", data, e + 28)
            yield Entry(pos, head, fat, e, kind, sm, e + ehead, payload)
            e += ehead + payload
        if e != fend:
            sys.exit(f"nccl_sm90: a fatbin at {pos:#x} does not end where its header says: unknown layout")
        pos = fend


def prune(data, keep_sm):
    """Rewrites each fatbin that has `keep_sm` machine code to hold that code alone: its
    header (with the smaller size), the kept entries, then zeroes to where it ended. Every
    fatbin keeps its address (the CUDA runtime finds each by a pointer and reads its size
    from its header). A few fatbins hold sm_100 code alone (kernels for other GPUs): left
    whole, they are small. Returns (kept, zeroed) bytes."""
    kept = zeroed = 0
    for off, size in sections(data, (".nv_fatbin", "__nv_relfatbin")).values():
        fatbins = {}
        for f in entries(data, off, size):
            fatbins.setdefault(f.start, []).append(f)
        for start, found in fatbins.items():
            keep = [f for f in found if f.kind == ELF_ENTRY and f.sm == keep_sm]
            if not keep:
                continue
            head = found[0].head
            body = b"".join(bytes(data[f.entry:f.payload + f.size]) for f in keep)
            end = start + head + found[0].fat_size
            new = bytearray(data[start:start + head]) + body
            struct.pack_into("<Q", new, 8, len(body))
            data[start:end] = new + bytes(end - start - len(new))
            kept += len(body)
            zeroed += end - start - len(new)
    if not kept:
        sys.exit(f"nccl_sm90: no sm_{keep_sm} machine code found")
    return kept, zeroed


def code(data, keep_sm):
    """The `keep_sm` machine code entries (header and payload) of both sections, in order."""
    return [bytes(data[f.entry:f.payload + f.size])
            for off, size in sections(data, (".nv_fatbin", "__nv_relfatbin")).values()
            for f in entries(data, off, size) if f.kind == ELF_ENTRY and f.sm == keep_sm]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--version", default="2.30.7")
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target")
    p.add_argument("--out", default=os.path.join(target, "gpu-extras"))
    p.add_argument("--cache", default=os.path.join(target, "gpu-extras-cache"))
    p.add_argument("--sm", type=int, default=90)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.cache, exist_ok=True)
    wheels = glob.glob(os.path.join(a.cache, f"nvidia_nccl_cu13-{a.version}-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--platform", "manylinux_2_18_x86_64", "--platform", "manylinux2014_x86_64",
                        "--python-version", "3.12", "-d", a.cache, f"nvidia-nccl-cu13=={a.version}"], check=True)
        wheels = glob.glob(os.path.join(a.cache, f"nvidia_nccl_cu13-{a.version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        data = bytearray(z.read("nvidia/nccl/lib/libnccl.so.2"))
        lic = [n for n in z.namelist() if os.path.basename(n).lower().startswith("license")]
        for n in lic:
            with open(os.path.join(a.out, "NCCL-" + os.path.basename(n)), "wb") as f:
                f.write(z.read(n))
    whole = len(data)
    before = code(data, a.sm)
    kept, zeroed = prune(data, a.sm)
    # The code kept must read back whole, entry by entry, from the rewritten fatbins.
    if code(data, a.sm) != before or len(data) != whole:
        sys.exit(f"nccl_sm90: the sm_{a.sm} code does not read back the same after the rewrite")
    with lzma.open(os.path.join(a.out, "libnccl.so.2.xz"), "wb", preset=6) as f:
        f.write(data)
    xz = os.path.getsize(os.path.join(a.out, "libnccl.so.2.xz"))
    print(f"nccl_sm90: NCCL {a.version} libnccl.so.2 {whole >> 20} MiB, sm_{a.sm} code {kept >> 20} MiB kept, "
          f"{zeroed >> 20} MiB of other targets zeroed; {a.out}/libnccl.so.2.xz {xz >> 20} MiB"
          f"{'' if lic else ' (the wheel had no license file)'}")


if __name__ == "__main__":
    main()
