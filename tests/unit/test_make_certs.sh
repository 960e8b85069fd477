#!/usr/bin/env bash
# Tests scripts/make_certs.sh: a node and a signed request make certificates
# the CA verifies; a NAME that would overwrite the CA (ca, ca.csr) or write
# outside DIR ('/', '..') is refused and writes nothing.
# Usage: bash tests/unit/test_make_certs.sh [path/to/make_certs.sh]
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script=${1:-$here/../../scripts/make_certs.sh}
command -v openssl >/dev/null || { echo "SKIP: no openssl"; exit 0; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/out.txt" ] && sed 's/^/  | /' "$tmp/out.txt" >&2; exit 1; }

d=$tmp/certs
bash "$script" ca "$d" >"$tmp/out.txt" 2>&1 || fail "ca"
ca_sum=$(cat "$d/ca.crt" "$d/ca.key" | sha256sum)
bash "$script" node "$d" n1 >"$tmp/out.txt" 2>&1 || fail "node n1"
openssl verify -CAfile "$d/ca.crt" "$d/n1.crt" >"$tmp/out.txt" 2>&1 || fail "n1.crt does not verify"
bash "$script" csr "$tmp/node" n2 >"$tmp/out.txt" 2>&1 || fail "csr n2"
bash "$script" sign "$d" "$tmp/node/n2.csr" >"$tmp/out.txt" 2>&1 || fail "sign n2.csr"
[ -f "$d/n2.crt" ] || fail "sign wrote no $d/n2.crt"

# refused COMMAND... EXPECTED: exits 2 with EXPECTED in its message.
refused() {
  local expected=${*: -1}
  bash "$script" "${@:1:$#-1}" >"$tmp/out.txt" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || fail "'${*:1:$#-1}' exited $rc, not 2"
  grep -qF -- "$expected" "$tmp/out.txt" || fail "'${*:1:$#-1}' did not say '$expected'"
}
# A request named ca.csr (from anywhere) would have overwritten ca.crt.
bash "$script" csr "$tmp/evil" n3 >/dev/null 2>&1 && mv "$tmp/evil/n3.csr" "$tmp/evil/ca.csr"
refused sign "$d" "$tmp/evil/ca.csr" "the CA's own file name"
refused node "$d" ca "the CA's own file name"
refused node "$d" ../outside "must be a plain file name"
refused csr "$d" sub/dir "must be a plain file name"
refused node "$d" .. "must be a plain file name"
refused node "$d" 'a b' "may hold only letters"
[ "$(cat "$d/ca.crt" "$d/ca.key" | sha256sum)" = "$ca_sum" ] || fail "the CA changed"
[ ! -e "$tmp/outside.key" ] && [ ! -e "$tmp/outside.crt" ] || fail "a file was written outside DIR"
[ ! -e "$d/sub" ] || fail "a folder was made inside DIR"
echo "OK: make_certs refuses names that overwrite the CA or leave DIR"
