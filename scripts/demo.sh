#!/usr/bin/env bash
# The main job: install, build, and train a local multi-process swarm with
# config/small on a real English corpus (scripts/corpus.sh: Debian packages'
# documentation, a SentencePiece tokenizer and token shards, made once into
# build/corpus), measuring the validation loss every 50 steps: 150 steps, a
# progress line every 2 s, the status page's address at the start, a summary
# and a plot at the end.
#   --long   1,500 steps
#   --bytes  the byte-level corpus instead (fortunes, no tokenizer, no validation)
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
if [ "$bytes" = 1 ]; then
  exec ./build/swarm --role cluster --config config/small --max-steps "$steps" "${args[@]}"
fi
corpus=${SWARM_CORPUS:-build/corpus}
bash scripts/corpus.sh "$corpus"
exec ./build/swarm --role cluster --config config/small --max-steps "$steps" --data "$corpus/shards" \
  --tokenizer "$corpus/shards/tokenizer.model" --eval-every 50 --eval-tokens 16384 "${args[@]}"
