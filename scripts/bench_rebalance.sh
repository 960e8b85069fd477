#!/usr/bin/env bash
# Rebalancing under heterogeneity, an uneven start and churn, in one run on the same
# config, each for DURATION seconds:
#   1. rebalancing on: servers at SLOWDOWNS, started STAGE_SERVERS per stage, one random
#      server SIGKILLed every EVERY s and restarted DOWN s later with --stage auto;
#   2. the same with --rebalance off (restarts go back to their stage);
#   3. the best static assignment of the same servers (brute force over every
#      assignment, from the slowdowns and the stage costs the coordinator reports),
#      --rebalance off, the same churn.
# Prints tokens/s of each (stalls included) as a ratio to the best static one, and
# the moves each made.
#   scripts/bench_rebalance.sh [config] [duration_s]   (defaults: config/small 150)
#   env: SLOWDOWNS (1,1,3,3) STAGE_SERVERS (3,1) PERIOD (30) EVERY (30) DOWN (10)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
duration=${2:-150}
slowdowns=${SLOWDOWNS:-1,1,3,3}
start=${STAGE_SERVERS:-3,1}
period=${PERIOD:-30}
every=${EVERY:-30}
down=${DOWN:-10}
bash scripts/build.sh swarm > /dev/null
out=$(mktemp -d /tmp/swarm-rebalance-XXXXXX)
echo "config $config, ${duration} s per run, slowdowns $slowdowns, uneven start $start, period ${period} s," \
     "churn: kill one every ${every} s, back after ${down} s; $(nproc) cores; metrics in $out"
run() {  # name, extra flags...
  local name=$1; shift
  timeout -s INT "$duration" ./build/swarm --role cluster --config "$config" --max-steps 0 \
    --rebalance-period "$period" --chaos kill --chaos-every "$every" --chaos-down "$down" --chaos-seed 7 \
    --metrics "$out/$name.jsonl" --log-level error "$@" > /dev/null 2>&1 || true
}
run rebalance --stage-servers "$start" --server-slowdowns "$slowdowns" --rebalance on
run off --stage-servers "$start" --server-slowdowns "$slowdowns" --rebalance off
best=$(python3 scripts/rebalance_summary.py best "$out/rebalance.jsonl" "$slowdowns")
echo "best static assignment: $best"
# shellcheck disable=SC2086
run best_static $best --rebalance off
python3 scripts/metrics_summary.py --until-exit "$out/best_static.jsonl" "$out/rebalance.jsonl" "$out/off.jsonl"
python3 scripts/rebalance_summary.py moves "$out/rebalance.jsonl" "$out/off.jsonl" "$out/best_static.jsonl"
python3 scripts/plot_metrics.py "$out/rebalance.jsonl" "$out/off.jsonl" "$out/best_static.jsonl" -o "$out/rebalance.png" | tail -1
