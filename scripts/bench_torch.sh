#!/usr/bin/env bash
# Training throughput of `swarm --role local` against the same GPT model in
# PyTorch (Debian's python3-torch, scripts/bench_torch.py: same threads, batch,
# microbatch, optimizer and clipping), fp32 and bf16 (--precision bf16 against
# torch.autocast), at d_model 128 (4 layers), 256 (8 layers) and 1024 (4
# layers), in one run. Prints each figure and the ratios. PyTorch runs twice per
# figure, its threads given to torch (OpenBLAS 1) and to OpenBLAS (torch 1), as
# swarm splits them (apps/thread_split.hpp), and the faster counts: both pools
# spin while they wait, so PyTorch's own default (both get every core) is slower
# than either.
#   scripts/bench_torch.sh [threads] [steps]     (defaults: all cores, 8)
# This machine sets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE: run it once as it
# is and once with both unset (env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
# scripts/bench_torch.sh), both sides alike.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
steps=${2:-8}
bash scripts/build.sh swarm >/dev/null
out=$(mktemp -d /tmp/swarm-bench-torch-XXXXXX)
corpus=/usr/share/games/fortunes/fortunes
py=/usr/bin/python3
echo "threads $threads, $steps steps of 16 samples x 128 bytes, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" \
  "OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}; files in $out"

swarm_rate() {  # tokens/s of a metrics file's step events after the first step
  $py - "$1" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"event": "step"' in l]
a, b = steps[0], steps[-1]
print(f"{(b['tokens'] - a['tokens']) / (b['t'] - a['t']):.1f}")
PY
}
ratio() { $py -c "print(f'{$1 / $2:.2f}')"; }

# name d heads layers
run_size() {
  local name=$1 d=$2 heads=$3 layers=$4
  local model=(--d-model "$d" --n-heads "$heads" --n-layers "$layers" --seq-len 128 --microbatch 8 --batch-size 16)
  declare -A ours theirs
  for p in fp32 bf16; do
    rm -f "$out/$name-$p.jsonl"
    ./build/swarm --role local --model gpt "${model[@]}" --stages 1 --corpus "$corpus" --threads "$threads" \
      --precision "$p" --max-steps "$steps" --metrics "$out/$name-$p.jsonl" --log-level warn >/dev/null
    ours[$p]=$(swarm_rate "$out/$name-$p.jsonl")
    local best=0 split
    for split in "$threads 1" "1 $threads"; do
      set -- $split
      local rate
      rate=$(OPENBLAS_NUM_THREADS=$2 $py scripts/bench_torch.py --model gpt "${model[@]}" --steps "$steps" \
        --threads "$1" --precision "$p" --corpus "$corpus" |
        $py -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["tokens_per_s"])')
      echo "  PyTorch $name $p, torch $1 + OpenBLAS $2 threads: $rate tokens/s"
      best=$($py -c "print(max($best, $rate))")
    done
    theirs[$p]=$best
  done
  printf '%-6s fp32: swarm %8s, PyTorch %8s tokens/s (%sx) | bf16: swarm %8s, PyTorch %8s (%sx) | swarm bf16/fp32 %sx\n' \
    "$name" "${ours[fp32]}" "${theirs[fp32]}" "$(ratio "${ours[fp32]}" "${theirs[fp32]}")" "${ours[bf16]}" \
    "${theirs[bf16]}" "$(ratio "${ours[bf16]}" "${theirs[bf16]}")" "$(ratio "${ours[bf16]}" "${ours[fp32]}")"
}

echo "== --role local against PyTorch $($py -c 'import torch; print(torch.__version__)'), GPT"
run_size d128 128 4 4
run_size d256 256 8 8
run_size d1024 1024 16 4
