#pragma once
// When the averaging coordinator starts a round, and with whom (SWARM section 5):
// pure, over the servers' last reports, so it is tested without actors or clocks.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace swarm::policy {

/// What the averager last heard from one server of a stage.
struct member_view {
  std::string id;
  bool reported = false;  ///< sent at least one progress report or round result
  uint64_t step = 0;      ///< optimizer steps it has applied
  uint64_t samples = 0;   ///< samples accumulated towards the next step
  uint64_t hash = 0;      ///< its parameter hash at `step`
  bool leaving = false;   ///< stopped on purpose, waiting for a round to hand its gradient in
  /// Told to reload the stage's current state a moment ago (at most
  /// catch_up_wait_s): a member again, with the gradient it keeps, once it has.
  bool catching_up = false;
};

/// How long a round waits for a server catching up (member_view::catching_up).
/// A stage that stepped without it left it a step behind again, its kept
/// gradient two steps stale and dropped at the next reload: a tiny stage steps
/// every 0.1 s and a reload takes 0.03-0.06 s (2026-12-06).
constexpr double catch_up_wait_s = 2.0;

/// The stage's position: the step its servers should be at, and the parameter
/// hash they must have there (the majority of the last round's results, or of
/// the servers' reports before a first round: see majority, reported_position).
struct stage_position {
  uint64_t step = 0;
  uint64_t hash = 0;
};

/// A round's clock, in multiples of averaging-timeout T, so that no round
/// outlives T: members not done at `report` say whom they wait for; at
/// `exclude` the averager excludes the members that did not (hung; the others
/// then cover their shards); at `end` every member gives up and the round ends
/// whatever happened (no step, so nobody differs). Before, a hung member was
/// excluded at 1.5 T and rounds ended by 3 T: a chaos run had one last 55 s
/// with T = 30, its stage applying nothing meanwhile.
struct round_clock {
  static constexpr double report = 0.5;
  static constexpr double exclude = 0.75;
  static constexpr double end = 1.0;
};

struct round_plan {
  bool start = false;           ///< eligible servers hold the target batch, or one leaving holds gradient
  std::vector<size_t> members;  ///< eligible servers, indices into the input, in rank order (by id)
  std::vector<size_t> stale;    ///< reported servers behind the stage or with other parameters: reload them
  uint64_t samples = 0;         ///< samples the eligible servers hold together
};

/// Eligible: reported, at the stage's step, with its hash, and not leaving
/// empty-handed (it exits at once). Start when their
/// samples reach `target_batch_size` (> 0), or when an eligible one that is
/// leaving holds samples (it exits after this round); not while a server is
/// catching up, unless one leaving must hand its gradient in.
[[nodiscard]] round_plan plan_round(const std::vector<member_view>& servers, const stage_position& stage,
                                    int64_t target_batch_size);

/// Among the results (step, hash) of one round that started at `round_step`,
/// the reference the stage moves to: the most common pair at round_step + 1,
/// the one step a round applies (any other step is a claim no round made);
/// ties go to the earliest in the list (rank order). nullopt when none is at
/// that step.
[[nodiscard]] std::optional<stage_position> majority(const std::vector<stage_position>& results, uint64_t round_step);

/// Indices of the results that differ from `agreed` when a strict majority of
/// them has it (otherwise nobody can be told wrong: empty).
[[nodiscard]] std::vector<size_t> dissenters(const std::vector<stage_position>& results, const stage_position& agreed);

/// A member whose round result differs from a strict majority this many rounds
/// in a row is evicted: one can be a fault caught mid-step, twice is a pattern.
constexpr int evict_after_dissents = 2;

/// A member that a strict majority of its round's other members named an
/// outlier (centered-clip, issue #47: policy::outlier_ratio) in
/// evict_after_outliers of its stage's last outlier_window rounds is evicted:
/// one round can be an unlucky microbatch, three in ten are a pattern.
constexpr int evict_after_outliers = 3;
constexpr uint64_t outlier_window = 10;

/// Where a stage stands before this averager ran a round of it (it started, or
/// took over from a leader, or the stage's state was lost): the (step, hash)
/// most servers report at or past `known` (a predecessor's record, else
/// {0, 0}); ties go to the higher step; `known` when nobody reported there.
/// One server claiming a step far ahead does not carry the stage.
[[nodiscard]] stage_position reported_position(const std::vector<member_view>& servers, const stage_position& known);

/// Whether the stage's state at `position` survives among its live servers:
/// one is at the position, has not reported yet, or is `awaited` (a member of
/// the running round that has not answered: its result is still to come). A
/// server of the stage at another step (one that came with nobody to copy from)
/// does not count. `awaited` is parallel to `live`.
[[nodiscard]] bool state_held(const std::vector<member_view>& live, const std::vector<bool>& awaited,
                              const stage_position& position);

}  // namespace swarm::policy
