#!/usr/bin/env bash
# swarm-sim end to end (registered only when SimGrid was found):
#   1. a fixed seed gives the same run twice (byte-identical metrics), another seed another run;
#   2. one stage, two peers, one 3x slower: work splits 3:1 and tokens/s is their capacity by hand;
#   3. one of two peers killed: its requests rerouted at once, none dropped, throughput halves;
#      with static routing the pin's death stops the run; a replayed run's first joiner is the pin;
#   4. bad configs exit 2 with a clear message; the plot script draws a simulated run.
#   tests/test_sim.sh SWARM_SIM SOURCE_DIR
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
echo "PASS"
