# scripts/regions.sh's prerequisites (check, and the delay shim's build):
# sourced by regions.sh, whose log/die it uses; not run on its own.
# --- prerequisites ---------------------------------------------------------------------
# Prints what is missing, space separated; empty when all is there.
missing_static() {
  local m=()
  [[ $(id -u) -eq 0 ]] || m+=("root")
  local c
  for c in ip tc iptables setsid flock; do command -v "$c" >/dev/null || m+=("$c"); done
  command -v "$CC" >/dev/null || m+=("C compiler ($CC)")
  [[ -f /usr/include/libnetfilter_queue/libnetfilter_queue.h ]] || m+=("libnetfilter-queue-dev")
  echo "${m[*]}"
}

require() {
  local m; m=$(missing_static)
  if [[ -n $m ]]; then
    echo "regions: skip: missing $m (install with scripts/setup.sh, run as root)"
    exit 77
  fi
}

# Compiles delay_shim into the cache directory when missing or older than its source,
# atomically (two harnesses may compile at once). Prints the binary path.
build_shim() {
  local bin=$BUILD_DIR/delay_shim
  mkdir -p -m 700 "$BUILD_DIR"
  # Root runs this binary: refuse a cache directory someone else could have planted.
  [[ -O $BUILD_DIR ]] || die "$BUILD_DIR is not owned by $(id -un); set SWARM_REGIONS_BUILD"
  if [[ -x $bin && ! $SHIM_SRC -nt $bin ]]; then echo "$bin"; return 0; fi
  local tmp libs
  tmp=$(mktemp "$BUILD_DIR/.delay_shim.XXXXXX")
  libs=$(pkg-config --cflags --libs libnetfilter_queue 2>/dev/null || echo "-lnetfilter_queue -lnfnetlink")
  # shellcheck disable=SC2086  # libs is a word list
  if ! "$CC" -O2 -Wall -o "$tmp" "$SHIM_SRC" $libs >&2; then
    rm -f "$tmp"
    return 1
  fi
  mv -f "$tmp" "$bin"
  echo "$bin"
}

cmd_check() {
  local m; m=$(missing_static)
  if [[ -z $m ]]; then
    # Functional probe in a throwaway namespace: the host's tables are never touched.
    build_shim >/dev/null 2>&1 || m="delay_shim build (libnetfilter-queue-dev)"
  fi
  if [[ -z $m ]]; then
    CHECK_NS=swregions-check-$$
    if ! ip netns add "$CHECK_NS" 2>/dev/null; then
      CHECK_NS=""; m="network namespaces"
    elif ! ip netns exec "$CHECK_NS" iptables -w -A FORWARD -j NFQUEUE --queue-num 0 2>/dev/null; then
      m="iptables NFQUEUE target"
    elif ! tc -n "$CHECK_NS" qdisc add dev lo root handle 1: htb default 1 2>/dev/null; then
      m="HTB qdisc"
    fi
    [[ -n $CHECK_NS ]] && ip netns del "$CHECK_NS"
    CHECK_NS=""
  fi
  if [[ -n $m ]]; then
    echo "regions: skip: missing $m (install with scripts/setup.sh, run as root)"
    exit 77
  fi
  echo "regions: ok"
}

