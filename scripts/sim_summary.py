#!/usr/bin/env python3
"""Tables of swarm-sim runs, alone or against real `swarm --role cluster` runs.

  sim_summary.py reality DIR ...  DIR/real-NAME.jsonl against DIR/sim-NAME.jsonl
                                  for every NAME: tokens/s of both, their ratio,
                                  and the direction of each comparison; with
                                  several DIRs (repeated runs) the means and
                                  the real runs' spread
  sim_summary.py runs A.jsonl ... one row per swarm-sim run (its sim_summary)
  sim_summary.py pairs A1 B1 A2 B2 ...
                                  runs A against runs B (e.g. one policy against
                                  another, each pair on one seed): both shares
                                  of the best assignment, their difference, and
                                  the means and the pairs A won

Tokens/s of a run is measured the same way for real and simulated files: the
tokens of `step` events after the first 20% of steps (warm-up, at least one),
over the time from that step to the run's end (cluster_exit), so stalls count.
"""
import json
import os
import sys

# Pairs (better, worse) that SWARM's design says should come out in this order.
DIRECTIONS = [("swarm", "churn"), ("churn", "static_churn"), ("rebalance", "rebalance_off")]


def events(path):
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and isinstance(e.get("t"), (int, float)):
                out.append(e)
    out.sort(key=lambda e: e["t"])
    return out


def tokens_per_s(path):
    ev = events(path)
    # Per trainer: tokens are cumulative per trainer, so sum each trainer's gain.
    steps = [e for e in ev if e.get("event") == "step" and isinstance(e.get("tokens"), (int, float))]
    if len(steps) < 2:
        return None
    warm = max(1, len(steps) // 5)
    t0 = steps[warm - 1]["t"]
    t1 = max([steps[-1]["t"]] + [e["t"] for e in ev if e.get("event") == "cluster_exit"])
    first, last = {}, {}
    for e in steps[warm - 1:]:
        key = e.get("trainer", "?")
        first.setdefault(key, e["tokens"])
        last[key] = e["tokens"]
    tokens = sum(last[k] - first[k] for k in last)
    return tokens / max(t1 - t0, 1e-9)


def reality(folders):
    """One folder: each scenario's real and simulated tokens/s. Several (repeated
    real runs, each simulated with its own churn): their means, and how far the
    real runs were apart (largest / smallest - 1), the noise any match is within."""
    names = sorted({f[len("real-"):-len(".jsonl")] for folder in folders for f in os.listdir(folder)
                    if f.startswith("real-") and f.endswith(".jsonl")})
    order = [n for n, _ in DIRECTIONS for n in (n,)] + [w for _, w in DIRECTIONS]
    names.sort(key=lambda n: order.index(n) if n in order else len(order))
    real, sim = {}, {}
    several = len(folders) > 1
    print(f"{'scenario':<16}{'real tokens/s':>15}{'sim tokens/s':>15}{'sim/real':>10}"
          + (f"{'real spread':>13}  real runs" if several else ""))
    worst = 0.0
    for n in names:
        rs = [tokens_per_s(os.path.join(f, f"real-{n}.jsonl")) for f in folders
              if os.path.exists(os.path.join(f, f"real-{n}.jsonl"))]
        ss = [tokens_per_s(os.path.join(f, f"sim-{n}.jsonl")) for f in folders
              if os.path.exists(os.path.join(f, f"sim-{n}.jsonl"))]
        rs, ss = [x for x in rs if x], [x for x in ss if x]
        r = sum(rs) / len(rs) if rs else None
        s_ = sum(ss) / len(ss) if ss else None
        real[n], sim[n] = r, s_
        ratio = s_ / r if r and s_ else None
        if ratio:
            worst = max(worst, abs(ratio - 1))
        line = f"{n:<16}{r or 0:>15,.0f}{s_ or 0:>15,.0f}{ratio or 0:>10.3f}"
        if several and rs:
            line += f"{100 * (max(rs) / min(rs) - 1):>12.1f}%  " + " / ".join(f"{x:,.0f}" for x in rs)
        print(line)
    print(f"largest difference: {100 * worst:.1f}% (target: within 15%)")
    agree = 0
    checked = 0
    for a, b in DIRECTIONS:
        if None in (real.get(a), real.get(b), sim.get(a), sim.get(b)):
            continue
        checked += 1
        rd, sd = real[a] > real[b], sim[a] > sim[b]
        agree += rd == sd
        print(f"{a} vs {b}: real {real[a] / real[b]:.3f}, sim {sim[a] / sim[b]:.3f} -> "
              f"{'same direction' if rd == sd else 'DIFFERENT direction'}")
    print(f"directions: {agree} of {checked} the same")


def runs(paths):
    print(f"{'run':<28}{'tokens/s':>12}{'of best':>9}{'of fluid':>9}{'peers up':>9}{'moves':>7}"
          f"{'rounds':>8}{'dropped':>8}{'wall s':>8}{'RSS MiB':>8}")
    for p in paths:
        s = next((e for e in reversed(events(p)) if e.get("event") == "sim_summary"), None)
        if s is None:
            print(f"{os.path.basename(p):<28} no sim_summary (not a finished swarm-sim run)")
            continue
        moves = s["moves_load"] + s["moves_redundancy"] + s["moves_empty"]
        print(f"{os.path.basename(p)[:-6]:<28}{s['tokens_per_s']:>12,.0f}{100 * s['share_of_optimal']:>8.1f}%"
              f"{100 * s['share_of_fluid']:>8.1f}%{s['mean_peers_up']:>9.1f}{moves:>7}{s['rounds_applied']:>8}"
              f"{s['dropped']:>8}{s['wall_s']:>8.1f}{s['peak_rss_mib']:>8.0f}")


def summary(path):
    s = next((e for e in reversed(events(path)) if e.get("event") == "sim_summary"), None)
    if s is None:
        sys.exit(f"sim_summary.py: {path}: no sim_summary (not a finished swarm-sim run)")
    return s


def pairs(paths):
    if len(paths) % 2:
        sys.exit("sim_summary.py pairs: an even number of files (A1 B1 A2 B2 ...)")
    name = lambda p: os.path.basename(p)[:-6]
    print(f"{'A':<28}{'B':<28}{'A of best':>10}{'B of best':>10}{'A - B':>8}")
    diffs, a_all, b_all = [], [], []
    for a, b in zip(paths[::2], paths[1::2]):
        sa, sb = 100 * summary(a)["share_of_optimal"], 100 * summary(b)["share_of_optimal"]
        a_all.append(sa), b_all.append(sb), diffs.append(sa - sb)
        print(f"{name(a):<28}{name(b):<28}{sa:>9.1f}%{sb:>9.1f}%{sa - sb:>8.1f}")
    n = len(diffs)
    mean = sum(diffs) / n
    sd = f" (sd {(sum((d - mean) ** 2 for d in diffs) / (n - 1)) ** 0.5:.1f})" if n > 1 else ""
    print(f"means over {n}: A {sum(a_all) / n:.1f}%, B {sum(b_all) / n:.1f}%, A - B {mean:.1f} points{sd};"
          f" A above B in {sum(d > 0 for d in diffs)} of {n}")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "reality":
        missing = [d for d in sys.argv[2:] if not os.path.isdir(d)]
        if missing:
            sys.exit(f"sim_summary.py: not a folder: {', '.join(missing)}")
        reality(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "runs":
        runs(sys.argv[2:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "pairs":
        pairs(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
