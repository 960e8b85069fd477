#!/usr/bin/env bash
# Certificates for a swarm with mutual TLS (--tls-ca, --tls-cert, --tls-key),
# made with the openssl CLI. EC P-256 keys; node certificates are usable as
# client and server (every node is both) and valid for $DAYS days (default 825).
#
#   make_certs.sh ca DIR                       # once, on the admin's machine: DIR/ca.crt, DIR/ca.key
#   make_certs.sh node DIR NAME ROLES          # DIR/NAME.crt and DIR/NAME.key, signed by DIR/ca.*
#   make_certs.sh csr DIR NAME                 # on a node: DIR/NAME.key (stays there) and DIR/NAME.csr
#   make_certs.sh sign DIR NAME.csr ROLES      # on the admin's machine: DIR/NAME.crt from the request
#
# ROLES: what the node may act as, comma-separated: coordinator, server,
# trainer, status, or all (one machine running --role cluster). The admin
# decides it when signing (an extended key usage per role; what a request asks
# for is ignored), and with TLS every node refuses a peer acting outside it.
# Without ROLES the certificate names none: for etcd, not for a swarm node.
# A node gets ca.crt, its NAME.crt and NAME.key; ca.key never leaves the admin.
# env SAN: subject alternative names for node/sign, e.g. SAN=IP:10.0.0.1,DNS:etcd-a
# (etcd's own certificates need them: its clients check the address they dial).
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2; }  # the comment above
[ $# -ge 2 ] || usage
command -v openssl >/dev/null || { echo "make_certs: openssl not found (scripts/setup.sh installs it)" >&2; exit 2; }
cmd=$1 dir=$2
days=${DAYS:-825}
mkdir -p "$dir"
umask 077  # keys readable by their owner only

# The roles' extended key usages; net/peer_roles.cpp reads the same OIDs (a
# UUID arc, 2.25.<uuid>, needs no registration).
role_arc=2.25.298418825308453232274976990090434074157
role_oid() {
  case $1 in
    coordinator) echo "$role_arc.1" ;; server) echo "$role_arc.2" ;;
    trainer) echo "$role_arc.3" ;; status) echo "$role_arc.4" ;;
    *) echo "make_certs: unknown role '$1' (coordinator, server, trainer, status or all)" >&2; exit 2 ;;
  esac
}
# The extended key usages for ROLES ($1, may be empty).
usages() {
  local list=serverAuth,clientAuth roles=$1
  [ "$roles" != all ] || roles=coordinator,server,trainer,status
  [ -z "$roles" ] && { echo "$list"; return; }
  local r
  for r in ${roles//,/ }; do list="$list,$(role_oid "$r")" || exit 2; done
  echo "$list"
}

# A NAME is one plain file name in DIR: no '/', no leading '.', and not the
# CA's own (signing ca.csr would overwrite ca.crt; node ca, ca.key).
check_name() {
  case $1 in
    ca) echo "make_certs: NAME 'ca' is the CA's own file name; pick another (e.g. the node's host name)" >&2; exit 2 ;;
    .*|*/*|'') echo "make_certs: NAME '$1' must be a plain file name in $dir (no '/', no leading '.')" >&2; exit 2 ;;
  esac
  [[ $1 =~ ^[A-Za-z0-9._-]+$ ]] || { echo "make_certs: NAME '$1' may hold only letters, digits, '.', '_' and '-'" >&2; exit 2; }
}

sign() {  # sign REQUEST NAME ROLES
  [ -f "$dir/ca.crt" ] && [ -f "$dir/ca.key" ] || { echo "make_certs: no CA in $dir (run: $0 ca $dir)" >&2; exit 2; }
  local ext eku
  eku=$(usages "$3") || exit 2
  ext=$(mktemp)
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n' "$eku" >"$ext"
  if [ -n "${SAN:-}" ]; then printf 'subjectAltName=%s\n' "$SAN" >>"$ext"; fi
  openssl x509 -req -in "$1" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days "$days" \
    -extfile "$ext" -out "$dir/$2.crt" 2>/dev/null || { rm -f "$ext"; echo "make_certs: signing $1 failed" >&2; exit 2; }
  rm -f "$ext"
  chmod 644 "$dir/$2.crt"
  echo "make_certs: $dir/$2.crt ($(openssl x509 -in "$dir/$2.crt" -noout -subject); roles: ${3:-none, not for a swarm node})"
}

case $cmd in
  ca)
    [ ! -e "$dir/ca.key" ] || { echo "make_certs: $dir/ca.key exists; not overwriting a CA" >&2; exit 2; }
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days "$days" \
      -subj "/CN=${CA_NAME:-swarm-cluster-ca}" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
    chmod 644 "$dir/ca.crt"
    echo "make_certs: CA $dir/ca.crt (give it to every node) and $dir/ca.key (keep it here)"
    ;;
  node|csr)
    [ $# -eq 3 ] || { [ "$cmd" = node ] && [ $# -eq 4 ]; } || usage
    name=$3 roles=${4:-}
    usages "$roles" >/dev/null || exit 2  # a bad role before any file is written
    check_name "$name"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" \
      -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
    if [ "$cmd" = node ]; then
      sign "$dir/$name.csr" "$name" "$roles"
      rm -f "$dir/$name.csr"
    else
      echo "make_certs: $dir/$name.key (keep it here) and $dir/$name.csr (send it to the admin)"
    fi
    ;;
  sign)
    [ $# -eq 3 ] || [ $# -eq 4 ] || usage
    name=$(basename "$3" .csr)
    check_name "$name"
    usages "${4:-}" >/dev/null || exit 2
    sign "$3" "$name" "${4:-}"
    ;;
  *) usage ;;
esac
