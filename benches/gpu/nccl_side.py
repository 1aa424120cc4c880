"""jitccl beside NVIDIA's NCCL on one GPU, in one run (tools/gpu-check.sh, stage nccl_side):
AllReduce, AllGather and ReduceScatter (float32 SUM, out of place for perf, in place for
torch's AllReduce) at 16 B ... 256 MiB by 8x, 2 and 4 ranks on GPU 0, timed five ways:

  perf          `jitccl perf COLL --target cuda -N n -g n`: jitccl's ranks as threads of one
                process (results checked against the reference in the first round);
  threads+NCCL  benches/gpu/threads_side.cu (--threads, built by the stage) on NCCL 2.30
                (--nccl): NCCL's ranks as one process's communicators on GPU 0, the layout
                of perf (results checked against the reference in the first round);
  torch+jitccl  benches/gpu/torch_side.py, one process a rank, backend "nccl" with jitccl's
                libnccl.so.2 preloaded (its INFO log must show that it served the ranks);
  torch+NCCL    the same script with NVIDIA's NCCL: a 2.30 library given with --nccl (carried
                to the GPU machine, preloaded) or else the one PyTorch bundles, with
                NCCL_MULTI_RANK_GPU_ENABLE=1; a library below 2.30 (or one that refuses)
                is a row saying so;
  copy          the device's own rate: a 256 MiB device-to-device copy (torch), bytes copied
                per second.

The variants take turns: each round runs every one once per rank count, in a rotating order,
and a cell is the median over the rounds (its spread, half the range over the median, in
the JSON). Without MPS the GPU time-slices the torch processes, while perf's ranks share one
process: perf and threads+NCCL are one layout, torch+jitccl and torch+NCCL another.

--device cpu runs the same logic without a GPU: perf on the host target, the torch side with
backend gloo (the peer) and jitccl's own backend "jitccl" (python/), the copy rate of host
memory; --py runs the rank script another way (e.g. in scripts/setup-torch.sh's chroot).

Writes nccl-side.txt (the table), nccl-side.json (every sample) and a plot of busbw against
size per collective and rank count (nccl-side-COLL-N.svg, busbw_svg.py) to --out."""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# busbw_svg.py lies in benches/ in the tree and beside this script where gpu-check.sh carries it.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import busbw_svg  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
COLLS = ("all_reduce", "all_gather", "reduce_scatter")
VARIANTS = ("perf", "threads+NCCL", "torch+jitccl", "torch+NCCL")

COPY_RATE = r"""
import json, statistics, sys, time, torch
dev = sys.argv[1]
n = 256 << 20
src = torch.ones(n // 4, device=dev)
dst = torch.empty_like(src)
rates = []
for _ in range(7):
    if dev == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); [dst.copy_(src) for _ in range(10)]; b.record(); b.synchronize()
        s = a.elapsed_time(b) / 1e3 / 10
    else:
        t = time.perf_counter(); dst.copy_(src); s = time.perf_counter() - t
    rates.append(n / s / 1e9)
assert torch.equal(dst, src)
nccl = ".".join(map(str, torch.cuda.nccl.version())) if dev == "cuda" else None
print(json.dumps({"copy_GBps": statistics.median(rates), "torch": torch.__version__, "nccl": nccl,
                  "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "host"}))
"""


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--jitccl", required=True, help="the jitccl binary (perf, launch)")
    p.add_argument("--libnccl", required=True, help="jitccl's libnccl.so.2")
    p.add_argument("--nccl", default="", help="NVIDIA's libnccl.so.2 2.30+ to preload (else PyTorch's own)")
    p.add_argument("--threads", default="", help="threads_side, built (threads+NCCL runs with --nccl only)")
    p.add_argument("--out", required=True)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", default=" ".join(str(16 << (3 * k)) for k in range(9)))
    p.add_argument("--iters", type=int, default=10, help="perf's -n")
    p.add_argument("--budget", type=float, default=0.1, help="torch side: seconds of calls per size and rep")
    p.add_argument("--timeout", type=int, default=120, help="seconds for one torch launch")
    p.add_argument("--deadline", type=int, default=0, help="seconds for the whole sweep: no round starts a variant "
                   "past it, and none runs beyond it (0: none)")
    p.add_argument("--py", default="python3", help="how to run the rank script")
    a = p.parse_args()
    sizes = [int(x) for x in a.sizes.split()]
    if any(b != 8 * s for s, b in zip(sizes, sizes[1:])):
        p.error("--sizes must go up by 8x (perf's -f 8 measures the same sizes)")
    return a


def run(cmd, env=None, timeout=120):
    """(exit code, output); a time-out is exit code 124, like timeout(1). The command gets
    SIGTERM first (`jitccl launch` passes it on to its ranks), then SIGKILL; so does a
    command running when this driver gets SIGTERM."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = p.communicate(timeout=timeout)[0]
        return p.returncode, out
    except subprocess.TimeoutExpired:
        p.terminate()
        try:
            out = p.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0]
        return 124, out
    finally:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def nccl_served(out):
    """Whether NVIDIA's NCCL ran (NCCL_DEBUG=VERSION: it prints its version) and jitccl did not."""
    return "NCCL version 2." in out and "init_rank:" not in out


class Side:
    def __init__(self, args):
        self.a = args
        self.cuda = args.device == "cuda"
        self.sizes = [int(s) for s in args.sizes.split()]
        self.tmp = tempfile.mkdtemp(prefix="nccl-side.")
        # samples[(variant, n, coll, size)] = [(us, busbw) per round]; notes[(variant, n)] = why no row;
        # done: (variant, n) not run again (refused, or failed: the next rounds would too)
        self.samples, self.notes, self.copy, self.failures, self.done = {}, {}, [], [], set()
        self.info = {}
        self.start = time.monotonic()
        self.rounds = 0  # rounds begun

    def left(self, want):
        """Seconds a command may run: `want`, within the deadline."""
        if not self.a.deadline:
            return want
        return max(1, min(want, int(self.a.deadline - (time.monotonic() - self.start))))

    def past_deadline(self):
        return self.a.deadline and time.monotonic() - self.start > self.a.deadline - 15

    def log(self, msg):
        print(msg, flush=True)

    def fail(self, what, out):
        self.failures.append(what)
        self.log(f"FAILED {what}\n" + "\n".join("   " + ln for ln in out.strip().splitlines()[-25:]))

    def copy_rate(self):
        env = dict(os.environ, CUDA_MODULE_LOADING="LAZY")
        rc, out = run(shlex.split(self.a.py) + ["-c", COPY_RATE, self.a.device], env=env, timeout=self.left(120))
        line = [ln for ln in out.splitlines() if ln.startswith("{")]
        if rc != 0 or not line:
            return self.fail("copy rate", out)
        info = json.loads(line[-1])
        self.copy.append(info["copy_GBps"])
        self.info.update({k: v for k, v in info.items() if k != "copy_GBps"})

    def perf(self, n, first):
        base = [self.a.jitccl, "perf"]
        where = ["--target", "cuda", "-N", str(n), "-g", str(n), "--devices", ",".join(["0"] * n)] if self.cuda \
            else ["--target", "host", "-N", str(n), "-g", str(n)]
        env = dict(os.environ) if self.cuda else dict(os.environ, JITCCL_DEVICE="host")
        for coll in COLLS:
            cmd = base + [coll] + where + ["-b", str(self.sizes[0]), "-e", str(self.sizes[-1]), "-f", "8",
                                           "-n", str(self.a.iters), "-w", "3", "-c", "1" if first else "0"]
            rc, out = run(cmd, env=env, timeout=self.left(180))
            rows = {}
            for ln in out.splitlines():
                f = ln.split()
                # size count type redop root | time algbw busbw #wrong (out of place) | in place
                if len(f) >= 13 and f[0].isdigit():
                    rows[int(f[0])] = (float(f[5]), float(f[7]), int(f[8]) if f[8].isdigit() else 0)  # N/A: unchecked
            if rc != 0 or any(row[2] for row in rows.values()) or not rows:
                self.fail(f"perf {coll} {n} ranks", out)
                continue
            for size in self.sizes:
                if size in rows:
                    self.samples.setdefault(("perf", n, coll, size), []).append(rows[size][:2])

    def threads(self, n, first):
        """NCCL's ranks in one process (threads_side), on the library given with --nccl."""
        key = ("threads+NCCL", n)
        if not (self.a.threads and self.a.nccl):
            self.notes[key] = "not run: needs --threads and --nccl (NCCL 2.30)"
            self.done.add(key)
            return
        env = dict(os.environ, NCCL_MULTI_RANK_GPU_ENABLE="1", NCCL_DEBUG="VERSION")
        if n > 2:
            # One process's ranks run their kernels side by side; NCCL's guide expects 2 a GPU
            # to fit with its defaults and advises NCCL_MAX_CTAS beyond (16: jitccl's channels).
            env["NCCL_MAX_CTAS"] = "16"
        env["LD_LIBRARY_PATH"] = os.path.dirname(self.a.nccl) + ":" + os.environ.get("LD_LIBRARY_PATH", "")
        if not self.cuda:
            env["JITCCL_DEVICE"] = "host"
        cmd = [self.a.threads, str(n), str(self.sizes[0]), str(self.sizes[-1]), str(self.a.iters),
               "1" if first else "0"]
        rc, out = run(cmd, env=env, timeout=self.left(90))
        if self.cuda and not nccl_served(out):
            rc = rc or 1  # rows from another library than NCCL's would be mislabelled
        rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] and ln.split()[0] in COLLS]
        if rc != 0:
            # NVIDIA's library failing in this layout is a finding, not a failure of jitccl.
            self.notes[key] = f"exit code {rc}: " + (out.strip().splitlines() or ["no output"])[-1][:200]
            self.done.add(key)
            return self.log(f"threads+NCCL {n} ranks: exit code {rc}\n" + "\n".join(out.strip().splitlines()[-25:]))
        for coll, size, us, busbw in rows:
            self.samples.setdefault(key[:1] + (n, coll, int(size)), []).append((float(us), float(busbw)))

    def torch(self, variant, n):
        out_file = os.path.join(self.tmp, f"{variant}-{n}.jsonl")
        if os.path.exists(out_file):
            os.remove(out_file)
        env = {k: v for k, v in os.environ.items() if k not in ("NCCL_COMM_ID", "JITCCL_COMM_ID", "LD_PRELOAD")}
        # PyTorch's default lazy loading: loading every kernel of libtorch at start costs each
        # rank seconds (jitccl and NCCL load their own kernels when they build them).
        env.update(PYTHONUNBUFFERED="1", USE_LIBUV="0", GLOO_SOCKET_IFNAME="lo", CUDA_MODULE_LOADING="LAZY")
        if not self.cuda:
            backend = "jitccl" if variant == "torch+jitccl" else "gloo"
            env.update(JITCCL_DEVICE="host", JITCCL_NCCL_SO=self.a.libnccl)
        elif variant == "torch+jitccl":
            backend = "nccl"
            env.update(LD_PRELOAD=self.a.libnccl, JITCCL_DEBUG="INFO")
        else:
            backend = "nccl"
            env.update(NCCL_MULTI_RANK_GPU_ENABLE="1", NCCL_DEBUG="VERSION")
            if self.a.nccl:
                env["LD_PRELOAD"] = self.a.nccl
        cmd = [self.a.jitccl, "launch", "-n", str(n), "--"] + shlex.split(self.a.py) + [
            os.path.join(HERE, "torch_side.py"), "--device", self.a.device, "--backend", backend,
            "--out", out_file, "--sizes", " ".join(map(str, self.sizes)), "--budget", str(self.a.budget)]
        if self.cuda and variant == "torch+NCCL":
            cmd += ["--need-version", "2.30"]
        limit = self.left(self.a.timeout)
        rc, out = run(cmd, env=env, timeout=limit)
        rows = []
        if os.path.exists(out_file):
            with open(out_file) as f:
                rows = [json.loads(ln) for ln in f if ln.strip()]
        for r in rows:
            if "version" in r:
                self.info[f"{variant} version"] = r["version"]
            elif "refused" in r:
                self.notes[(variant, n)] = r["refused"]
                self.done.add((variant, n))
            else:
                self.samples.setdefault((variant, n, r["coll"], r["size"]), []).append((r["us"], r["busbw"]))
        if variant == "torch+NCCL" and (variant, n) in self.notes:
            return  # NCCL refusing the layout is the finding, not a failure of the stage
        if rc == 124 and limit < self.a.timeout:
            self.notes[(variant, n)] = f"cut short by the deadline after {limit} s (measured what is shown)"
            return
        if rc != 0:
            why = "timed out" if rc == 124 else f"exit code {rc}"
            self.done.add((variant, n))
            self.notes.setdefault((variant, n), f"{why} (measured what is shown)")
            if variant == "torch+NCCL" and self.cuda:
                # NVIDIA's library failing in this layout is a finding, not a failure of jitccl.
                return self.log(f"{variant} {n} ranks: {why}\n" + "\n".join(out.strip().splitlines()[-25:]))
            return self.fail(f"{variant} {n} ranks: {why}", out)
        if self.cuda and variant == "torch+jitccl" and f"init_rank: rank {n - 1} of {n}" not in out:
            return self.fail(f"{variant} {n} ranks: jitccl's log shows no init_rank: was it preloaded?", out)
        if self.cuda and variant == "torch+NCCL" and not nccl_served(out):
            return self.fail(f"{variant} {n} ranks: NCCL printed no version: did NCCL serve the calls?", out)

    def sweep(self):
        ranks = [int(x) for x in self.a.ranks.split(",")]
        for rnd in range(self.a.rounds):
            if self.past_deadline():
                self.notes[("all", 0)] = f"the deadline ({self.a.deadline} s) ended the sweep before round {rnd + 1}"
                return ranks
            self.copy_rate()
            self.rounds = rnd + 1
            for n in ranks:
                order = VARIANTS[rnd % len(VARIANTS):] + VARIANTS[:rnd % len(VARIANTS)]
                for v in order:
                    if self.past_deadline():
                        self.notes[("all", 0)] = f"the deadline ({self.a.deadline} s) ended round {rnd + 1}"
                        return ranks
                    self.log(f"round {rnd + 1}/{self.a.rounds}, {n} ranks: {v}")
                    if v == "perf":
                        self.perf(n, rnd == 0)
                    elif v == "threads+NCCL":
                        self.threads(n, rnd == 0)
                    elif (v, n) not in self.done:
                        self.torch(v, n)
        return ranks

    def table(self, ranks):
        copy = statistics.median(self.copy) if self.copy else float("nan")
        peer = "NCCL" if self.cuda else "gloo"
        peer_lib = f"PyTorch's own NCCL {self.info.get('nccl')}, torch+NCCL ran NCCL " \
            f"{self.info.get('torch+NCCL version', '-')}" if self.cuda else "the peer: gloo"
        lines = [f"# jitccl beside {peer}: median of the rounds, {self.rounds} of {self.a.rounds} begun, interleaved; "
                 f"{self.info.get('gpu', '?')}, torch {self.info.get('torch', '?')}, {peer_lib}",
                 f"# copy rate (256 MiB {'device-to-device' if self.cuda else 'in host memory'}, bytes copied): "
                 f"{copy:.1f} GB/s (rounds: {', '.join(f'{c:.1f}' for c in self.copy)})",
                 "# one process, ranks on its streams: perf (jitccl), thr+NCCL (threads_side on NCCL); one process "
                 "a rank (time-sliced without MPS): t+jitccl, t+" + peer + " (PyTorch)",
                 "# ratio: busbw of perf over thr+NCCL, of t+jitccl over t+" + peer +
                 "; thr+NCCL at more than 2 ranks with NCCL_MAX_CTAS=16"]
        if not self.cuda:
            lines.append("# --device cpu: t+jitccl is jitccl's own backend \"jitccl\"; thr+NCCL runs on the library "
                         "given with --nccl (cpu-check.sh: jitccl's, on its host target)")
        names = ("perf", "thr+NCCL", "t+jitccl", "t+" + peer)
        w = 9 * len(names) - 1
        head = f"{'':<14} {'':>5} {'':>10} | {'time (us)':^{w}} | {'busbw (GB/s)':^{w}} | {'ratio':^13} | " \
               f"{'% of copy':^17}"
        cols = f"{'coll':<14} {'ranks':>5} {'size (B)':>10} | {' '.join(f'{x:>8}' for x in names)} | " \
               f"{' '.join(f'{x:>8}' for x in names)} | {'perf':>6} {'torch':>6} | {'perf':>8} {'t+jitccl':>8}"
        lines += [head, cols, "-" * len(cols)]

        def med(key, i):
            s = self.samples.get(key)
            return statistics.median(x[i] for x in s) if s else None

        def cell(x, fmt="{:.2f}", w=8):
            return f"{fmt.format(x) if x is not None else '-':>{w}}"

        for coll in COLLS:
            for n in ranks:
                for size in self.sizes:
                    us = [med((v, n, coll, size), 0) for v in VARIANTS]
                    p, t, j, q = (med((v, n, coll, size), 1) for v in VARIANTS)
                    lines.append(f"{coll:<14} {n:>5} {size:>10} | {' '.join(cell(x, '{:.1f}') for x in us)} | "
                                 f"{cell(p)} {cell(t)} {cell(j)} {cell(q)} | "
                                 f"{cell(p / t if p and t else None, w=6)} {cell(j / q if j and q else None, w=6)} | "
                                 f"{cell(p and 100 * p / copy, '{:.1f}%')} {cell(j and 100 * j / copy, '{:.1f}%')}")
        for (v, n), why in sorted(self.notes.items()):
            lines.append(f"# {v}, {n} ranks: {why}")
        return "\n".join(lines)

    def save(self, text):
        os.makedirs(self.a.out, exist_ok=True)
        with open(os.path.join(self.a.out, "nccl-side.txt"), "w") as f:
            f.write(text + "\n")

        def spread(xs):
            m = statistics.median(xs)
            return (max(xs) - min(xs)) / 2 / m if m else None

        samples = {f"{v} {n} {c} {s}": {"us": [x[0] for x in xs], "busbw": [x[1] for x in xs],
                                        "spread": spread([x[0] for x in xs])}
                   for (v, n, c, s), xs in self.samples.items()}
        with open(os.path.join(self.a.out, "nccl-side.json"), "w") as f:
            json.dump({"info": self.info, "copy_GBps": self.copy, "samples": samples,
                       "notes": {f"{v} {n}": w for (v, n), w in self.notes.items()},
                       "failures": self.failures}, f, indent=1)
        copy = statistics.median(self.copy) if self.copy else None
        for coll, n in sorted({(c, n) for (_, n, c, _) in self.samples}):
            series = {v: [(size, statistics.median(x[1] for x in xs))
                          for (v2, n2, c2, size), xs in sorted(self.samples.items()) if (v2, n2, c2) == (v, n, coll)]
                      for v in VARIANTS}
            series = {v: pts for v, pts in series.items() if pts}
            levels = [("40% of copy rate", 0.4 * copy)] if copy else []
            with open(os.path.join(self.a.out, f"nccl-side-{coll}-{n}.svg"), "w") as f:
                f.write(busbw_svg.svg(series, f"{coll}, {n} ranks, {self.info.get('gpu', '?')}: busbw against size",
                                      levels))


def main():
    # The stage's time limit ends this driver with SIGTERM: run() then ends its command.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("nccl_side: terminated"))
    args = parse()
    side = Side(args)
    ranks = side.sweep()
    text = side.table(ranks)
    print(text)
    side.save(text)
    if side.failures:
        print(f"nccl_side: {len(side.failures)} failure(s): " + "; ".join(side.failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
