#!/usr/bin/env python3
"""jitccl's time over a peer's, round by round, from benches/peers.sh's samples.

peers.sh runs every side once per round, interleaved, so a round's two times met the same
phase of the machine's load. Per (layout, collective, size) this prints the median of the
rounds' paired ratios (jitccl / peer), a 95% bootstrap interval of that median, and in how
many rounds jitccl was the slower. An interval that holds 1.00 is a difference the machine's
noise can make; one wholly above it is not.

Usage: python3 benches/paired.py [SAMPLES_TSV] [PEER]
       (default: target/peers-bench/samples.tsv and mpi; PEER: mpi or gloo)
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
    with open(path, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            key = (row["hosts"], row["per_host"], row["rate"], row["coll"], int(row["bytes"]))
            points.setdefault(key, {}).setdefault(row["side"], {})[row["round"]] = float(row["time_us"])
    rng = random.Random(1)
    print(f"# jitccl / {peer}, paired by round: median, 95% bootstrap interval, rounds slower")
    print("# hosts x ranks  rate  coll             bytes | median  interval     slower")
    for (hosts, per_host, rate, coll, size), sides in sorted(points.items()):
        ours, theirs = sides.get("jitccl", {}), sides.get(peer, {})
        ratios = [ours[r] / theirs[r] for r in ours if r in theirs and theirs[r] > 0]
        if not ratios:
            continue
        medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(DRAWS))
        low, high = medians[int(0.025 * DRAWS)], medians[int(0.975 * DRAWS) - 1]
        slower = sum(r > 1 for r in ratios)
        print(f"  {hosts:>2} x {per_host:<2}  {rate:>5}  {coll:<15} {size:>10} | {statistics.median(ratios):6.2f}"
              f"  {low:.2f}..{high:.2f}  {slower:>3}/{len(ratios)}")


if __name__ == "__main__":
    main()
