#!/usr/bin/env bash
# Tensor transfer throughput between two processes on loopback (1, 16, 64 MiB):
# the swarm's chunked CAF path and a single CAF message, next to raw TCP measured
# in the same run. Flags go to the benchmark: --reps N --chunk-bytes B
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh swarm_bench_transfer > /dev/null
./build/swarm_bench_transfer "$@"
