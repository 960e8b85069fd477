# scripts/regions.sh selftest: sourced by regions.sh, whose functions it
# uses (up, exec, cut, heal, down on real namespaces); not run on its own.
# --- selftest --------------------------------------------------------------------------
# One python3 program for both ends. server: accepts connect probes (closed at once) and
# one stream, then prints JSON figures. client: times connects, then streams for SECS.
SELFTEST_PY='
import json, socket, sys, time
mode, addr, port, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
MIB = 1 << 20
if mode == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(16)
    while True:
        c, _ = ls.accept()
        if c.recv(1) == b"S": break
        c.close()
    buf = bytearray(MIB); got = 0; samples = []; t8 = None
    while True:
        n = c.recv_into(buf)
        if not n: break
        now = time.monotonic(); got += n; samples.append((now, got))
        if t8 is None and got >= 8 * MIB: t8 = now
    t0, tend = samples[0][0], samples[-1][0]
    half = t0 + (tend - t0) / 2
    th, bh = next((t, b) for t, b in samples if t >= half)
    steady = (got - bh) * 8 / max(tend - th, 1e-9) / 1e6
    print(json.dumps({"bytes": got, "secs": tend - t0, "steady_mbit": steady,
                      "t8": None if t8 is None else t8 - t0}))
else:
    deadline = time.monotonic() + 5
    while True:
        try:
            socket.create_connection((addr, port), timeout=2).close(); break
        except ConnectionRefusedError:
            if time.monotonic() > deadline: raise
            time.sleep(0.05)
    times = []
    for _ in range(5):
        t = time.monotonic(); s = socket.create_connection((addr, port), timeout=5)
        times.append((time.monotonic() - t) * 1000); s.close()
    s = socket.create_connection((addr, port), timeout=5); s.sendall(b"S")
    data = b"x" * MIB; end = time.monotonic() + secs
    while time.monotonic() < end: s.sendall(data)
    s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
    print(json.dumps({"connect_ms": sorted(times)[len(times) // 2]}))
'

# Inside region 1: listeners on the loopback and on the region address at once (same
# port), each reachable; the connect time over loopback shows it is not delayed.
BIND_PY='
import socket, sys, time
a = socket.socket(); a.bind(("127.0.0.1", 0)); a.listen(1)
b = socket.socket(); b.bind((sys.argv[1], a.getsockname()[1])); b.listen(1)
for ls in (a, b):
    socket.create_connection(ls.getsockname(), timeout=2).close()  # warm-up, not timed
    t = time.monotonic(); socket.create_connection(ls.getsockname(), timeout=2).close()
    print("%s:%d %.2fms" % (ls.getsockname() + ((time.monotonic() - t) * 1000,)), end=", ")
print("ok")
'

cmd_selftest() {
  local rate=100mbit rtt=50
  while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || usage
    case $1 in --rate) rate=$2 ;; --rtt) rtt=$2 ;; *) usage ;; esac
    shift 2
  done
  local name=swselftest
  parse_up_args --regions 2 --rate "$rate" --rtt "$rtt"
  require
  command -v python3 >/dev/null || { echo "regions: skip: missing python3"; exit 77; }
  local t_up=$SECONDS
  locked_up "$name"
  unlock
  local r1 ns0=$name-r0 ns1=$name-r1
  r1=$(print_env "$name" | sed -n 's/^REGION1=//p')
  TMP_DIR=$(mktemp -d "$BUILD_DIR/selftest.XXXXXX")

  local ping_rtt="n/a" lo_rtt="n/a"
  if command -v ping >/dev/null; then
    ping_rtt=$(ip netns exec "$ns0" timeout 10 ping -n -q -c 5 -i 0.2 "$r1" |
      awk -F'/' '/^rtt|^round-trip/ { print $5 }') || ping_rtt="no reply"
    lo_rtt=$(ip netns exec "$ns1" timeout 10 ping -n -q -c 3 -i 0.2 127.0.0.1 |
      awk -F'/' '/^rtt|^round-trip/ { print $5 }') || lo_rtt="no reply"
  fi
  local bind
  bind=$(ip netns exec "$ns1" timeout 10 python3 -c "$BIND_PY" "$r1" 2>&1) || bind="FAILED: $bind"

  ip netns exec "$ns1" timeout 25 python3 -c "$SELFTEST_PY" server "$r1" 5201 4 \
    >"$TMP_DIR/server.json" 9>&- &
  local spid=$! cpid
  # In the background too, so that a signal is handled at once (bash defers traps until
  # a foreground child ends); on_exit's down then stops both ends.
  ip netns exec "$ns0" timeout 20 python3 -c "$SELFTEST_PY" client "$r1" 5201 4 \
    >"$TMP_DIR/client.json" 9>&- &
  cpid=$!
  wait "$cpid"
  wait "$spid"

  local verdict=0
  python3 - "$TMP_DIR/server.json" "$TMP_DIR/client.json" "$rate" "$rtt" "$ping_rtt" "$lo_rtt" \
    "$bind" "$(rate_bytes "$rate")" <<'EOF' || verdict=$?
import json, sys
s, c = (json.load(open(p)) for p in sys.argv[1:3])
rate, rtt, ping_rtt, lo_rtt, bind = sys.argv[3:8]
t8 = s["t8"]
eight = "n/a (<8 MiB sent)" if t8 is None else f"{t8:.2f} s = {8 * 8 * 1.048576 / t8:.1f} Mbit/s (incl. slow start)"
print(f"requested      : rate {rate}, rtt {rtt} ms")
print(f"ping rtt       : {ping_rtt} ms (region0 -> region1, avg of 5)")
print(f"tcp connect    : {c['connect_ms']:.1f} ms (median of 5; expect ~1 rtt)")
print(f"8 MiB transfer : {eight}")
print(f"steady tcp     : {s['steady_mbit']:.1f} Mbit/s (second half of a {s['secs']:.1f} s stream, {s['bytes'] / 2**20:.0f} MiB)")
print(f"loopback rtt   : {lo_rtt} ms (inside region1, must be undelayed)")
print(f"bind in region1: {bind}")
# Verdict: latency and isolation must be right; throughput is only reported, since TCP
# buffers (tcp_wmem max 4 MiB) cap one stream at ~330 Mbit/s per 100 ms of rtt.
bad = []
try:
    if abs(float(ping_rtt) - float(rtt)) > 0.1 * float(rtt) + 2: bad.append("rtt")
except ValueError:
    if ping_rtt != "n/a": bad.append("rtt")
if abs(c["connect_ms"] - float(rtt)) > 0.1 * float(rtt) + 5: bad.append("connect")
try:
    if float(lo_rtt) > 1: bad.append("loopback delayed")
except ValueError:
    if lo_rtt != "n/a": bad.append("loopback")
if not bind.endswith("ok"): bad.append("bind")
if s["steady_mbit"] > 1.02 * float(sys.argv[8]) * 8 / 1e6: bad.append("rate overshoot")
print("selftest: " + ("FAIL: " + ", ".join(bad) if bad else "PASS"))
sys.exit(1 if bad else 0)
EOF
  lock
  do_down "$name"
  CLEANUP_NAME=""
  log "selftest took $((SECONDS - t_up)) s"
  return "$verdict"
}

