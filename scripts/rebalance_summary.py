#!/usr/bin/env python3
"""Rebalancing benchmark helpers (scripts/bench_rebalance.sh).

  rebalance_summary.py best METRICS.jsonl SLOWDOWNS
      The best static assignment of servers with these --slowdown factors to the
      stages, by brute force over every assignment: the one whose slowest stage
      serves the most samples/s, where a server's rate on a stage is
      1 / (slowdown x the stage's cost) and the costs are those the coordinator
      wrote in METRICS.jsonl (`stage_load` events). Prints the flags that start
      it: --stage-servers N0,N1,... --server-slowdowns S,S,... (stage-major).
  rebalance_summary.py moves METRICS.jsonl...
      Per file: the moves (`rebalance` events) by reason, when the first came,
      and how long moves took.
"""
import itertools
import json
import statistics
import sys


def load(path):
    return [json.loads(line) for line in open(path)]


def stage_costs(events):
    costs = {}
    for e in events:
        if e.get("event") == "stage_load":
            costs[e["stage"]] = e["cost"]
    if not costs:
        sys.exit("no stage_load events: was the coordinator's --metrics set?")
    return [costs[s] for s in sorted(costs)]


def best(path, slowdowns):
    costs = stage_costs(load(path))
    speeds = [1.0 / float(s) for s in slowdowns.split(",")]
    stages = len(costs)
    top, top_assign = -1.0, None
    for assign in itertools.product(range(stages), repeat=len(speeds)):
        if len(set(assign)) < stages:
            continue  # every stage needs a server
        caps = [0.0] * stages
        for server, stage in enumerate(assign):
            caps[stage] += speeds[server] / costs[stage]
        if min(caps) > top:
            top, top_assign = min(caps), assign
    counts = [top_assign.count(s) for s in range(stages)]
    ordered = [slowdowns.split(",")[i] for s in range(stages) for i, a in enumerate(top_assign) if a == s]
    print(f"--stage-servers {','.join(map(str, counts))} --server-slowdowns {','.join(ordered)}")


def moves(paths):
    for path in paths:
        events = load(path)
        start = min(e["t"] for e in events)
        mv = [e for e in events if e.get("event") == "rebalance"]
        by_reason = {}
        for e in mv:
            by_reason[e["reason"]] = by_reason.get(e["reason"], 0) + 1
        kills = sum(1 for e in events if e.get("event") == "chaos" and e.get("action") == "kill")
        line = f"{path[-40:]:40} {kills} kills; moves: " + (", ".join(f"{n} {r}" for r, n in sorted(by_reason.items())) or "none")
        timed = [e["seconds"] for e in mv if e["reason"] != "join"]
        if timed:
            first = min(e["t"] - e["seconds"] for e in mv if e["reason"] != "join")
            line += f"; first move ordered {first - start:.1f} s in; a move takes {statistics.median(timed):.2f} s (median)"
        print(line)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "best":
        best(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "moves":
        moves(sys.argv[2:])
    else:
        sys.exit(__doc__)
