#!/usr/bin/env bash
# The main job: install, build, and train a local multi-process swarm on the
# default corpus with config/small, printing progress. Extra flags are passed on,
# e.g. scripts/demo.sh --max-steps 50 --metrics /tmp/m.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh swarm
exec ./build/swarm --role cluster --config config/small "$@"
