#!/usr/bin/env bash
# The square-cube law, measured: a stage's compute grows like d^2 per token
# (d^3 per layer of a model scaled in depth and width), its traffic like d, so
# wider models should lose less to slow links. For each width, network, routing
# and compression, a 2-stage swarm trains for SECONDS and its tokens/s is
# divided by the same swarm's on plain loopback ("relative utilisation").
#
# Layout (scripts/regions.sh, 3 regions): coordinator and trainer in region 0,
# both servers of stage 0 in region 1, both of stage 1 in region 2, so every
# stage call crosses a link of RATE and RTT. Loopback: the same processes,
# no namespaces. Rebalancing is off (the layout is the experiment).
#
#   scripts/bench_square_cube.sh            (root; see the variables below)
#   env: WIDTHS ("256 512 1024")  NETS ("1gbit/0 1gbit/50 1gbit/100 100mbit/0 100mbit/50 100mbit/100")
#        ROUTINGS ("swarm static")  COMPRESSIONS ("blockwise8 none")  SECONDS_PER_RUN (30)  WARMUP (10)
#        LAYERS_PER_STAGE (2)  OUT (a fresh /tmp/swarm-square-cube-XXXXXX)
# Prints one table (scripts/square_cube_summary.py) and leaves every run's metrics in OUT.
# A run whose metrics are already in OUT is kept, not repeated (FRESH=1 repeats it): an
# interrupted sweep resumes, and more networks can be added to a finished one.
set -euo pipefail
cd "$(dirname "$0")/.."
widths=${WIDTHS:-256 512 1024}
nets=${NETS-1gbit/0 1gbit/50 1gbit/100 100mbit/0 100mbit/50 100mbit/100}
routings=${ROUTINGS:-swarm static}
compressions=${COMPRESSIONS:-blockwise8 none}
seconds=${SECONDS_PER_RUN:-30}
warmup=${WARMUP:-10}
layers=${LAYERS_PER_STAGE:-2}
out=${OUT:-$(mktemp -d /tmp/swarm-square-cube-XXXXXX)}
mkdir -p "$out"
if ! bash scripts/regions.sh check; then
  echo "bench_square_cube: needs root and scripts/setup.sh's packages for the regions" >&2
  exit 77
fi
bash scripts/build.sh swarm > /dev/null
swarm=$PWD/build/swarm
echo "square-cube: widths $widths; nets loopback $nets; routing $routings; compression $compressions;" \
     "$layers layers per stage, 2 stages, 2 servers each; ${seconds} s per run after ${warmup} s warm-up;" \
     "$(nproc) cores; metrics in $out"

name=swsq$$
pids=()
stop_all() {
  [ ${#pids[@]} -eq 0 ] && return
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "${pids[@]}" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}
cleanup() { stop_all; bash scripts/regions.sh down "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# One run: net (loopback or RATE/RTT), width, routing, compression.
run() {
  local net=$1 d=$2 routing=$3 compression=$4
  local metrics=$out/${net//\//-}_d${d}_${routing}_${compression}.jsonl
  if [ -z "${FRESH:-}" ] && grep -q '"event": "step"' "$metrics" 2>/dev/null; then
    python3 scripts/square_cube_summary.py one "$metrics" "$warmup" | sed "s|^|  $net d=$d $routing $compression (kept): |"
    return
  fi
  rm -f "$metrics"
  local model=(--d-model "$d" --n-heads $((d / 64)) --n-layers $((2 * layers)) --stages 2 --seq-len 128
               --microbatch 8 --rebalance off --connection-timeout 20 --metrics "$metrics" --log-level error)
  local in0=() in1=() in2=() coordinator host0=127.0.0.1 host1=127.0.0.1 host2=127.0.0.1
  if [ "$net" = loopback ]; then
    rm -f "$out/port"
    "$swarm" --role coordinator --port 0 --port-file "$out/port" "${model[@]}" >/dev/null 2>&1 & pids+=($!)
    for _ in $(seq 100); do [ -s "$out/port" ] && break; sleep 0.1; done
    coordinator=127.0.0.1:$(cat "$out/port")
  else
    in0=(ip netns exec "$NS0") in1=(ip netns exec "$NS1") in2=(ip netns exec "$NS2")
    host0=$REGION0 host1=$REGION1 host2=$REGION2
    coordinator=$REGION0:7100
    "${in0[@]}" "$swarm" --role coordinator --port 7100 "${model[@]}" >/dev/null 2>&1 & pids+=($!)
  fi
  for i in 1 2; do
    "${in1[@]}" "$swarm" --role server --stage 0 --coordinator "$coordinator" --host "$host1" "${model[@]}" \
      >/dev/null 2>&1 & pids+=($!)
    "${in2[@]}" "$swarm" --role server --stage 1 --coordinator "$coordinator" --host "$host2" "${model[@]}" \
      >/dev/null 2>&1 & pids+=($!)
  done
  # A step event per microbatch (--batch-size 8) times the run finely; servers
  # average every 64 samples, the default.
  "${in0[@]}" "$swarm" --role trainer --coordinator "$coordinator" --host "$host0" --routing "$routing" \
    --compression "$compression" --max-steps 0 --batch-size 8 "${model[@]}" >/dev/null 2>&1 & pids+=($!)
  # Time from the first step on, so start-up (model building, joins) is not counted.
  for _ in $(seq 600); do grep -q '"event": "step"' "$metrics" 2>/dev/null && break; sleep 0.2; done
  sleep "$((warmup + seconds))"
  stop_all
  python3 scripts/square_cube_summary.py one "$metrics" "$warmup" | sed "s|^|  $net d=$d $routing $compression: |"
}

for d in $widths; do
  for r in $routings; do for c in $compressions; do run loopback "$d" "$r" "$c"; done; done
done
for net in $nets; do
  rate=${net%/*} rtt=${net#*/}
  eval "$(bash scripts/regions.sh up "$name" --regions 3 --rate "$rate" --rtt "$rtt")"
  for d in $widths; do
    for r in $routings; do for c in $compressions; do run "$net" "$d" "$r" "$c"; done; done
  done
  bash scripts/regions.sh down "$name" >/dev/null
done
python3 scripts/square_cube_summary.py table "$out" "$warmup"
