# Shared by the shell tests (sourced): fail() counts a failure, expect() runs
# a command that must fail with a given exit code and say a given text.
# The caller sets `work` (a scratch folder) first.
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE TEXT -- command...: the exit code, and TEXT in its standard error.
expect() {
  local code=$1 text=$2
  shift 3
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [ "$rc" != "$code" ]; then
    fail "exit $rc (want $code): $*"; sed 's/^/  | /' "$work/err" | tail -5
  elif ! grep -qF -- "$text" "$work/err"; then
    fail "no '$text' in the error of: $*"; sed 's/^/  | /' "$work/err" | tail -5
  fi
}
