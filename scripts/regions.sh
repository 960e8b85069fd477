#!/usr/bin/env bash
# Emulates 2-3 network "regions" on this machine, joined through a router namespace with a
# given bandwidth and round-trip time, so swarm processes can run inside them.
# Design and rules: shared/notes/wan.md. The kernel has no netem, so:
#   - bandwidth: an HTB root qdisc at RATE on each router veth (egress towards a region,
#     hence each direction of each region pair is shaped; a region's inbound RATE is shared
#     by all senders towards it);
#   - latency: `iptables -j NFQUEUE` in the router's FORWARD chain plus one delay_shim
#     (regions/delay_shim.c) holding each packet RTT/2 ms (it crosses the router once per
#     direction). Loopback inside a region is never delayed or shaped.
# Nothing is created in the host namespace: no veth, qdisc or iptables rule there.
# Region addresses are reachable only from inside the namespaces; start processes with
# `regions.sh exec NAME I CMD` or `ip netns exec $NSi CMD`, and bind/advertise $REGIONi.
#
# Subcommands (run without arguments for the usage text):
#   check | up | down | cut | heal | exec | env | run | selftest
# Exit status 77 = prerequisites missing (root, packages): tests should skip.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SHIM_SRC=$HERE/regions/delay_shim.c
BUILD_DIR=${SWARM_REGIONS_BUILD:-/tmp/swarm-regions}
STATE_DIR=${SWARM_REGIONS_STATE:-$BUILD_DIR}
CC=${CC:-cc}
PATH=$PATH:/usr/sbin:/sbin # ip, tc, iptables when run via sudo from a user shell

usage() {
  cat >&2 <<'EOF'
usage: regions.sh check
       regions.sh up NAME --regions K --rate RATE --rtt MS [--queue-base Q] [--buffer-ms B]
       regions.sh down NAME
       regions.sh cut NAME I | heal NAME I    (region I's link down: a partition; up again)
       regions.sh exec NAME I CMD...
       regions.sh env NAME
       regions.sh run NAME --regions K --rate RATE --rtt MS [...up options] -- CMD...
       regions.sh selftest [--rate RATE] [--rtt MS]        (defaults: 100mbit, 50)
  NAME: [A-Za-z0-9_-], at most 24 chars. K: 2 or 3. RATE: tc syntax (100mbit, 1gbit).
  MS: round-trip time between regions in ms (0 = no delay). Q: netfilter queue number
  (per namespace, default 0). B: router buffer per link direction in ms of RATE
  (default 100; at least 96 KiB), i.e. the most queueing delay a saturated link adds.
  up/env print REGION<i>=<address> and NS<i>=<namespace> lines; run exports them to CMD.
  Exit 77: prerequisites missing (see `check`).
EOF
  exit 2
}

log() { echo "regions: $*" >&2; }
die() { log "$*"; exit 1; }

# --- cleanup on any exit --------------------------------------------------------------
# CLEANUP_NAME is set while a setup is in progress (up) or owned by this process (run,
# selftest): whatever way we exit (error, SIGINT, SIGTERM), it is torn down.
CLEANUP_NAME=""
UP_IN_PROGRESS=""
CHECK_NS=""
TMP_DIR=""
CMD_PID=""
on_exit() {
  local rc=$?
  trap - EXIT
  trap '' INT TERM # a second Ctrl-C must not cut the cleanup short (it is bounded)
  set +e
  if [[ -n $CMD_PID ]] && kill -0 "$CMD_PID" 2>/dev/null; then stop_group "$CMD_PID"; fi
  [[ -z $UP_IN_PROGRESS ]] || log "up $CLEANUP_NAME failed (status $rc); removing what it made"
  if [[ -n $CLEANUP_NAME ]]; then lock; do_down "$CLEANUP_NAME"; fi
  [[ -n $CHECK_NS ]] && ip netns del "$CHECK_NS" 2>/dev/null
  [[ -n $TMP_DIR ]] && rm -rf "$TMP_DIR"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# TERM a process group, then KILL it if it has not gone within 5 s.
stop_group() {
  kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do alive "$1" || return 0; sleep 0.1; done
  kill -KILL -- "-$1" 2>/dev/null || kill -KILL "$1" 2>/dev/null || true
}

# --- prerequisites: scripts/regions/check.sh -------------------------------------------
# shellcheck source=regions/check.sh
source "$HERE/regions/check.sh"

# --- state -----------------------------------------------------------------------------
# $STATE_DIR/NAME.state holds "key value" lines, appended as things are made:
#   subnet 10.X | regions K | rate R | rtt MS | queue Q | ns NAMESPACE... | shim_pid PID
valid_name() { [[ $1 =~ ^[A-Za-z0-9_][A-Za-z0-9_-]{0,23}$ ]] || die "bad NAME '$1'"; }
state_file() { echo "$STATE_DIR/$1.state"; }
state_get() { awk -v k="$2" '$1 == k { print $2 }' "$(state_file "$1")" 2>/dev/null; }
record() { echo "$2 $3" >>"$(state_file "$1")"; }

# One lock for all NAMEs, held only while namespaces are made or removed (not while a
# run's CMD works), so two harnesses never race on one NAME and a single file stays in
# the cache directory. fd 9 must not leak into long-lived children (daemon, CMD), or the
# lock would outlive us: they get 9>&-.
lock() {
  mkdir -p -m 700 "$STATE_DIR"
  # State files name namespaces to delete and pids to kill: only trust our own.
  [[ -O $STATE_DIR ]] || { log "$STATE_DIR is not owned by $(id -un)"; return 1; }
  exec 9>>"$STATE_DIR/.lock"
  flock -w 60 9 || { log "another regions.sh holds $STATE_DIR/.lock"; return 1; }
}
unlock() { exec 9>&-; }

# Deterministic per NAME so different harnesses' logs are told apart; collisions are
# harmless, since every address lives in this NAME's own namespaces.
subnet_of() { echo "10.$((200 + $(cksum <<<"$1" | cut -d' ' -f1) % 50))"; }

print_env() {
  local name=$1 k subnet i
  k=$(state_get "$name" regions); subnet=$(state_get "$name" subnet)
  for ((i = 0; i < k; i++)); do
    echo "REGION$i=$subnet.$i.2"
    echo "NS$i=$name-r$i"
  done
}

# Bytes per second of a tc rate (100mbit, 1gbit, 10mbps, 5kibit, a bare number = bit/s).
rate_bytes() {
  awk -v r="$1" 'BEGIN {
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit 1
    n = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
    m[""] = m["bit"] = 1 / 8; m["kbit"] = 1e3 / 8; m["mbit"] = 1e6 / 8
    m["gbit"] = 1e9 / 8; m["tbit"] = 1e12 / 8
    m["kibit"] = 1024 / 8; m["mibit"] = 1048576 / 8; m["gibit"] = 1073741824 / 8
    m["bps"] = 1; m["kbps"] = 1e3; m["mbps"] = 1e6; m["gbps"] = 1e9
    m["kibps"] = 1024; m["mibps"] = 1048576; m["gibps"] = 1073741824
    if (!(u in m) || n * m[u] < 1) exit 1
    printf "%.0f\n", n * m[u]
  }'
}

# --- up --------------------------------------------------------------------------------
UP_ARGS_K="" UP_ARGS_RATE="" UP_ARGS_RTT="" UP_ARGS_Q=0 UP_ARGS_BUF=100
parse_up_args() {
  UP_ARGS_K="" UP_ARGS_RATE="" UP_ARGS_RTT="" UP_ARGS_Q=0 UP_ARGS_BUF=100
  while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || usage
    case $1 in
      --regions) UP_ARGS_K=$2 ;;
      --rate) UP_ARGS_RATE=$2 ;;
      --rtt) UP_ARGS_RTT=$2 ;;
      --queue-base) UP_ARGS_Q=$2 ;;
      --buffer-ms) UP_ARGS_BUF=$2 ;;
      *) usage ;;
    esac
    shift 2
  done
  [[ $UP_ARGS_K =~ ^[23]$ ]] || { log "--regions must be 2 or 3"; usage; }
  rate_bytes "$UP_ARGS_RATE" >/dev/null || { log "--rate must look like 100mbit or 1gbit"; usage; }
  [[ $UP_ARGS_RTT =~ ^[0-9]+$ && $UP_ARGS_RTT -le 60000 ]] || { log "--rtt must be 0..60000 ms"; usage; }
  [[ $UP_ARGS_Q =~ ^[0-9]+$ && $UP_ARGS_Q -le 65535 ]] || { log "--queue-base must be 0..65535"; usage; }
  [[ $UP_ARGS_BUF =~ ^[0-9]+$ && $UP_ARGS_BUF -ge 1 && $UP_ARGS_BUF -le 10000 ]] ||
    { log "--buffer-ms must be 1..10000"; usage; }
}

# Creates everything for NAME from the parsed UP_ARGS_*. Any failure exits, and on_exit
# removes what was recorded so far (the caller has set CLEANUP_NAME).
do_up() {
  local name=$1 k=$UP_ARGS_K rate=$UP_ARGS_RATE rtt=$UP_ARGS_RTT q=$UP_ARGS_Q
  local state router subnet i ns shim=""
  UP_IN_PROGRESS=1
  state=$(state_file "$name")
  router=$name-router
  subnet=$(subnet_of "$name")
  local burst
  burst=$(rate_bytes "$rate") || die "unknown unit in rate '$rate'"
  local qlimit=$((burst * UP_ARGS_BUF / 1000))
  qlimit=$((qlimit > 98304 ? qlimit : 98304)) # at least one 64 KiB GSO packet and then some
  burst=$((burst / 1000 > 3100 ? burst / 1000 : 3100))
  [[ $rtt -eq 0 ]] || shim=$(build_shim) || die "cannot build delay_shim"
  : >"$state"
  record "$name" subnet "$subnet"
  record "$name" regions "$k"
  record "$name" rate "$rate"
  record "$name" rtt "$rtt"

  ip netns add "$router"
  record "$name" ns "$router"
  ip -n "$router" link set lo up
  ip netns exec "$router" sysctl -qw net.ipv4.ip_forward=1
  for ((i = 0; i < k; i++)); do
    ns=$name-r$i
    ip netns add "$ns"
    record "$name" ns "$ns"
    ip -n "$ns" link set lo up
    # The veth is created inside the namespaces; its ends are v<i> (router) and eth0.
    ip -n "$router" link add "v$i" type veth peer name eth0 netns "$ns"
    ip -n "$router" addr add "$subnet.$i.1/24" dev "v$i"
    # Shaping is in place before the link comes up. One class is all there is, so its
    # quantum only has to be valid; setting it avoids HTB's "quantum is big/small"
    # warnings at any rate. tc's default burst is under one 1514-byte frame, which left
    # 1 Gbit/s at ~780 Mbit/s of TCP goodput (timer-bound); 1 ms worth of RATE gives the
    # wire rate (~955 Mbit/s goodput) without overshoot.
    tc -n "$router" qdisc add dev "v$i" root handle 1: htb default 1
    tc -n "$router" class add dev "v$i" parent 1: classid 1:1 htb rate "$rate" \
      burst "$burst" cburst "$burst" quantum 60000
    # The default leaf, pfifo of 1000 packets, counts GSO super-packets (up to 64 KiB,
    # which the senders' veths pass along whole) as one each: at 100 Mbit/s a single
    # stream queued over 1 MiB and ping under load reached 500 ms. A byte limit bounds
    # the queueing delay at BUFFER_MS (like a router buffer of that many ms).
    tc -n "$router" qdisc add dev "v$i" parent 1:1 handle 10: bfifo limit "$qlimit"
    ip -n "$router" link set "v$i" up
    ip -n "$ns" addr add "$subnet.$i.2/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$subnet.$i.1"
    # A dead peer address then fails in ~7 s instead of ~2 min (wan.md).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_syn_retries=2
  done

  if [[ $rtt -gt 0 ]]; then
    record "$name" queue "$q"
    local pidf=$STATE_DIR/$name.shim.pid delay
    delay=$((rtt / 2)).$((rtt % 2 * 5))
    rm -f "$pidf"
    # setsid: a Ctrl-C on the terminal must not stop the delay before the processes
    # using the network are stopped; down/on_exit stop it in order. ip netns exec and
    # setsid both exec, so $! is the daemon's own pid.
    ip netns exec "$router" setsid "$shim" --queue "$q" --delay-ms "$delay" --pid-file "$pidf" \
      </dev/null >>"$STATE_DIR/$name.shim.log" 2>&1 9>&- &
    record "$name" shim_pid "$!"
    # The pid file appears only once the queue is bound.
    for _ in $(seq 100); do
      [[ -s $pidf ]] && break
      alive "$!" || die "delay_shim failed: $(tail -n 3 "$STATE_DIR/$name.shim.log")"
      sleep 0.05
    done
    [[ -s $pidf ]] || die "delay_shim did not start within 5 s"
    ip netns exec "$router" iptables -w -A FORWARD -j NFQUEUE --queue-num "$q"
  fi
  UP_IN_PROGRESS=""
  log "up $name: $k regions, $rate, rtt ${rtt} ms, buffer $qlimit bytes, subnet $subnet.0.0/16"
}

# Takes the lock and brings NAME up, torn down again if this process exits before
# the caller clears CLEANUP_NAME. The caller unlocks.
locked_up() {
  local name=$1
  lock
  [[ ! -e $(state_file "$name") ]] || die "$name is already up (regions.sh down $name first)"
  CLEANUP_NAME=$name
  do_up "$name"
}

cmd_up() {
  [[ $# -ge 1 ]] || usage
  local name=$1; shift
  valid_name "$name"
  parse_up_args "$@"
  require
  locked_up "$name"
  CLEANUP_NAME=""
  unlock
  print_env "$name"
}

# --- down ------------------------------------------------------------------------------
# Is PID the delay_shim that `up NAME` started? Guards against a recycled pid.
is_our_shim() {
  local cmdline
  cmdline=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *delay_shim*" --pid-file $STATE_DIR/$2.shim.pid"* ]]
}

# Removes what the state file of NAME records; idempotent, ignores what is already gone.
do_down() {
  local name=$1 state pid ns nss=() pids=()
  state=$(state_file "$name")
  [[ -f $state ]] || return 0
  mapfile -t nss < <(state_get "$name" ns)
  # First the processes still running in the regions (the network still works while
  # they shut down), then the daemon, which releases every held packet on SIGTERM.
  # A namespace outlives its name while a process is inside, so none may remain.
  for ns in "${nss[@]}"; do
    [[ $ns == "$name-router" ]] && continue
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null)
  done
  kill_and_wait "${pids[@]}"
  pid=$(state_get "$name" shim_pid)
  if [[ -n $pid ]] && is_our_shim "$pid" "$name"; then kill_and_wait "$pid"; fi
  pids=()
  for ns in "${nss[@]}"; do
    [[ $ns == "$name-router" ]] || continue
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null)
  done
  kill_and_wait "${pids[@]}"
  # Deleting a namespace removes its veth ends, qdiscs and iptables rules with it.
  for ns in "${nss[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -f "$state" "$STATE_DIR/$name.shim.pid" "$STATE_DIR/$name.shim.log"
  log "down $name"
}

# Running (not a zombie: an orphan daemon is reaped by pid 1, which may take a while).
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $st && ${st:0:1} != Z ]]
}

# TERM the given pids, KILL whatever still runs after 5 s.
kill_and_wait() {
  [[ $# -gt 0 ]] || return 0
  kill -TERM "$@" 2>/dev/null || true
  local p alive
  for _ in $(seq 50); do
    alive=0
    for p in "$@"; do alive "$p" && alive=1; done
    [[ $alive -eq 1 ]] || return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}

cmd_down() {
  [[ $# -eq 1 ]] || usage
  valid_name "$1"
  [[ $(id -u) -eq 0 ]] || { echo "regions: skip: missing root"; exit 77; }
  lock
  [[ -f $(state_file "$1") ]] || { log "$1 is not up"; return 0; }
  do_down "$1"
}

# --- exec / env ------------------------------------------------------------------------
cmd_exec() {
  [[ $# -ge 3 ]] || usage
  local name=$1 i=$2 k; shift 2
  valid_name "$name"
  k=$(state_get "$name" regions)
  [[ -n $k ]] || die "$name is not up"
  [[ $i =~ ^[0-9]+$ && $i -lt $k ]] || die "region index must be 0..$((k - 1))"
  trap - EXIT INT TERM
  exec ip netns exec "$name-r$i" "$@"
}

cmd_env() {
  [[ $# -eq 1 ]] || usage
  valid_name "$1"
  [[ -f $(state_file "$1") ]] || die "$1 is not up"
  print_env "$1"
}

# --- cut / heal: a region's link down (a partition) and up again -----------------------
cmd_link() {  # cmd_link down|up NAME I
  [[ $# -eq 3 ]] || usage
  local state=$1 name=$2 i=$3 k
  valid_name "$name"
  k=$(state_get "$name" regions)
  [[ -n $k ]] || die "$name is not up"
  [[ $i =~ ^[0-9]+$ && $i -lt $k ]] || die "region index must be 0..$((k - 1))"
  # The router's end of the region's veth: packets both ways are dropped, no
  # connection is reset (as when a region's uplink fails).
  ip -n "$name-router" link set "v$i" "$state"
}

# --- run -------------------------------------------------------------------------------
cmd_run() {
  [[ $# -ge 1 ]] || usage
  local name=$1; shift
  local opts=()
  while [[ $# -gt 0 && $1 != -- ]]; do opts+=("$1"); shift; done
  [[ $# -ge 2 ]] || usage
  shift
  valid_name "$name"
  parse_up_args "${opts[@]}"
  require
  locked_up "$name"
  unlock
  local line
  while IFS= read -r line; do export "${line?}"; done < <(print_env "$name")
  # CMD runs in its own session so that we decide when it stops: on SIGINT/SIGTERM its
  # whole process group gets SIGTERM (on_exit), before the network goes away. Background
  # jobs read /dev/null unless told otherwise, so hand it our stdin explicitly.
  exec 3<&0
  setsid "$@" <&3 3<&- 9>&- &
  CMD_PID=$!
  local rc=0
  wait "$CMD_PID" || rc=$?
  CMD_PID=""
  exit "$rc" # on_exit runs down
}

# --- selftest: scripts/regions/selftest.sh --------------------------------------------
# shellcheck source=regions/selftest.sh
source "$HERE/regions/selftest.sh"

# --- main ------------------------------------------------------------------------------
[[ $# -ge 1 ]] || usage
sub=$1; shift
case $sub in
  check) [[ $# -eq 0 ]] || usage; cmd_check ;;
  up) cmd_up "$@" ;;
  down) cmd_down "$@" ;;
  cut) cmd_link down "$@" ;;
  heal) cmd_link up "$@" ;;
  exec) cmd_exec "$@" ;;
  env) cmd_env "$@" ;;
  run) cmd_run "$@" ;;
  selftest) cmd_selftest "$@" ;;
  *) usage ;;
esac
