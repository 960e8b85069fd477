#!/usr/bin/env bash
# Tests scripts/plot_metrics.py on small synthetic metrics files.
# Usage: bash tests/unit/test_plot_metrics.sh [path/to/plot_metrics.py]
# (default: ../../scripts/plot_metrics.py relative to this file). Exits non-zero
# with a message on the first failure.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script=${1:-$here/../../scripts/plot_metrics.py}
[ -f "$script" ] || { echo "FAIL: no script at $script" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*" >&2
  [ -f "$tmp/out.txt" ] && sed 's/^/  | /' "$tmp/out.txt" >&2
  exit 1
}

# Writes a synthetic run to $1: 2 stages, one trainer, $2 = loss scale, so the
# two files of the overlay differ. Includes a malformed line, a null loss, a
# failed round, validation (eval) events, and every panel-3 event kind.
make_run() {
  python3 - "$1" "$2" <<'EOF'
import json, math, sys
path, scale = sys.argv[1], float(sys.argv[2])
t0 = 1_700_000_000.0
lines = [{"t": t0, "role": "cluster", "event": "cluster_start", "stages": 2, "stage_servers": "2,2",
          "trainers": 1, "coordinator_port": 1}]
for stage in (0, 1):
    for s in range(2):
        lines.append({"t": t0 + 0.5, "role": "coordinator", "event": "server_join", "stage": stage,
                      "server": f"s-{stage}{s}", "host": "127.0.0.1", "port": 1000 + s})
for i in range(1, 121):
    t = t0 + i
    lines.append({"t": t, "role": "trainer", "event": "step", "trainer": "t1", "step": i,
                  "loss": None if i == 7 else scale * (5.5 * math.exp(-i / 60) + 1.5),
                  "samples": 64 * i, "tokens": 8192 * i, "tokens_per_s": 8000 + 500 * math.sin(i / 9),
                  "elapsed_s": i})
    for stage in (0, 1):
        lines.append({"t": t + 0.2, "role": "coordinator", "event": "round_end", "stage": stage, "round": i,
                      "step": i, "peers": 2, "applied": 0 if i == 60 else 2, "agreeing": 2, "excluded": 0,
                      "seconds": 0.3 + 0.1 * stage + (20.0 if i == 61 else 0.0)})
    if i % 30 == 0:  # validation: plotted apart, not counted as steps in the summary line
        lines.append({"t": t + 0.3, "role": "trainer", "event": "eval", "trainer": "t1", "step": i,
                      "samples": 512, "tokens": 65536, "loss": scale * (5.6 * math.exp(-i / 60) + 1.6),
                      "perplexity": 10.0, "failed": 0, "seconds": 0.5})
    if i % 5 == 0:
        for stage in (0, 1):
            lines.append({"t": t + 0.1, "role": "coordinator", "event": "stage_load", "stage": stage,
                          "servers": 1 if (stage == 0 and 40 <= i < 70) else 2, "capacity": 100.0, "cost": 1e8})
events = [
    (38, {"role": "cluster", "event": "chaos", "action": "kill", "process": "server 0.1", "pid": 11}),
    (39, {"role": "coordinator", "event": "server_down", "stage": 0, "server": "s-01", "reason": "x"}),
    (50, {"role": "cluster", "event": "chaos", "action": "stop", "process": "server 1.0", "pid": 12}),
    (55, {"role": "cluster", "event": "chaos", "action": "continue", "process": "server 1.0", "pid": 12}),
    (56, {"role": "coordinator", "event": "reload", "stage": 1, "server": "s-10", "from": "s-11", "step": 50,
          "reason": "behind"}),
    (65, {"role": "server", "event": "rebalance", "server": "s-11", "from": 1, "to": 0, "reason": "load",
          "predicted_gain": 0.2, "seconds": 0.4}),
    (66, {"role": "server", "event": "rebalance", "server": "s-20", "from": -1, "to": 0, "reason": "join",
          "predicted_gain": None, "seconds": 0.4}),
    (80, {"role": "cluster", "event": "chaos", "action": "wipe", "process": "stage 1", "pid": 0}),
    (81, {"role": "coordinator", "event": "stage_lost", "stage": 1, "step": 80, "hash": "1", "reason": "x"}),
    (85, {"role": "server", "event": "checkpoint_load", "stage": 1, "server": "s-12", "step": 78,
          "file": "f", "skipped": 0, "hash": "1", "seconds": 0.1}),
    (90, {"role": "cluster", "event": "chaos", "action": "kill", "process": "coordinator", "pid": 13}),
    (91, {"role": "cluster", "event": "process_start", "process": "coordinator", "pid": 14}),
]
for dt, e in events:
    lines.append(dict({"t": t0 + dt}, **e))
with open(path, "w") as f:
    for n, e in enumerate(lines):
        f.write(json.dumps(e) + "\n")
        if n == 10:
            f.write('{"t": 17000, "role": "trainer", "event": "st\n')  # a torn line: skipped, counted
EOF
}

make_run "$tmp/local.jsonl" 1.0 || fail "could not write synthetic metrics"
make_run "$tmp/swarm.jsonl" 1.05 || fail "could not write synthetic metrics"

# 1. Two files overlaid: exit 0, a PNG over 20 kB, a summary line per file.
python3 "$script" "$tmp/local.jsonl" "$tmp/swarm.jsonl" -o "$tmp/out.png" --title "test" >"$tmp/out.txt" 2>&1 ||
  fail "plot of two files exited $?"
[ -f "$tmp/out.png" ] || fail "no PNG written"
magic=$(head -c 8 "$tmp/out.png" | od -An -tx1 | tr -d ' \n')
[ "$magic" = "89504e470d0a1a0a" ] || fail "output is not a PNG (magic $magic)"
size=$(wc -c <"$tmp/out.png")
[ "$size" -gt 20000 ] || fail "PNG is only $size bytes"
grep -q '^local: 120 steps' "$tmp/out.txt" || fail "no summary line for local.jsonl"
grep -q '^swarm: 120 steps' "$tmp/out.txt" || fail "no summary line for swarm.jsonl"
grep -q 'skipped 1 malformed' "$tmp/out.txt" || fail "malformed line not counted on stderr"

# 2. An input with steps only: the other panels say so instead of failing.
grep '"event": "step"' "$tmp/local.jsonl" >"$tmp/steps.jsonl"
python3 "$script" "$tmp/steps.jsonl" -o "$tmp/steps.png" >"$tmp/out.txt" 2>&1 || fail "steps-only plot exited $?"
[ -s "$tmp/steps.png" ] || fail "no PNG for a steps-only file"

# 3. A missing input exits 2 and names the file.
python3 "$script" "$tmp/local.jsonl" "$tmp/missing.jsonl" -o "$tmp/m.png" >"$tmp/out.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "missing input exited $rc, expected 2"
grep -q 'missing.jsonl' "$tmp/out.txt" || fail "missing input not named in the message"

# 4. A file of garbage only exits 2; so does an empty file.
printf 'not json\n{"event": "step"}\n[1, 2]\n' >"$tmp/garbage.jsonl"
python3 "$script" "$tmp/garbage.jsonl" -o "$tmp/g.png" >"$tmp/out.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "garbage-only input exited $rc, expected 2"
[ ! -e "$tmp/g.png" ] || fail "a PNG was written for garbage input"
: >"$tmp/empty.jsonl"
python3 "$script" "$tmp/empty.jsonl" -o "$tmp/e.png" >"$tmp/out.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "empty input exited $rc, expected 2"

echo "PASS: test_plot_metrics.sh"
