#!/usr/bin/env python3
"""Summarises `step` events of metrics files: tokens/s after warm-up and losses.

Usage: metrics_summary.py [--until-exit] REFERENCE.jsonl OTHER.jsonl [...]
Prints one row per file and each file's throughput as a ratio to the first.
The first 20% of steps (at least 1) are warm-up and left out of tokens/s.
--until-exit: the timed window ends at the cluster's exit, not at the last
step, so a run that stalls at the end is charged for the stall.
"""
import json
import sys


def summarise(path, until_exit):
    events = [json.loads(line) for line in open(path)]
    steps = [e for e in events if e.get("event") == "step"]
    if not steps:
        sys.exit(f"{path}: no step events")
    warm = max(1, len(steps) // 5)
    if warm >= len(steps):
        warm = len(steps) - 1
    # Throughput over the timed window: tokens completed between the last warm-up
    # step and the last step, divided by the wall time between them.
    t0, t1 = steps[warm - 1]["t"] if warm else 0, steps[-1]["t"]
    if until_exit:
        t1 = max([t1] + [e["t"] for e in events if e.get("event") == "cluster_exit"])
    tokens = steps[-1]["tokens"] - (steps[warm - 1]["tokens"] if warm else 0)
    return {
        "steps": len(steps),
        "tokens_per_s": tokens / max(t1 - t0, 1e-9),
        "first_loss": steps[0]["loss"],
        "last_loss": sum(e["loss"] for e in steps[-5:]) / len(steps[-5:]),
    }


def main():
    args = sys.argv[1:]
    until_exit = "--until-exit" in args
    rows = [(p, summarise(p, until_exit)) for p in args if p != "--until-exit"]
    ref = rows[0][1]["tokens_per_s"]
    print(f"{'file':40} {'steps':>5} {'tokens/s':>10} {'ratio':>6} {'first loss':>10} {'last-5 loss':>11}")
    for path, r in rows:
        print(f"{path[-40:]:40} {r['steps']:5d} {r['tokens_per_s']:10.1f} {r['tokens_per_s'] / ref:6.3f} "
              f"{r['first_loss']:10.3f} {r['last_loss']:11.3f}")


if __name__ == "__main__":
    main()
