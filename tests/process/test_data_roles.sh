#!/usr/bin/env bash
# --role tokenizer and --role prepare as a user runs them, on real text (the
# fortunes package), and the independent check of the ids: Debian's
# python3-sentencepiece must give exactly the ids `swarm --encode` gives on the
# same model, line for line. Then a short local run on the shards, and the
# bad inputs that must be exit 2 naming what is wrong.
#   tests/process/test_data_roles.sh SWARM_BINARY SOURCE_DIR
set -euo pipefail
swarm=$1
src=$2
work=$(mktemp -d /tmp/swarm-test-data-roles-XXXXXX)
trap 'rm -rf "$work"' EXIT
fortunes=/usr/share/games/fortunes
py=/usr/bin/python3  # Debian's, with python3-sentencepiece (a python3 earlier on PATH may lack it)
source "$(dirname "$0")/../expect.sh"

echo "== tokenizer: train on $fortunes"
"$swarm" --role tokenizer --input "$fortunes" --vocab-size 2000 --out "$work/tok.model" --threads 2 | tail -2
[ -s "$work/tok.model" ] || fail "no model written"

echo "== the ids against python3-sentencepiece"
$py - "$fortunes" "$work/lines.txt" <<'PY'
import os, sys
lines = []
for name in sorted(os.listdir(sys.argv[1])):
    path = os.path.join(sys.argv[1], name)
    if name.endswith(('.dat', '.u8')) or os.path.islink(path) or not os.path.isfile(path):
        continue
    for raw in open(path, 'rb').read().split(b'\n'):
        try:
            line = raw.decode('utf-8')
        except UnicodeDecodeError:
            continue
        if line.strip() and line != '%':
            lines.append(line)
lines = lines[::max(1, len(lines) // 3000)][:3000]
open(sys.argv[2], 'w', encoding='utf-8', newline='\n').write('\n'.join(lines) + '\n')
PY
"$swarm" --role tokenizer --tokenizer "$work/tok.model" --encode <"$work/lines.txt" >"$work/ids.swarm"
$py - "$work/tok.model" "$work/lines.txt" "$work/ids.swarm" <<'PY' || failures=$((failures + 1))
import sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
lines = open(sys.argv[2], encoding='utf-8', newline='\n').read().split('\n')[:-1]
ours = open(sys.argv[3]).read().split('\n')[:-1]
assert len(lines) == len(ours), f"{len(lines)} lines in, {len(ours)} lines of ids out"
differ = 0
tokens = 0
for i, (line, got) in enumerate(zip(lines, ours)):
    want = sp.encode(line)
    tokens += len(want)
    if [int(x) for x in got.split()] != want:
        differ += 1
        if differ <= 3:
            print(f"line {i}: {line!r}\n  swarm  {got}\n  python {want}")
print(f"python3-sentencepiece {spm.__version__}: {len(lines)} lines, {tokens} tokens, {differ} lines differ")
sys.exit(1 if differ or len(lines) < 1000 else 0)
PY

echo "== prepare"
"$swarm" --role prepare --input "$fortunes" --tokenizer "$work/tok.model" --out "$work/shards" --val-fraction 0.02 \
  --shard-tokens 200000 | tail -4
ls "$work/shards"/train-00000.bin "$work/shards"/val-00000.bin "$work/shards"/tokenizer.model >/dev/null || fail "shards missing"

echo "== local on the shards"
"$swarm" --role local --config "$src/config/tiny" --data "$work/shards" --tokenizer "$work/shards/tokenizer.model" \
  --max-steps 3 --threads 2 | tail -2 || fail "local on shards"

echo "== local on the shards, resumed: the same steps and validation as one run"
steps() { grep -E '^local (step|validation)' | sed 's/ tokens\/s.*//'; }
local=("$swarm" --role local --config "$src/config/tiny" --data "$work/shards" --tokenizer "$work/shards/tokenizer.model"
       --threads 1 --eval-every 3 --eval-tokens 1024)
"${local[@]}" --max-steps 6 | steps >"$work/whole.txt"
"${local[@]}" --max-steps 3 --checkpoint-dir "$work/ckpt" --checkpoint-every 1 | steps >"$work/parts.txt"
"${local[@]}" --max-steps 6 --checkpoint-dir "$work/ckpt" | steps | grep -v 'validation at step 3:' >>"$work/parts.txt"
grep -q 'validation at step 6' "$work/whole.txt" || fail "no validation at step 6"
diff "$work/whole.txt" "$work/parts.txt" >/dev/null || { fail "a resumed run on shards differs"; diff "$work/whole.txt" "$work/parts.txt"; }

echo "== export and generate with the SentencePiece tokenizer"
"$swarm" --role export --config "$src/config/tiny" --tokenizer "$work/shards/tokenizer.model" \
  --checkpoint-dir "$work/ckpt" --out "$work/hf" | tail -1
cmp "$work/hf/tokenizer.model" "$work/shards/tokenizer.model" || fail "export did not copy the tokenizer"
grep -q '"model_type": "gpt2"' "$work/hf/config.json" || fail "a gpt export's config.json is not gpt2's"
"$swarm" --role generate --config "$src/config/tiny" --tokenizer "$work/shards/tokenizer.model" \
  --init-from "$work/hf/model.safetensors" --prompt "The" --max-new-tokens 20 --temperature 0 --threads 1 \
  >"$work/sample" 2>"$work/sample.err" || fail "generate with the SentencePiece tokenizer"
echo "  The$(cat "$work/sample")"
grep -qE '^generate: [0-9]+ tokens in' "$work/sample.err" || fail "generate said no token count"

echo "== a cluster's trainer samples by its slot: two runs, the same first step"
# Step 1's loss is over the first microbatches, all forwarded on the initial
# parameters (one server per stage: no reordering), so it depends on the
# windows drawn alone. A sampler seeded by process id differs in the 4th digit.
first_loss() {
  rm -f "$work/cluster.jsonl"  # metrics files are appended to
  "$swarm" --role cluster --config "$src/config/tiny" --data "$work/shards" --tokenizer "$work/shards/tokenizer.model" \
    --servers-per-stage 1 --max-steps 1 --metrics "$work/cluster.jsonl" >"$work/cluster.log" 2>&1 ||
    { fail "cluster on shards"; tail -5 "$work/cluster.log"; }
  grep -q 'trainer slot 0: the data sampler draws the same windows' "$work/cluster.log" || fail "no trainer slot 0"
  grep '"event": "step"' "$work/cluster.jsonl" | grep -o '"step": 1, "loss": [-0-9.e]*'
}
a=$(first_loss)
b=$(first_loss)
echo "run 1: $a; run 2: $b"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "two cluster runs drew different windows ($a / $b)"

echo "== a server with another tokenizer is refused, both named"
"$swarm" --role coordinator --port 0 --port-file "$work/port" --tokenizer "$work/tok.model" >"$work/coord.log" 2>&1 &
coord=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
expect 2 "its tokenizer is bytes, the swarm's $work/tok.model (hash" -- "$swarm" --role server \
  --coordinator "127.0.0.1:$(cat "$work/port")" --threads 1
kill "$coord"; wait "$coord" 2>/dev/null || true

echo "== bad input: exit 2, naming what is wrong"
expect 2 "--tokenizer" -- "$swarm" --role local --config "$src/config/tiny" --data "$work/shards" --max-steps 1
expect 2 "has 2000 ids" -- "$swarm" --role local --config "$src/config/tiny" --tokenizer "$work/tok.model" --vocab 300 \
  --data "$work/shards" --max-steps 1
expect 2 "needs --data" -- "$swarm" --role local --config "$src/config/tiny" --tokenizer "$work/tok.model" --max-steps 1
head -c 1000 "$work/shards/train-00000.bin" >"$work/cut.bin"
mkdir "$work/cut" && cp "$work/cut.bin" "$work/cut/train-00000.bin"
expect 2 "train-00000.bin" -- "$swarm" --role local --config "$src/config/tiny" --data "$work/cut" \
  --tokenizer "$work/tok.model" --max-steps 1
mkdir "$work/none"
expect 2 "holds no train-" -- "$swarm" --role local --config "$src/config/tiny" --data "$work/none" \
  --tokenizer "$work/tok.model" --max-steps 1
expect 2 "fewer than one window" -- "$swarm" --role local --config "$src/config/tiny" --data "$work/shards" \
  --tokenizer "$work/tok.model" --seq-len 400000 --max-steps 1
expect 2 "not a SentencePiece model" -- "$swarm" --role local --config "$src/config/tiny" --tokenizer "$work/lines.txt"
head -c 100 /dev/urandom >"$work/noise.bin"
expect 2 "not UTF-8" -- "$swarm" --role prepare --input "$work/noise.bin" --tokenizer "$work/tok.model" --out "$work/x"
expect 2 "SentencePiece" -- "$swarm" --role prepare --input "$fortunes" --out "$work/x"
expect 2 "--input" -- "$swarm" --role tokenizer --out "$work/y.model"
expect 2 "does not exist" -- "$swarm" --role tokenizer --input "$work/nothing" --out "$work/y.model"
expect 2 "needs --data" -- "$swarm" --role local --config "$src/config/tiny" --eval-every 5

[ "$failures" = 0 ] && echo "test_data_roles: all passed" || { echo "test_data_roles: $failures failed"; exit 1; }
