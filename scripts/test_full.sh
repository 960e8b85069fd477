#!/usr/bin/env bash
# The multi-process tests at their full sizes (SWARM_TEST_FULL=1): the storm of
# 10,000 malformed inputs, the longer durability and averaging runs, the
# partitioned leader's region (test_regions) and three leader kills (test_control). The README's
# test command runs them smaller to stay within 10 minutes; this takes longer.
# Usage: scripts/test_full.sh [ctest args...]   e.g. scripts/test_full.sh -R test_faults
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
SWARM_TEST_FULL=1 ctest --output-on-failure --timeout 1800 -L process "$@"
