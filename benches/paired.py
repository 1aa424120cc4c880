#!/usr/bin/env python3
"""jitccl's time over a peer's, round by round, from the samples of benches/peers.sh or
benches/socket.sh.

Those run every side once per round, interleaved, so a round's two times met the same phase
of the machine's load. Per point (every column of the samples but the side, the round and
what was measured) this prints the median of the rounds' paired ratios (jitccl / peer), a 95%
bootstrap interval of that median, and in how many rounds jitccl was the slower. An interval
that holds 1.00 is a difference the machine's noise can make; one wholly above it is not.

Usage: python3 benches/paired.py [SAMPLES_TSV] [PEER]
       (default: target/peers-bench/samples.tsv and mpi; PEER: mpi, gloo or before)
"""
import csv
import random
import statistics
import sys

DRAWS = 4000


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "target/peers-bench/samples.tsv"
    peer = sys.argv[2] if len(sys.argv) > 2 else "mpi"
    points = {}
    measured = {"side", "round", "time_us", "wrong", "load"}
    with open(path, newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        at = [c for c in reader.fieldnames if c not in measured]
        for row in reader:
            key = tuple(row[c] for c in at)
            points.setdefault(key, {}).setdefault(row["side"], {})[row["round"]] = float(row["time_us"])
    rng = random.Random(1)
    print(f"# jitccl / {peer}, paired by round: median, 95% bootstrap interval, rounds slower")
    print(f"# {' '.join(at)} | median  interval     slower")
    # Sizes sort as numbers, the other columns as given.
    order = lambda kv: tuple(int(v) if v.isdigit() else v for v in kv[0])
    for key, sides in sorted(points.items(), key=order):
        ours, theirs = sides.get("jitccl", {}), sides.get(peer, {})
        ratios = [ours[r] / theirs[r] for r in ours if r in theirs and theirs[r] > 0]
        if not ratios:
            continue
        medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(DRAWS))
        low, high = medians[int(0.025 * DRAWS)], medians[int(0.975 * DRAWS) - 1]
        slower = sum(r > 1 for r in ratios)
        print(f"  {' '.join(key)} | {statistics.median(ratios):6.2f}  {low:.2f}..{high:.2f}  {slower:>3}/{len(ratios)}")

if __name__ == "__main__":
    main()
