#!/usr/bin/env python3
"""The compression ablation's table (scripts/bench_compression.sh).

Usage: compression_summary.py RUN.jsonl [RUN.jsonl ...]
Each file is named COMPRESSION_BOUNDARY_seedN.jsonl (the boundary's ':' as '-').
Per setting, over its seeds: the training loss at the samples every run reached
(mean of the step events within +-5% of them; the last 5% of a run), its change
against none/none at the same seeds, the trainer's wire bytes per sample
(`trainer_exit`, both directions, every stage cut), and the median tokens/s after
the first 10% of steps.
"""
import json
import os
import re
import statistics
import sys


def load(path):
    return [json.loads(line) for line in open(path)]


def parse_name(path):
    m = re.fullmatch(r"(.+?)_(.+)_seed(\d+)\.jsonl", os.path.basename(path))
    if not m:
        sys.exit(f"{path}: expected COMPRESSION_BOUNDARY_seedN.jsonl")
    return m.group(1), m.group(2).replace("-", ":"), int(m.group(3))


def loss_at(steps, samples, window):
    near = [s["loss"] for s in steps if abs(s["samples"] - samples) <= window and s.get("loss") is not None]
    return statistics.mean(near) if near else float("nan")


def main(paths):
    runs = {}
    for p in paths:
        events = load(p)
        steps = [e for e in events if e.get("event") == "step"]
        if not steps:
            sys.exit(f"{p}: no step events (did the run fail? see its log)")
        exits = [e for e in events if e.get("event") == "trainer_exit"]
        samples = sum(e["samples"] for e in exits)
        wire = sum(e.get("wire_bytes", 0) for e in exits) / max(samples, 1)
        tps = statistics.median(e["tokens_per_s"] for e in steps[len(steps) // 10:])
        runs[parse_name(p)] = {"steps": steps, "wire": wire, "tps": tps}
    total = min(r["steps"][-1]["samples"] for r in runs.values())
    window = max(total * 0.05, 1)
    for r in runs.values():
        r["loss"] = loss_at(r["steps"], total - window, window)
    settings = []
    for key in runs:
        if key[:2] not in settings:
            settings.append(key[:2])
    seeds = sorted({key[2] for key in runs})
    base = ("none", "none")
    print(f"training loss at {total - window:.0f} samples (mean over the last {2 * window:.0f}), seeds {seeds}")
    print(f"{'compression':<12} {'boundary':<14} {'loss per seed':<22} {'vs none':>9} {'kB/sample':>10} "
          f"{'x none':>7} {'tokens/s':>9} {'x none':>7}")
    for setting in settings:
        mine = [runs[setting + (s,)] for s in seeds if setting + (s,) in runs]
        ref = [runs[base + (s,)] for s in seeds if setting + (s,) in runs and base + (s,) in runs]
        loss = statistics.mean(r["loss"] for r in mine)
        wire = statistics.mean(r["wire"] for r in mine)
        tps = statistics.mean(r["tps"] for r in mine)
        per_seed = " / ".join(f"{r['loss']:.3f}" for r in mine)
        row = f"{setting[0]:<12} {setting[1]:<14} {per_seed:<22}"
        if len(ref) == len(mine):
            rl = statistics.mean(r["loss"] for r in ref)
            rw = statistics.mean(r["wire"] for r in ref)
            rt = statistics.mean(r["tps"] for r in ref)
            row += f" {100 * (loss - rl) / rl:+8.1f}% {wire / 1e3:10.1f} {wire / rw:7.3f} {tps:9.0f} {tps / rt:7.2f}"
        else:
            row += f" {'':>9} {wire / 1e3:10.1f} {'':>7} {tps:9.0f}"
        print(row)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
