#!/usr/bin/env bash
# The simulator is optional: configuring without SimGrid (its pkg-config module
# pointed at a name that does not exist) must succeed, say so, and leave the
# swarm-sim target out while swarm is still there.
#   tests/process/test_sim_optional.sh SOURCE_DIR
set -euo pipefail
src=$1
dir=$(mktemp -d /tmp/swarm-test-nosim-XXXXXX)
trap 'rm -rf "$dir"' EXIT
cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWARM_SIMGRID_MODULE=simgrid-not-installed \
  > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; echo "FAIL: configure failed without SimGrid"; exit 1; }
grep -q "swarm-sim: not built (SimGrid not found" "$dir/configure.log" || { echo "FAIL: no skip line"; exit 1; }
targets=$(ninja -C "$dir" -t targets all)
grep -q "^swarm-sim:" <<< "$targets" && { echo "FAIL: swarm-sim is still a target"; exit 1; }
grep -q "^swarm:" <<< "$targets" || { echo "FAIL: swarm is missing"; exit 1; }
grep -q "^test_sim" "$dir/CTestTestfile.cmake" 2>/dev/null && { echo "FAIL"; exit 1; }
ctest --test-dir "$dir" -N | grep -q "test_sim " && { echo "FAIL: test_sim registered without swarm-sim"; exit 1; }
echo "PASS: configured without SimGrid, swarm-sim skipped"
