#!/usr/bin/env bash
# A local swarm (`--role cluster`: 2 stages x 2 servers and a trainer, the
# defaults) against PyTorch DistributedDataParallel over gloo (scripts/bench_ddp.py,
# 2 ranks of 1 thread: what a user would run on these cores instead), same
# GPT, same global batch, same cores, in one run: config/small (d 128, 4 layers)
# and d 256 with 8 layers. Prints each figure and the ratio.
#   scripts/bench_ddp.sh [steps] [cluster flags...]     (default 30; e.g. --precision bf16)
# This machine sets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE: run it once as it
# is and once with both unset (env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
# scripts/bench_ddp.sh), both sides alike.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
shift || true
bash scripts/build.sh swarm >/dev/null
out=$(mktemp -d /tmp/swarm-bench-ddp-XXXXXX)
py=/usr/bin/python3
echo "$(nproc) cores, $steps steps of 64 samples x 128 bytes, cluster flags: ${*:-none};" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}; files in $out"

swarm_rate() {  # tokens/s of a metrics file's step events after the first fifth (start-up, first round)
  $py - "$1" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"event": "step"' in l]
a, b = steps[len(steps) // 5], steps[-1]
print(f"{(b['tokens'] - a['tokens']) / (b['t'] - a['t']):.1f}")
PY
}

# name d heads layers, then extra cluster flags
run_size() {
  local name=$1 d=$2 heads=$3 layers=$4
  shift 4
  local model=(--d-model "$d" --n-heads "$heads" --n-layers "$layers" --seq-len 128 --microbatch 8 --batch-size 64)
  rm -f "$out/$name.jsonl"
  ./build/swarm --role cluster --config config/small "${model[@]}" --max-steps "$steps" --metrics "$out/$name.jsonl" \
    --log-level warn "$@" >/dev/null
  local ours theirs
  ours=$(swarm_rate "$out/$name.jsonl")
  theirs=$(OPENBLAS_NUM_THREADS=1 $py scripts/bench_ddp.py "${model[@]}" --steps "$steps" --ranks 2 --threads 1 |
    $py -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["tokens_per_s"])')
  printf '%-5s swarm cluster %8s tokens/s, PyTorch DDP (gloo, 2 x 1 thread) %8s tokens/s, ratio %s\n' "$name" \
    "$ours" "$theirs" "$($py -c "print(f'{$ours / $theirs:.2f}')")"
}

run_size d128 128 4 4 "$@"
run_size d256 256 8 8 "$@"
