#pragma once
// Whether a stage has stopped learning. Every stage takes optimizer steps as
// the same samples pass through it, so between two steps of a healthy stage
// each other stage takes a step or two. A stage whose rounds no longer
// complete (a member nobody can reach, a lost coordinator) stops stepping
// while the others go on: training "succeeds" with its weights frozen.
//
// The watch remembers, for each stage, every stage's step when that stage
// last moved (or, for a stage heard of later, when it was first heard of); it
// is stalled when another stage has since gained more than `allowed` steps. Absolute step counts are no measure: rounds
// close at or past the target batch, so stages drift apart by a few percent in a healthy run, and one that reloaded an
// older checkpoint trains on with an offset. Steps a stage takes while still behind the one standing still do not
// count: one catching up after its own rounds were held up is no sign that the stage ahead stopped (a stall behind such
// an offset is reported once it is passed).
//
// Pure: fed with (stage, step) observations (a trainer: its replies'
// server_step; the status board: the servers' reports), no clock.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace swarm {

/// Steps another stage may take while one stands still before it counts as
/// stalled: between two steps of a healthy stage the others take one or two.
/// The trainer's warning and the status board's mark both use it.
constexpr int64_t stage_lag_allowed = 5;

struct stage_lag {
  int stage = 0;       ///< the stalled stage
  int64_t step = 0;    ///< where it stays
  int leader = 0;      ///< the stage that gained the most since it last moved
  int64_t gained = 0;  ///< that stage's steps since then
};

class stage_watch {
public:
  explicit stage_watch(int stages);

  /// A stage's step as last heard (a stage past the count so far adds it).
  void observe(int stage, int64_t step);

  /// The most steps another stage took since `stage` last moved (0 when
  /// none, or `stage` was not heard from), and that stage.
  [[nodiscard]] std::pair<int64_t, int> gained_on(int stage) const;

  /// The stage the others gained most on since it last moved, when by more
  /// than `allowed` steps.
  [[nodiscard]] std::optional<stage_lag> stalled(int64_t allowed) const;

  [[nodiscard]] const std::vector<int64_t>& steps() const { return steps_; }

  /// "64/119": the steps in stage order ("?" for a stage not heard from).
  [[nodiscard]] std::string steps_text() const;

private:
  std::vector<int64_t> steps_;
  std::vector<std::vector<int64_t>> at_move_;  ///< at_move_[s]: every stage's step when s last moved
};

/// Whether a stall by `gained` steps is worth a warning after one at `last_warned`
/// (0: none since the stage last moved): past `allowed`, then each `allowed` more.
[[nodiscard]] bool warn_about_lag(int64_t gained, int64_t last_warned, int64_t allowed);

}  // namespace swarm
