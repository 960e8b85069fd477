#!/usr/bin/env python3
"""Summarises a soak test (scripts/soak.sh): OUT/faultfree.* and OUT/chaos.*.

Usage: soak_summary.py OUT [--min-life SECONDS]

Reads OUT/<run>.jsonl (metrics) and OUT/<run>-rss.csv (t_s,pid,role,rss_kib[,stage])
for the runs faultfree and chaos; a missing run is left out. For each run prints:
  1. duration (first to last step, and from cluster_start), steps, samples
  2. dropped microbatches, issued / completed
  3. samples per stage: the trainers' acked against the servers' committed_samples
     (a SIGKILLed server writes no server_exit: its samples show as the difference)
  4. hash disagreements: (stage, epoch, step) keys whose `params` events carry more
     than one hash; epoch = new timelines of the stage before: `stage_lost`
     events, or checkpoint loads below the step it had reached (goal: 0)
  4b. averaging rounds per stage (round_end): how many, applied, the longest
  4c. verified work and robust averaging (issue #47): the trainers' last `verify`
      counts, and every verify_strike, verify_ban, server_banned, clip_strike and
      server_evicted naming a server (in a soak no server lies: goal 0)
  5. checkpoints written and loaded, stages lost and the steps each one cost
  6. chaos actions, coordinator kills, wipes, processes the cluster restarted
  7. the longest stalls (gaps between a trainer's consecutive steps)
  8. RSS growth of every process alive >= --min-life s (600), from its first sample
     60 s into its life to its last, and the largest growth per role; then every
     process's RSS at 1 minute, half time and the end of the run
then the comparison: steps and samples of chaos over faultfree, and the mean loss per
5-minute window (and over the last 2 minutes) side by side.
Lines that are not JSON objects with a numeric "t" are skipped and counted.
"""
import collections
import os
import statistics
import sys

from metrics_file import read_events
from soak_memory import fmt_t, load_rss, section_memory

RUNS = ("faultfree", "chaos")
WINDOW_S = 300  # loss windows
LAST_S = 120  # the last-minutes loss


# ---------------------------------------------------------------- reading


def load_events(path):
    """Events sorted by time, and the number of lines skipped (scripts/metrics_file.py)."""
    events, bad, _ = read_events(path)
    return events, bad


def num(e, key, default=None):
    """A numeric field, or default when missing, null or not a number."""
    v = e.get(key)
    if isinstance(v, bool):
        return default
    if isinstance(v, (int, float)):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def by_event(events):
    groups = collections.defaultdict(list)
    for e in events:
        groups[e.get("event", "?")].append(e)
    return groups


def trainer_steps(ev):
    """Step events of trainers (not of `--role local`)."""
    return [e for e in ev["step"] if e.get("role", "trainer") == "trainer" and num(e, "step") is not None]


def per_trainer(events):
    groups = collections.defaultdict(list)
    for e in events:
        groups[e.get("trainer", 0)].append(e)
    return groups


# ---------------------------------------------------------------- a run


class Run:
    """One run's events, grouped by event name, with its start time t0."""

    def __init__(self, name, out, min_life):
        self.name = name
        self.events, self.bad = load_events(os.path.join(out, name + ".jsonl"))
        self.ev = by_event(self.events)
        starts = self.ev["cluster_start"]
        self.t0 = starts[0]["t"] if starts else (self.events[0]["t"] if self.events else 0)
        self.steps = trainer_steps(self.ev)
        self.rss, self.rss_roles = load_rss(os.path.join(out, name + "-rss.csv"))
        self.min_life = min_life

    def rel(self, e):
        return e["t"] - self.t0

    def max_step(self):
        return max((int(num(e, "step")) for e in self.steps), default=0)

    def samples(self):
        """Samples completed: each trainer's last step, summed."""
        return sum(num(rows[-1], "samples", 0) for rows in per_trainer(self.steps).values())


def section_progress(r):
    print("1. progress")
    if len(r.ev["cluster_start"]) > 1:
        print(f"   note: {len(r.ev['cluster_start'])} cluster_start events (runs appended to one file?)")
    end = r.events[-1]["t"] if r.events else r.t0
    exits = r.ev["cluster_exit"]
    print(f"   from cluster_start to {'cluster_exit' if exits else 'the last event'}: {fmt_t(end - r.t0)} (m:s)")
    if not r.steps:
        print("   no step events")
        return
    first, last = r.steps[0], r.steps[-1]
    print(f"   steps from {fmt_t(r.rel(first))} to {fmt_t(r.rel(last))}: {fmt_t(last['t'] - first['t'])}")
    print(f"   steps done {r.max_step()}, samples {int(r.samples())}")


def section_drops(r):
    print("2. dropped microbatches")
    exits = r.ev["trainer_exit"]
    line = f"   dropped events {len(r.ev['dropped'])}"
    if exits:
        dropped = sum(num(e, "dropped", 0) for e in exits)
        issued = sum(num(e, "issued", 0) for e in exits)
        completed = sum(num(e, "completed", 0) for e in exits)
        line += f", trainer_exit.dropped {int(dropped)}; issued {int(issued)}, completed {int(completed)}"
    elif r.steps:
        lasts = [rows[-1] for rows in per_trainer(r.steps).values()]
        issued = sum(num(e, "issued", 0) for e in lasts)
        completed = sum(num(e, "completed", 0) for e in lasts)
        line += f"; no trainer_exit; last step: issued {int(issued)}, completed {int(completed)}"
    print(line)
    reasons = collections.Counter(f"stage {e.get('stage', '?')} {e.get('op', '?')}: {e.get('reason', '?')}"
                                  for e in r.ev["dropped"])
    for reason, n in reasons.most_common(5):
        print(f"     {n:5d} x {reason}")


def acked_per_stage(r):
    """{stage: samples acked}, and where it came from."""
    acked = collections.Counter()
    exits = [e for e in r.ev["trainer_exit"] if e.get("acked") not in (None, "")]
    if exits:
        for e in exits:
            for k, v in enumerate(str(e["acked"]).split(",")):
                try:
                    acked[k] += int(float(v))
                except ValueError:
                    pass
        return acked, "trainer_exit.acked"
    stages = r.ev["cluster_start"][0].get("stages") if r.ev["cluster_start"] else None
    stages = int(stages) if isinstance(stages, (int, float)) else 1 + max(
        (int(num(e, "stage", 0)) for e in r.ev["server_exit"]), default=0)
    for k in range(stages):
        acked[k] = int(r.samples())
    return acked, "no trainer_exit: the last step's samples"


def section_accounting(r):
    print("3. samples per stage")
    acked, source = acked_per_stage(r)
    committed, exits = collections.Counter(), collections.Counter()
    for e in r.ev["server_exit"]:
        k = num(e, "stage")
        if k is None:
            continue
        committed[int(k)] += num(e, "committed_samples", 0)
        exits[int(k)] += 1
    print(f"   acked from {source}; committed = sum of server_exit.committed_samples")
    print(f"   {'stage':>5} {'acked':>10} {'committed':>10} {'acked-committed':>16} {'server_exits':>12}")
    for k in sorted(set(acked) | set(committed)):
        print(f"   {k:5d} {int(acked[k]):10d} {int(committed[k]):10d} {int(acked[k] - committed[k]):16d} "
              f"{exits[k]:12d}")


def stage_lost_times(r):
    """Per stage, when a new timeline began: a `stage_lost`, or a server's
    `checkpoint_load` below the highest step the stage had reached (a stage
    wiped out together with the coordinator has no `stage_lost`: no coordinator
    saw its last server go)."""
    lost = collections.defaultdict(list)
    for e in r.ev["stage_lost"]:
        if num(e, "stage") is not None:
            lost[int(num(e, "stage"))].append(e["t"])
    reached = collections.defaultdict(int)
    for e in sorted(r.ev["params"] + r.ev["checkpoint_load"], key=lambda e: e["t"]):
        stage, step = num(e, "stage"), num(e, "step")
        if stage is None or step is None or stage < 0:
            continue
        stage = int(stage)
        if e["event"] == "checkpoint_load":
            if step < reached[stage] and not any(abs(t - e["t"]) < 30 for t in lost[stage]):
                lost[stage].append(e["t"])
                reached[stage] = int(step)
        else:
            reached[stage] = max(reached[stage], int(step))
    for times in lost.values():
        times.sort()
    return lost


def hash_groups(r):
    """{(stage, epoch, step): {hash: [server...]}} of the params events."""
    lost = stage_lost_times(r)
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in r.ev["params"]:
        stage, step, h = num(e, "stage"), num(e, "step"), e.get("hash")
        if stage is None or step is None or h is None:
            continue
        stage = int(stage)
        epoch = sum(1 for t in lost[stage] if t < e["t"])
        groups[(stage, epoch, int(step))][str(h)].append(e.get("server", "?"))
    return groups


def section_hashes(r):
    print("4. hash disagreements (key: stage, epoch = timelines before: stage_lost or a checkpoint load back, step)")
    groups = hash_groups(r)
    differ = sorted(k for k, hashes in groups.items() if len(hashes) > 1)
    r.disagreements = len(differ)
    print(f"   keys checked {len(groups)}, keys that differ {len(differ)} (goal 0); "
          f"keys seen by >1 server {sum(1 for h in groups.values() if sum(map(len, h.values())) > 1)}")
    for key in differ[:10]:
        hashes = "; ".join(f"{h}: servers {','.join(map(str, s))}" for h, s in groups[key].items())
        print(f"     stage {key[0]} epoch {key[1]} step {key[2]}: {hashes}")
    if len(differ) > 10:
        print(f"     ... and {len(differ) - 10} more")


def section_rounds(r):
    print("4b. averaging rounds (the coordinator's round_end): per stage, and the longest")
    ends = r.ev["round_end"]
    if not ends:
        print("   none")
        return
    for stage in sorted({int(num(e, "stage", -1)) for e in ends}):
        mine = [e for e in ends if int(num(e, "stage", -1)) == stage]
        applied = sum(1 for e in mine if num(e, "applied", 0) > 0)  # members that applied it
        longest = max(mine, key=lambda e: num(e, "seconds", 0))
        print(f"   stage {stage}: {len(mine)} rounds, {applied} applied, {len(mine) - applied} not; longest "
              f"{num(longest, 'seconds', 0):.1f} s (to step {longest.get('step', '?')}, ended at "
              f"{fmt_t(r.rel(longest))}, {longest.get('excluded', '?')} excluded)")


def section_verification(r):
    print("4c. verified work and robust averaging (no server lies here: every charge below is a false one)")
    last = {}
    for e in r.ev["verify"]:
        last[e.get("trainer", "?")] = e
    for trainer, e in sorted(last.items()):
        print(f"   trainer {trainer}: {int(num(e, 'requests', 0))} forwards verified "
              f"({100 * num(e, 'share', 0):.1f}% extra forward samples), {int(num(e, 'agreed', 0))} agreed, "
              f"{int(num(e, 'disagreed', 0))} disagreed, {int(num(e, 'inconclusive', 0))} inconclusive")
    if not last:
        print("   no verify events (--verify-fraction 0?)")
    charges = 0
    for kind in ("verify_strike", "verify_ban", "server_banned", "clip_strike", "server_evicted"):
        charges += len(r.ev[kind])
        for e in r.ev[kind][:5]:
            print(f"     {kind} at {fmt_t(r.rel(e))}: stage {e.get('stage', '?')} server {e.get('server', '?')} "
                  f"{e.get('why', '')}")
    print(f"   strikes, bans and evictions: {charges} (goal 0)")
    r.false_charges = charges


def section_checkpoints(r):
    print("5. checkpoints")
    written = collections.defaultdict(list)
    for e in r.ev["checkpoint"]:
        written[(e.get("role", "?"), e.get("stage", "-"))].append(e)
    print(f"   written {len(r.ev['checkpoint'])}")
    for (role, stage), rows in sorted(written.items(), key=lambda kv: str(kv[0])):
        secs = [num(e, "seconds") for e in rows if num(e, "seconds") is not None]
        size = [num(e, "bytes") for e in rows if num(e, "bytes") is not None]
        secs = f"{statistics.mean(secs):.3f} s" if secs else "? s"
        size = f"{statistics.mean(size) / 1e6:.2f} MB" if size else "? MB"
        print(f"     {role} stage {stage}: {len(rows)}, mean {secs}, mean {size}, last step {rows[-1].get('step', '?')}")
    loads = r.ev["checkpoint_load"]
    print(f"   loaded {len(loads)}")
    for e in loads:
        print(f"     at {fmt_t(r.rel(e))}: stage {e.get('stage', '?')} server {e.get('server', '?')} "
              f"step {e.get('step', '?')} ({os.path.basename(str(e.get('file', '?')))})")
    print(f"   stages lost {len(r.ev['stage_lost'])}")
    for e in r.ev["stage_lost"]:
        stage, step = e.get("stage", "?"), num(e, "step")
        after = [x for x in loads if num(x, "stage") == num(e, "stage") and x["t"] >= e["t"]]
        if after and step is not None and num(after[0], "step") is not None:
            cost = f"reloaded step {int(num(after[0], 'step'))} at {fmt_t(r.rel(after[0]))}: " \
                   f"{int(step - num(after[0], 'step'))} steps lost"
        else:
            restart = [x for x in r.ev["params"] if num(x, "stage") == num(e, "stage") and x["t"] > e["t"]]
            cost = "no checkpoint_load afterwards" + (
                f"; next params of the stage at step {restart[0].get('step', '?')}" if restart else "")
        print(f"     at {fmt_t(r.rel(e))}: stage {stage} lost at step {e.get('step', '?')} "
              f"({e.get('reason', '?')}); {cost}")


def section_chaos(r):
    print("6. chaos")
    chaos = r.ev["chaos"]
    if not chaos and not r.ev["process_start"]:
        print("   none")
        return
    actions = collections.Counter(e.get("action", "?") for e in chaos)
    print("   " + ", ".join(f"{a} {n}" for a, n in sorted(actions.items())))
    coord = sum(1 for e in chaos if e.get("action") == "kill" and "coordinator" in str(e.get("process", "")))
    print(f"   coordinator kills {coord}, wipes {actions.get('wipe', 0)}, "
          f"processes restarted by the cluster (process_start) {len(r.ev['process_start'])}")
    for e in chaos:
        if e.get("action") == "wipe":
            print(f"     wipe at {fmt_t(r.rel(e))}: {e.get('process', '?')}")
    codes = collections.Counter(f"{str(e.get('process', '?')).split(' ')[0]} code {e.get('code', '?')}"
                                for e in r.ev["process_exit"])
    if codes:
        print("   process_exit: " + ", ".join(f"{k} x{n}" for k, n in sorted(codes.items())))


def stalls(r):
    """[(gap_s, start_rel_s, step_before, trainer)] longest first."""
    gaps = []
    for trainer, rows in per_trainer(r.steps).items():
        for a, b in zip(rows, rows[1:]):
            gaps.append((b["t"] - a["t"], r.rel(a), a.get("step"), trainer))
    return sorted(gaps, reverse=True)


def section_stalls(r):
    print("7. longest stalls (gap between a trainer's consecutive steps)")
    gaps = stalls(r)
    if not gaps:
        print("   fewer than 2 steps")
        return
    r.longest_stall = gaps[0][0]
    for gap, start, step, trainer in gaps[:3]:
        print(f"   {gap:7.1f} s from {fmt_t(start)} after step {step} (trainer {trainer})")
    print(f"   median gap {statistics.median(g[0] for g in gaps):.2f} s")


def report(r):
    print(f"== {r.name} ==")
    if r.bad:
        print(f"   {r.bad} lines skipped (not JSON objects with a numeric t)")
    r.disagreements, r.longest_stall = None, None
    for section in (section_progress, section_drops, section_accounting, section_hashes, section_rounds,
                    section_verification, section_checkpoints, section_chaos, section_stalls, section_memory):
        section(r)
    print()


# ---------------------------------------------------------------- comparison


def loss_windows(r):
    """{window index: mean loss} over 5-minute windows from cluster_start, and the last-2-minute mean."""
    windows = collections.defaultdict(list)
    for e in r.steps:
        loss = num(e, "loss")
        if loss is not None:
            windows[int(r.rel(e) // WINDOW_S)].append(loss)
    means = {k: statistics.mean(v) for k, v in windows.items()}
    last = None
    if r.steps:
        end = r.steps[-1]["t"]
        tail = [num(e, "loss") for e in r.steps if e["t"] >= end - LAST_S and num(e, "loss") is not None]
        last = statistics.mean(tail) if tail else None
    return means, last


def stall(r):
    return f"{r.longest_stall:.1f} s" if r.longest_stall is not None else "-"


def cell(v):
    return f"{v:10.4f}" if v is not None else f"{'-':>10}"


def compare(runs):
    print("== comparison ==")
    names = [r.name for r in runs]
    if len(runs) == 2:
        a, b = runs
        for label, f in (("steps", Run.max_step), ("samples", Run.samples)):
            va, vb = f(a), f(b)
            ratio = f"{vb / va:.3f}" if va else "-"
            print(f"   {label}: {a.name} {int(va)}, {b.name} {int(vb)}, {b.name}/{a.name} {ratio}")
        print(f"   hash disagreements: {a.name} {a.disagreements}, {b.name} {b.disagreements}")
        print(f"   dropped: {a.name} {len(a.ev['dropped'])}, {b.name} {len(b.ev['dropped'])}")
        print(f"   longest stall: {a.name} {stall(a)}, {b.name} {stall(b)}")
    print(f"9. mean trainer loss per {WINDOW_S // 60}-minute window (from cluster_start)")
    curves = [loss_windows(r) for r in runs]
    header = "   window     " + "".join(f"{n:>10}" for n in names) + (f"{'diff':>10}" if len(runs) == 2 else "")
    print(header)
    keys = sorted(set().union(*(c[0].keys() for c in curves)))

    def row(label, values):
        diff = values[1] - values[0] if len(values) == 2 and None not in values else None
        print(f"   {label:11}" + "".join(cell(v) for v in values) + (cell(diff) if len(values) == 2 else ""))

    for k in keys:
        row(f"{k * WINDOW_S // 60:3d}-{(k + 1) * WINDOW_S // 60:<3d}min", [c[0].get(k) for c in curves])
    row(f"last {LAST_S // 60} min", [c[1] for c in curves])
    if len(runs) == 2:
        print(f"   diff = {names[1]} - {names[0]}")


def main():
    args = sys.argv[1:]
    min_life = 600.0
    if "--min-life" in args:
        i = args.index("--min-life")
        min_life = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    out = args[0]
    runs = [Run(n, out, min_life) for n in RUNS if os.path.exists(os.path.join(out, n + ".jsonl"))]
    if not runs:
        sys.exit(f"{out}: neither of {', '.join(n + '.jsonl' for n in RUNS)}")
    print(f"soak results in {out}: {', '.join(r.name for r in runs)}"
          + ("" if len(runs) == 2 else f" (no {', '.join(set(RUNS) - {r.name for r in runs})})"))
    print()
    for r in runs:
        report(r)
    compare(runs)


if __name__ == "__main__":
    main()
