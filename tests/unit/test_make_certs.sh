#!/usr/bin/env bash
# Tests scripts/make_certs.sh: a node and a signed request make certificates
# the CA verifies, naming the roles given (one extended key usage each, the
# OIDs net/peer_roles.cpp reads); an unknown role, or a NAME that would
# overwrite the CA (ca, ca.csr) or write outside DIR ('/', '..'), is refused
# and writes nothing.
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

# Roles: the OIDs must match net/peer_roles.cpp's (read from it, so the two cannot drift apart).
sources=$(dirname "$script")/../net/peer_roles.cpp
arc=$(grep -o '"2\.25\.[0-9]*\.1"' "$sources" | tr -d '"' | sed 's/\.1$//')
[ -n "$arc" ] || fail "no role OIDs found in $sources"
usages() { openssl x509 -in "$1" -noout -ext extendedKeyUsage 2>/dev/null | tail -n +2; }
bash "$script" node "$d" t1 trainer >"$tmp/out.txt" 2>&1 || fail "node t1 trainer"
grep -q "roles: trainer" "$tmp/out.txt" || fail "node t1 did not say its role"
u=$(usages "$d/t1.crt")
[[ $u == *"$arc.3"* && $u != *"$arc.2"* && $u != *"$arc.1"* ]] || fail "t1.crt's usages are not trainer alone: $u"
bash "$script" node "$d" a1 all >"$tmp/out.txt" 2>&1 || fail "node a1 all"
u=$(usages "$d/a1.crt")
for r in 1 2 3 4; do [[ $u == *"$arc.$r"* ]] || fail "a1.crt lacks role $r: $u"; done
bash "$script" csr "$tmp/node" s1 >/dev/null 2>&1 && bash "$script" sign "$d" "$tmp/node/s1.csr" status,server \
  >"$tmp/out.txt" 2>&1 || fail "sign s1 status,server"
u=$(usages "$d/s1.crt")
[[ $u == *"$arc.4"* && $u == *"$arc.2"* && $u != *"$arc.3"* ]] || fail "s1.crt's usages are not status and server: $u"
[[ $(usages "$d/n1.crt") != *"$arc"* ]] || fail "n1.crt (no ROLES) names a role"

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
refused node "$d" r1 admin "unknown role 'admin'"
refused sign "$d" "$tmp/node/s1.csr" server,root "unknown role 'root'"
[ ! -e "$d/r1.key" ] && [ ! -e "$d/r1.crt" ] || fail "an unknown role left files"
[ "$(cat "$d/ca.crt" "$d/ca.key" | sha256sum)" = "$ca_sum" ] || fail "the CA changed"
[ ! -e "$tmp/outside.key" ] && [ ! -e "$tmp/outside.crt" ] || fail "a file was written outside DIR"
[ ! -e "$d/sub" ] || fail "a folder was made inside DIR"
echo "OK: make_certs names the roles given; refuses unknown roles and names that overwrite the CA or leave DIR"
