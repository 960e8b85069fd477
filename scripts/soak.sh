#!/usr/bin/env bash
# Soak test: a 2-stage swarm (3 servers per stage, config/small) trains without
# a step limit for MINUTES, once without faults and once under chaos, writing a
# checkpoint every 30 s. Shows whether a long run stays correct (servers of a
# stage agree on their parameters, samples are accounted for, lost stages come
# back from a checkpoint) and healthy (no memory growth, no long stalls, the
# loss keeps up with the fault-free run).
#   faultfree: no faults.
#   chaos:     every 20 s one random server is SIGKILLed or SIGSTOPped (at
#              random) and restarted or continued 10 s later; the coordinator
#              is SIGKILLed every 300 s (timings: env below) (the cluster restarts it on the same
#              port); at half time every server of one random stage is
#              SIGKILLed at once (the stage must come back from a checkpoint).
# Each run is stopped with SIGINT after MINUTES (SIGKILL if the cluster is
# still alive 60 s later). Every 10 s the RSS of each process of the cluster is
# sampled.
#
#   scripts/soak.sh [minutes] [out_dir]       (defaults: 30, a fresh /tmp/swarm-soak-XXXXXX)
#   env: RUNS ("faultfree chaos"; either alone runs only that half)
#        FRESH=1 repeats a run that already finished in out_dir (otherwise it is kept)
#        COORDINATOR_EVERY (300): seconds between coordinator kills of the chaos run
#        FLAGS: more flags for both runs, e.g. issue 47's: FLAGS="--verify-fraction 0.2
#        --aggregation centered-clip" (verification is on at its default 3% anyway)
#        CHAOS_EVERY (20), CHAOS_DOWN (10), WIPE_AT (half time): the chaos run's other
#        timings, e.g. issue 22's 6-minute run: RUNS=chaos CHAOS_EVERY=10 CHAOS_DOWN=5
#        COORDINATOR_EVERY=90 WIPE_AT=200 scripts/soak.sh 6
#
# Output in out_dir, per run: <run>.jsonl (metrics), <run>.log (the cluster's
# stdout and stderr), <run>-rss.csv (t_s,pid,role,rss_kib,stage: t_s seconds
# since the run started, stage only for servers, as on their command line:
# a restarted server says "auto"), <run>-ckpt/ (checkpoints), <run>.done (the
# run completed). summary.txt is scripts/soak_summary.py's report over
# everything in out_dir (also printed): per run duration, steps, dropped
# microbatches, per-stage sample accounting, hash disagreements (goal 0),
# checkpoints and lost stages, chaos counts, longest stalls, memory growth of
# processes alive >= 10 min, then chaos against fault-free (steps, loss per
# 5-minute window).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
if ! [[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "usage: scripts/soak.sh [minutes] [out_dir]" >&2
  exit 2
fi
out=${2:-$(mktemp -d /tmp/swarm-soak-XXXXXX)}
mkdir -p "$out"
runs=${RUNS:-faultfree chaos}
for r in $runs; do
  case $r in faultfree | chaos) ;; *) echo "soak: unknown run '$r' (faultfree, chaos)" >&2; exit 2 ;; esac
done
duration=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
half=$((duration / 2))
bash scripts/build.sh swarm > /dev/null
echo "soak: ${minutes} min per run ($runs), config/small with 3,3 servers; results in $out"

cluster_pid=
# SIGINT to the cluster; SIGKILL if it is still alive 60 s later. Sets cluster_rc.
stop_cluster() {
  local pid=$cluster_pid kid
  cluster_rc=0
  [ -n "$pid" ] || return 0
  kill -INT "$pid" 2>/dev/null || true
  local waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 60 ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    # Its children would outlive it (or linger SIGSTOPped): they go too.
    local kids
    kids=$(pgrep -P "$pid" | tr '\n' ' ' || true)
    echo "soak: the cluster (pid $pid) was still alive 60 s after SIGINT; sent SIGKILL to it" \
         "and its children (${kids% })" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for kid in $kids; do kill -KILL "$kid" 2>/dev/null || true; done
  fi
  wait "$pid" 2>/dev/null || cluster_rc=$?
  cluster_pid=
}
trap 'echo "soak: interrupted; the run in progress is not marked done" >&2; stop_cluster; exit 130' INT TERM

# One line per child of the cluster: t_s,pid,role,rss_kib,stage. Children come
# and go (chaos kills them): one that vanished midway is skipped.
sample_rss() {  # t_s csv
  local t=$1 csv=$2 pid arg prev role stage rss key value _
  local -a args
  for pid in $(pgrep -P "$cluster_pid" || true); do
    mapfile -d '' -t args 2>/dev/null < "/proc/$pid/cmdline" || continue
    role='' stage='' prev=''
    for arg in "${args[@]}"; do
      case $prev in --role) role=$arg ;; --stage) stage=$arg ;; esac
      prev=$arg
    done
    case $role in coordinator | server | trainer) ;; *) continue ;; esac  # not exec'd yet
    [ "$role" = server ] || stage=
    rss=
    while read -r key value _; do
      if [ "$key" = VmRSS: ]; then rss=$value; break; fi
    done 2>/dev/null < "/proc/$pid/status" || continue
    [ -n "$rss" ] || continue  # a zombie has no memory
    echo "$t,$pid,$role,$rss,$stage" >> "$csv"
  done
}

run() {  # name, extra flags...
  local name=$1; shift
  if [ -z "${FRESH:-}" ] && [ -e "$out/$name.done" ]; then
    echo "$name: kept from an earlier run (FRESH=1 repeats it)"
    return
  fi
  # Metrics append: a run that did not finish starts over.
  rm -rf "$out/$name.jsonl" "$out/$name.log" "$out/$name-rss.csv" "$out/$name-ckpt" "$out/$name.done"
  echo "t_s,pid,role,rss_kib,stage" > "$out/$name-rss.csv"
  echo "$name: started $(date '+%F %T'), ends $(date -d "+$duration seconds" '+%T')"
  local start now t
  printf -v start '%(%s)T' -1
  ./build/swarm --role cluster --config config/small --stage-servers 3,3 --max-steps 0 \
    --metrics "$out/$name.jsonl" --log-level warn \
    --checkpoint-dir "$out/$name-ckpt" --checkpoint-every 30s ${FLAGS:-} "$@" > "$out/$name.log" 2>&1 &
  cluster_pid=$!
  while :; do
    printf -v now '%(%s)T' -1
    t=$((now - start))
    [ "$t" -lt "$duration" ] || break
    if ! kill -0 "$cluster_pid" 2>/dev/null; then
      cluster_rc=0
      wait "$cluster_pid" || cluster_rc=$?
      cluster_pid=
      echo "$name: the cluster had exited by itself by $t s, code $cluster_rc (see $out/$name.log)" >&2
      return
    fi
    sample_rss "$t" "$out/$name-rss.csv"
    sleep "$(( duration - t < 10 ? duration - t : 10 ))" & wait $!
  done
  stop_cluster
  echo "$name: stopped, cluster exit code $cluster_rc"
  touch "$out/$name.done"
}

for r in $runs; do
  case $r in
    faultfree) run faultfree ;;
    chaos) run chaos --chaos mixed --chaos-every "${CHAOS_EVERY:-20}" --chaos-down "${CHAOS_DOWN:-10}" \
             --chaos-seed 11 --chaos-coordinator-every "${COORDINATOR_EVERY:-300}" --chaos-wipe-at "${WIPE_AT:-$half}" ;;
  esac
done
python3 scripts/soak_summary.py "$out" | tee "$out/summary.txt"
plots=()
for r in faultfree chaos; do [ -f "$out/$r.jsonl" ] && plots+=("$out/$r.jsonl"); done
python3 scripts/plot_metrics.py "${plots[@]}" -o "$out/soak.png" | tail -1
