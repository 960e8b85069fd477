#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder of untrusted bytes (tests/fuzz/).
# Usage: scripts/fuzz.sh [TARGET|all] [SECONDS]      (default: all, 60 s each)
#        SWARM_FUZZ_JOBS=2 scripts/fuzz.sh all 600  (targets run two at a time)
# Builds the targets with clang 14, libFuzzer, ASan and UBSan into build-fuzz/
# (installing clang through scripts/setup.sh --fuzz), then runs each for
# SECONDS from its seed corpus tests/fuzz/corpus/TARGET plus what earlier runs
# found (build-fuzz/corpus/TARGET). An input that crashes, leaks, trips a
# sanitizer or hangs lands in tests/fuzz/crashes/TARGET/: commit it, and the
# test suite replays it from then on (ctest -L fuzz). Prints per target:
# executions, edges covered, corpus size and findings.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-all}
seconds=${2:-60}
jobs=${SWARM_FUZZ_JOBS:-1}
all=$(sed -n 's/^swarm_fuzz_target(\([a-z0-9_]*\) .*/\1/p' tests/fuzz/CMakeLists.txt)
if [ "$target" = all ]; then
  targets=$all
elif grep -qx "$target" <<<"$all"; then
  targets=$target
else
  echo "fuzz.sh: no target '$target'; there are: $(echo $all)" >&2
  exit 2
fi

bash scripts/setup.sh --fuzz
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSWARM_FUZZ=ON \
  -DCMAKE_CXX_COMPILER=clang++-14 > build-fuzz.log 2>&1 || { cat build-fuzz.log; exit 1; }
ninja -C build-fuzz -j "${SWARM_BUILD_JOBS:-2}" $(for t in $targets; do echo "fuzz_$t"; done)

run_one() {
  local t=$1 found=build-fuzz/corpus/$1 crashes=tests/fuzz/crashes/$1 log=build-fuzz/fuzz-$1.log
  mkdir -p "$found" "$crashes"
  # -rss_limit_mb: a decoder that allocates what its input announces is a finding.
  set +e
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$found" "tests/fuzz/corpus/$t" > "$log" 2>&1
  local code=$?
  set -e
  local execs edges corpus
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(ls "$found" | wc -l)
  local verdict="nothing found"
  [ $code -ne 0 ] && verdict="FOUND (exit $code): $(ls -t "$crashes" | head -1) - see $log"
  printf '%-14s %6s s  %12s executions  %5s edges  %5s inputs in corpus  %s\n' \
    "$t" "$seconds" "${execs:-?}" "${edges:-?}" "$corpus" "$verdict"
  return $code
}

for t in $targets; do
  rm -f "build-fuzz/fuzz-$t.code"
  (set +e; run_one "$t"; echo $? > "build-fuzz/fuzz-$t.code") &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
done
wait
status=0
for t in $targets; do
  [ "$(cat "build-fuzz/fuzz-$t.code")" = 0 ] || status=1
done
exit $status
