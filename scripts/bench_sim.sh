#!/usr/bin/env bash
# swarm-sim experiments (docs/simulator.md), each printing its table:
#   scripts/bench_sim.sh rebalance   the SWARM paper's rebalancing experiment redone: config/sim-t4
#                                    on peers that come and go as the g4dn (T4) trace says, rebalancing
#                                    every 60 s, every 300 s, only placing joiners (--rebalance off),
#                                    and none at all (joiners on a random stage) (~2 minutes); with
#                                    SEEDS="2 3 ... 10" every 300 s and placing only on those seeds
#                                    too, two at a time (~35 s a seed), and the pairs compared
#   scripts/bench_sim.sh scale       100 and 1,000 peers (10,000 with WITH_10000=1: ~9 more minutes,
#                                    2.4 GB) for a simulated hour under churn; 1,000
#                                    peers in 3 regions at 10/50/150 ms; swarm vs static routing (~3 min)
#   scripts/bench_sim.sh reality     see scripts/bench_sim_reality.sh (real runs, ~13 minutes)
# TRACE (default ../shared/data/traces/g4dn-trace.csv), OUT (a fresh /tmp folder) and SIM (the
# binary, default build/swarm-sim after building it: a copy keeps a long run apart from rebuilds) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
[ -n "${SIM:-}" ] || bash scripts/build.sh swarm-sim > /dev/null
binary=${SIM:-./build/swarm-sim}
out=${OUT:-$(mktemp -d /tmp/swarm-sim-XXXXXX)}
mkdir -p "$out"
trace=${TRACE:-../shared/data/traces/g4dn-trace.csv}
sim() {  # name, flags...
  local name=$1; shift
  /usr/bin/time -f "%e s wall, %M KiB peak" -o "$out/$name.time" \
    "$binary" --config config/sim-t4 --quiet --metrics "$out/$name.jsonl" "$@" > "$out/$name.txt"
  echo "$name: $(sed -n 2p "$out/$name.txt" | sed 's/^ *//') [$(cat "$out/$name.time")]"
}
case "$what" in
  rebalance)
    [ -f "$trace" ] || { echo "no trace at $trace (set TRACE)"; exit 2; }
    # 240 machine slots: the trace (at most 24 up at once) laid 10 times with +-5 min of jitter,
    # over its whole 10.8 hours.
    common=(--churn trace --trace "$trace" --peers 240 --trace-jitter 300 --duration 38760 --warmup 1800
            --trainers 32 --in-flight 32)
    echo "rebalancing on the g4dn trace: config/sim-t4, 240 slots, 10.8 simulated hours; metrics in $out"
    sim every60 "${common[@]}" --seed 1 --rebalance on --rebalance-period 60
    sim every300 "${common[@]}" --seed 1 --rebalance on --rebalance-period 300
    sim placed_only "${common[@]}" --seed 1 --rebalance off
    sim none "${common[@]}" --seed 1 --rebalance off --join random
    python3 scripts/sim_summary.py runs "$out/every60.jsonl" "$out/every300.jsonl" "$out/placed_only.jsonl" \
      "$out/none.jsonl"
    # One seed is one draw of jitter and placements: runs of one policy spread over ~10 points of share.
    if [ -n "${SEEDS:-}" ]; then
      pairs=("$out/every300.jsonl" "$out/placed_only.jsonl")
      for seed in $SEEDS; do
        sim every300_seed$seed "${common[@]}" --seed "$seed" --rebalance on --rebalance-period 300 &
        sim placed_only_seed$seed "${common[@]}" --seed "$seed" --rebalance off
        wait
        pairs+=("$out/every300_seed$seed.jsonl" "$out/placed_only_seed$seed.jsonl")
      done
      python3 scripts/sim_summary.py pairs "${pairs[@]}"
    fi
    ;;
  scale)
    churn=(--churn rate --mtbf 7200 --churn-down 900 --duration 3600 --seed 1)
    echo "scale: config/sim-t4, a simulated hour, each peer fails every 2 h on average and is back after 15 min;" \
         "metrics in $out"
    # Trainers x in-flight sized to keep the pipeline full: ~4 microbatches in flight per peer.
    sim peers100 "${churn[@]}" --peers 100 --trainers 13 --in-flight 32
    sim peers1000 "${churn[@]}" --peers 1000 --trainers 128 --in-flight 32
    # 10,000: the same 40,960 in flight from 160 trainers (a router per trainer and stage over all its servers).
    [ -n "${WITH_10000:-}" ] && sim peers10000 "${churn[@]}" --peers 10000 --trainers 160 --in-flight 256
    for ms in 10 50 150; do
      sim regions3_${ms}ms "${churn[@]}" --peers 1000 --trainers 128 --in-flight 32 --regions 3 --region-latency-ms "$ms"
    done
    sim static1000 "${churn[@]}" --peers 1000 --trainers 128 --in-flight 32 --routing static
    python3 scripts/sim_summary.py runs "$out"/peers*.jsonl "$out"/regions3_*.jsonl "$out/static1000.jsonl"
    ;;
  reality)
    exec bash scripts/bench_sim_reality.sh "${@:2}"
    ;;
  *)
    sed -n 2,11p "$0"
    exit 2
    ;;
esac
