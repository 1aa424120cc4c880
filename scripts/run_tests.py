#!/usr/bin/env python3
"""Builds the workspace's tests (`cargo test --release --workspace --all-targets --no-run`)
and the programs they run (libnccl.so, `jitccl`, the examples), and runs the test executables a few at a time, each as cargo would (in its
package's folder). Many targets mostly wait (rank processes, network namespaces,
timeouts) while others compile kernels, so two side by side keep the cores busy where one
after the other left them idle; more at once would set the targets that time failures and
links (which start many rank processes each) against each other. (One `cargo test -p PKG` per target would not do: each package alone unifies
its dependencies' features differently, and cargo would build them again.)

Each target's output is printed whole when it ends; the run fails if any target failed,
and the end lists them with the command that reruns each. The longest targets start first:
their durations are kept in target/test-durations.json (a fresh checkout uses the list
below).

    scripts/run_tests.py [--jobs N] [-- ARGS for every test executable]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

# The longest targets of a run (seconds, roughly), for a checkout without durations.
FIRST = {"torch": 180, "collectives": 170, "nvrtc_specs": 100, "across_hosts": 90, "multiprocess": 80}


def targets(root):
    """(name, executable, package folder, rerun command) of every test executable, built now."""
    build = ["cargo", "test", "--release", "--workspace", "--all-targets", "--no-run"]
    out = subprocess.run(
        build + ["--message-format=json-render-diagnostics"], cwd=root, stdout=subprocess.PIPE, check=True
    ).stdout
    # What the tests run as programs (libnccl.so, which the tests' build leaves out, being
    # a cdylib; `jitccl`; the examples), by the command of a test that finds one missing
    # (tests/common/programs.rs): that test then finds them fresh, where a narrower build
    # would unify features differently and relink them beside the tests that run them.
    subprocess.run(["cargo", "build", "--release", "--workspace", "--lib", "--bins", "--examples"], cwd=root, check=True)
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=root))
    names = {p["manifest_path"]: p["name"] for p in meta["packages"]}
    jobs = []
    for line in out.decode().splitlines():
        m = json.loads(line)
        if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
            continue
        pkg_dir = os.path.dirname(m["manifest_path"])
        pkg = names[m["manifest_path"]]
        kind, name = m["target"]["kind"][0], m["target"]["name"]
        flag = {"test": f"--test {name}", "bench": f"--bench {name}", "example": f"--example {name}", "bin": f"--bin {name}"}
        rerun = f"cargo test --release -p {pkg} {flag.get(kind, '--lib')}"
        jobs.append((f"{pkg} {kind} {name}", m["executable"], pkg_dir, rerun))
    return jobs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="targets run at once (default 2)")
    ap.add_argument("test_args", nargs="*", help="passed to every test executable (e.g. --nocapture)")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target_dir = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    history_path = os.path.join(target_dir, "test-durations.json")
    try:
        with open(history_path) as f:
            history = json.load(f)
    except (OSError, ValueError):
        history = {}

    def expected(job):
        name = job[0]
        return history.get(name, FIRST.get(name.split(" ")[-1], 0))

    try:
        jobs = targets(root)
    except subprocess.CalledProcessError as e:
        print(f"run_tests: the build failed (exit {e.returncode})", file=sys.stderr)
        return e.returncode or 1
    queue = sorted(jobs, key=expected, reverse=True)
    # The build's and the toolchain's libraries (a proc-macro's tests link the standard
    # library dynamically), as cargo puts them on the loader's path.
    release = os.path.join(target_dir, "release")
    sysroot = subprocess.check_output(["rustc", "--print", "sysroot"], cwd=root, text=True).strip()
    host = next(l.split()[1] for l in subprocess.check_output(["rustc", "-vV"], text=True).splitlines() if l.startswith("host:"))
    libs = [os.path.join(release, "deps"), release, os.path.join(sysroot, "lib", "rustlib", host, "lib")]
    libs += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    lock = threading.Lock()
    failed, took = [], {}
    start = time.monotonic()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                name, exe, pkg_dir, rerun = queue.pop(0)
            # What cargo gives a test it runs: its package's folder and the libraries above.
            env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir, LD_LIBRARY_PATH=":".join(libs))
            t0 = time.monotonic()
            with tempfile.TemporaryFile() as out:
                status = subprocess.call(
                    [exe, *args.test_args], cwd=pkg_dir, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
                out.seek(0)
                text = out.read().decode(errors="replace")
            secs = time.monotonic() - t0
            with lock:
                took[name] = round(secs, 1)
                verdict = "ok" if status == 0 else f"FAILED (exit {status})"
                print(f"=== {name}: {verdict} in {secs:.1f} s", flush=True)
                sys.stdout.write(text)
                sys.stdout.flush()
                if status != 0:
                    failed.append((name, rerun))

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history.update(took)
    try:
        os.makedirs(target_dir, exist_ok=True)
        with open(history_path, "w") as f:
            json.dump(history, f, indent=0, sort_keys=True)
    except OSError as e:
        print(f"run_tests: cannot keep durations in {history_path}: {e}", file=sys.stderr)
    print(f"=== {len(took)} targets in {time.monotonic() - start:.0f} s, {len(failed)} failed")
    for name, cmd in failed:
        print(f"FAILED {name}: rerun with `{cmd}`")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
