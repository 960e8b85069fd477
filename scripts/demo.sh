#!/usr/bin/env bash
# The main job: install, build, and train a local multi-process swarm on the
# default corpus with config/small: 150 steps (about 3 minutes on 2 cores), a
# progress line every 2 s, the status page's address at the start, a summary
# and a plot at the end. --long trains 1,500 steps (about 25 minutes); other
# flags are passed on (and win), e.g. scripts/demo.sh --max-steps 50 --chaos kill
set -euo pipefail
cd "$(dirname "$0")/.."
steps=150
args=()
for a in "$@"; do
  if [ "$a" = "--long" ]; then steps=1500; else args+=("$a"); fi
done
bash scripts/build.sh swarm
exec ./build/swarm --role cluster --config config/small --max-steps "$steps" "${args[@]}"
