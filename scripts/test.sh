#!/usr/bin/env bash
# Install, build, and run the whole test suite (unit, actor-protocol and
# multi-process tests) under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 "$@"
