#!/usr/bin/env python3
"""Loss against samples seen for a local and a swarm run, and the swarm's averaging rounds.

Usage: fidelity_summary.py LOCAL.jsonl SWARM.jsonl
Loss at a sample count is the mean `loss` of the step events in a window of
+-5% of the run's samples around it (single steps are noisy). Rounds: per stage,
from the servers' `averaging_round` and the coordinator's `round_end` events.
"""
import json
import statistics
import sys


def load(path):
    return [json.loads(line) for line in open(path)]


def loss_at(steps, samples, window):
    near = [s["loss"] for s in steps if abs(s["samples"] - samples) <= window and s["loss"] is not None]
    return statistics.mean(near) if near else float("nan")


def main(local_path, swarm_path):
    local, swarm = load(local_path), load(swarm_path)
    ls = [e for e in local if e.get("event") == "step"]
    ss = [e for e in swarm if e.get("event") == "step"]
    if not ls or not ss:
        sys.exit("no step events")
    total = min(ls[-1]["samples"], ss[-1]["samples"])
    window = max(total * 0.05, 1)
    print(f"{'samples':>8} {'local loss':>10} {'swarm loss':>10} {'gap':>7}")
    for frac in (0.1, 0.25, 0.5, 0.75, 0.95):
        n = total * frac
        a, b = loss_at(ls, n, window), loss_at(ss, n, window)
        print(f"{n:8.0f} {a:10.3f} {b:10.3f} {b - a:+7.3f}")
    rounds = [e for e in swarm if e.get("event") == "averaging_round"]
    ends = [e for e in swarm if e.get("event") == "round_end"]
    params = {}
    for e in swarm:
        if e.get("event") == "params":
            params.setdefault((e["stage"], e["step"]), set()).add(e["hash"])
    disagree = sum(1 for h in params.values() if len(h) > 1)
    print(f"params: {len(params)} (stage, step) pairs reported, {disagree} with differing hashes")
    for stage in sorted({e["stage"] for e in rounds}):
        mine = [e for e in rounds if e["stage"] == stage and e["applied"] and e["peers"] > 1]
        theirs = [e for e in ends if e["stage"] == stage]
        if not theirs:
            continue
        per_round = {}
        for e in rounds:
            if e["stage"] == stage:
                per_round[e["round"]] = per_round.get(e["round"], 0) + e["samples"]
        print(f"stage {stage}: {len(theirs)} rounds, mean {statistics.mean(per_round.values()):.1f} samples per round "
              f"(target: --batch-size), round time median {statistics.median(e['seconds'] for e in theirs):.3f} s "
              f"(start to last result)")
        if mine:
            sent = statistics.mean(e["bytes"] for e in mine)
            ideal = statistics.mean(e["ideal_bytes"] for e in mine)
            print(f"  per server: {sent / 1e6:.3f} MB sent, ideal {ideal / 1e6:.3f} MB, ratio {sent / ideal:.3f}; "
                  f"exchange median {statistics.median(e['seconds'] for e in mine):.3f} s")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
