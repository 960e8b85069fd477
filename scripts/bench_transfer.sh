#!/usr/bin/env bash
# Payload throughput between two processes on loopback (1, 16, 64 MiB): the bulk
# data plane for requests, replies and all-reduce pieces, end to end with proto
# encoding, and CAF alone, each next to raw TCP measured in the same run, plus
# the CPU time per GB. Flags go to the benchmark: --reps N --chunk-bytes B
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh swarm_bench_transfer > /dev/null
./build/swarm_bench_transfer "$@"
