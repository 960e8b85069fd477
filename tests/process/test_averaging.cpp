// Tier (c): stage-wide averaging of the real binary as real processes. Every
// server writes a `params` event (stage, step, hash of its parameters) after
// each step; servers of a stage must agree at every step, through a kill -9 in
// the middle of a round, a server joining mid-training and a coordinator restart.
// Rebalancing is off: these uneven stages (3+1, 2+1) would otherwise send a
// server to the thin stage (tests/process/test_rebalancing.cpp covers that).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "process_util.hpp"

using namespace swarm::test;

namespace {

/// Steps of `stage` at which at least `servers` servers reported parameters.
size_t steps_with(const std::string& metrics, int stage, size_t servers) {
  size_t n = 0;
  for (const auto& [key, hashes] : params_by_step(metrics))
    n += key.first == stage && hashes.size() >= servers;
  return n;
}

int64_t last_step(const std::string& metrics, int stage) {
  int64_t last = -1;
  for (const auto& [key, hashes] : params_by_step(metrics))
    if (key.first == stage)
      last = std::max(last, key.second);
  return last;
}

}  // namespace

TEST_CASE("a server killed with kill -9 mid-round: survivors finish it identical, training goes on", "[averaging]") {
  manual_swarm swarm({"--rebalance", "off"}, "averaging");
  REQUIRE_FALSE(swarm.address.empty());
  // Rank order is id order ("s0-<pid>"): whichever rank the victim gets, its shard is reassigned.
  swarm.server(0);
  swarm.server(0);
  const pid_t victim = swarm.server(0, {"--fault", "hang-round", "--fault-after", "8"});
  swarm.server(1);
  // All three of stage 0 in the victim's round: a server joining after the first
  // rounds (slow start on a loaded machine) would miss it.
  REQUIRE(swarm.public_ports(4).size() == 5);
  const pid_t trainer = swarm.trainer({"--max-steps", "120"});
  REQUIRE(wait_for_metrics(
      swarm.metrics,
      [](const auto& lines) {
        return std::any_of(lines.begin(), lines.end(),
                           [](const auto& l) { return is_event(l, "fault") && text(l, "op") == "round"; });
      },
      120));
  kill(victim, SIGKILL);  // it holds its shard of the round: the survivors must cover it
  REQUIRE(wait_exit(trainer, 180) == 0);
  swarm.shutdown();

  const auto fault = events(swarm.metrics, "fault").at(0);
  const std::string victim_id = text(fault, "server");
  // The round the victim hung in: its two peers finished it without it.
  std::vector<std::string> survivors_of_round;
  for (const auto& l : events(swarm.metrics, "averaging_round"))
    if (number(l, "stage") == 0 && number(l, "excluded") == 1 && number(l, "peers") == 3)
      survivors_of_round.push_back(l);
  for (const auto& l : events(swarm.metrics, "round_end"))
    if (number(l, "stage") == 0 && number(l, "excluded") > 0)
      UNSCOPED_INFO(l);
  REQUIRE(survivors_of_round.size() >= 2);
  const auto& first = survivors_of_round[0];
  CHECK(first.find("\"applied\": true") != std::string::npos);
  int reassigned = 0;
  for (const auto& l : survivors_of_round)
    if (number(l, "round") == number(first, "round"))
      reassigned += static_cast<int>(number(l, "reassigned"));
  CHECK(reassigned >= 1);
  const auto ends = events(swarm.metrics, "round_end");
  const auto end = std::find_if(ends.begin(), ends.end(),
                                [&](const auto& l) { return number(l, "round") == number(first, "round"); });
  REQUIRE(end != ends.end());
  CHECK(number(*end, "applied") == 2);
  CHECK(number(*end, "agreeing") == 2);
  CHECK(number(*end, "excluded") == 1);
  std::printf("round with kill -9: %.3f s (%.0f of 3 applied)\n", number(*end, "seconds"), number(*end, "applied"));
  // Identical parameters at every step of both stages, and training went on
  // well past the fault with both survivors.
  CHECK(params_disagreements(swarm.metrics).empty());
  const auto fault_step = static_cast<int64_t>(number(first, "step"));
  CHECK(last_step(swarm.metrics, 0) > fault_step + 10);
  CHECK(steps_with(swarm.metrics, 0, 2) > 20);
  const auto [head, tail] = loss_head_tail(swarm.metrics, 5);
  CHECK(tail < head - 1.0);
  std::printf("loss %.2f -> %.2f; stage 0 reached step %lld, fault at step %lld\n", head, tail,
              static_cast<long long>(last_step(swarm.metrics, 0)), static_cast<long long>(fault_step));
}

// One swarm for two events in turn: a server joins stage 0 mid-training, then
// the coordinator is restarted. The join also guards against a joiner starting
// from scratch (the step and hash it downloaded are its peer's).
TEST_CASE(
    "a server joins mid-training, then the coordinator restarts: the joiner averages with its peers, rounds "
    "resume, parameters stay identical",
    "[averaging]") {
  manual_swarm swarm({"--rebalance", "off", "--heartbeat", "0.5", "--connection-timeout", "3"}, "averaging");
  REQUIRE_FALSE(swarm.address.empty());
  swarm.server(0);
  swarm.server(0);
  swarm.server(1);
  swarm.server(1);
  // The trainer runs until the checks below have something to check: each event
  // waits for the training it needs, not for a number of steps that a faster
  // or slower machine would pass before or after the event.
  const pid_t trainer = swarm.trainer({"--max-steps", "0"});
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const auto&) { return last_step(swarm.metrics, 0) >= 15; }, 120));
  swarm.server(0);  // the joiner, while the stage trains
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const auto&) { return steps_with(swarm.metrics, 0, 3) >= 12; }, 120));
  const size_t rounds_before = events(swarm.metrics, "round_end").size();
  swarm.restart_coordinator();  // returns once the old one is dead: later rounds are the new one's
  const double killed_t = unix_seconds();
  const auto rounds_after = [&] {
    size_t n = 0;
    for (const auto& l : events(swarm.metrics, "round_end"))
      n += number(l, "t") > killed_t;
    return n;
  };
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const auto&) { return rounds_after() >= 20; }, 120));
  CHECK(stop(trainer) == 0);
  swarm.shutdown();

  // The joiner: what it downloaded is what its peer had at that step, and from
  // then on it steps with the others, with the same parameters.
  const auto downloads = events(swarm.metrics, "state_download");
  REQUIRE(!downloads.empty());
  const auto& joined = downloads.back();
  const std::string joiner = text(joined, "server");
  const auto step = static_cast<int64_t>(number(joined, "step"));
  CHECK(step >= 15);
  const auto at_step = params_by_step(swarm.metrics)[{0, step}];
  CHECK(at_step.at(text(joined, "from")) == text(joined, "hash"));
  size_t together = 0;
  for (const auto& [key, hashes] : params_by_step(swarm.metrics))
    together += key.first == 0 && key.second > step && hashes.count(joiner) > 0 && hashes.size() == 3;
  std::printf("joiner %s downloaded step %lld (%.0f bytes, %.3f s); %zu later steps with all 3 servers\n",
              joiner.c_str(), static_cast<long long>(step), number(joined, "bytes"), number(joined, "seconds"),
              together);
  CHECK(together >= 10);

  // The restart: the new averager runs rounds, both stages step with both their servers.
  const auto ends = events(swarm.metrics, "round_end");
  REQUIRE(ends.size() > rounds_before + 10);
  double first_after = 0;
  for (const auto& l : ends)
    if (number(l, "t") > killed_t) {
      first_after = number(l, "t");
      break;
    }
  REQUIRE(first_after > 0);
  std::printf(
      "coordinator restart: first round of the new averager %.2f s after the kill (process start + 3 s "
      "settle included); %zu rounds after\n",
      first_after - killed_t, ends.size() - rounds_before);
  for (int stage : {0, 1})
    CHECK(steps_with(swarm.metrics, stage, 2) > 30);
  CHECK(params_disagreements(swarm.metrics).empty());
}

TEST_CASE("a server stopped on purpose mid-training hands its gradient to a round before it exits", "[averaging]") {
  // Rounds of 128 samples: a server holds gradient nearly all the time (with
  // tiny's 16 it held none at the stop in 3 runs of 4, and nothing was checked).
  manual_swarm swarm({"--rebalance", "off", "--batch-size", "128"}, "averaging");
  REQUIRE_FALSE(swarm.address.empty());
  const pid_t stopped = swarm.server(0);
  swarm.server(0);
  swarm.server(1);
  const pid_t trainer = swarm.trainer({"--max-steps", "0"});
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const auto&) { return last_step(swarm.metrics, 0) >= 3; }, 120));
  const double stop_t = unix_seconds();
  CHECK(stop(stopped) == 0);
  CHECK(stop(trainer) == 0);
  swarm.shutdown();

  // What it held went into a round it applied after the stop, none dropped.
  const auto stops = events(swarm.metrics, "stop_hand_in");
  const auto first_stop =
      std::find_if(stops.begin(), stops.end(), [&](const std::string& l) { return number(l, "t") >= stop_t; });
  REQUIRE(first_stop != stops.end());
  const std::string stopper = text(*first_stop, "server");
  int64_t dropped = -1;
  for (const auto& l : events(swarm.metrics, "server_exit"))
    if (text(l, "server") == stopper && number(l, "t") >= stop_t)
      dropped = static_cast<int64_t>(number(l, "dropped_samples"));
  size_t rounds_since = 0;
  for (const auto& l : events(swarm.metrics, "averaging_round"))
    rounds_since +=
        text(l, "server") == stopper && number(l, "t") >= stop_t && l.find("\"applied\": true") != std::string::npos;
  const bool handed_in = first_stop->find("\"handed_in\": true") != std::string::npos;
  std::printf(
      "server %s stopped holding %.0f samples: handed in %d, %zu rounds applied after the stop, %.2f s to exit, "
      "%lld dropped\n",
      stopper.c_str(), number(*first_stop, "samples"), int{handed_in}, rounds_since, number(*first_stop, "seconds"),
      static_cast<long long>(dropped));
  CHECK(dropped == 0);
  CHECK(handed_in);
  CHECK(number(*first_stop, "seconds") < 2.5);
  if (number(*first_stop, "samples") > 0)  // nearly always, with rounds of 128 samples
    CHECK(rounds_since >= 1);
  CHECK(params_disagreements(swarm.metrics).empty());
}

TEST_CASE("a member that hangs without dying is excluded at the deadline; the round ends without it", "[averaging]") {
  // Long connection timeout: the hung server's node still answers heartbeats, so
  // only the averager's deadline can take it out of the round: at 0.75 x 2 s.
  // Short request timeouts: the trainer's requests held by the hung server are
  // retried elsewhere after 5 s, not the tiny config's 20.
  manual_swarm swarm({"--rebalance", "off", "--averaging-timeout", "2", "--connection-timeout", "60",
                      "--forward-timeout", "5", "--backward-timeout", "5"},
                     "averaging");
  REQUIRE_FALSE(swarm.address.empty());
  swarm.server(0);
  const pid_t hung = swarm.server(0, {"--fault", "hang-round", "--fault-after", "5"});
  swarm.server(1);
  // Both of stage 0 in its rounds from the first (a server starting late would
  // miss its 5th), and training until the survivor stepped alone after the
  // round that excluded the hung one.
  REQUIRE(swarm.public_ports(3).size() == 4);
  const pid_t trainer = swarm.trainer({"--max-steps", "0"});
  std::vector<std::string> ends;
  std::vector<std::string>::const_iterator end;
  const auto excluded_then_stepped = [&] {
    const auto fault = events(swarm.metrics, "fault");
    if (fault.size() != 1)
      return false;
    ends = events(swarm.metrics, "round_end");
    end = std::find_if(ends.cbegin(), ends.cend(), [&](const auto& l) {
      return number(l, "stage") == 0 && number(l, "t") > number(fault[0], "t");
    });
    return end != ends.cend() && last_step(swarm.metrics, 0) > number(*end, "step") + 5;
  };
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const auto&) { return excluded_then_stepped(); }, 120));
  CHECK(stop(trainer) == 0);
  kill(hung, SIGKILL);  // a clean stop of a hung server is test_durability's
  swarm.shutdown();
  REQUIRE(excluded_then_stepped());
  CHECK(events(swarm.metrics, "fault").size() == 1);
  std::printf("hung member: round ended after %.2f s with %.0f of %.0f applied, %.0f excluded\n",
              number(*end, "seconds"), number(*end, "applied"), number(*end, "peers"), number(*end, "excluded"));
  CHECK(number(*end, "peers") == 2);
  CHECK(number(*end, "applied") == 1);
  CHECK(number(*end, "excluded") == 1);
  CHECK(number(*end, "seconds") < 2 + 0.5);  // never past the timeout (plus scheduling slack)
  CHECK(params_disagreements(swarm.metrics).empty());
}

TEST_CASE("a round given up before any part left, then a reload: the gradient goes into later rounds, none dropped",
          "[averaging]") {
  // The failing member's peer counts it out at the deadline (0.75 x 2 s) and
  // steps alone; the failing one keeps the gradient it took into the round (same
  // step), is then a step behind, reloads the peer's state and keeps what it
  // holds (a step stale) for its next round.
  manual_swarm swarm({"--rebalance", "off", "--averaging-timeout", "2"}, "averaging");
  REQUIRE_FALSE(swarm.address.empty());
  swarm.server(0);
  swarm.server(0, {"--fault", "fail-round", "--fault-after", "5"});
  swarm.server(1);
  REQUIRE(swarm.public_ports(3).size() == 4);  // both of stage 0 in rounds from the first
  const pid_t trainer = swarm.trainer({"--max-steps", "0"});
  const auto carried_and_stepped = [&] {
    const auto faults = events(swarm.metrics, "fault");
    if (faults.empty())
      return false;
    for (const auto& l : events(swarm.metrics, "gradient_carry"))
      if (text(l, "server") == text(faults[0], "server") && text(l, "reason") == "reload")
        return last_step(swarm.metrics, 0) > number(l, "step") + 3;
    return false;
  };
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const auto&) { return carried_and_stepped(); }, 120));
  CHECK(stop(trainer) == 0);
  swarm.shutdown();

  const auto faults = events(swarm.metrics, "fault");
  REQUIRE(faults.size() == 1);
  CHECK(text(faults[0], "op") == "fail-round");
  const std::string failing = text(faults[0], "server");
  std::vector<std::string> carries;
  for (const auto& l : events(swarm.metrics, "gradient_carry")) {
    std::printf("carry: %s %s %.0f samples computed at step %.0f, now at %.0f, kept %d\n", text(l, "server").c_str(),
                text(l, "reason").c_str(), number(l, "samples"), number(l, "computed_at"), number(l, "step"),
                int{l.find("\"kept\": true") != std::string::npos});
    CHECK(l.find("\"kept\": true") != std::string::npos);
    if (text(l, "server") == failing)
      carries.push_back(l);
  }
  REQUIRE(carries.size() >= 2);
  CHECK(text(carries[0], "reason") == "failed_round");
  CHECK(number(carries[0], "step") == number(carries[0], "computed_at"));  // nobody stepped with it: not stale
  CHECK(text(carries[1], "reason") == "reload");
  CHECK(number(carries[1], "step") == number(carries[1], "computed_at") + 1);  // the reload: a step on
  CHECK(number(carries[1], "samples") >= number(carries[0], "samples"));       // what failed is in it
  // Its next applied round took at least what it carried from the reload.
  double next_round = -1;
  for (const auto& l : events(swarm.metrics, "averaging_round"))
    if (next_round < 0 && text(l, "server") == failing && number(l, "t") >= number(carries[1], "t") &&
        l.find("\"applied\": true") != std::string::npos)
      next_round = number(l, "samples");
  CHECK(next_round >= number(carries[1], "samples"));
  int64_t dropped = 0;
  for (const auto& l : events(swarm.metrics, "server_exit"))
    dropped += static_cast<int64_t>(number(l, "dropped_samples"));
  CHECK(dropped == 0);
  CHECK(number(events(swarm.metrics, "trainer_exit").at(0), "dropped") == 0);
  const auto disagreements = params_disagreements(swarm.metrics);
  for (const auto& [stage, step] : disagreements)
    for (const auto& [server, hash] : params_by_step(swarm.metrics).at({stage, step}))
      UNSCOPED_INFO("stage " << stage << " step " << step << ": " << server << " " << hash);
  CHECK(disagreements.empty());
}
