#pragma once
// The cluster launcher's chaos and its supervision of the coordinator, as pure
// decisions that apps/cluster.cpp carries out: which server to hit and how,
// which stage a wipe takes, whether a dead coordinator is started again.
// Randomness comes in as a generator the caller seeds (--chaos-seed), so one
// seed over the same servers picks the same victims.

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace swarm::policy {

enum class chaos_mode { none, kill, stop, mixed };

/// --chaos's words: none | kill | stop | mixed; nullopt for anything else.
[[nodiscard]] std::optional<chaos_mode> chaos_mode_of(const std::string& word);

/// A running server as chaos sees it.
struct chaos_target {
  int64_t id = 0;  ///< the caller's handle of it (a pid)
  int stage = 0;   ///< the stage it was started on
};

struct chaos_hit {
  int64_t id = 0;     ///< the target hit
  bool kill = false;  ///< SIGKILL, a fresh process later; else SIGSTOP, SIGCONT later
};

/// The server to hit: uniform over the targets of `stage` (any when -1), in
/// their given order; killed or stopped as `mode` says (mixed: a fair coin,
/// drawn after the victim). nullopt for mode none or when no target fits.
[[nodiscard]] std::optional<chaos_hit> choose_victim(const std::vector<chaos_target>& targets, int stage,
                                                     chaos_mode mode, std::mt19937_64& rng);

/// The stage a wipe kills every server of: `stage` when >= 0, else uniform over [0, stages).
[[nodiscard]] int choose_wipe_stage(int stage, int stages, std::mt19937_64& rng);

/// The coordinator's supervision: a death within `quick_s` of its start is
/// quick (a crash at start-up, a port not yet free); after `give_up_after`
/// quick deaths in a row the cluster stops. Deaths the cluster's own chaos
/// caused are never quick.
struct coordinator_supervision {
  double quick_s = 10;
  int give_up_after = 5;
  double quick_restart_delay_s = 1;  ///< wait this long before a start after a quick death; else at once
};

struct coordinator_verdict {
  int quick_deaths = 0;  ///< in a row, this death included
  bool give_up = false;
  double restart_in_s = 0;
};

/// What to do now that the coordinator died after running `alive_s` seconds,
/// `quick_deaths` quick deaths in a row before it; `by_chaos`: our own kill.
[[nodiscard]] coordinator_verdict after_coordinator_death(const coordinator_supervision& s, int quick_deaths,
                                                          double alive_s, bool by_chaos);

}  // namespace swarm::policy
