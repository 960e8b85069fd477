#!/usr/bin/env bash
# The calibration swarm-sim reads (config/calibration), measured on this machine:
#   1. `swarm --role calibrate`: each stage's forward and backward request, the
#      wire codec, the optimizer step and a state export/import, one torch thread;
#   2. two real `swarm --role cluster` runs, 1 and 3 servers per stage (the
#      scenarios of scripts/bench_sim_reality.sh use 2 and 3+1, so they stay
#      predictions), SECONDS each: every process's CPU time from /proc over the
#      steady part, against the microbatches completed, gives what the
#      trainer and the coordinator spend per stage request, and (two runs, two
#      unknowns) how much a server's CPU per request exceeds step 1's model and
#      codec, and what a live server process burns per second whatever it serves;
#      then, with that idle burn, the excess of each stage's servers apart
#      (cluster-scale per stage: the last stage's real servers cost more over
#      their model than the others');
#   3. a third real cluster, 1 server per stage, both slowed 3x (--slowdown:
#      they sleep twice their compute), so the machine is about 40% busy
#      instead of 95%: a request costs less CPU there (fewer processes contend
#      for the cores), so each stage's scale is measured again at that load
#      (light-scale at light-load; swarm-sim interpolates by the machine's load).
#   scripts/calibrate.sh [config] [out] [seconds]   (defaults: config/small config/calibration 40)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-config/small}
out=${2:-config/calibration}
seconds=${3:-40}
bash scripts/build.sh swarm > /dev/null
./build/swarm --role calibrate --config "$config" --out "$out"
tmp=$(mktemp -d /tmp/swarm-calibrate-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
measure() {  # name servers-per-stage [flags]: a real cluster, /proc CPU of its processes in the steady part
  local name=$1 servers=$2
  shift 2
  # No moves: each server's CPU counts for the stage it joined.
  ./build/swarm --role cluster --config "$config" --servers-per-stage "$servers" --max-steps 0 --http-port -1 \
    --rebalance off "$@" \
    --metrics "$tmp/$name.jsonl" --log-level error > /dev/null 2>&1 &
  local cluster=$!
  snapshot() {  # pid utime+stime(ticks) role time, for every process of this cluster
    for p in $(pgrep -P "$cluster"); do
      role=$(tr '\0' ' ' < "/proc/$p/cmdline" | grep -o -- '--role [a-z]*' | head -1 | cut -d' ' -f2)
      echo "$p $(awk '{print $14 + $15}' "/proc/$p/stat") $role $(date +%s.%N)"
    done
  }
  sleep 12                      # start-up and the first rounds are not steady
  snapshot > "$tmp/$name.a"
  sleep "$((seconds - 12))"
  snapshot > "$tmp/$name.b"
  sleep 3                       # a step after the window closes
  kill -INT "$cluster"; wait "$cluster" || true
}
measure one 1
measure three 3
measure light 1 --server-slowdowns 3,3
python3 - "$out" "$tmp" "$(getconf CLK_TCK)" "$(nproc)" <<'PY'
import json, sys
out, tmp, hz, cores = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
cal = {}
for line in open(out):
    line = line.split("#")[0]
    if "=" in line:
        k, v = line.split("=", 1)
        cal[k.strip()] = v.strip()
stages = int(cal["stages"])
per_microbatch = float(cal["microbatch-s"])  # model and codec, as models/shape/cost_model.cpp counts them
per_stage = [float(x) for x in cal["stage-microbatch-s"].split(",")]

def run(name, servers_per_stage):
    """CPU seconds per role, microbatches and seconds of one cluster's measured window."""
    def rows(part):
        return {r.split()[0]: r.split() for r in open(f"{tmp}/{name}.{part}") if r.strip()}
    a, b = rows("a"), rows("b")
    t0 = min(float(r[3]) for r in a.values()); t1 = max(float(r[3]) for r in b.values())
    events = [json.loads(l) for l in open(f"{tmp}/{name}.jsonl")]
    stage_of = {e["server"]: e["stage"] for e in events if e.get("event") == "server_join"}
    cpu = {"server": 0.0, "trainer": 0.0, "coordinator": 0.0}
    stage_cpu = [0.0] * stages
    for pid, r in b.items():
        if pid in a and r[2] in cpu:
            used = (float(r[1]) - float(a[pid][1])) / hz
            cpu[r[2]] += used
            if r[2] == "server":
                if f"s-{pid}" not in stage_of:
                    sys.exit(f"calibrate.sh: server process {pid} never joined a stage")
                stage_cpu[stage_of[f"s-{pid}"]] += used
    steps = [e for e in events if e.get("event") == "step"]
    def samples_at(t):  # linear between the trainer's step events
        before = [e for e in steps if e["t"] <= t]; after = [e for e in steps if e["t"] > t]
        if not before or not after:
            sys.exit("calibrate.sh: the cluster made no steps around the measured window")
        x, y = before[-1], after[0]
        return x["samples"] + (y["samples"] - x["samples"]) * (t - x["t"]) / (y["t"] - x["t"])
    mb = (samples_at(t1) - samples_at(t0)) / int(cal["microbatch"])
    return {"cpu": cpu, "stage_cpu": stage_cpu, "mb": mb, "requests": mb * (2 * stages - 1), "seconds": t1 - t0,
            "per_stage": servers_per_stage, "servers": servers_per_stage * stages, "model": mb * per_microbatch,
            "load": sum(cpu.values()) / (t1 - t0) / cores}

r1, r3, rl = run("one", 1), run("three", 3), run("light", 1)
# Server CPU = scale x (model and codec) + idle x live servers x seconds: two runs, two unknowns.
y1, y3 = r1["cpu"]["server"], r3["cpu"]["server"]
a1, b1 = r1["model"], r1["servers"] * r1["seconds"]
a3, b3 = r3["model"], r3["servers"] * r3["seconds"]
det = a1 * b3 - a3 * b1
scale = (y1 * b3 - y3 * b1) / det
idle = (a1 * y3 - a3 * y1) / det
if scale <= 0 or idle < 0:  # noise: put it all on requests
    scale, idle = y1 / a1, 0.0
# Each stage apart, the idle burn taken as fitted: scale_k = what its servers
# spent beyond idling / its model and codec, over both runs.
scales = []
for k in range(stages):
    busy = sum(r["stage_cpu"][k] - idle * r["per_stage"] * r["seconds"] for r in (r1, r3))
    model = sum(r["mb"] * per_stage[k] for r in (r1, r3))
    scales.append(busy / model if busy > 0 else scale)
# The same per stage in the light cluster, with the same idle burn.
light = []
for k in range(stages):
    busy = rl["stage_cpu"][k] - idle * rl["per_stage"] * rl["seconds"]
    light.append(busy / (rl["mb"] * per_stage[k]) if busy > 0 else scales[k])
reqs = r1["requests"] + r3["requests"]
# A join's state copy as the real servers did it (state_download: protobuf,
# CAF chunks, the source exporting while it serves), not step 1's in-process
# export and import alone, which is 10-20x cheaper.
downloads = sorted(e["seconds"] / e["bytes"] for name in ("one", "three") for e in map(json.loads, open(f"{tmp}/{name}.jsonl"))
                   if e.get("event") == "state_download" and e.get("bytes", 0) > 0)
over = {
    "cluster-scale": ",".join(f"{s:.6g}" for s in scales),
    "cluster-load": (r1["load"] + r3["load"]) / 2,
    "light-scale": ",".join(f"{s:.6g}" for s in light),
    "light-load": rl["load"],
    "server-idle-cores": idle,
    "trainer-s-per-request": (r1["cpu"]["trainer"] + r3["cpu"]["trainer"]) / reqs,
    "coordinator-s-per-request": (r1["cpu"]["coordinator"] + r3["cpu"]["coordinator"]) / reqs,
}
if downloads:
    over["state-s-per-byte"] = downloads[len(downloads) // 2]
text = open(out).read().splitlines()
text = [l for l in text if l.split("=")[0].strip() not in over]
for name, r in (("1 server per stage", r1), ("3 servers per stage", r3), ("1 server per stage slowed 3x", rl)):
    text.append(f"# measured on a running cluster, {name}: {r['mb']:.0f} microbatches in {r['seconds']:.1f} s, "
                f"{100 * r['load']:.0f}% of {cores} cores busy, "
                "CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in r["cpu"].items()) + f" (model and codec {r['model']:.2f}; "
                "servers by stage " + ", ".join(f"{v:.2f}" for v in r["stage_cpu"]) + ")")
if downloads:
    text.append(f"# state-s-per-byte: the median of {len(downloads)} state downloads of these clusters' servers")
text += [f"{k} = {v}" if isinstance(v, str) else f"{k} = {v:.6g}" for k, v in over.items()]
open(out, "w").write("\n".join(text) + "\n")
print(f"calibrate.sh: a request costs {over['cluster-scale']} x the model and codec in a cluster {100 * over['cluster-load']:.0f}% "
      f"busy, {over['light-scale']} at {100 * over['light-load']:.0f}% (per stage); trainer "
      f"{1e3 * over['trainer-s-per-request']:.1f} ms, coordinator {1e3 * over['coordinator-s-per-request']:.1f} ms "
      f"of CPU; a live server {over['server-idle-cores']:.3f} cores; a state copy "
      f"{1e9 * float(over.get('state-s-per-byte', cal['state-s-per-byte'])):.1f} s per GB; wrote {out}")
PY
