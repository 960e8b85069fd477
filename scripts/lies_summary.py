#!/usr/bin/env python3
"""Summarises scripts/bench_lies.sh: OUT/<run>.jsonl for the runs it made.

Usage: lies_summary.py OUT

Per run: steps, the loss at the samples every run reached (mean of the 5
steps up to there) and its change against `clean`, tokens/s (samples x
seq_len over the trainer's time to its last step) against `clean`, the
trainer's last `verify` counts (share of extra forward samples, disagreements,
strikes, bans), the liar's strikes and, for a ban, the microbatches the
trainer had issued when it came (`issued` of the step before it); then the
flip runs' loss every 10 steps side by side.
"""
import os
import sys

from metrics_file import read_events

RUNS = ("clean", "clean_verify", "noise", "stale", "drop_half", "clean_clip", "flip_clip", "flip_mean")


def load(path):
    events, _, _ = read_events(path)
    steps = [e for e in events if e["event"] == "step"]
    verify = [e for e in events if e["event"] == "verify"]
    bans = [e for e in events if e["event"] == "verify_ban"]
    strikes = [e for e in events if e["event"] == "verify_strike"]
    evicted = [e for e in events if e["event"] == "server_evicted"]
    clips = [e for e in events if e["event"] == "clip_strike"]
    return steps, verify, bans, strikes, evicted, clips


def loss_at(steps, n):
    """Mean loss of the 5 steps up to step n (fewer when the run has fewer)."""
    upto = [e for e in steps if e.get("step", 0) <= n]
    last = upto[-5:]
    return sum(e.get("loss", float("nan")) for e in last) / len(last) if last else float("nan")


def tokens_per_s(steps):
    if len(steps) < 2:
        return float("nan")
    first, last = steps[0], steps[-1]
    secs = last.get("elapsed_s", 0) - first.get("elapsed_s", 0)
    return (last.get("tokens", 0) - first.get("tokens", 0)) / secs if secs > 0 else float("nan")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    data = {r: load(os.path.join(out, r + ".jsonl")) for r in RUNS if os.path.exists(os.path.join(out, r + ".jsonl"))}
    if not data:
        print(f"no runs in {out}")
        return 1
    common = min(max((e.get("step", 0) for e in d[0]), default=0) for d in data.values())
    ref = data.get("clean")
    ref_loss = loss_at(ref[0], common) if ref else float("nan")
    ref_tps = tokens_per_s(ref[0]) if ref else float("nan")
    print(f"loss at step {common} (mean of 5 steps), tokens/s over the run; against clean")
    print(f"{'run':13} {'steps':>5} {'loss':>7} {'vs clean':>9} {'tokens/s':>9} {'x clean':>8} "
          f"{'verify share':>12} {'disagreed':>9} {'strikes':>7} {'bans':>4}  ban after")
    for run, (steps, verify, bans, strikes, evicted, clips) in data.items():
        loss = loss_at(steps, common)
        tps = tokens_per_s(steps)
        v = verify[-1] if verify else {}
        ban = ""
        if bans:
            before = [e for e in steps if e["t"] <= bans[0]["t"]]
            issued = before[-1].get("issued", 0) if before else 0
            ban = f"{issued} microbatches ({bans[0].get('server')})"
        if evicted:
            ban += f" evicted {evicted[0].get('server')} after {len(clips)} clip strikes"
        print(f"{run:13} {len(steps):5d} {loss:7.3f} {100 * (loss / ref_loss - 1):+8.2f}% {tps:9.0f} "
              f"{tps / ref_tps:8.3f} {100 * v.get('share', 0):11.1f}% {v.get('disagreed', 0):9} "
              f"{v.get('strikes', 0):7} {v.get('bans', 0):4}  {ban}")
    flips = [r for r in ("clean", "flip_clip", "flip_mean") if r in data]
    if len(flips) > 1:
        print("\nloss every 10 steps: " + " | ".join(flips))
        for n in range(10, common + 1, 10):
            print(f"  step {n:4d}: " + " | ".join(f"{loss_at(data[r][0], n):7.3f}" for r in flips))
    return 0


if __name__ == "__main__":
    sys.exit(main())
