#!/usr/bin/env bash
# Standby coordinators against the restarted one (issue 27), side by side on
# this machine, config/tiny with 2 servers per stage and one trainer:
#   restart  --role cluster: one coordinator, SIGKILLed every EVERY s and
#            started again on its port by the cluster (the default without --control)
#   elected  --role cluster --control-replicas 3 --control-lease 1: three
#            etcd members, two candidates; the leader SIGKILLed every EVERY s
# each for MINUTES. For every kill, how long each stage took to apply a round
# ordered after it (scripts/check_history.py), their min / median / max, the
# history's verdict (no order of a deposed leader, one hash per (stage, step))
# and the microbatches dropped.
#
#   scripts/bench_control.sh [minutes] [out_dir]   (defaults: 3, a fresh /tmp/swarm-control-bench-XXXXXX)
#   env: EVERY (20) seconds between kills; ACTION (kill | stop: SIGSTOP for
#        DOWN s, default 3, past the 1 s lease); RUNS ("restart elected")
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-3}
out=${2:-$(mktemp -d /tmp/swarm-control-bench-XXXXXX)}
every=${EVERY:-20}
action=${ACTION:-kill}
down=${DOWN:-3}
mkdir -p "$out"
[ -x build/swarm ] || bash scripts/build.sh swarm
seconds=$((minutes * 60))

run() {  # run NAME extra-flags...
  local name=$1
  shift
  rm -f "$out/$name.jsonl"
  echo "== $name: $minutes min, coordinator hit ($action) every $every s"
  build/swarm --role cluster --config config/tiny --max-steps 0 --http-port -1 --log-level warn \
    --metrics "$out/$name.jsonl" --chaos-coordinator-every "$every" "$@" > "$out/$name.log" 2>&1 &
  local pid=$!
  sleep "$seconds"
  kill -INT "$pid"
  wait "$pid" || true
}

summary() {  # summary NAME
  python3 - "$out/$1.jsonl" "$1" <<'PY'
import json, statistics, sys
sys.path.insert(0, "scripts")
from check_history import check, load
events = load([sys.argv[1]])
bad, report, waits = check(events)
drops = sum(e.get("dropped", 0) for e in events if e.get("event") == "trainer_exit")
steps = max((e.get("steps", 0) for e in events if e.get("event") == "trainer_exit"), default=0)
print(f"{sys.argv[2]}: {len(waits)} recoveries (kills x stages)", end="")
if waits:
    print(f", seconds to a round ordered after the kill: min {min(waits):.2f}, median "
          f"{statistics.median(waits):.2f}, max {max(waits):.2f}; within 2 s: {sum(w <= 2 for w in waits)}/{len(waits)}",
          end="")
print(f"; trainer steps {steps}, dropped {drops}; history {'OK' if not bad else 'VIOLATED'}")
for line in report[1:]:
    print("  " + line)
for line in bad:
    print("  VIOLATION " + line)
PY
}

flags=(--chaos-coordinator-action "$action" --chaos-down "$down")
for r in ${RUNS:-restart elected}; do
  case $r in
    restart) run restart "${flags[@]}" ;;
    elected) run elected --control-replicas 3 --control-lease 1 "${flags[@]}" ;;
    *) echo "bench_control: unknown run '$r'" >&2; exit 2 ;;
  esac
done
echo
for r in ${RUNS:-restart elected}; do summary "$r"; done | tee "$out/summary.txt"
echo "metrics and logs: $out"
