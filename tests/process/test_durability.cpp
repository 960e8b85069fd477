// Durability with real processes of the real binary: checkpoints and resume,
// a stage wiped out, the supervised coordinator.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/config.hpp"
#include "models/checkpoint.hpp"
#include "corrupt.hpp"
#include "process_util.hpp"
#include "durability_helpers.hpp"

using namespace swarm::test;
namespace fs = std::filesystem;
using namespace swarm::test::durability_helpers;

namespace {

/// Highest `params` step of each stage.
std::map<int, int64_t> last_steps(const std::string& metrics) {
  std::map<int, int64_t> out;
  for (const auto& l : events(metrics, "params")) {
    auto& s = out[static_cast<int>(number(l, "stage"))];
    s = std::max(s, static_cast<int64_t>(number(l, "step")));
  }
  return out;
}

std::vector<std::string> cluster_flags(const std::string& metrics, const std::string& dir, int steps) {
  return {"--role",
          "cluster",
          "--config",
          tiny,
          "--metrics",
          metrics,
          "--log-level",
          "warn",
          "--max-steps",
          std::to_string(steps),
          "--checkpoint-dir",
          dir,
          "--checkpoint-every",
          "10"};
}

/// config/tiny's learning rate (0.003) trains fast but, a step stale as most of
/// stage 0's samples are there, its loss spikes to 5-9 in most swarm runs of 120
/// steps (one process never does); at 0.001 none did in 6. The resume case checks
/// its loss where the first run stopped, so a spike there must not be possible.
constexpr const char* calm_lr = "0.001";

std::vector<std::string> calm_flags(const std::string& metrics, const std::string& dir, int steps) {
  auto flags = cluster_flags(metrics, dir, steps);
  flags.insert(flags.end(), {"--lr", calm_lr});
  return flags;
}

/// The file of the checkpoint of `step` in `folder`, as the store names it.
std::string checkpoint_file(const std::string& folder, int64_t step) {
  return folder + "/step-" + std::string(12 - std::to_string(step).size(), '0') + std::to_string(step) + ".ckpt";
}

/// After a clean stop at the steps `before` (stage -> step): each stage keeps
/// its last few checkpoints, the newest whole and at the step it stopped.
void check_stopped_checkpoints(const swarm::checkpoint_store& store, const std::map<int, int64_t>& before) {
  for (int stage : {0, 1}) {
    // The last few kept; a clean stop leaves the state as it stopped.
    int files = 0;
    for (const auto& e : fs::directory_iterator(store.folder(swarm::checkpoint_header::kind::stage, stage)))
      files += e.path().extension() == ".ckpt";
    CHECK(files <= 3);
    auto newest = store.newest(swarm::checkpoint_header::kind::stage, stage, 2, tiny_hash(calm_lr));
    REQUIRE(newest);
    REQUIRE(newest->has_value());
    CHECK((*newest)->skipped == 0);
    const auto latest = store.latest_written(swarm::checkpoint_header::kind::stage, stage);
    REQUIRE(latest);  // (dereferenced unchecked, an empty folder crashed the test instead of failing it)
    CHECK(latest->step == before.at(stage));
  }
}

/// The run resumed (metrics `m2`, `second` trainer steps) from the first one
/// (`m1`, stopped after `first` trainer steps at the stage steps `before`)
/// continued every stage from where it stopped and the trainer from its step count.
void check_resumed_where_stopped(const std::string& m1, const std::string& m2, int first, int second,
                                 const std::map<int, int64_t>& before) {
  std::map<int, int64_t> loaded;
  for (const auto& l : events(m2, "checkpoint_load")) {
    const int stage = static_cast<int>(number(l, "stage"));
    if (stage >= 0)
      loaded[stage] = static_cast<int64_t>(number(l, "step"));
    else
      CHECK(number(l, "step") == first);
  }
  REQUIRE(loaded.size() == 2);
  for (int stage : {0, 1}) {
    std::printf("stage %d: stopped at step %lld, resumed at step %lld\n", stage,
                static_cast<long long>(before.at(stage)), static_cast<long long>(loaded.at(stage)));
    CHECK(loaded.at(stage) == before.at(stage));
    CHECK(last_steps(m2).at(stage) > before.at(stage));
  }
  const auto steps = events(m2, "step");
  REQUIRE(!steps.empty());
  CHECK(number(steps.front(), "step") == first + 1);
  CHECK(number(events(m2, "trainer_exit").at(0), "steps") == second);
  // Continued from the very parameters it stopped with (the hash of a server that exited at that step).
  for (const auto& l : events(m2, "checkpoint_load")) {
    const int stage = static_cast<int>(number(l, "stage"));
    if (stage < 0)
      continue;
    std::set<std::string> exit_hashes;
    for (const auto& e : events(m1, "server_exit"))
      if (static_cast<int>(number(e, "stage")) == stage && number(e, "steps") == number(l, "step"))
        exit_hashes.insert(text(e, "hash"));
    INFO("stage " << stage << " loaded " << l);
    CHECK(exit_hashes.count(text(l, "hash")) == 1);
  }
}

/// Resumed from the parameters the first run (`m1`) stopped with, the second
/// (`m2`) starts with a loss near where the first one's was, not a fresh
/// model's ln 256.
void check_resumed_loss(const std::string& m1, const std::string& m2) {
  // How far the first run got is timing (its servers stepped 10-36 times in its 60 trainer steps), and its
  // last rounds (the stop hands gradients in: a short step) come after its last loss: at tiny's own
  // learning rate they twice landed on a spike (CI 2026-12-06: ended at 3.345 and 3.445, resumed
  // at best 3.782 and 8.364, with equal hashes), hence calm_lr. The best of the first 10 steps
  // must be closer to the end than to a fresh model.
  const auto ended = events(m1, "step");
  const auto steps = events(m2, "step");
  REQUIRE(ended.size() >= 5);
  REQUIRE(steps.size() >= 10);
  double end_loss = 0, resumed = std::numeric_limits<double>::infinity();
  for (size_t i = ended.size() - 5; i < ended.size(); ++i)
    end_loss += number(ended[i], "loss") / 5;
  for (size_t i = 0; i < 10; ++i)
    resumed = std::min(resumed, number(steps[i], "loss"));
  std::printf("loss: first run ended at %.3f, the resumed run's first steps %.3f at best (a fresh model: %.3f)\n",
              end_loss, resumed, std::log(256.0));
  CHECK(resumed < (end_loss + std::log(256.0)) / 2);
  if (end_loss < std::log(256.0) - 0.5)
    CHECK(resumed < std::log(256.0) - 0.5);
}

/// The newest checkpoint of each stage damaged: stage 0's (the one of its
/// last step in `metrics`) has a byte flipped, stage 1's is cut in half.
void damage_newest_checkpoints(const swarm::checkpoint_store& store, const std::string& metrics) {
  const auto newest0 =
      checkpoint_file(store.folder(swarm::checkpoint_header::kind::stage, 0), last_steps(metrics).at(0));
  REQUIRE(fs::exists(newest0));
  flip_byte(newest0, 5000);
  const auto files1 = store.latest_written(swarm::checkpoint_header::kind::stage, 1);
  REQUIRE(files1);
  const auto newest1 = checkpoint_file(store.folder(swarm::checkpoint_header::kind::stage, 1), files1->step);
  fs::resize_file(newest1, fs::file_size(newest1) / 2);
}

/// The run (`m3`) after the newest files of the run before it (`m2`) were
/// damaged: both stages loaded the ones before them, every load skipping its
/// stage's one bad file, and trained on without dropping anything.
void check_damaged_skipped(const std::string& m2, const std::string& m3) {
  // Both servers of a stage may start before either has registered, so each loads: every load skipped
  // exactly its stage's one bad file.
  std::set<int> reloaded;
  for (const auto& l : events(m3, "checkpoint_load"))
    if (number(l, "stage") >= 0) {
      const int stage = static_cast<int>(number(l, "stage"));
      reloaded.insert(stage);
      CHECK(number(l, "skipped") == 1);
      CHECK(number(l, "step") < last_steps(m2).at(stage));
    }
  CHECK(reloaded == std::set<int>{0, 1});
  // Which (stage, step) and whose hashes, should they differ (seen once in a
  // fresh clone's CI at 02ff3c2, not again in 10 runs of this case).
  for (const auto& [stage, step] : params_disagreements(m3))
    for (const auto& [server, hash] : params_by_step(m3).at({stage, step}))
      UNSCOPED_INFO("stage " << stage << " step " << step << ": " << server << " " << hash);
  CHECK(params_disagreements(m3).empty());
  // Its 10 steps end before the averager's settle time (3 s from its start, no
  // round before): the stop's rounds start when it is over, within the servers'
  // wait to hand their gradients in, and nothing is dropped.
  const auto hand_ins = events(m3, "stop_hand_in");
  CHECK(hand_ins.size() == 4);
  for (const auto& h : hand_ins) {
    INFO(h);
    CHECK(h.find("\"handed_in\": true") != std::string::npos);
  }
  for (const auto& e : events(m3, "server_exit"))
    CHECK(number(e, "dropped_samples") == 0);
}

}  // namespace

TEST_CASE("a swarm stopped and started again on its checkpoint folder resumes every stage and the trainer",
          "[durability]") {
  const auto dir = fresh_dir("ckpt");
  const auto m1 = dir + "-1.jsonl", m2 = dir + "-2.jsonl", m3 = dir + "-3.jsonl";
  for (const auto& f : {m1, m2, m3})
    std::remove(f.c_str());
  // Trainer steps of the first run, of the run resumed from it, and of the one after.
  const int first = 60, second = 110, third = 120;
  REQUIRE(run_swarm(calm_flags(m1, dir, first), 120) == 0);
  const auto before = last_steps(m1);
  REQUIRE(before.size() == 2);
  CHECK(events(m1, "checkpoint").size() >= 4);
  CHECK(partial_files(dir) == 0);
  swarm::checkpoint_store store{dir, 3};
  check_stopped_checkpoints(store, before);

  // Started again: every stage continues from where it stopped, the trainer
  // from its step count, and the loss from where it was, not from ln 256.
  REQUIRE(run_swarm(calm_flags(m2, dir, second), 120) == 0);
  check_resumed_where_stopped(m1, m2, first, second, before);
  check_resumed_loss(m1, m2);
  CHECK(params_disagreements(m2).empty());

  // Another model on the same folder: exit 2 with the reason, before joining anything.
  auto [code, out] = run_swarm_output({"--role", "server", "--config", tiny, "--d-model", "32", "--coordinator",
                                       "127.0.0.1:1", "--stage", "0", "--checkpoint-dir", dir},
                                      30);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("was written by a model of config hash"));

  // The newest files torn and corrupted: skipped with a message, the ones before them loaded.
  damage_newest_checkpoints(store, m2);
  auto [code3, out3] = run_swarm_output(calm_flags(m3, dir, third), 120);
  CHECK(code3 == 0);
  CHECK_THAT(out3, Catch::Contains("skipping checkpoint"));
  check_damaged_skipped(m2, m3);
  if (std::getenv("SWARM_TEST_KEEP") != nullptr)  // kept for a post-mortem of a failed run
    return;
  fs::remove_all(dir);
  for (const auto& f : {m1, m2, m3})
    std::remove(f.c_str());
}

TEST_CASE("--role local resumed from its checkpoint trains exactly as one uninterrupted run", "[durability]") {
  const auto dir = fresh_dir("local");
  auto losses = [](const std::string& output) {
    std::vector<std::string> out;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("local step ", 0) == 0)
        out.push_back(line.substr(0, line.find(" tokens/s")));  // "local step N loss X"
    return out;
  };
  const std::vector<std::string> base{"--role", "local", "--config", tiny, "--threads", "1"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  auto [code_whole, whole] = run_swarm_output(with({"--max-steps", "20"}), 120);
  auto [code_first, first] =
      run_swarm_output(with({"--max-steps", "10", "--checkpoint-dir", dir, "--checkpoint-every", "4"}), 120);
  auto [code_rest, rest] = run_swarm_output(with({"--max-steps", "20", "--checkpoint-dir", dir}), 120);
  REQUIRE(code_whole == 0);
  REQUIRE(code_first == 0);
  REQUIRE(code_rest == 0);
  CHECK_THAT(rest, Catch::Contains("resumed from") && Catch::Contains("at step 10, data sampler where it was"));
  auto joined = losses(first);
  const auto resumed = losses(rest);
  joined.insert(joined.end(), resumed.begin(), resumed.end());
  REQUIRE(losses(whole).size() == 20);
  CHECK(joined == losses(whole));
  // A swarm's folder (2 stages) is another cut: refused with exit 2.
  fs::create_directories(dir + "/swarm");
  swarm::checkpoint_store store{dir + "/swarm", 3};
  REQUIRE(store.write({swarm::checkpoint_header::kind::stage, 0, 2, tiny_hash(), 5}, "state"));
  auto [code_other, other] = run_swarm_output(with({"--max-steps", "1", "--checkpoint-dir", dir + "/swarm"}), 60);
  CHECK(code_other == 2);
  CHECK_THAT(other, Catch::Contains("cut into 2 stages"));
  fs::remove_all(dir);
}

TEST_CASE("a stage wiped out at once resumes from its newest checkpoint, losing at most one interval", "[durability]") {
  const auto dir = fresh_dir("wipe");
  const auto metrics = dir + ".jsonl";
  std::remove(metrics.c_str());
  // Trains until stage 1 came back from its checkpoint and the trainer took 20
  // steps more, then the cluster is stopped.
  auto flags = cluster_flags(metrics, dir, 0);
  flags.insert(flags.end(), {"--chaos-wipe-at", "8", "--chaos-stage", "1", "--chaos-down", "2"});
  const auto [resumed, code] = stop_when(
      spawn_swarm(flags), metrics,
      [](const auto& lines) {
        for (const auto& l : lines)
          if (is_event(l, "checkpoint_load") && number(l, "stage") == 1)
            return steps_after(lines, number(l, "t")) >= 20;
        return false;
      },
      120);
  REQUIRE(code == 0);
  REQUIRE(resumed);
  const auto lost = events(metrics, "stage_lost");  // the wipe; the clean stop at the end writes none
  REQUIRE(lost.size() == 1);
  CHECK(number(lost[0], "stage") == 1);
  const double lost_at = number(lost[0], "t");
  const auto lost_step = static_cast<int64_t>(number(lost[0], "step"));
  std::vector<int64_t> loads;
  for (const auto& l : events(metrics, "checkpoint_load"))
    if (number(l, "stage") == 1 && number(l, "t") > lost_at)
      loads.push_back(static_cast<int64_t>(number(l, "step")));
  REQUIRE(!loads.empty());
  std::printf("stage 1 lost at step %lld, loaded the checkpoint of step %lld\n", static_cast<long long>(lost_step),
              static_cast<long long>(loads.front()));
  CHECK(loads.front() > 0);
  CHECK(lost_step - loads.front() <= 10);
  CHECK(loads.front() <= lost_step);
  fs::remove_all(dir);
  std::remove(metrics.c_str());
}

TEST_CASE("the cluster restarts a killed coordinator on its port and training goes on", "[durability]") {
  const auto metrics = fresh_dir("coordinator") + ".jsonl";
  std::remove(metrics.c_str());
  // 3 servers a stage: two that joined by copying the first never dialed each
  // other, and CAF's route between them went through the coordinator (they
  // now dial each other at every round; before, no round ever ended again).
  const pid_t cluster =
      spawn_swarm({"--role", "cluster", "--config", tiny, "--metrics", metrics, "--log-level", "warn",
                   "--servers-per-stage", "3", "--max-steps", "0", "--chaos-coordinator-every", "10"});
  std::vector<double> kills;
  const auto coordinator_kills = [&] {
    kills.clear();
    for (const auto& l : events(metrics, "chaos"))
      if (text(l, "process") == "coordinator")
        kills.push_back(number(l, "t"));
    return kills;
  };
  // Two kills, and both stages applying rounds again after the second: then
  // the cluster is stopped (its trainer lets its microbatches finish).
  const auto [recovered_twice, code] = stop_when(
      cluster, metrics,
      [&](const auto& lines) {
        if (coordinator_kills().size() < 2)
          return false;
        std::set<int> stepped;
        for (const auto& l : lines)
          if (is_event(l, "round_end") && number(l, "t") > kills[1] && number(l, "applied") > 0)
            stepped.insert(static_cast<int>(number(l, "stage")));
        return stepped.size() == 2;
      },
      120);
  REQUIRE(code == 0);
  REQUIRE(recovered_twice);
  coordinator_kills();
  REQUIRE(kills.size() >= 2);
  CHECK(events(metrics, "process_start").size() >= kills.size() - 1);
  const double end = number(events(metrics, "trainer_exit").at(0), "t");
  for (size_t k = 0; k < kills.size(); ++k) {
    const double until = k + 1 < kills.size() ? kills[k + 1] : end;
    if (k >= 2)
      continue;  // a third kill the stop came too late to see through
    // The new coordinator hears from both stages' servers, and both run rounds again before the next kill.
    std::set<int> joined;
    std::map<int, double> first_round;
    for (const auto& l : events(metrics, "server_join"))
      if (number(l, "t") > kills[k])
        joined.insert(static_cast<int>(number(l, "stage")));
    for (const auto& l : events(metrics, "round_end"))
      if (number(l, "t") > kills[k] && number(l, "t") < until && number(l, "applied") > 0)
        first_round.emplace(static_cast<int>(number(l, "stage")), number(l, "t") - kills[k]);
    std::printf("coordinator killed at %.1f s: first applied round of stage 0 %.2f s later, of stage 1 %.2f s later\n",
                kills[k] - kills[0], first_round.count(0) ? first_round[0] : -1.0,
                first_round.count(1) ? first_round[1] : -1.0);
    CHECK(joined.size() == 2);
    CHECK(first_round.size() == 2);
  }
  CHECK(number(events(metrics, "trainer_exit").at(0), "steps") > 100);  // it trained on through both kills
  std::remove(metrics.c_str());
}
