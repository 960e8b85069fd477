#!/usr/bin/env bash
# Fidelity of stage-wide averaging: loss against samples seen for `--role local`
# and for the swarm (N servers per stage, averaging), same model, batch size and
# learning rate, measured in one run; plus the averaging rounds' time and bytes
# per server against the ideal all-reduce.
#   scripts/bench_fidelity.sh [config] [steps] [servers-per-stage] [in-flight]   (defaults: config/small 100 2 4)
# in-flight: the trainer's microbatches in the pipeline; those in flight when a
# stage steps are computed partly on the old parameters (see README, Staleness).
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
steps=${2:-100}
servers=${3:-2}
in_flight=${4:-4}
bash scripts/build.sh swarm > /dev/null
out=$(mktemp -d /tmp/swarm-fidelity-XXXXXX)
echo "config $config, $steps steps of --batch-size samples each, $servers servers per stage, in-flight $in_flight, $(nproc) cores; metrics in $out"
./build/swarm --role local --config "$config" --max-steps "$steps" --metrics "$out/local.jsonl" --log-level warn > /dev/null
./build/swarm --role cluster --config "$config" --max-steps "$steps" --servers-per-stage "$servers" --in-flight "$in_flight" \
  --metrics "$out/swarm.jsonl" --log-level warn > /dev/null
python3 scripts/fidelity_summary.py "$out/local.jsonl" "$out/swarm.jsonl"
