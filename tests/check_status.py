#!/usr/bin/python3
"""Checks what the coordinator's HTTP port said against the run's metrics file,
with real parsers: json for /api/status, prometheus_client's own parser for
/metrics. Usage: check_status.py STATUS.json METRICS.txt RUN.jsonl
Prints the figures it compared; exits 1 naming the first mismatch."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def fail(why):
    print("check_status: " + why)
    sys.exit(1)


def main():
    status_path, prom_path, run_path = sys.argv[1:4]
    status = json.load(open(status_path))
    events = []
    for line in open(run_path):
        try:
            events.append(json.loads(line))
        except ValueError:
            pass  # a line being written as we read

    # /api/status against the metrics file.
    if len(status["stages"]) != 2:
        fail("expected 2 stages, got %d" % len(status["stages"]))
    joined = {(e["stage"], e["server"]) for e in events if e["event"] == "server_join"}
    for st in status["stages"]:
        live = [s for s in st["servers"] if s["state"] != "down"]
        if len(live) < 2:
            fail("stage %d shows %d live servers" % (st["stage"], len(live)))
        for s in st["servers"]:
            if (st["stage"], s["id"]) not in joined:
                fail("server %s of stage %d never joined in the metrics file" % (s["id"], st["stage"]))
            if len(s["hash"]) != 8 or s["step"] < 0:
                fail("server %s: hash %r step %r" % (s["id"], s["hash"], s["step"]))
        applied = sum(1 for e in events if e["event"] == "round_end" and e["stage"] == st["stage"] and e["applied"] > 0)
        if not 1 <= st["rounds"]["applied"] <= applied:
            fail("stage %d: %d applied rounds shown, %d in the file" % (st["stage"], st["rounds"]["applied"], applied))
        print("stage %d: %d servers, step %d, %d applied rounds (file: %d)"
              % (st["stage"], len(live), st["step"], st["rounds"]["applied"], applied))
    if len(status["trainers"]) != 1:
        fail("expected 1 trainer, got %d" % len(status["trainers"]))
    tr = status["trainers"][0]
    steps = {e["step"]: e for e in events if e["event"] == "step" and e["trainer"] == tr["id"]}
    if tr["step"] not in steps:
        fail("trainer %s at step %d: no such step event" % (tr["id"], tr["step"]))
    ev = steps[tr["step"]]
    if abs(ev["loss"] - tr["loss"]) > 1e-4 or ev["samples"] != tr["samples"]:
        fail("trainer step %d: loss %s samples %s shown, file says %s %s"
             % (tr["step"], tr["loss"], tr["samples"], ev["loss"], ev["samples"]))
    history = status["history"][tr["id"]]
    if not history or history[-1][1] != tr["step"]:
        fail("history does not end at the trainer's step")
    print("trainer %s: step %d loss %.4f samples %d (file: loss %.4f samples %d), %d history points, %d events"
          % (tr["id"], tr["step"], tr["loss"], tr["samples"], ev["loss"], ev["samples"], len(history),
             len(status["events"])))

    # /metrics, parsed by the Prometheus client's own parser.
    families = {f.name: f for f in text_string_to_metric_families(open(prom_path).read())}
    want = {"swarm_stage_servers": "gauge", "swarm_rounds": "counter", "swarm_round_seconds": "summary",
            "swarm_trainer_steps": "counter", "swarm_trainer_loss": "gauge",
            "swarm_trainer_tokens_per_second": "gauge", "swarm_trainer_wire_bytes": "counter",
            "swarm_trainer_reroutes": "counter", "swarm_trainer_bans": "counter", "swarm_trainer_dropped": "counter"}
    for name, kind in want.items():
        if name not in families or families[name].type != kind or not families[name].documentation:
            fail("/metrics: family %s missing, not a %s, or without help" % (name, kind))

    def value(family, **labels):
        for s in families[family].samples:
            if all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        fail("/metrics: no %s sample with %s" % (family, labels))

    for st in status["stages"]:
        shown = value("swarm_stage_servers", stage=str(st["stage"]))
        if shown < 2:
            fail("/metrics: stage %d has %s servers" % (st["stage"], shown))
    prom_step = value("swarm_trainer_steps", trainer=tr["id"])
    if int(prom_step) not in steps:
        fail("/metrics: trainer steps %s is no step of the file" % prom_step)
    prom_rounds = value("swarm_rounds", stage="0", outcome="applied")
    print("/metrics: %d families; trainer steps %d, stage 0 applied rounds %d"
          % (len(families), prom_step, prom_rounds))


main()
