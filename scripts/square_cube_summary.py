#!/usr/bin/env python3
"""Tokens/s of square-cube runs (scripts/bench_square_cube.sh) and the table.

Usage: square_cube_summary.py one METRICS.jsonl WARMUP_S
       square_cube_summary.py table DIR WARMUP_S
A run's tokens/s counts the tokens of steps completed from WARMUP_S after its
first step to its last step, over that time. The table divides each run by
the loopback run of the same width, routing and compression ("relative
utilisation") and prints one markdown table per compression.
"""
import glob
import json
import os
import re
import sys

def tokens_per_s(path, warmup):
    steps = []
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "step":
            steps.append(e)
    if len(steps) < 2:
        return None, len(steps)
    start = steps[0]["t"] + warmup
    window = [s for s in steps if s["t"] >= start]
    first = max([s for s in steps if s["t"] < start], key=lambda s: s["t"], default=steps[0])
    if not window or window[-1]["t"] <= first["t"]:
        return None, len(steps)
    last = window[-1]
    return (last["tokens"] - first["tokens"]) / (last["t"] - first["t"]), len(window)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "one":
        rate, n = tokens_per_s(sys.argv[2], float(sys.argv[3]))
        print(f"{rate:.0f} tokens/s ({n} steps timed)" if rate else f"no throughput ({n} steps)")
        return
    if len(sys.argv) != 4 or sys.argv[1] != "table":
        sys.exit(__doc__)
    warmup = float(sys.argv[3])
    runs = {}
    for path in glob.glob(os.path.join(sys.argv[2], "*.jsonl")):
        m = re.match(r"(.+)_d(\d+)_(\w+)_(\w+)\.jsonl$", os.path.basename(path))
        if m:
            net, d, routing, compression = m.group(1), int(m.group(2)), m.group(3), m.group(4)
            runs[(net, d, routing, compression)] = tokens_per_s(path, warmup)[0]
    widths = sorted({k[1] for k in runs})
    routings = sorted({k[2] for k in runs}, key=lambda r: r != "swarm")
    nets = sorted({k[0] for k in runs if k[0] != "loopback"},
                  key=lambda n: (-float(n.split("-")[0].replace("gbit", "000").replace("mbit", "")),
                                 float(n.split("-")[1])))
    for compression in sorted({k[3] for k in runs}):
        cols = [(d, r) for d in widths for r in routings]
        print(f"\ncompression {compression}: tokens/s relative to loopback (loopback tokens/s in the first row)\n")
        print("| network | " + " | ".join(f"d={d} {r}" for d, r in cols) + " |")
        print("|---|" + "---|" * len(cols))
        base = {c: runs.get(("loopback", c[0], c[1], compression)) for c in cols}
        print("| loopback | " + " | ".join(f"{base[c]:.0f}" if base[c] else "-" for c in cols) + " |")
        for net in nets:
            cells = []
            for c in cols:
                v = runs.get((net, c[0], c[1], compression))
                cells.append(f"{v / base[c]:.2f}" if v and base[c] else "-")
            print(f"| {net.replace('-', ' / ')} ms | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
