#!/usr/bin/env bash
# Throughput under churn, in one run on the same config, each for DURATION seconds:
#   1. the swarm without faults,
#   2. the swarm while one random server is SIGKILLed every EVERY s and
#      restarted DOWN s later (--chaos kill),
#   3. the same churn with --routing static (each trainer pinned to one server
#      per stage, GPipe-style).
# Prints tokens/s of each (stalls included: the window ends when the run does)
# as a ratio to the fault-free swarm.
#   scripts/bench_churn.sh [config] [duration_s]   (defaults: config/small 120)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
duration=${2:-120}
every=${EVERY:-20}
down=${DOWN:-10}
bash scripts/build.sh swarm > /dev/null
out=$(mktemp -d /tmp/swarm-churn-XXXXXX)
echo "config $config, ${duration} s per run, 2 servers per stage, churn: kill one every ${every} s, back after ${down} s"
run() {  # name, extra flags...
  local name=$1; shift
  timeout -s INT "$duration" ./build/swarm --role cluster --config "$config" --servers-per-stage 2 --max-steps 0 \
    --metrics "$out/$name.jsonl" --log-level error "$@" > /dev/null 2>&1 || true
}
run swarm
run swarm_churn --chaos kill --chaos-every "$every" --chaos-down "$down" --chaos-seed 7
run static_churn --chaos kill --chaos-every "$every" --chaos-down "$down" --chaos-seed 7 --routing static
python3 scripts/metrics_summary.py --until-exit "$out/swarm.jsonl" "$out/swarm_churn.jsonl" "$out/static_churn.jsonl"
python3 scripts/plot_metrics.py "$out/swarm.jsonl" "$out/swarm_churn.jsonl" "$out/static_churn.jsonl" -o "$out/churn.png" | tail -1
for f in swarm_churn static_churn; do
  echo "$f: $(grep -c '"action": "kill"' "$out/$f.jsonl") kills, $(grep -c '"event": "reroute"' "$out/$f.jsonl") reroutes," \
       "$(grep -c '"event": "dropped"' "$out/$f.jsonl") dropped microbatches"
done
