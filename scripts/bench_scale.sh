#!/usr/bin/env bash
# The real binary at the largest size this machine holds (issue 28): config/tiny in 2 stages with
# N servers per stage (SIZES, default "2 4 8 16": 4 to 32 servers) and 4 trainers, DURATION s each
# (default 60), and what grows with N: the averaging round's duration against its members, the
# coordinator's CPU (per second and per progress report), each role's memory, the time from a
# server's start to its join; swarm-sim on the same layout beside it. Then what the coordinator's
# CPU per report means at swarm-sim's request rates for 100 to 10,000 peers of config/sim-t4.
#   scripts/bench_scale.sh [duration_s]        (OUT=folder keeps the metrics; FLAGS="..." adds swarm
#                                               flags to the real clusters, e.g. FLAGS="--busy-retries 0")
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60}
sizes=${SIZES:-"2 4 8 16"}
bash scripts/build.sh swarm swarm-sim > /dev/null
out=${OUT:-$(mktemp -d /tmp/swarm-scale-XXXXXX)}
mkdir -p "$out"
echo "config/tiny, 2 stages, 4 trainers, ${duration} s per size, $(nproc) cores; metrics in $out"
for n in $sizes; do
  rm -f "$out/real-$n.jsonl"
  ./build/swarm --role cluster --config config/tiny --stages 2 --servers-per-stage "$n" --trainers 4 \
    --max-steps 0 --http-port -1 --log-level error --metrics "$out/real-$n.jsonl" ${FLAGS:-} > "$out/real-$n.log" 2>&1 &
  pid=$!
  # Measured from 40% of the run (everyone joined) to 5 s before its end; joins from the cluster's start.
  python3 scripts/bench_scale.py sample "$pid" "$out/real-$n.jsonl" "$out/probe-$n.json" "$((duration * 2 / 5))" \
    "$((duration - 5))"
  kill -INT "$pid"
  wait "$pid" || true
  # The same layout in swarm-sim (--platform local: this machine's cores, config/calibration's costs).
  ./build/swarm-sim --platform local --cores "$(nproc)" --d-model 64 --n-layers 2 --seq-len 64 --microbatch 8 \
    --stages 2 --batch-size 16 --in-flight 4 --trainers 4 --peers "$((2 * n))" --forward-timeout 10 \
    --backward-timeout 20 --duration "$duration" --quiet --metrics "$out/sim-$n.jsonl" > /dev/null
  echo "$n servers per stage: done"
done
# shellcheck disable=SC2086
python3 scripts/bench_scale.py report "$out" $sizes
