#pragma once
// Where the missing throughput goes (docs/simulator.md, "The gap"): every
// second of every live peer, weighted by its speed (the yardstick's
// speed / slowdown, so a second is worth the core-seconds of model it could
// compute), is booked to exactly one place, and each request's compute to
// exactly one fate. With C the core-seconds one sample costs across all
// stages, K the peers' core-seconds in the window and N the samples completed
// in it:
//   best x time - N = (K - N C) / C - (fluid bound - best) x time
// and K - N C is the sum of the parts below (busy time turned into samples
// that completed cancels N C). The parts are booked as things happen; the gap
// comes from the samples and the coordinator's per-second optimum, so the sum
// agreeing with the gap is a check, not an identity.
//
// Single-threaded like the rest of the simulator: SimGrid's actors run in
// one thread. O(1) per event (10,000 peers): idle time is booked per stage
// from running sums, not per peer.

#include <cstdint>
#include <string>
#include <vector>

namespace swarm::sim {

struct peer;

/// What a live peer's machine is doing.
enum class phase { off, starting, copying, idle, busy };

/// A trainer's worker: the compute its current attempt and microbatch got, in
/// core-seconds inside the window (`in`) and before it (`pre`).
struct work_books {
  uint64_t attempt = 0;  ///< the attempt it waits on; 0 between attempts
  double attempt_in = 0, attempt_pre = 0;
  double microbatch_in = 0, microbatch_pre = 0;
};

/// How an attempt ended, for its compute's fate.
enum class attempt_end { accepted, timed_out, down, leaving };

class ledger {
public:
  /// The window the summary measures: [from, to] in simulated seconds.
  void open(double from, double to, int stages);

  /// `p` enters `ph` at `now` (on its current stage for idle).
  void set_phase(peer& p, phase ph, double now);
  /// `p` starts (+1) or ends (-1) an averaging round's flows.
  void round(peer& p, int delta, double now);
  /// A request joined (+1) or left (-1) a queue of a server of `stage`.
  void queued(int stage, int delta, double now);

  /// A server finished computing a request it took at `t0` (busy phase):
  /// the compute goes to its attempt when `books` still waits on `attempt`,
  /// else nobody wants it (its trainer gave up: overshoot).
  void computed(const peer& p, double t0, double now, work_books* books, uint64_t attempt);
  /// A server finished a verification's second opinion it took at `t0`
  /// (issue #47): verification's compute, used by no microbatch.
  void verified(const peer& p, double t0, double now);
  /// A worker's attempt ended.
  void attempt_over(work_books& b, attempt_end how);
  /// A worker's microbatch completed (true) or was dropped (false) at `now`.
  void microbatch_over(work_books& b, bool completed, double now);

  struct part {
    std::string key, label;
    double points;  ///< share points of the best assignment's throughput
  };
  struct report {
    double gap_points = 0, sum_points = 0;
    std::vector<part> parts;
  };
  /// Closes every peer's phase at the window's end and turns the books into
  /// points of `best_samples` (the best assignment's samples in the window):
  /// `completed` samples were completed, `fluid_samples` is the fluid bound's,
  /// `per_sample` the core-seconds of one sample across all stages.
  report close(std::vector<peer>& peers, const std::vector<const work_books*>& workers, double completed,
               double best_samples, double fluid_samples, double per_sample, double now);

private:
  struct stage_books {
    double idle_speed = 0;   ///< sum of the speeds of its idle servers not in a round
    double round_speed = 0;  ///< ... of those in a round
    int64_t queue = 0;       ///< requests waiting at its servers
    double since = 0;
  };
  [[nodiscard]] double clip(double a, double b) const;
  void touch(int stage, double now);
  void idle_sums(const peer& p, double sign);

  double from_ = 0, to_ = 0;
  std::vector<stage_books> stages_;
  // Core-seconds inside the window, by where they went.
  double starting_ = 0, copying_ = 0, busy_ = 0, killed_computing_ = 0;
  double idle_starved_ = 0, idle_queued_ = 0, idle_round_ = 0;
  // Busy core-seconds by fate.
  double useful_ = 0, useful_pre_ = 0, dropped_ = 0, overshoot_ = 0, lost_down_ = 0, verification_ = 0;
};

}  // namespace swarm::sim
