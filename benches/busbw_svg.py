"""Bus bandwidth against size, one curve per side, as a standalone SVG (no plotting library):
the plots of the benchmarks beside other libraries (tools/compare-mpi.sh, benches/torch/run.sh,
benches/gpu/nccl_side.py) and of figures recorded by hand (docs/img/).

    python3 busbw_svg.py FIGURES.csv OUT.svg [--title TEXT] [--line LABEL=GBPS ...]

FIGURES.csv has a header and the columns `series,size_bytes,busbw_GBps` (lines starting
with # are comments); --line draws a level, such as a share of the device's copy rate."""

import argparse
import csv
import math
from xml.sax.saxutils import escape

COLOURS = ("#1f5fa8", "#c2401a", "#2e8b3a", "#7b3fa0", "#b08800", "#444444")
W, H = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 220, 40, 50


def size_label(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift:
            return f"{b >> shift}{unit}"
    return f"{b}"


def nice_top(v):
    """The smallest 1, 2 or 5 times a power of ten at or above v."""
    e = 10 ** math.floor(math.log10(v)) if v > 0 else 1
    return next(m * e for m in (1, 2, 5, 10) if m * e >= v)


def svg(series, title, lines=()):
    """series: {label: [(size_bytes, busbw_GBps), ...]}; lines: [(label, GBps)]."""
    sizes = [s for pts in series.values() for s, _ in pts]
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    hi = hi if hi > lo else lo + 1
    top = nice_top(max([b for pts in series.values() for _, b in pts] + [v for _, v in lines]) * 1.05)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(s):
        return LEFT + (math.log2(s) - lo) / (hi - lo) * pw

    def y(b):
        return TOP + ph - b / top * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{LEFT}" y="22" font-size="14">{escape(title)}</text>']
    for k in range(6):  # horizontal grid and the busbw axis
        b = top * k / 5
        out.append(f'<line x1="{LEFT}" y1="{y(b):.1f}" x2="{LEFT + pw}" y2="{y(b):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(b) + 4:.1f}" text-anchor="end">{b:g}</text>')
    for e in range(math.ceil(lo), math.floor(hi) + 1):  # a tick per power of two, a label every other
        out.append(f'<line x1="{x(2 ** e):.1f}" y1="{TOP + ph}" x2="{x(2 ** e):.1f}" y2="{TOP + ph + 4}" '
                   'stroke="black"/>')
        if (e - math.ceil(lo)) % 2 == 0:
            out.append(f'<text x="{x(2 ** e):.1f}" y="{TOP + ph + 18}" text-anchor="middle">'
                       f'{size_label(2 ** e)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">size (bytes)</text>')
    out.append(f'<text transform="translate(18 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
               'busbw (GB/s)</text>')
    legend = TOP + ph // 2
    for i, (label, v) in enumerate(lines):
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + pw}" y2="{y(v):.1f}" stroke="#888" '
                   'stroke-dasharray="6 4"/>')
        out.append(f'<text x="{LEFT + pw + 10}" y="{y(v) + 4:.1f}" fill="#555">{escape(label)}</text>')
    for i, (label, pts) in enumerate(series.items()):
        c = COLOURS[i % len(COLOURS)]
        pts = sorted(pts)
        path = " ".join(f"{x(s):.1f},{y(b):.1f}" for s, b in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        out += [f'<circle cx="{x(s):.1f}" cy="{y(b):.1f}" r="3" fill="{c}"/>' for s, b in pts]
        out.append(f'<line x1="{LEFT + pw + 10}" y1="{legend + 18 * i}" x2="{LEFT + pw + 30}" '
                   f'y2="{legend + 18 * i}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 36}" y="{legend + 18 * i + 4}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def read(path):
    series = {}
    with open(path) as f:
        for row in csv.DictReader(ln for ln in f if not ln.startswith("#")):
            series.setdefault(row["series"], []).append((int(row["size_bytes"]), float(row["busbw_GBps"])))
    return series


def main():
    p = argparse.ArgumentParser()
    p.add_argument("figures")
    p.add_argument("out")
    p.add_argument("--title", default="bus bandwidth against size")
    p.add_argument("--line", action="append", default=[], help="LABEL=GBPS: a dashed level")
    a = p.parse_args()
    lines = [(t.rsplit("=", 1)[0], float(t.rsplit("=", 1)[1])) for t in a.line]
    with open(a.out, "w") as f:
        f.write(svg(read(a.figures), a.title, lines))


if __name__ == "__main__":
    main()
