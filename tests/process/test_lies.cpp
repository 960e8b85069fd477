// Tier (c): lying servers in a running swarm (issue #47). Of config/tiny's two
// stages of three servers each, one of stage 0 answers with noise (--fault
// noise) and one of stage 1 hands its round -10 x its gradient (--fault flip).
// The trainer verifies half its forwards; the stages average with
// CenteredClip. Passing means: the noise server is banned by the trainer and
// taken out of its stage by the coordinator, the flipping one is clipped and
// evicted, nobody else is charged, and training goes on past both.
#include <catch2/catch.hpp>

#include <string>

#include "process_util.hpp"

using namespace swarm::test;

namespace {

bool names(const std::string& line, const std::string& server) {
  return line.find("\"server\": \"" + server + "\"") != std::string::npos;
}

size_t count_naming(const std::vector<std::string>& lines, const std::string& event, const std::string& server) {
  return static_cast<size_t>(std::count_if(
      lines.begin(), lines.end(), [&](const std::string& l) { return is_event(l, event) && names(l, server); }));
}

}  // namespace

TEST_CASE("a server answering with noise is banned; one flipping its gradient is clipped and evicted",
          "[faults][verify]") {
  // Rounds of 6 microbatches: each of the three members holds a part (with
  // 2, most rounds have two parts, and two cannot outvote each other).
  // --verify-strikes for the coordinator too: it counts every trainer's strikes.
  manual_swarm swarm(
      {"--aggregation", "centered-clip", "--rebalance", "off", "--batch-size", "48", "--verify-strikes", "2"}, "lies");
  REQUIRE_FALSE(swarm.address.empty());
  const std::string noisy = "s-" + std::to_string(swarm.server(0, {"--fault", "noise", "--allow-faults"}));
  swarm.server(0);
  swarm.server(0);
  const std::string flipper = "s-" + std::to_string(swarm.server(1, {"--fault", "flip", "--allow-faults"}));
  swarm.server(1);
  swarm.server(1);
  REQUIRE(swarm.public_ports(6).size() == 7);
  const pid_t trainer = swarm.trainer({"--max-steps", "0", "--verify-fraction", "0.5"});
  double caught_at = 0;
  const bool caught = wait_for_metrics(
      swarm.metrics,
      [&](const std::vector<std::string>& lines) {
        if (count_naming(lines, "server_banned", noisy) == 0 || count_naming(lines, "server_evicted", flipper) == 0)
          return false;
        for (const auto& l : lines)
          if (is_event(l, "server_banned") || is_event(l, "server_evicted"))
            caught_at = std::max(caught_at, number(l, "t"));
        return true;
      },
      150);
  CHECK(caught);
  // Training goes on without them.
  CHECK(wait_for_metrics(
      swarm.metrics,
      [&](const std::vector<std::string>& lines) {
        return std::count_if(lines.begin(), lines.end(),
                             [&](const auto& l) { return is_event(l, "step") && number(l, "t") > caught_at; }) >= 5;
      },
      90));
  stop(trainer);
  swarm.shutdown();
  const auto lines = read_lines(swarm.metrics);
  size_t strikes = 0, wrongly = 0, clips = 0, wrongly_clipped = 0;
  for (const auto& l : lines) {
    if (is_event(l, "verify_strike"))
      ++(names(l, noisy) ? strikes : wrongly);
    if (is_event(l, "clip_strike"))
      ++(names(l, flipper) ? clips : wrongly_clipped);
  }
  std::printf("lies: noise server %s: %zu strikes; flip server %s: %zu clip strikes; others: %zu, %zu\n", noisy.c_str(),
              strikes, flipper.c_str(), clips, wrongly, wrongly_clipped);
  CHECK(strikes >= 2);
  CHECK(wrongly == 0);
  CHECK(clips >= 3);
  CHECK(wrongly_clipped == 0);
  CHECK(count_naming(lines, "verify_ban", noisy) == 1);
  const auto verify = events(swarm.metrics, "verify");
  REQUIRE_FALSE(verify.empty());
  CHECK(number(verify.back(), "bans") == 1);
  CHECK(number(verify.back(), "requests") > 0);
  // Every line of a lying server names its lie.
  for (const auto& l : lines)
    if (l.find("\"role\": \"server\"") != std::string::npos && names(l, noisy) && is_event(l, "server_exit"))
      CHECK(l.find("\"fault\": \"noise\"") != std::string::npos);
}
