#!/usr/bin/env python3
"""The history of a swarm's orders, checked from its metrics files (issue 27).

Reads every process's events (one or more JSON-lines metrics files; a
cluster's children share one) and fails (exit 1, each violation printed) when:

  stale order      a coordinator ordered (round_start, reload) with term T
                   after a coordinator of a newer term had begun ordering:
                   two leaders at once, or a deposed one that went on;
  stale apply      a server applied a round ordered after a newer term had
                   begun ordering (fencing should have refused it);
  two leaders      rounds of two terms were applied at the same (stage, step);
  two hashes       servers reported different parameters at one (stage,
                   step) (`params`), outside a stage that was lost and
                   restarted from a checkpoint (`stage_lost`);
  slow recovery    with --max-recovery S: a stage applied no round ordered
                   after a coordinator was killed (`chaos` kill of a
                   coordinator) within S seconds of the kill, while it
                   trained at all afterwards. (Rounds the killed one ordered
                   still finish among the servers; they do not count.)

It prints what it checked and, for every coordinator kill, how long each
stage took to apply a round ordered after it (by the next leader, or by the
restarted coordinator without --control).

Usage: check_history.py [--max-recovery S] METRICS.jsonl [...]
"""
import argparse
import json
import sys
from collections import defaultdict


def load(paths):
    events = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    print(f"{path}:{n}: not JSON, skipped", file=sys.stderr)
                    continue
                if isinstance(e, dict) and isinstance(e.get("t"), (int, float)):
                    events.append(e)
    events.sort(key=lambda e: e["t"])
    return events


def check(events, max_recovery=None):
    """Violations (strings), the report's lines, and every recovery time (seconds, per kill and stage)."""
    bad, report, recoveries = [], [], []
    orders = [e for e in events if e.get("event") in ("round_start", "reload") and "term" in e]
    first_order = {}
    for e in orders:
        first_order.setdefault(e["term"], e["t"])
    terms = sorted(first_order)
    round_ordered = {e["round"]: e for e in orders if e["event"] == "round_start"}

    def newer_began_before(term, t):
        """The first newer term that had begun ordering before time t, if any."""
        for other in terms:
            if other > term and first_order[other] < t:
                return other
        return None

    for e in orders:
        newer = newer_began_before(e["term"], e["t"])
        if newer is not None:
            bad.append(f"stale order: {e['event']} of stage {e.get('stage')} at step {e.get('step')} by term "
                       f"{e['term']} at t={e['t']:.3f}, after term {newer} began ordering at "
                       f"t={first_order[newer]:.3f}")

    applied = [e for e in events if e.get("event") == "averaging_round" and e.get("applied")]
    terms_at = defaultdict(set)
    for e in applied:
        order = round_ordered.get(e.get("round"))
        term = e.get("term", 0)
        if order is not None:
            newer = newer_began_before(term, order["t"])
            if newer is not None:
                bad.append(f"stale apply: server {e.get('server')} applied round {e.get('round')} of term {term} "
                           f"(stage {e.get('stage')}, step {e.get('step')}), ordered after term {newer} began")
        terms_at[(e.get("stage"), e.get("step"))].add(term)
    for (stage, step), ts in sorted(terms_at.items()):
        if len(ts) > 1:
            bad.append(f"two leaders: stage {stage} step {step} was reached by rounds of terms {sorted(ts)}")

    lost_at = defaultdict(lambda: float("inf"))
    for e in events:
        if e.get("event") == "stage_lost":
            lost_at[e.get("stage")] = min(lost_at[e.get("stage")], e["t"])
    hashes = defaultdict(set)
    for e in events:
        if e.get("event") == "params" and e["t"] < lost_at[e.get("stage")]:
            hashes[(e.get("stage"), e.get("step"))].add(str(e.get("hash")))
    for (stage, step), hs in sorted(hashes.items()):
        if len(hs) > 1:
            bad.append(f"two hashes: stage {stage} step {step}: {sorted(hs)}")

    stages = sorted({e.get("stage") for e in applied})
    kills = [e for e in events if e.get("event") == "chaos" and e.get("action") == "kill"
             and str(e.get("process", "")).startswith("coordinator")]
    worst = 0.0
    for k in kills:
        waits = []
        for s in stages:
            after = [e["t"] for e in applied
                     if e.get("stage") == s and e["t"] > k["t"] and e.get("round") in round_ordered
                     and round_ordered[e["round"]]["t"] > k["t"]]
            if not after:
                continue  # the run ended (or the stage stopped training) before its next round
            wait = min(after) - k["t"]
            worst = max(worst, wait)
            recoveries.append(wait)
            waits.append(f"stage {s} {wait:.2f} s")
            if max_recovery is not None and wait > max_recovery:
                bad.append(f"slow recovery: stage {s} applied its first round ordered after {k['process']} "
                           f"was killed at t={k['t']:.3f} {wait:.2f} s after the kill (limit {max_recovery} s)")
        report.append(f"kill of {k['process']} (pid {k.get('pid')}): a round ordered after it applied after " +
                      (", ".join(waits) if waits else "none (the run ended)"))
    report.insert(0, f"{len(orders)} orders of {len(terms)} term(s), {len(applied)} applied rounds, "
                     f"{len(hashes)} (stage, step) hashes, {len(kills)} coordinator kill(s)"
                     + (f", slowest recovery {worst:.2f} s" if kills else ""))
    return bad, report, recoveries


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("metrics", nargs="+")
    ap.add_argument("--max-recovery", type=float, default=None,
                    help="fail when a stage applied no round this many seconds after a coordinator kill")
    args = ap.parse_args()
    bad, report, _ = check(load(args.metrics), args.max_recovery)
    for line in report:
        print(line)
    for line in bad:
        print("VIOLATION", line)
    print("history: " + ("OK" if not bad else f"{len(bad)} violation(s)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
