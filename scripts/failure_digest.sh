#!/usr/bin/env bash
# Prints, after a failed ctest run, each failed check of the last run with the
# lines around it, from ctest's own log: a CI page that shows only the start
# and end of a long output still shows what failed.
# Usage: scripts/failure_digest.sh BUILD_DIR
log=${1:?"usage: failure_digest.sh BUILD_DIR"}/Testing/Temporary/LastTest.log
[ -f "$log" ] || exit 0
echo "=== failure digest (from $log) ==="
# A Catch2 failure: the test case's name two lines above the file:line, the
# check and its expansion below; a test that crashed or timed out: ctest's verdict.
grep -B 6 -A 6 -E ': FAILED:$|^Test (Failed|Timeout)|Exception: |SEGFAULT|Subprocess aborted' "$log" | cut -c1-300 | head -200
