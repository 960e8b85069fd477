#!/usr/bin/env bash
# The main job: install, build, and train a local multi-process swarm with
# config/llama-small on a real English corpus (scripts/corpus.sh: Debian
# packages' documentation, a SentencePiece tokenizer and token shards, made
# once into build/corpus), measuring the validation loss every 50 steps: 150
# steps, a progress line every 2 s, the status page's address at the start, a
# summary and a plot at the end, then a sample of what the trained model
# writes (--role generate on the run's checkpoints in build/demo/checkpoints,
# cleared at the start: each demo trains from scratch).
#   --long   1,500 steps
#   --bytes  the byte-level corpus instead (config/small, fortunes, no tokenizer, no validation)
# Other flags are passed on (and win), e.g. scripts/demo.sh --max-steps 50 --chaos kill
set -euo pipefail
cd "$(dirname "$0")/.."
steps=150
bytes=0
args=()
for a in "$@"; do
  case "$a" in
    --long) steps=1500 ;;
    --bytes) bytes=1 ;;
    *) args+=("$a") ;;
  esac
done
bash scripts/build.sh swarm
ckpt=build/demo/checkpoints
rm -rf "$ckpt"
mkdir -p "$ckpt"
if [ "$bytes" = 1 ]; then
  model=(--config config/small)
  prompt="Q: "
else
  corpus=${SWARM_CORPUS:-build/corpus}
  bash scripts/corpus.sh "$corpus"
  model=(--config config/llama-small --tokenizer "$corpus/shards/tokenizer.model")
  prompt="The"
  args=(--data "$corpus/shards" --eval-every 50 --eval-tokens 16384 "${args[@]}")
fi
./build/swarm --role cluster "${model[@]}" --max-steps "$steps" --checkpoint-dir "$ckpt" "${args[@]}"
echo
echo "== a sample from the trained model (swarm --role generate ${model[*]} --checkpoint-dir $ckpt --prompt \"$prompt\")"
printf '%s' "$prompt"
./build/swarm --role generate "${model[@]}" --checkpoint-dir "$ckpt" --prompt "$prompt" --max-new-tokens 120 \
  --temperature 0.8 --top-k 40 2>"$ckpt/generate.log"
cat "$ckpt/generate.log"
