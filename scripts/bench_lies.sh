#!/usr/bin/env bash
# Lying servers against verified work and robust averaging (issue #47), on one
# config, each run STEPS steps of the same data (trainer slot 0) on stages of
# 3 (stage 0) and 2 (stage 1) servers, rebalancing off:
#   clean          no liar, no verification: the reference
#   clean_verify   no liar, --verify-fraction P: verification's throughput cost
#   noise          one stage-0 server --fault noise, P: how soon it is banned, the loss
#   stale          one stage-0 server --fault stale (2 steps old), P: caught or harmless
#   drop_half      one stage-0 server --fault drop-half, P: caught or harmless
#   clean_clip     no liar, --aggregation centered-clip: clipping's own cost
#   flip_clip      one stage-0 server --fault flip, centered-clip: the loss
#   flip_mean      the same with --aggregation mean (the default): the loss
# Then scripts/lies_summary.py prints per run the loss at the samples every run
# reached (mean of the last 5 steps) and against clean, tokens/s against clean,
# the verification's share, strikes and bans, microbatches issued until the
# ban, and the flip runs' loss curves side by side.
#   scripts/bench_lies.sh [config] [steps]   (defaults: config/small 100)
#   env: P (0.05), RUNS (all of the above, in that order)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
steps=${2:-100}
p=${P:-0.05}
runs=${RUNS:-clean clean_verify noise stale drop_half clean_clip flip_clip flip_mean}
bash scripts/build.sh swarm > /dev/null
out=$(mktemp -d /tmp/swarm-lies-XXXXXX)
echo "config $config, $steps steps per run, verify fraction $p, stages of 3 and 2 servers; $(nproc) cores;" \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}; metrics in $out"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
}
trap cleanup EXIT
run() {  # name, liar's flags ('' for none), then flags for every process
  local name=$1 liar=$2; shift 2
  local m="$out/$name.jsonl" common port
  common=(--config "$config" --metrics "$m" --log-level error --threads 1 --rebalance off ${EXTRA:-} "$@")
  pids=()
  ./build/swarm --role coordinator --port 0 --port-file "$out/$name.port" "${common[@]}" > "$out/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$out/$name.port" ] && break; sleep 0.1; done
  port=$(cat "$out/$name.port")
  local server=(./build/swarm --role server --coordinator "127.0.0.1:$port" "${common[@]}")
  # shellcheck disable=SC2086
  "${server[@]}" --stage 0 $liar >> "$out/$name.log" 2>&1 &
  pids+=($!)
  for stage in 0 0 1 1; do
    "${server[@]}" --stage "$stage" >> "$out/$name.log" 2>&1 &
    pids+=($!)
  done
  local started=$SECONDS
  ./build/swarm --role trainer --coordinator "127.0.0.1:$port" --max-steps "$steps" --trainer-slot 0 \
    "${common[@]}" >> "$out/$name.log" 2>&1 || echo "$name: the trainer exited with $?" >&2
  echo "$name: $((SECONDS - started)) s"
  for pid in "${pids[@]:1}"; do kill -INT "$pid" 2> /dev/null || true; done
  sleep 2
  kill -INT "${pids[0]}" 2> /dev/null || true
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null || true
  done
}
for r in $runs; do
  case $r in
    clean) run clean '' --verify-fraction 0 ;;
    clean_verify) run clean_verify '' --verify-fraction "$p" ;;
    noise) run noise '--fault noise --allow-faults' --verify-fraction "$p" ;;
    stale) run stale '--fault stale --fault-after 2 --allow-faults' --verify-fraction "$p" ;;
    drop_half) run drop_half '--fault drop-half --allow-faults' --verify-fraction "$p" ;;
    clean_clip) run clean_clip '' --verify-fraction 0 --aggregation centered-clip ;;
    flip_clip) run flip_clip '--fault flip --allow-faults' --verify-fraction 0 --aggregation centered-clip ;;
    flip_mean) run flip_mean '--fault flip --allow-faults' --verify-fraction 0 --aggregation mean ;;
    *) echo "bench_lies: unknown run '$r'" >&2; exit 2 ;;
  esac
done
python3 scripts/lies_summary.py "$out"
