"""jitccl's and NCCL's nccl-tests runs side by side, from a run made by hand (docs/guide.md,
"nccl-tests"): the out-of-place time and busbw of each size from the logs
DIR/jitccl-COLL-N.txt and DIR/nccl-COLL-N.txt.

    python3 nccl_tests_table.py DIR"""

import os
import sys


def rows(path):
    """{size: (out-of-place time in us, busbw)} of an nccl-tests log (none where it is missing)."""
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for ln in f:
                # size count type redop root | time algbw busbw #wrong (out of place) | in place
                x = ln.split()
                if len(x) >= 13 and x[0].isdigit():
                    out[int(x[0])] = (float(x[5]), float(x[7]))
    return out


def main():
    d = sys.argv[1]
    print("# nccl-tests, out of place: jitccl's libnccl.so.2 beside NVIDIA's NCCL 2.30")
    print("# (NCCL_MULTI_RANK_GPU_ENABLE=1); every rank on GPU 0, one process a rank under MPI")
    print(f"{'':<14} {'':>5} {'':>10} | {'time (us)':^17} | {'busbw (GB/s)':^17} |")
    print(f"{'coll':<14} {'ranks':>5} {'size (B)':>10} | {'jitccl':>8} {'NCCL':>8} | {'jitccl':>8} {'NCCL':>8} | "
          "NCCL's time / jitccl's")
    for name in sorted(os.listdir(d)):
        if not name.startswith("jitccl-"):
            continue
        _, coll, n = name[:-len(".txt")].split("-")
        j, q = rows(os.path.join(d, name)), rows(os.path.join(d, f"nccl-{coll}-{n}.txt"))
        for size in sorted(j):
            (jt, jb), (qt, qb) = j[size], q.get(size, (None, None))
            nccl = (f"{qt:8.1f}", f"{qb:8.2f}", f"{qt / jt:6.2f}") if qt else (f"{'-':>8}", f"{'-':>8}", f"{'-':>6}")
            print(f"{coll:<14} {n:>5} {size:>10} | {jt:8.1f} {nccl[0]} | {jb:8.2f} {nccl[1]} | {nccl[2]}")


if __name__ == "__main__":
    main()
