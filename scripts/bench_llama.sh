#!/usr/bin/env bash
# The llama model's training throughput: `swarm --role local` against the same
# model in PyTorch (Debian's python3-torch, scripts/bench_torch.py: same
# threads, batch, microbatch, optimizer and clipping) in one run, at d_model
# 256 and 1024, and `--role cluster` on the d=256 model beside them; then
# generation speed with the KV cache against recomputing the window.
#   scripts/bench_llama.sh [threads]      (default: all cores)
# Prints each figure and the ratios. This machine sets OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE: run it once as it is and once with both unset
# (env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE scripts/bench_llama.sh), both sides alike.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
bash scripts/build.sh swarm >/dev/null
out=$(mktemp -d /tmp/swarm-bench-llama-XXXXXX)
corpus=/usr/share/games/fortunes/fortunes
py=/usr/bin/python3
echo "threads $threads, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}; files in $out"

swarm_rate() {  # tokens/s of a metrics file's step events after the first step
  $py - "$1" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"event": "step"' in l]
a, b = steps[0], steps[-1]
print(f"{(b['tokens'] - a['tokens']) / (b['t'] - a['t']):.1f}")
PY
}

# name d heads kv layers ffn batch steps
run_size() {
  local name=$1 d=$2 heads=$3 kv=$4 layers=$5 ffn=$6 batch=$7 steps=$8
  local model=(--d-model "$d" --n-heads "$heads" --n-kv-heads "$kv" --n-layers "$layers" --ffn-dim "$ffn"
               --seq-len 128 --microbatch 8 --batch-size "$batch")
  rm -f "$out/$name.jsonl"
  ./build/swarm --role local --model llama "${model[@]}" --stages 1 --corpus "$corpus" --threads "$threads" \
    --max-steps "$steps" --metrics "$out/$name.jsonl" --log-level warn >/dev/null
  local ours torch
  ours=$(swarm_rate "$out/$name.jsonl")
  torch=$($py scripts/bench_torch.py --model llama --d-model "$d" --n-heads "$heads" --n-kv-heads "$kv" --n-layers "$layers" \
    --ffn-dim "$ffn" --seq-len 128 --microbatch 8 --batch-size "$batch" --steps "$steps" --threads "$threads" \
    --corpus "$corpus" | $py -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["tokens_per_s"])')
  printf '%-7s d=%-4s layers %s, batch %s: swarm local %9s tokens/s, PyTorch %9s tokens/s, ratio %s\n' "$name" "$d" \
    "$layers" "$batch" "$ours" "$torch" "$($py -c "print(f'{$ours / $torch:.2f}')")"
}

echo "== training throughput, --role local against PyTorch $($py -c 'import torch; print(torch.__version__)')"
run_size d256 256 8 4 4 768 64 12
run_size d1024 1024 16 8 2 2816 16 6

echo "== the cluster on the d=256 model (2 stages x 1 server, 1 trainer, the same cores)"
rm -f "$out/cluster.jsonl"
./build/swarm --role cluster --config config/llama-small --d-model 256 --n-heads 8 --n-kv-heads 4 --n-layers 4 \
  --ffn-dim 768 --servers-per-stage 1 --max-steps 12 --corpus "$corpus" --metrics "$out/cluster.jsonl" \
  --log-level warn >/dev/null
echo "cluster d=256: $(swarm_rate "$out/cluster.jsonl") tokens/s (trainer steps; activations blockwise8 over loopback)"

echo "== generation, d=256, context 512: KV cache against recomputing the window"
gen_model=(--model llama --d-model 256 --n-heads 8 --n-kv-heads 4 --n-layers 4 --ffn-dim 768 --seq-len 512
           --threads "$threads")
./build/swarm --role local "${gen_model[@]}" --stages 1 --max-steps 1 --batch-size 8 --corpus "$corpus" \
  --checkpoint-dir "$out/ckpt" --log-level warn >/dev/null
for cache in on off; do
  ./build/swarm --role generate "${gen_model[@]}" --checkpoint-dir "$out/ckpt" --max-new-tokens 400 \
    --kv-cache "$cache" --prompt "Q: " 2>&1 >/dev/null | grep 'tokens/s'
done
