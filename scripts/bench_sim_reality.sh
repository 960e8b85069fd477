#!/usr/bin/env bash
# swarm-sim against the real binary: the same small swarm (config/small, 2
# stages, 4 servers, one trainer on this machine's cores) run as a real
# `swarm --role cluster` and simulated (config/sim-small, --platform local,
# replaying the real run's kills and restarts),
# DURATION seconds each, in five scenarios:
#   swarm          2 servers per stage, no faults
#   churn          one random server SIGKILLed every 20 s, back 10 s later
#   static_churn   the same churn with --routing static
#   rebalance      servers slowed 1,1,3,3, started 3,1, kill one every 30 s
#                  (back after 10 s with --stage auto), rebalancing every 30 s
#   rebalance_off  the same with --rebalance off
# Prints tokens/s of each (real and simulated, measured alike) and whether every
# comparison (swarm/churn, churn/static, rebalance on/off) points the same way.
# Real runs of one scenario differ by 10-40% on this shared machine, so with
# RUNS=N every real run is repeated N times (each simulated with its own churn)
# and the means are compared, with the real runs' spread beside them.
#   scripts/bench_sim_reality.sh [duration_s]   (default 150; ~13 minutes of real runs per repetition)
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-150}
bash scripts/build.sh swarm swarm-sim > /dev/null
top=${OUT:-$(mktemp -d /tmp/swarm-sim-reality-XXXXXX)}
runs=${RUNS:-1}
mkdir -p "$top"
echo "config/small, ${duration} s per run, ${runs} repetition(s), $(nproc) cores; calibration config/calibration; metrics in $top"
real() {  # name, extra flags...   (SIM_ONLY=1 with OUT=an earlier run's folder: reuse its real runs)
  local name=$1; shift
  [ -n "${SIM_ONLY:-}" ] && return 0
  timeout -s INT "$duration" ./build/swarm --role cluster --config config/small --max-steps 0 --http-port -1 \
    --metrics "$out/real-$name.jsonl" --log-level error "$@" > /dev/null 2>&1 || true
}
sim() {  # name, extra flags...
  local name=$1; shift
  ./build/swarm-sim --config config/sim-small --duration "$duration" --quiet --metrics "$out/sim-$name.jsonl" "$@" \
    > /dev/null
}
churn20=(--chaos kill --chaos-every 20 --chaos-down 10 --chaos-seed 7)
churn30=(--chaos kill --chaos-every 30 --chaos-down 10 --chaos-seed 7)
uneven=(--stage-servers 3,1 --server-slowdowns 1,1,3,3 --rebalance-period 30)
folders=()
for rep in $(seq 1 "$runs"); do
  out=$top
  [ "$runs" -gt 1 ] && out=$top/run$rep
  mkdir -p "$out"
  folders+=("$out")
  real swarm --servers-per-stage 2
  real churn --servers-per-stage 2 "${churn20[@]}"
  real static_churn --servers-per-stage 2 "${churn20[@]}" --routing static
  real rebalance "${uneven[@]}" "${churn30[@]}" --rebalance on
  real rebalance_off "${uneven[@]}" "${churn30[@]}" --rebalance off
  # The simulated runs redo the real runs' kills and restarts (--churn replay): the
  # same servers at the same times, so the churn is not a second draw of chance.
  sim swarm --stage-servers 2,2
  sim churn --stage-servers 2,2 --churn replay --churn-log "$out/real-churn.jsonl"
  sim static_churn --stage-servers 2,2 --churn replay --churn-log "$out/real-static_churn.jsonl" --routing static
  sim rebalance --stage-servers 3,1 --slowdowns 1,1,3,3 --rebalance-period 30 --churn replay \
    --churn-log "$out/real-rebalance.jsonl"
  sim rebalance_off --stage-servers 3,1 --slowdowns 1,1,3,3 --rebalance-period 30 --churn replay \
    --churn-log "$out/real-rebalance_off.jsonl" --rebalance off
done
python3 scripts/sim_summary.py reality "${folders[@]}"
