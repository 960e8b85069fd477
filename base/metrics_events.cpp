#include "base/metrics_events.hpp"

namespace swarm {

// One row per event: its name, the roles that write it, its fields and when.
// A test says when an emit("...") in the code has no row here, and when
// docs/metrics.md's table is not this one (`swarm --help-metrics-markdown`).
const std::vector<metrics_event_doc>& metrics_events() {
  static const std::vector<metrics_event_doc> events{
      {"step", "trainer, local",
       "`step`, `loss` (mean next-token cross-entropy of the step's microbatches, nats), `samples` and "
       "`tokens` (completed so far), `tokens_per_s` (over this step), `elapsed_s`; local also `lr` (the "
       "step's learning rate); trainer also `trainer`, "
       "`issued`, `completed`, `dropped`, `retries` (counts so far), `step_retries` (re-sent attempts "
       "during this step), `busy` (busy answers to its load balancers' asks for room so far, "
       "policy::admission), `wire_bytes` (request and reply payload bytes to and from the servers so far, "
       "all stages) and `wire_bytes_per_sample` (the same over samples completed)"},
      {"eval", "trainer, local",
       "`step` (the step whose weights were measured: 0 first, then every `eval-every`), `samples` and "
       "`tokens` (validation windows measured), `loss` (mean next-token cross-entropy over them, nats), "
       "`perplexity` (e^loss), `failed` (samples no server could measure), `seconds`; trainer also `trainer`. "
       "The windows are --data's held-out shards, the same for every trainer and `--role local`"},
      {"dropped", "trainer",
       "`trainer`, `microbatch`, `stage`, `op` (forward/backward), `reason`: a microbatch given up after "
       "`max-retries` attempts or a fatal error"},
      {"trainer_exit", "trainer",
       "`trainer`, `steps`, `issued`, `completed`, `dropped`, `in_flight` (microbatches still unfinished "
       "when a stop signal's 3 s to finish them ran out; `issued = completed + dropped + in_flight`), `retries`, "
       "`busy`, `samples`, "
       "`wire_bytes` (as in `step`), `compression`, `acked` (per stage, comma-separated: samples whose "
       "gradients the stage confirmed adding), `stage_steps` (each stage's optimizer step as its last "
       "reply said, `/`-separated)"},
      {"stage_lag", "trainer",
       "`trainer`, `stage`, `step`, `leader`, `gained`, `stage_steps`: a stage that has stayed at `step` while "
       "stage `leader` took `gained` (more than 5) steps (counted from where it stood level or ahead): its "
       "rounds are not completing, its weights not "
       "learning; again each 5 steps more while it stays"},
      {"reroute", "trainer",
       "`stage`, `trainer`, `op`, `from`, `to`, `reason` (`down`, `timeout`, `leaving`, `error`): an "
       "attempt re-sent to another server"},
      {"timeout", "trainer", "`stage`, `trainer`, `server`, `op`, `seconds`: an attempt passed its deadline (no ban)"},
      {"ban", "trainer",
       "`stage`, `trainer`, `server`, `seconds` (ban length), `reason`: a server failed a request with an "
       "error"},
      {"server_join", "coordinator",
       "`stage`, `server`, `host`, `port`: a server registered for a stage (on starting, after a move, "
       "after a coordinator restart)"},
      {"server_down", "coordinator",
       "`stage`, `server`, `reason`: a server died, was killed, or its link was lost (a failure)"},
      {"server_stop", "coordinator",
       "`stage`, `server`: a server stopped on purpose (asked to stop, or the run ended): not a failure, so "
       "no `server_down`, no mark in the plot, and no `stage_lost` when it was its stage's last"},
      {"params", "server",
       "`stage`, `server`, `step` (optimizer steps applied), `hash` (FNV-1a of its parameters, decimal "
       "string): after every step and every reload; servers of a stage must agree at each step"},
      {"averaging_round", "server",
       "`stage`, `server`, `round`, `term` (the ordering coordinator's, 0 without --control), `step` (after it), "
       "`applied` (false: gave up, no step), `peers`, "
       "`excluded` (members gone: died, late or refused), `reassigned` (shards of a gone owner it had to "
       "get elsewhere), `samples` (of its gradient), `stale_samples` (of those, computed on the parameters "
       "before the previous step: a step stale), `lr` (the step's learning rate), `compression` (its "
       "`--averaging-compression`), `outliers` (with `--aggregation centered-clip`: the members whose parts lay "
       "outside the honest spread in the shards it reduced, comma-separated), `bytes` "
       "and `bytes_received` (encoded gradient values it sent and got), `raw_bytes` (what it sent as "
       "float32), `ideal_bytes` (2 x (peers-1)/peers x float32 gradient bytes), `seconds` (from its hand-over "
       "to its step)"},
      {"round_start", "coordinator",
       "`stage`, `round`, `step` (the stage's, which the round makes step + 1), `peers`, `term` (0 without "
       "--control): a round ordered (scripts/check_history.py checks that no two leaders ordered at once)"},
      {"leadership", "coordinator",
       "`change` (`won`: this candidate leads from now; `lost`: its etcd lease ran out, it stopped ordering and "
       "exits), `term`, `address`, `pid`, `stood_by_s` (won: seconds from its start to leading)"},
      {"stale_order", "server",
       "`stage`, `server`, `order` (`round`, `reload`, `move`, `registration`), `term`, `newest_term`: an order "
       "of a deposed coordinator's term refused (fencing)"},
      {"round_end", "coordinator",
       "`stage`, `round`, `step` (the stage's afterwards), `peers`, `applied`, `agreeing` (members with the "
       "majority hash), `excluded`, `seconds` (start to last result)"},
      {"reload", "coordinator",
       "`stage`, `server`, `from`, `step`, `reason` (`behind`, `parameters differ`), `term`: a server told to copy "
       "an up-to-date peer's state"},
      {"server_exit", "server",
       "`stage`, `server`, `served`, `rejected` (requests), `committed_samples` (samples whose gradients it "
       "added), `duplicates` (repeats not added again), `late` (refused or discarded after the commit "
       "deadline), `rounds` (applied), `rounds_failed`, `dropped_samples` (gradient samples thrown away: "
       "computed more than a step before the parameters they would step, left behind by a move, or held "
       "when it exited without a round to hand them to), "
       "`carried_gradients` (gradients a failed round or a reload did not use, kept for the next round), "
       "`withheld_samples` (answered, but held back: the reply may have "
       "come after the trainer re-sent it; see docs/design.md), `cache_hits` and `cache_misses` (backwards "
       "that found their forward in the activation cache, `--activation-cache-mb`, and those that recomputed it), "
       "`cache_stepped` and `cache_evicted` (recorded forwards dropped because the parameters stepped before "
       "their backward came, or for room), `cache_peak_mib` (most held at once, estimated), `steps`, `hash` (FNV-1a of "
       "its parameters, as a decimal string), "
       "`refused` (messages of its process refused for their sender: orders not from its coordinator, reports in "
       "another's name), `refused_by_role` (refused for the role the sender's certificate names, with TLS), "
       "`moved_to` (-1: the server stopped; else the stage it left this one for). One per stage served: "
       "when the server stops, and when it leaves a stage for another, with the totals of its time there"},
      {"gradient_carry", "server",
       "`stage`, `server`, `reason` (what left a gradient unused: `failed_round` (given up before any part left), "
       "`returned` (given up after parts left; the next round began at the same step, so nobody stepped with "
       "it), `reload` (taken before adopting a peer's state), `checkpoint_reload` (before loading the stage's "
       "newest checkpoint)), `samples`, `computed_at` (the step it was computed at), `step` (the server's step "
       "now), `kept` (true: it goes into the next round, at most one step stale; false: dropped and counted "
       "in `dropped_samples`, two or more steps behind)"},
      {"stop_hand_in", "server",
       "`stage`, `server`, `samples` (gradient samples it held when stopped on purpose), `handed_in` (none left "
       "behind: they went into a round before it exited, or there were none), `seconds` (from the stop to the exit; at "
       "most 2): a server stopped on "
       "purpose (SIGTERM) hands its gradient to a round first"},
      {"state_download", "server",
       "`stage`, `server`, `from` (the peer), `step` (the state's optimizer steps), `bytes`, `seconds`, "
       "`hash` (of the parameters, checked against the peer's): on joining, on moving and on every reload"},
      {"rebalance", "server",
       "`server`, `from` (-1 for a new server), `to`, `reason` (`load`: throughput; `redundancy`: the stage "
       "had fewer than `min-replicas`; `empty`: it had none; `join`: a server started with `--stage auto` "
       "placed there), `predicted_gain` (predicted relative rise of the slowest stage's capacity; `null` "
       "when a stage was empty), `seconds` (from the order, or the placement question, until it served the "
       "new stage), `state_copied` (moves: false when no live peer held the stage's state), `state_from` "
       "(moves: `peer`, `checkpoint` or `initial`)"},
      {"stage_load", "coordinator",
       "`stage`, `servers` (a server on its way there counts), `capacity` (samples/s: the sum of its "
       "servers' measured rates, see Rebalancing), `cost` (the stage's work per sample, multiply-adds): "
       "every `min(rebalance-period, 5)` seconds"},
      {"bulk", "server, trainer",
       "`process`, `frames_sent`, `bytes_sent`, `frames_received`, `bytes_received`, `send_failures` "
       "(frames dropped: peer unreachable or connection broken), `bad_frames` (connections closed for "
       "garbage), `strangers` (connections closed before a hello naming this process's token: not a "
       "member of the swarm's CAF network), `undeliverable` (frames for an actor gone), `frames_waited` (frames that "
       "waited for room "
       "under `--bulk-budget`), `stalled` (connections closed mid-frame: no room in time, or nothing came "
       "for 30 s), `peak_pending` (most bytes of frames being received at once): at exit, what the process "
       "moved over its bulk connections"},
      {"stage_lost", "coordinator",
       "`stage`, `step` (optimizer steps of the state lost, as the averager last heard: servers that "
       "finished a round among themselves just before they died may have been one further), `hash`, `reason`: the last "
       "server holding a "
       "trained stage's state died (a clean stop writes none); the next server of the stage loads the "
       "stage's newest checkpoint, or starts from initial parameters without one"},
      {"server_evicted", "coordinator",
       "`stage`, `server`, `dissents`, `outlier_rounds`, `why`: the server's round results differed from a strict "
       "majority "
       "of its rounds' `dissents` rounds in a row (the majority decides, docs/deploy.md), or under "
       "`--aggregation centered-clip` a strict majority of its rounds' other members found its gradient outside "
       "the honest spread in `outlier_rounds` (3) of its stage's last 10 rounds: out of its stage's rounds, "
       "dropped from membership (trainers send "
       "it nothing) and never admitted again"},
      {"clip_strike", "coordinator",
       "`stage`, `server`, `round`, `reporters`, `strikes`: under `--aggregation centered-clip`, a strict "
       "majority of a round's other members (`reporters` of them) found this server's gradient outside the honest "
       "spread (its distance from the parts' median, x sqrt(samples), over 4 times the median part's); `strikes`: "
       "such rounds among its stage's last 10, 3 evict it (`server_evicted`)"},
      {"verify_strike", "trainer",
       "`stage`, `trainer`, `server`, `step` (the server_step every compared answer claimed), `microbatch`, "
       "`agreeing` (the servers whose answers agreed, comma-separated), `output_hash` and `agreed_hash` (FNV-1a "
       "of the charged answer's and the majority's compared tensor), `distance` (relative, between them), "
       "`tolerance`, `strikes` (so far): verified work (`--verify-fraction`) found this server outside the "
       "majority of three that answered one forward"},
      {"verify_ban", "trainer",
       "the fields of `verify_strike`: this trainer's `--verify-strikes`-th strike against it; it sends it no "
       "more work (every strike went to the coordinator, which counts them over all trainers: `server_banned`). "
       "swarm-sim writes `stage`, "
       "`trainer`, `server`, `liar` (whether it was one of the `--liars`)"},
      {"verify", "trainer",
       "`trainer`, `step`, `fraction` (`--verify-fraction`), `requests` (forwards re-sent to a second or third "
       "server), `samples` (theirs), `forward_samples` (of every forward), `share` (samples / forward_samples: "
       "verification's extra forward compute, probation's included), `agreed`, `disagreed` (a third server asked), "
       "`inconclusive` (no "
       "other server, an error, or answers of different steps), `strikes`, `bans`: after every step and at exit "
       "while verification is on, the counts so far"},
      {"server_banned", "coordinator",
       "`stage`, `server`, `trainer`, `step`, `microbatch`, `distance`, `tolerance`, `strikes`, `output_hash`, "
       "`agreed_hash`, `compared` (`outputs`, or `loss and input_grad` on the last stage), `cooldown_s`, "
       "`last_of_stage` (true: its stage has no server left), `why`: trainers' verification charged the server "
       "`strikes` (`--verify-strikes`) times, all trainers together; the last charge's evidence took it out of its "
       "stage; it is refused for `--ban-cooldown` (a trainer's reports ban at most a third of "
       "a stage at a time)"},
      {"fault", "server",
       "`server`, `stage`, `op` (`forward`, `backward`, `round`, `state`, `fail-round`), `pid`: the `--fault` "
       "test hook now holds a request (or its shard of a round) and hangs until stopped; `fail-round`: it gave "
       "the round up before sending any part and goes on"},
      {"checkpoint", "server, trainer, local",
       "`stage` (-1: a trainer's position), `server` or `trainer`, `step`, `file`, `bytes` (of the payload: "
       "the state, or the position), `seconds` (export and write): a checkpoint written (see Checkpoints)"},
      {"checkpoint_load", "server, trainer",
       "server: `stage`, `server`, `step`, `file`, `skipped` (newer files of the stage that were torn or "
       "corrupt), `hash` (of the parameters loaded), `seconds`; trainer: `stage` -1, `trainer`, `step`, "
       "`samples`, `slot`: a process resumed from a checkpoint"},
      {"chaos", "cluster",
       "`action` (`kill`, `restart`, `stop`, `continue`, `wipe`), `process` (\"server 1.0\", "
       "\"coordinator\", \"stage 1\" for a wipe), `pid`"},
      {"process_start", "cluster", "`process`, `pid`: the cluster started the coordinator again after it died"},
      {"cluster_start", "cluster",
       "`stages`, `stage_servers` (servers started per stage, comma-separated), `trainers`, "
       "`coordinator_port`"},
      {"process_exit", "cluster",
       "`process` (\"trainer 0\", \"server 1.0\", ...), `pid`, `code` (128 + signal when killed)"},
      {"cluster_exit", "cluster", "`code`"},
      {"stage_cost", "sim",
       "`stage`, `forward_s`, `backward_s` (core-seconds of one request on the calibrated core), "
       "`forward_in_bytes`, `forward_out_bytes`, `backward_in_bytes`, `backward_out_bytes`, `parameters`, "
       "`state_bytes`: `swarm-sim`'s cost model of each stage, at the start"},
      {"sim_throughput", "sim",
       "`tokens_per_s` (since the last one), `optimal_tokens_per_s` (the best assignment of the peers up, "
       "same span), `share`, `alive` (peers up), `samples`: every `--report-every` simulated seconds"},
      {"sim_summary", "sim",
       "`tokens_per_s` and `share_of_optimal`, `share_of_fluid` (after `warmup_s`), `samples`, `issued`, "
       "`completed`, `dropped`, `reroutes`, `busy` (busy answers to asks, policy::admission), `rounds_applied`, "
       "`rounds_failed`, `moves_load`, "
       "`moves_redundancy`, `moves_empty`, `joins`, `downs`, `mean_peers_up`, `simulated_s`, `warmup_s`, "
       "`wall_s`, `peak_rss_mib`, `seed`: the end of a `swarm-sim` run"},
      {"sim_gap", "sim",
       "`gap_points` (points of the best assignment's throughput the run missed, after the warm-up), "
       "`gap_sum_points` (the parts' sum) and the parts: `gap_startup`, `gap_state_copies`, `gap_idle_routing`, "
       "`gap_idle_averaging`, `gap_idle_no_requests`, `gap_best_spare`, `gap_lost_to_failures`, `gap_overshoot`, "
       "`gap_verification` (second opinions of verified work), `gap_window_ends`, `gap_slower_than_yardstick` "
       "(docs/simulator.md, \"The gap\"): the end of a `swarm-sim` run"},
      {"sim_verification", "sim",
       "`fraction` (`--verify-fraction`), `forwards` (answered), `requests` (second and third opinions), `share` "
       "(requests / forwards), `disagreed`, `inconclusive`, `strikes`, `liars` (`--liars` of the peers), "
       "`liars_banned`, `honest_banned`, `first_ban_s` and `last_ban_s` (simulated seconds of the liars' bans, -1: "
       "none): the end of a `swarm-sim` run (issue #47)"},
  };
  return events;
}

std::string metrics_events_markdown() {
  std::string out = "| event | role | fields |\n|---|---|---|\n";
  for (const auto& e : metrics_events())
    out += std::string{"| `"} + e.name + "` | " + e.roles + " | " + e.fields + " |\n";
  return out;
}

}  // namespace swarm
