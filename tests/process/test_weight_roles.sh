#!/usr/bin/env bash
# Weights in and out as a user runs them: a short local llama run with
# checkpoints, --role export of it, export -> import -> export to identical
# bytes, --role generate from the checkpoints, from the file, without the KV
# cache and through a real swarm (a coordinator and two stage servers started
# from the exported file: the same greedy text), a trainer that trains on
# from the imported weights, and bad inputs that must be exit 2 naming what is wrong.
#   tests/process/test_weight_roles.sh SWARM_BINARY SOURCE_DIR
set -euo pipefail
swarm=$1
src=$2
work=$(mktemp -d /tmp/swarm-test-weight-roles-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/../expect.sh"

model=(--config "$src/config/llama-small" --d-model 64 --n-layers 2 --seq-len 32 --threads 1)
echo "== local: 60 steps of a small llama, checkpointed"
"$swarm" --role local "${model[@]}" --stages 1 --max-steps 60 --checkpoint-dir "$work/ckpt" | tail -1

echo "== export, and export -> import -> export gives identical bytes"
"$swarm" --role export "${model[@]}" --checkpoint-dir "$work/ckpt" --out "$work/hf" || fail "export"
ls "$work/hf/model.safetensors" "$work/hf/config.json" >/dev/null || fail "export wrote no model or config"
grep -q '"num_key_value_heads": 2' "$work/hf/config.json" || fail "config.json lacks num_key_value_heads 2"
"$swarm" --role export "${model[@]}" --init-from "$work/hf/model.safetensors" --out "$work/hf2" >/dev/null 2>&1 ||
  fail "export from --init-from"
cmp "$work/hf/model.safetensors" "$work/hf2/model.safetensors" || fail "the round trip changed the file"
cmp "$work/hf/config.json" "$work/hf2/config.json" || fail "the round trip changed config.json"

echo "== generate: greedy text from the checkpoints, the file, and without the KV cache"
gen=("$swarm" --role generate "${model[@]}" --prompt "Q: What" --max-new-tokens 24 --temperature 0)
"${gen[@]}" --checkpoint-dir "$work/ckpt" >"$work/g_ckpt" 2>"$work/g_ckpt.err" || fail "generate from checkpoints"
"${gen[@]}" --init-from "$work/hf/model.safetensors" >"$work/g_file" 2>/dev/null || fail "generate from the file"
"${gen[@]}" --init-from "$work/hf/model.safetensors" --kv-cache off >"$work/g_nocache" 2>"$work/g_nocache.err" ||
  fail "generate without cache"
sed 's/^/  text: /' "$work/g_ckpt"
grep -h 'tokens/s' "$work/g_ckpt.err" "$work/g_nocache.err" | sed 's/^/  /'
grep -q '^generate: 24 tokens in' "$work/g_ckpt.err" || fail "no token count on stderr"
[ "$(tr -d ' \n' <"$work/g_ckpt" | fold -w1 | sort -u | wc -l)" -ge 3 ] ||
  fail "greedy text of fewer than 3 distinct characters: the comparisons below would prove little"
cmp "$work/g_ckpt" "$work/g_file" || fail "checkpoint and exported file generate different text"
cmp "$work/g_ckpt" "$work/g_nocache" || fail "the KV cache changed the text"
"$swarm" --role generate "${model[@]}" --init-from "$work/hf/model.safetensors" --max-new-tokens 24 \
  --sample-seed 5 >"$work/s1" 2>/dev/null
"$swarm" --role generate "${model[@]}" --init-from "$work/hf/model.safetensors" --max-new-tokens 24 \
  --sample-seed 5 >"$work/s2" 2>/dev/null
cmp "$work/s1" "$work/s2" || fail "the same --sample-seed drew different text"

echo "== a swarm started from the exported file: the same greedy text through it, and a trainer trains on"
"$swarm" --role coordinator --port 0 --port-file "$work/port" "${model[@]}" --stages 2 >"$work/coord.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
address="127.0.0.1:$(cat "$work/port")"
for stage in 0 1; do
  "$swarm" --role server --coordinator "$address" "${model[@]}" --stages 2 --stage $stage \
    --init-from "$work/hf/model.safetensors" >"$work/server$stage.log" 2>&1 &
  pids+=($!)
done
"${gen[@]}" --stages 2 --coordinator "$address" --compression none >"$work/g_swarm" 2>"$work/g_swarm.err" ||
  { fail "generate through the swarm"; tail -5 "$work/g_swarm.err"; }
grep -h 'tokens/s' "$work/g_swarm.err" | sed 's/^/  /'
cmp "$work/g_ckpt" "$work/g_swarm" || fail "the swarm generates other text than the local model"
"$swarm" --role trainer --coordinator "$address" "${model[@]}" --stages 2 --max-steps 2 --batch-size 16 \
  --metrics "$work/trainer.jsonl" >"$work/trainer.log" 2>&1 || { fail "trainer on imported weights"; tail -5 "$work/trainer.log"; }
first=$(grep '"event": "step"' "$work/trainer.jsonl" | head -1 | grep -o '"loss": [0-9.e+-]*' | cut -d' ' -f2)
echo "  the trainer's first loss on the imported weights: $first (random weights: ln 256 = 5.55)"
awk -v l="${first:-9}" 'BEGIN { exit !(l < 5.0) }' || fail "the trainer's first loss $first: not the imported model's"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done

echo "== bad input: exit 2, naming what is wrong"
expect 2 "cannot open" -- "$swarm" --role local "${model[@]}" --init-from "$work/nothing.safetensors" --max-steps 1
expect 2 "tensor model.embed_tokens.weight is [256, 64], this model needs [256, 128]" -- \
  "$swarm" --role local --config "$src/config/llama-small" --seq-len 32 --init-from "$work/hf/model.safetensors" \
  --max-steps 1
expect 2 "transformer.wte.weight is missing" -- "$swarm" --role generate --config "$src/config/tiny" \
  --init-from "$work/hf/model.safetensors"
head -c 5000 "$work/hf/model.safetensors" >"$work/cut.safetensors"
expect 2 "safetensors" -- "$swarm" --role export "${model[@]}" --init-from "$work/cut.safetensors" --out "$work/x"
expect 2 "--init-from" -- "$swarm" --role server --coordinator 127.0.0.1:1 "${model[@]}" --stage 0 \
  --init-from "$work/cut.safetensors"
expect 2 "exactly one source" -- "$swarm" --role export "${model[@]}" --out "$work/x"
expect 2 "exactly one model" -- "$swarm" --role generate "${model[@]}" --checkpoint-dir "$work/ckpt" \
  --init-from "$work/hf/model.safetensors"
expect 2 "config hash" -- "$swarm" --role export "${model[@]}" --d-model 32 --checkpoint-dir "$work/ckpt" --out "$work/x"
# 200,000 nested brackets where a dtype goes (400 KB): dump() in the error message overflowed the stack.
python3 -c '
import struct, sys
d = 200000
h = "{\"a\":{\"dtype\":" + "[" * d + "]" * d + ",\"shape\":[1],\"data_offsets\":[0,4]}}"
sys.stdout.buffer.write(struct.pack("<Q", len(h)) + h.encode() + bytes(4))' >"$work/deep.safetensors"
expect 2 "nests deeper than 8 levels" -- "$swarm" --role export "${model[@]}" --init-from "$work/deep.safetensors" \
  --out "$work/x"
expect 2 "nests deeper than 8 levels" -- "$swarm" --role generate "${model[@]}" --init-from "$work/deep.safetensors"
mkdir "$work/empty"
expect 2 "holds no stage checkpoints" -- "$swarm" --role generate "${model[@]}" --checkpoint-dir "$work/empty"

[ "$failures" = 0 ] && echo "test_weight_roles: all passed" || { echo "test_weight_roles: $failures failed"; exit 1; }
