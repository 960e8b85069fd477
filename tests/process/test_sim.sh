#!/usr/bin/env bash
# swarm-sim end to end (registered only when SimGrid was found):
#   1. a fixed seed gives the same run twice (byte-identical metrics), another seed another run;
#   2. one stage, two peers, one 3x slower: work splits 3:1 and tokens/s is their capacity by hand;
#   3. one of two peers killed: its requests rerouted at once, none dropped, throughput halves;
#      with static routing the pin's death stops the run; a replayed run's first joiner is the pin;
#   4. bad configs exit 2 with a clear message; the plot script draws a simulated run;
#   5. the burst: a stage's requests re-sent at once while a slow server has just joined go to
#      it only as probes (one per trainer), and to it by the dozen with --routing-probe 0;
#   6. asking first: servers that grant room to at most 4 requests (policy::admission) leave
#      fewer idle while others queue than routing alone (240 peers, no churn);
#   6b. lying peers (issue #47): a third of 12 peers answer wrongly; trainers verifying 5% of
#      forwards ban every liar and no honest peer, the second opinions cost about 5% of the
#      forwards and show in the gap as verification's; without verification nobody is banned;
#   7. where the gap went: the parts add up to the gap (within 1% of it) in every run above.
#   tests/process/test_sim.sh SWARM_SIM SOURCE_DIR
set -euo pipefail
sim=$1
src=$2
out=$(mktemp -d /tmp/swarm-test-sim-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

echo "== 1. same seed, same run"
busy=(--config "$src/config/sim-small" --platform wan --peers 6 --speed-spread 0.3 --churn rate --mtbf 60
      --churn-down 15 --rebalance-period 20 --duration 150 --quiet)
"$sim" "${busy[@]}" --seed 5 --metrics "$out/a.jsonl" > /dev/null
"$sim" "${busy[@]}" --seed 5 --metrics "$out/b.jsonl" > /dev/null
"$sim" "${busy[@]}" --seed 6 --metrics "$out/c.jsonl" > /dev/null
grep -v '"sim_summary"' "$out/a.jsonl" > "$out/a.cut"  # the summary carries wall time
grep -v '"sim_summary"' "$out/b.jsonl" > "$out/b.cut"
grep -v '"sim_summary"' "$out/c.jsonl" > "$out/c.cut"
cmp -s "$out/a.cut" "$out/b.cut" || fail "seed 5 twice gave different runs"
cmp -s "$out/a.cut" "$out/c.cut" && fail "seeds 5 and 6 gave the same run"
for kind in server_down rebalance round_end step; do
  grep -q "\"$kind\"" "$out/a.jsonl" || fail "the seeded run has no $kind event: it exercised too little"
done
echo "$(wc -l < "$out/a.jsonl") identical lines; seed 6 differs"

one_stage=(--n-layers 1 --stages 1 --d-model 128 --platform wan --bandwidth-mbps 100000
           --local-latency-ms 0.01 --trainers 1 --rebalance off --quiet)
echo "== 2. one stage, two peers, the second 3x slower"
"$sim" "${one_stage[@]}" --peers 2 --slowdowns 1,3 --in-flight 8 --duration 120 --metrics "$out/split.jsonl" > /dev/null
python3 "$src/tests/check_sim.py" split "$out/split.jsonl" 3

echo "== 3. one of two peers dies"
"$sim" "${one_stage[@]}" --peers 2 --in-flight 8 --duration 75 --churn kill --churn-every 40 --churn-down 1000 \
  --metrics "$out/kill.jsonl" > /dev/null
python3 "$src/tests/check_sim.py" reroute "$out/kill.jsonl" 40
echo "== 3b. the same with static routing: the pin dies (seed 2), nothing runs on the survivor"
"$sim" "${one_stage[@]}" --peers 2 --in-flight 8 --duration 75 --churn kill --churn-every 40 --churn-down 1000 \
  --routing static --seed 2 --metrics "$out/static.jsonl" > /dev/null
python3 "$src/tests/check_sim.py" static "$out/static.jsonl" 40
echo "== 3c. replaying a real run: its servers start in the order they joined there, so its pin is pinned"
# A recorded cluster whose "server 0.0" (the lower PID) joined 2.5 s before
# "server 0.1" and was killed at 40 s for good: the trainer's only choice at
# first, so it is the pin (the seed, with both there at once, draws the other).
cat > "$out/recorded.jsonl" <<'LOG'
{"t": 1000.0, "role": "cluster", "event": "cluster_start", "stages": 1}
{"t": 1000.5, "role": "coordinator", "event": "server_join", "stage": 0, "server": "s-4710", "host": "127.0.0.1", "port": 1}
{"t": 1003.0, "role": "coordinator", "event": "server_join", "stage": 0, "server": "s-4711", "host": "127.0.0.1", "port": 2}
{"t": 1040.0, "role": "cluster", "event": "chaos", "action": "kill", "process": "server 0.0", "pid": 4710}
LOG
"$sim" "${one_stage[@]}" --peers 2 --in-flight 8 --duration 75 --churn replay --churn-log "$out/recorded.jsonl" \
  --routing static --metrics "$out/replay.jsonl" > /dev/null
python3 "$src/tests/check_sim.py" static "$out/replay.jsonl" 40

echo "== 4. bad configs, the plot"
expect_2() {  # pattern, flags...
  local pattern=$1; shift
  local code=0
  "$sim" "$@" > "$out/err" 2>&1 || code=$?
  [ "$code" = 2 ] || fail "swarm-sim $* exited $code, not 2: $(cat "$out/err")"
  grep -q -- "$pattern" "$out/err" || fail "swarm-sim $*: no '$pattern' in: $(cat "$out/err")"
}
expect_2 "stages must be 1..n-layers" --stages 5 --n-layers 4
expect_2 "cannot read the calibration file" --calibration /nonexistent/calibration
expect_2 "needs --trace FILE" --churn trace
expect_2 "/etc/passwd:1:" --churn trace --trace /etc/passwd
expect_2 "slowdowns" --slowdowns 0.5,1
expect_2 "stage-servers places more servers" --peers 2 --stage-servers 2,2
expect_2 "The following argument was not expected" --no-such-flag
python3 "$src/scripts/plot_metrics.py" "$out/a.jsonl" -o "$out/a.png" > /dev/null
[ -s "$out/a.png" ] || fail "plot_metrics.py drew nothing from a simulated run"
echo "7 bad configs refused; plot drawn"

echo "== 5. the burst onto a server that has just joined"
# Three servers, 4 trainers x 32 in flight. Server 0.2 (1000x slower) is
# killed at 5 s and restarted at 30 s (it joins at ~31.2 s, unmeasured); at
# 31.3 s server 0.1 is killed and its queue re-sent at once.
cat > "$out/burst.jsonl" <<'LOG'
{"t": 1000.0, "role": "cluster", "event": "cluster_start", "stages": 1}
{"t": 1005.0, "role": "cluster", "event": "chaos", "action": "kill", "process": "server 0.2", "pid": 3}
{"t": 1030.0, "role": "cluster", "event": "chaos", "action": "restart", "process": "server 0.2", "pid": 4}
{"t": 1031.3, "role": "cluster", "event": "chaos", "action": "kill", "process": "server 0.1", "pid": 2}
LOG
for probe in 1 0; do
  "$sim" --n-layers 1 --stages 1 --d-model 128 --platform wan --bandwidth-mbps 100000 --local-latency-ms 0.01 \
    --rebalance off --quiet --peers 3 --slowdowns 1,1,1000 --trainers 4 --in-flight 32 --duration 60 --churn replay \
    --churn-log "$out/burst.jsonl" --busy-retries 0 --routing-probe "$probe" --metrics "$out/probe$probe.jsonl" > /dev/null
done
python3 - "$out/probe1.jsonl" "$out/probe0.jsonl" <<'PY'
import json, sys
def resent_to_joiner(path):
    ev = [json.loads(l) for l in open(path)]
    joiner = [e["server"] for e in ev if e["event"] == "server_join" and e["t"] > 30][0]
    burst = [e for e in ev if e["event"] == "reroute" and 31.29 < e["t"] < 31.5]
    return len(burst), sum(1 for e in burst if e["to"] == joiner)
capped, flood = resent_to_joiner(sys.argv[1]), resent_to_joiner(sys.argv[2])
print(f"re-sent at once: {capped[0]}, to the joiner {capped[1]} with the probe cap, {flood[1]} of {flood[0]} without")
if capped[0] < 30 or flood[0] < 30:
    sys.exit(f"FAIL: too few requests re-sent at the kill ({capped[0]}, {flood[0]}): the burst was not reproduced")
if capped[1] > 4:
    sys.exit(f"FAIL: the joiner took {capped[1]} of the burst, more than one probe per trainer (4)")
if flood[1] < 20:
    sys.exit(f"FAIL: without the cap the joiner took only {flood[1]}: the test no longer shows the burst")
PY

echo "== 6. asking a server for room first"
# config/sim-t4's 240 peers without churn for an hour: the routers alone leave
# servers idle while requests queue at others of their stage (docs/simulator.md, figure 5).
for retries in 0 4; do
  "$sim" --config "$src/config/sim-t4" --quiet --peers 240 --duration 3600 --trainers 32 --in-flight 32 --seed 1 \
    --busy-retries "$retries" --metrics "$out/ask$retries.jsonl" > /dev/null
done
python3 - "$out/ask0.jsonl" "$out/ask4.jsonl" <<'PY'
import json, sys
def run(path):
    ev = [json.loads(l) for l in open(path)]
    s = [e for e in ev if e["event"] == "sim_summary"][-1]
    g = [e for e in ev if e["event"] == "sim_gap"][-1]
    return s["share_of_optimal"], g["gap_idle_routing"], s["busy"]
(share0, idle0, busy0), (share4, idle4, busy4) = run(sys.argv[1]), run(sys.argv[2])
print(f"without asking {100 * share0:.1f}% of the best assignment, {idle0:.1f} points idle while others queued; "
      f"asking {100 * share4:.1f}%, {idle4:.1f} points ({busy4} busy answers)")
if busy0 != 0 or busy4 == 0:
    sys.exit(f"FAIL: busy answers {busy0} without asking, {busy4} with it")
if not (idle4 < idle0 - 4 and share4 > share0 + 0.04):
    sys.exit("FAIL: asking first did not cut the routing idle by 4 points and add 4 points of share")
PY

echo "== 6b. lying peers, verified work"
for p in 0 0.05; do
  "$sim" --config "$src/config/sim-small" --platform wan --quiet --peers 12 --trainers 2 --duration 300 --seed 3 \
    --liars 0.34 --verify-fraction "$p" --metrics "$out/liars$p.jsonl" > /dev/null
done
python3 - "$out/liars0.jsonl" "$out/liars0.05.jsonl" <<'PY'
import json, sys
def run(path):
    ev = [json.loads(l) for l in open(path)]
    v = [e for e in ev if e["event"] == "sim_verification"][-1]
    g = [e for e in ev if e["event"] == "sim_gap"][-1]
    return v, g
(off, off_gap), (on, on_gap) = run(sys.argv[1]), run(sys.argv[2])
print(f"verifying 5%: {on['requests']} second opinions for {on['forwards']} forwards ({100 * on['share']:.1f}%), "
      f"liars banned {on['liars_banned']} of {on['liars']} (first at {on['first_ban_s']:.0f} s, last at "
      f"{on['last_ban_s']:.0f} s), honest banned {on['honest_banned']}; {on_gap['gap_verification']:.2f} points of "
      f"the gap; without verification {off['liars_banned']} banned")
if on["liars"] != 4 or on["liars_banned"] != on["liars"] or on["honest_banned"] != 0:
    sys.exit("FAIL: verification did not ban exactly the liars")
if not 0.03 < on["share"] < 0.08 or on_gap["gap_verification"] <= 0:
    sys.exit("FAIL: the second opinions' share or their place in the gap is off")
if off["requests"] != 0 or off["liars_banned"] != 0 or off_gap["gap_verification"] != 0:
    sys.exit("FAIL: without verification something was verified or banned")
PY

echo "== 7. the gap's parts add up to the gap"
python3 - "$out"/*.jsonl <<'PY'
import json, sys
checked = 0
for path in sys.argv[1:]:
    gaps = [json.loads(l) for l in open(path) if '"sim_gap"' in l]
    if not gaps:
        continue
    g = gaps[-1]
    parts = sum(v for k, v in g.items() if k.startswith("gap_") and k not in ("gap_points", "gap_sum_points"))
    if abs(parts - g["gap_sum_points"]) > 1e-3 or "gap_unbooked" in g:
        sys.exit(f"FAIL: {path}: the parts sum to {parts}, the event says {g['gap_sum_points']} ({g})")
    if abs(parts - g["gap_points"]) > max(0.01 * abs(g["gap_points"]), 0.05):
        sys.exit(f"FAIL: {path}: the parts sum to {parts:.3f} points, the gap is {g['gap_points']:.3f}")
    print(f"{path.rsplit('/', 1)[-1]}: gap {g['gap_points']:.2f} points, parts {parts:.2f}")
    checked += 1
if checked < 5:
    sys.exit(f"FAIL: only {checked} runs had a sim_gap event")
PY
echo "PASS"
