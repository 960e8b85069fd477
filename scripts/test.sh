#!/usr/bin/env bash
# Install, build, and run the whole test suite (unit, actor-protocol and
# multi-process tests) under ctest.
# Usage: scripts/test.sh [ctest args...]
#        scripts/test.sh --sanitize address,undefined [ctest args...]   (build-asan/)
#        scripts/test.sh --sanitize thread [ctest args...]              (build-tsan/)
# A sanitizer build compiles everything with -fsanitize (gcc) into its own
# folder and runs under it what can run there (docs/testing.md, "Sanitizers"):
# address,undefined: the whole suite; thread: the tests whose threads are this
# project's own (test_core, test_actors), since CAF's and libtorch's libraries
# are not instrumented and TSan cannot see their synchronisation.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != --sanitize ]; then
  bash scripts/build.sh
  cd build
  ctest --output-on-failure --timeout 600 "$@" || { rc=$?; bash ../scripts/failure_digest.sh .; exit $rc; }
  exit 0
fi
sanitize=${2:?"--sanitize needs address,undefined or thread"}
shift 2
case "$sanitize" in
  address,undefined | undefined,address | address) dir=build-asan; only=() ;;
  thread) dir=build-tsan; only=(-R '^(test_core|test_actors)$') ;;
  *) echo "test.sh: --sanitize takes address,undefined or thread, not '$sanitize'" >&2; exit 2 ;;
esac
bash scripts/setup.sh
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSWARM_SANITIZE="$sanitize" \
  > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
ninja -C "$dir" -j "${SWARM_BUILD_JOBS:-2}"
cd "$dir"
# Any report fails its test: halt at the first, with the stack. Leaks are
# reported by the unit tests (LSan at exit); the multi-process tests' real
# binaries are killed by signals, where LSan has nothing to say. A smaller
# quarantine than ASan's 256 MiB: test_guard bounds a server's RSS growth by
# 256 MiB, and freed memory held for use-after-free checks counts in it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0:quarantine_size_mb=64}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$PWD/../tests/sanitizers/ubsan.supp}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
ctest --output-on-failure --timeout 1800 "${only[@]}" "$@" || { rc=$?; bash ../scripts/failure_digest.sh .; exit $rc; }
