#!/usr/bin/env python3
"""Checks of swarm-sim runs against answers worked out by hand (tests/process/test_sim.sh).

  check_sim.py split FILE RATIO      one stage, two peers, the second RATIO times slower:
                                     work splits RATIO:1 and tokens/s equals the two
                                     peers' capacity (both always busy)
  check_sim.py reroute FILE KILL_T   one stage, two equal peers, one killed at KILL_T:
                                     its requests rerouted, nothing dropped, and the
                                     survivor alone sets the throughput after it
  check_sim.py static FILE KILL_T    the same with --routing static and the pin killed:
                                     one peer's throughput before, none after, the
                                     survivor never used
Exit 0 when the run agrees, 1 with the reason otherwise.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def capacity(ev, slowdowns):
    """Samples/s of one stage whose servers have these slowdowns (hand formula)."""
    cost = next(e for e in ev if e["event"] == "stage_cost" and e["stage"] == 0)
    start = next(e for e in ev if e["event"] == "cluster_start")
    microbatch = start["microbatch"]
    per_request = cost["forward_s"] + cost["backward_s"]  # one stage: the forward includes the backward
    return sum(microbatch / (per_request * s) for s in slowdowns), start["seq_len"]


def tokens_between(ev, t0, t1):
    steps = [e for e in ev if e["event"] == "step" and t0 <= e["t"] <= t1]
    if len(steps) < 2:
        fail(f"fewer than 2 steps between {t0} and {t1} s")
    return (steps[-1]["tokens"] - steps[0]["tokens"]) / (steps[-1]["t"] - steps[0]["t"])


def split(path, ratio):
    ev = load(path)
    served = {e["server"]: e["served"] for e in ev if e["event"] == "server_exit"}
    fast, slow = served.get("s0.1", 0), served.get("s1.1", 0)
    if slow == 0:
        fail(f"the slow peer served nothing: {served}")
    if abs(fast / slow - ratio) > 0.1 * ratio:
        fail(f"work split {fast}:{slow} = {fast / slow:.2f}, expected {ratio} +- 10%")
    cap, seq = capacity(ev, [1, ratio])
    end = max(e["t"] for e in ev)
    tps = tokens_between(ev, 0.2 * end, end)
    if abs(tps / (cap * seq) - 1) > 0.03:
        fail(f"{tps:.0f} tokens/s, the two peers' capacity is {cap * seq:.0f} (+- 3%)")
    print(f"split {fast}:{slow} ({fast / slow:.2f}, expected {ratio}); {tps:.0f} tokens/s against "
          f"{cap * seq:.0f} by hand ({100 * (tps / (cap * seq) - 1):+.1f}%)")


def reroute(path, kill_t):
    ev = load(path)
    kills = [e for e in ev if e["event"] == "chaos" and e["action"] == "kill"]
    if not kills or abs(kills[0]["t"] - kill_t) > 1e-6:
        fail(f"expected one kill at {kill_t} s, got {kills}")
    victim = kills[0]["process"]
    rerouted = [e for e in ev if e["event"] == "reroute" and e["from"] == victim]
    if not rerouted or any(e["reason"] != "down" or e["t"] != kill_t for e in rerouted):
        fail(f"expected the victim's requests re-sent at once with reason down, got {rerouted}")
    exit_ = next(e for e in ev if e["event"] == "trainer_exit")
    if exit_["dropped"] != 0 or exit_["issued"] != exit_["completed"] + exit_["in_flight"]:
        fail(f"microbatches lost: {exit_}")
    survivors = [e["server"] for e in ev if e["event"] == "server_exit"]
    if survivors == [] or victim in survivors:
        fail(f"the victim {victim} still served at the end: {survivors}")
    cap_both, seq = capacity(ev, [1, 1])
    end = max(e["t"] for e in ev)
    before = tokens_between(ev, 0.3 * kill_t, kill_t)
    after = tokens_between(ev, kill_t + 5, end)
    if abs(after / (cap_both / 2 * seq) - 1) > 0.05:
        fail(f"{after:.0f} tokens/s after the kill, one peer's capacity is {cap_both / 2 * seq:.0f} (+- 5%)")
    if abs(before / (cap_both * seq) - 1) > 0.05:
        fail(f"{before:.0f} tokens/s before the kill, two peers' capacity is {cap_both * seq:.0f} (+- 5%)")
    print(f"{len(rerouted)} request(s) of {victim} rerouted at {kill_t} s, 0 dropped; tokens/s "
          f"{before:.0f} -> {after:.0f} (by hand {cap_both * seq:.0f} -> {cap_both / 2 * seq:.0f})")


def static(path, kill_t):
    ev = load(path)
    kills = [e for e in ev if e["event"] == "chaos" and e["action"] == "kill"]
    if len(kills) != 1 or abs(kills[0]["t"] - kill_t) > 1e-6:
        fail(f"expected one kill at {kill_t} s, got {kills}")
    victim = kills[0]["process"]
    exits = [e for e in ev if e["event"] == "server_exit"]
    if len(exits) != 1 or exits[0]["server"] == victim:
        fail(f"expected the survivor's server_exit only, got {exits}")
    # The seed makes the victim the pinned server: the survivor, there when it
    # died, is retired and never served (re-pinning to it is what SWARM fixes).
    if exits[0]["served"] != 0:
        fail(f"the survivor {exits[0]['server']} served {exits[0]['served']} requests: static routing re-pinned "
             "to a server present when its pin died (or the seed no longer kills the pin)")
    cap_both, seq = capacity(ev, [1, 1])
    end = max(e["t"] for e in ev)
    before = tokens_between(ev, 0.3 * kill_t, kill_t)
    late = [e for e in ev if e["event"] == "step" and e["t"] > kill_t + 5]
    if abs(before / (cap_both / 2 * seq) - 1) > 0.05:
        fail(f"{before:.0f} tokens/s before the kill, one pinned peer's capacity is {cap_both / 2 * seq:.0f} (+- 5%)")
    if late:
        fail(f"{len(late)} steps from {kill_t + 5} s to {end} s after the pin died: nothing should have run")
    print(f"static: pin {victim} killed at {kill_t} s; the survivor served 0; tokens/s {before:.0f} -> 0 "
          f"(by hand {cap_both / 2 * seq:.0f} -> 0)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "split":
        split(sys.argv[2], float(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "reroute":
        reroute(sys.argv[2], float(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "static":
        static(sys.argv[2], float(sys.argv[3]))
    else:
        sys.exit(__doc__)
