#!/usr/bin/env python3
"""What grows with the swarm's size in the real binary (scripts/bench_scale.sh).

  bench_scale.py sample PID METRICS OUT.json FROM_S TO_S
      while `swarm --role cluster` (PID) writes METRICS: at FROM_S and TO_S seconds after its
      cluster_start, each of its children's CPU seconds and resident memory from /proc
  bench_scale.py report DIR N...
      one row per run DIR/real-N.jsonl (+ probe-N.json): rounds by members, the
      coordinator's CPU per second and per progress report, memory per role, join times;
      and what that CPU per report costs one coordinator at swarm-sim's request rates
"""
import json
import os
import statistics
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def events(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
    except FileNotFoundError:
        pass
    return out


def proc(pid):
    """(cpu seconds, rss MiB) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
        return (int(fields[11]) + int(fields[12])) / TICK, rss / 1024
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def children(pid):
    """{name: pid} of the cluster's children, named by role and pid."""
    out = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline") as f:
                    args = f.read().split("\0")
            except OSError:
                continue
            who = args[args.index("--role") + 1] if "--role" in args else os.path.basename(args[0])
            out[f"{who} {kid}"] = kid
    return out


def sample(pid, metrics, out, t_from, t_to):
    start = None
    while start is None:
        start = next((e["t"] for e in events(metrics) if e["event"] == "cluster_start"), None)
        if start is None:
            time.sleep(0.5)
    snaps = []
    for at in (t_from, t_to):
        time.sleep(max(0.0, start + at - time.time()))
        snaps.append({"t": time.time(), "procs": {name: proc(p) for name, p in children(pid).items()}})
    with open(out, "w") as f:
        json.dump(snaps, f)


def role(name):
    return name.split()[0] if name else "?"


def report(folder, sizes):
    rows = []
    for n in sizes:
        ev = events(f"{folder}/real-{n}.jsonl")
        try:
            with open(f"{folder}/probe-{n}.json") as f:
                a, b = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"bench_scale.py: no usable samples of the {n}-server run in {folder} ({e}): "
                     f"run scripts/bench_scale.sh with OUT={folder}")
        span = b["t"] - a["t"]
        cpu, rss = {}, {}
        for name, now in b["procs"].items():
            then = a["procs"].get(name)
            if now and then:
                cpu.setdefault(role(name), []).append((now[0] - then[0]) / span)
                rss.setdefault(role(name), []).append(now[1])
        t0, t1 = a["t"], b["t"]
        rounds = [e["seconds"] for e in ev if e["event"] == "round_end" and e.get("applied")]
        members = [e["peers"] for e in ev if e["event"] == "round_end" and e.get("applied")]
        # A server's join: from the cluster's start (all start together) to its server_join.
        start = next((e["t"] for e in ev if e["event"] == "cluster_start"), None)
        joins = [e["t"] - start for e in ev if e["event"] == "server_join" and start is not None]
        # Progress reports: one per request that adds samples (every backward and the
        # last stage's forwards): the trainers' completed microbatches times the stages.
        by_trainer = {}
        for e in ev:
            if e["event"] == "step" and t0 <= e["t"] <= t1:
                by_trainer.setdefault(e["trainer"], []).append(e)
        mb_rate = sum((steps[-1]["completed"] - steps[0]["completed"]) / (steps[-1]["t"] - steps[0]["t"])
                      for steps in by_trainer.values() if len(steps) >= 2 and steps[-1]["t"] > steps[0]["t"])
        stages = next((e["stages"] for e in ev if e["event"] == "cluster_start"), 2)
        start_ev = next((e for e in ev if e["event"] == "cluster_start"), {})
        sim = events(f"{folder}/sim-{n}.jsonl")
        sim_summary = next((e for e in sim if e["event"] == "sim_summary"), {})
        sim_rounds = [e["seconds"] for e in sim if e["event"] == "round_end" and e.get("applied")]
        report_rate = mb_rate * stages
        coord = sum(cpu.get("coordinator", [0.0]))
        rows.append({
            "servers_per_stage": n,
            "round_s_median": statistics.median(rounds) if rounds else float("nan"),
            "members_median": statistics.median(members) if members else 0,
            "rounds": len(rounds),
            "microbatches_per_s": mb_rate,
            "tokens_per_s": mb_rate * start_ev.get("microbatch", 8) * start_ev.get("seq_len", 64),
            "sim_tokens_per_s": sim_summary.get("tokens_per_s", float("nan")),
            "sim_round_s_median": statistics.median(sim_rounds) if sim_rounds else float("nan"),
            "reports_per_s": report_rate,
            "coordinator_cores": coord,
            "coordinator_ms_per_report": 1000 * coord / report_rate if report_rate > 0 else float("nan"),
            "rss_mib": {r: statistics.mean(v) for r, v in rss.items()},
            "join_s_median": statistics.median(joins) if joins else float("nan"),
        })
    print(f"{'servers/stage':>13} {'round s':>8} {'members':>7} {'rounds':>6} {'mb/s':>6} {'reports/s':>9} "
          f"{'coord cores':>11} {'ms/report':>9} {'RSS MiB server/trainer/coord':>28} {'join s':>6} "
          f"{'tokens/s':>9} {'sim tokens/s':>12} {'sim round s':>11}")
    for r in rows:
        m = r["rss_mib"]
        print(f"{r['servers_per_stage']:>13} {r['round_s_median']:>8.2f} {r['members_median']:>7} {r['rounds']:>6} "
              f"{r['microbatches_per_s']:>6.1f} {r['reports_per_s']:>9.1f} {r['coordinator_cores']:>11.3f} "
              f"{r['coordinator_ms_per_report']:>9.2f} "
              f"{m.get('server', 0):>10.0f}/{m.get('trainer', 0):.0f}/{m.get('coordinator', 0):.0f}{'':>9} "
              f"{r['join_s_median']:>6.2f} {r['tokens_per_s']:>9.0f} {r['sim_tokens_per_s']:>12.0f} "
              f"{r['sim_round_s_median']:>11.3f}")
    # The coordinator's CPU per report against the servers it holds: a + b x servers (least squares).
    pts = [(2 * r["servers_per_stage"], r["coordinator_ms_per_report"]) for r in rows
           if r["coordinator_ms_per_report"] > 0]
    if len(pts) >= 2:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        b = sum((x - mx) * (y - my) for x, y in pts) / max(sum((x - mx) ** 2 for x, _ in pts), 1e-12)
        a = my - b * mx
        print(f"\ncoordinator CPU per progress report (one per request that adds samples): "
              f"{a:.3f} ms + {1000 * b:.2f} us x servers (fit over {len(pts)} sizes)")
        # config/sim-t4 (16 stages, 64 x 512-token microbatches): swarm-sim's tokens/s at 100,
        # 1,000 and 10,000 peers (docs/simulator.md, figure 5) -> reports/s.
        for peers, tps in ((100, 21754), (1000, 211596), (10000, 1824945)):
            reports = tps / (64 * 512) * 16
            print(f"  config/sim-t4, {peers:>6} peers: {reports:>6,.0f} reports/s x {a + b * peers:.2f} ms "
                  f"= {reports * (a + b * peers) / 1000:.2f} coordinator cores")
        per_peer = 1824945 / (64 * 512) * 16 / 10000  # reports/s per peer at 10,000
        size = 100
        while per_peer * size * (a + b * size) / 1000 < 1 and size < 10 ** 7:
            size = int(size * 1.05) + 1
        print(f"  one core is used up at ~{size:,} peers; without the per-server term at "
              f"~{1000 / a / per_peer:,.0f}")
    with open(f"{folder}/scale.json", "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "sample":
        sample(int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "report":
        report(sys.argv[2], [int(n) for n in sys.argv[3:]])
    else:
        sys.exit(__doc__)
