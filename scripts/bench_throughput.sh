#!/usr/bin/env bash
# Tokens per second of `--role local` and of `--role cluster` on the same model,
# config and cores, measured in one run, and their ratio.
#   scripts/bench_throughput.sh [config] [steps]     (defaults: config/small 30)
# Extra cluster flags can be given in CLUSTER_FLAGS, e.g. CLUSTER_FLAGS="--servers-per-stage 1".
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
steps=${2:-30}
bash scripts/build.sh swarm > /dev/null
out=$(mktemp -d /tmp/swarm-bench-XXXXXX)
echo "config $config, $steps steps each, $(nproc) cores; metrics in $out"
./build/swarm --role local --config "$config" --max-steps "$steps" --metrics "$out/local.jsonl" --log-level warn > /dev/null
./build/swarm --role cluster --config "$config" --max-steps "$steps" --metrics "$out/cluster.jsonl" \
  --log-level warn ${CLUSTER_FLAGS:-} > /dev/null
python3 scripts/metrics_summary.py "$out/local.jsonl" "$out/cluster.jsonl"
python3 scripts/plot_metrics.py "$out/local.jsonl" "$out/cluster.jsonl" -o "$out/throughput.png" | tail -1
