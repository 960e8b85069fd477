#!/usr/bin/env python3
"""Loss against samples seen for a local run and one or more swarm runs.

Usage: fidelity_summary.py LOCAL.jsonl SWARM.jsonl [SWARM.jsonl ...]
Loss at a sample count is the mean `loss` of the step events in a window of
+-5% of the run's samples around it (single steps are noisy); the gap is against
local, in nats and per cent. Per swarm run: the trainer's wire bytes per sample
(`trainer_exit`), median tokens/s after the first 10% of steps, parameter hash
agreement, and per stage the averaging rounds (`averaging_round`, `round_end`) with
the share of samples whose gradient was computed on parameters a step older than
the ones it stepped (`stale_samples`). Runs named baseline-X (bench_fidelity.sh's
BASELINE) are compared with X: mean of the median tokens/s over the runs of each.
"""
import json
import os
import statistics
import sys


def load(path):
    return [json.loads(line) for line in open(path)]


def loss_at(steps, samples, window):
    near = [s["loss"] for s in steps if abs(s["samples"] - samples) <= window and s["loss"] is not None]
    return statistics.mean(near) if near else float("nan")


def name(path):
    base = os.path.basename(path)
    return base[len("swarm-"):-len(".jsonl")] if base.startswith("swarm-") else base


def rounds_summary(swarm):
    rounds = [e for e in swarm if e.get("event") == "averaging_round"]
    ends = [e for e in swarm if e.get("event") == "round_end"]
    for stage in sorted({e["stage"] for e in rounds}):
        mine = [e for e in rounds if e["stage"] == stage and e["applied"] and e["peers"] > 1]
        theirs = [e for e in ends if e["stage"] == stage]
        if not theirs:
            continue
        per_round = {}
        for e in rounds:
            if e["stage"] == stage:
                per_round[e["round"]] = per_round.get(e["round"], 0) + e["samples"]
        line = (f"  stage {stage}: {len(theirs)} rounds, {statistics.mean(per_round.values()):.1f} samples per round, "
                f"round median {statistics.median(e['seconds'] for e in theirs):.3f} s")
        applied = [e for e in rounds if e["stage"] == stage and e["applied"]]
        taken = sum(e["samples"] for e in applied)
        if taken and all("stale_samples" in e for e in applied):
            stale = sum(e["stale_samples"] for e in applied)
            line += f", {100 * stale / taken:.1f}% of samples a step stale"
        if mine:
            sent = statistics.mean(e["bytes"] for e in mine)
            ideal = statistics.mean(e["ideal_bytes"] for e in mine)
            line += f"; per server {sent / 1e6:.3f} MB sent, {sent / ideal:.3f} x the float32 ideal {ideal / 1e6:.3f} MB"
        print(line)


def median_tps(steps):
    return statistics.median(e["tokens_per_s"] for e in steps[len(steps) // 10:])


def setting(run):
    """A run's setting: its name without the -runN that RUNS adds."""
    head, _, tail = run.rpartition("-run")
    return head if head and tail.isdigit() else run


def baseline_ratios(steps):
    groups = {}
    for run, ss in steps.items():
        groups.setdefault(setting(run), []).append(median_tps(ss))
    for name, tps in sorted(groups.items()):
        base = groups.get("baseline-" + name)
        if base:
            now, then = statistics.mean(tps), statistics.mean(base)
            print(f"{name}: {now:.0f} tokens/s against the baseline's {then:.0f}: {now / then:.3f} x")


def main(local_path, swarm_paths):
    local = load(local_path)
    ls = [e for e in local if e.get("event") == "step"]
    swarms = [(name(p), load(p)) for p in swarm_paths]
    steps = {n: [e for e in s if e.get("event") == "step"] for n, s in swarms}
    if not ls or not all(steps.values()):
        sys.exit("no step events")
    total = min([ls[-1]["samples"]] + [s[-1]["samples"] for s in steps.values()])
    window = max(total * 0.05, 1)
    print(f"{'samples':>8} {'local':>7}" + "".join(f" {n:>24}" for n, _ in swarms))
    for frac in (0.1, 0.25, 0.5, 0.75, 0.95):
        n = total * frac
        a = loss_at(ls, n, window)
        row = f"{n:8.0f} {a:7.3f}"
        for run, _ in swarms:
            b = loss_at(steps[run], n, window)
            row += f" {b:7.3f} ({b - a:+.3f} {100 * (b - a) / a:+5.1f}%)"
        print(row)
    for run, swarm in swarms:
        exits = [e for e in swarm if e.get("event") == "trainer_exit"]
        wire = sum(e.get("wire_bytes", 0) for e in exits)
        samples = sum(e["samples"] for e in exits)
        ss = steps[run]
        tps = median_tps(ss)
        params = {}
        for e in swarm:
            if e.get("event") == "params":
                params.setdefault((e["stage"], e["step"]), set()).add(e["hash"])
        disagree = sum(1 for h in params.values() if len(h) > 1)
        print(f"{run}: {wire / max(samples, 1) / 1e3:.1f} kB on the wire per sample (trainer <-> servers), "
              f"{tps:.0f} tokens/s median, {len(params)} (stage, step) hashes reported, {disagree} differing")
        rounds_summary(swarm)
    baseline_ratios(steps)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
