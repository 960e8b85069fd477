"""scripts/soak_summary.py's memory part: the RSS samples soak.sh takes
(OUT/<run>-rss.csv: t_s,pid,role,rss_kib[,stage]) and section 8 of its report."""
import collections
import csv
import os

WARMUP_S = 60  # RSS: first sample this far into a process's life
MARK_SLACK_S = 15  # RSS at a mark: a sample at most this far from it (they come every 10 s)


def fmt_t(seconds):
    if seconds is None:
        return "?"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}"


def load_rss(path):
    """{pid: [(t_s, rss_kib)...]} and {pid: role label}; header and bad rows skipped."""
    samples, roles = collections.defaultdict(list), {}
    if not os.path.exists(path):
        return None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) < 4:
                continue
            try:
                t, pid, rss = float(row[0]), int(row[1]), int(row[3])
            except ValueError:
                continue  # the header, or a torn line
            samples[pid].append((t, rss))
            stage = row[4] if len(row) > 4 and row[4] else None
            roles.setdefault(pid, row[2] + (f" {stage}" if stage else ""))
    for rows in samples.values():
        rows.sort()
    return samples, roles


def rss_growth(r):
    """[(pid, role, first_t, life_s, warm_kib, last_kib, growth_pct)] of long-lived processes."""
    rows = []
    for pid, samples in (r.rss or {}).items():
        first_t, last_t = samples[0][0], samples[-1][0]
        if last_t - first_t < r.min_life:
            continue
        warm = next((s for s in samples if s[0] >= first_t + WARMUP_S), None)
        if warm is None or warm[1] <= 0:
            continue
        last = samples[-1]
        rows.append((pid, r.rss_roles[pid], first_t, last_t - first_t, warm[1], last[1],
                     100.0 * (last[1] - warm[1]) / warm[1]))
    return rows


def section_memory(r):
    print(f"8. memory (processes alive >= {r.min_life / 60:g} min; RSS {WARMUP_S} s into their life -> last sample)")
    if r.rss is None:
        print("   no rss csv")
        return
    rows = rss_growth(r)
    print(f"   processes sampled {len(r.rss)}, long-lived {len(rows)}")
    for pid, role, first_t, life, warm, last, pct in sorted(rows, key=lambda x: x[1]):
        print(f"   pid {pid:7d} {role:12} from {fmt_t(first_t)} for {fmt_t(life)}: "
              f"{warm / 1024:8.1f} -> {last / 1024:8.1f} MiB ({pct:+.1f}%)")
    worst = {}
    for row in rows:
        role = row[1].split(" ")[0]
        if role not in worst or row[6] > worst[role][6]:
            worst[role] = row
    for role, row in sorted(worst.items()):
        print(f"   max growth {role}: {row[6]:+.1f}% (pid {row[0]})")
    section_memory_marks(r)


def rss_at(samples, t):
    """RSS (KiB) of the sample nearest to t within MARK_SLACK_S, else None."""
    near = min(samples, key=lambda s: abs(s[0] - t))
    return near[1] if abs(near[0] - t) <= MARK_SLACK_S else None


def section_memory_marks(r):
    """Every process's RSS at 1 minute, half time and the end of the run (1, 15, 30 min in a 30-minute soak)."""
    if not r.rss:
        return
    end = max(s[-1][0] for s in r.rss.values())
    marks = [WARMUP_S, round(end / 2), end]
    rows, short = [], 0
    for pid, samples in r.rss.items():
        values = [rss_at(samples, t) for t in marks]
        if sum(v is not None for v in values) < 2:
            short += 1  # a process of less than half the run (chaos restarts): in the growth list if long enough
            continue
        rows.append((r.rss_roles[pid], pid, values))
    header = "   ".join(f"{fmt_t(t):>9}" for t in marks)
    print(f"   RSS (MiB) of the processes alive at two marks or more ({short} shorter-lived left out):")
    print(f"{'   at':<31}{header}")
    for role, pid, values in sorted(rows):
        cells = "   ".join(f"{v / 1024:9.1f}" if v is not None else f"{'-':>9}" for v in values)
        print(f"   {role:12} pid {pid:7d}    {cells}")
