#pragma once
// SWARM's stochastic wiring: how a trainer picks one server of a pipeline stage
// for each microbatch (SWARM.md, mechanisms 2 and 4).
//
// Interleaved weighted round-robin over virtual finish times: every peer has a
// virtual time; choose() takes the eligible peer with the smallest and adds
// cost / throughput to it, so over time each peer gets work in proportion to
// its measured throughput, interleaved rather than in bursts. Throughput is a
// bias-corrected EMA of the server's own compute time per request when its
// reply says it, else of whole requests (network + queue + compute). Whole
// requests include the queue, so a server was measured slow because it was
// busy and then starved while its queue drained (swarm-sim's 240-peer
// pipeline: 77.8% of the best assignment on whole requests, 83.4% on compute).
// An unmeasured server holds at most `probe_requests` of a router's requests
// at once while a measured one is eligible.
//
// Faults: a timeout never bans (the network may be at fault), but the peer is
// charged the time it held the request, so a hung peer that still answers
// heartbeats gets probed about once per deadline instead of taking a share of
// every batch; an error or a peer going down bans it with exponential backoff
// until the ban expires or the peer re-registers.
//
// Pure: no CAF, no sockets, no clock, no global RNG. `now` is seconds on any
// monotonic clock the caller likes; randomness comes in as an engine, so tests
// are exact and need no sleeps. Not thread-safe: one router per stage per
// trainer, used from that trainer's actor.

#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace swarm::policy {

/// Bias-corrected exponential moving average of a rate in samples per second.
class throughput_ema {
public:
  /// alpha: weight of the newest sample; 0.1 follows the SWARM prototype.
  explicit throughput_ema(double alpha = 0.1) : alpha_(alpha) {}

  /// Folds in one request that moved `samples` in `seconds`; ignores requests
  /// that carry no usable rate (non-positive or non-finite), keeping the state.
  void update(double samples, double seconds);

  /// Samples per second; nullopt before the first valid update. Started at 0
  /// and divided by 1 - (1 - alpha)^n (as in Adam), so one sample is exact
  /// instead of being pulled towards 0.
  [[nodiscard]] std::optional<double> estimate() const;

  /// Number of valid updates folded in so far.
  [[nodiscard]] int64_t updates() const { return updates_; }

private:
  double alpha_;
  double estimate_ = 0.0;    // bias-corrected EMA, samples per second
  double weight_sum_ = 0.0;  // 1 - (1 - alpha)^updates_: the bias correction
  int64_t updates_ = 0;
};

/// Knobs of the stage router; one field per line with its unit.
struct routing_config {
  /// Weight of the newest request in the throughput EMA (dimensionless, 0..1].
  double alpha = 0.1;
  /// A backward counts as this many forwards (dimensionless): the server
  /// recomputes the forward before it can run the backward (SWARM: ~2.5x).
  double backward_cost = 2.5;
  /// Length of the first ban after an error, in seconds; each further
  /// consecutive ban doubles it.
  double ban_base_s = 1.0;
  /// Longest ban, in seconds, so a peer that recovers is retried within a minute.
  double ban_max_s = 60.0;
  /// Requests an unmeasured server holds at once from this router while a
  /// measured one is eligible (0: no cap): its first requests are a probe.
  /// Without it a server that joined a stage whose requests were all being
  /// re-sent took them all (swarm-sim: 563 at once, which timed out).
  int64_t probe_requests = 1;
};

/// Picks servers of one pipeline stage for one trainer (interleaved weighted
/// round-robin over virtual finish times, with bans and backoff).
class stage_router {
public:
  explicit stage_router(routing_config cfg = {}) : cfg_(cfg) {}
  // The indexes point into peers_: a copy points them at its own peers.
  stage_router(const stage_router& other);
  stage_router& operator=(const stage_router& other);
  stage_router(stage_router&&) = default;
  stage_router& operator=(stage_router&&) = default;

  /// A server joined or re-announced itself. New: it enters at the current
  /// minimum virtual time so it is probed soon, or with `rng` at a uniformly
  /// random point of one task's advance past it (twice the median peer's
  /// distance from the minimum), so that the many trainers adding it at once
  /// do not all send it their next request.
  /// Known: its ban and ban count are cleared and its virtual time is lifted
  /// to that entry point; its EMA stays.
  void add(const std::string& id, double now, std::mt19937_64* rng = nullptr);

  /// Forgets a server entirely (gone for good); unknown ids are ignored.
  void remove(const std::string& id);

  /// The server for the next task of `task_size` samples; nullopt when no
  /// server is eligible (present, not banned at `now`, not in `exclude`).
  /// Equal virtual times are broken uniformly at random with `rng`.
  [[nodiscard]] std::optional<std::string> choose(double task_size, bool backward, double now, std::mt19937_64& rng,
                                                  const std::vector<std::string>& exclude = {});

  /// The same as choose() with every server but `id` excluded, in O(1) rather
  /// than a scan per excluded server: `id` when it is known and not banned at
  /// `now` (charged like any choice), else nullopt. A backward goes back to its
  /// forward's server this way (load balancer, swarm-sim's thousands of servers).
  [[nodiscard]] std::optional<std::string> choose_only(const std::string& id, double task_size, bool backward,
                                                       double now);

  /// A backward's server. Backward is stateless (SWARM.md, mechanism 3) and
  /// a stage's replicas hold the same parameters between rounds, so it is
  /// routed as any task; its forward's server (`preferred`: its activation
  /// cache may hold the forward) is taken when it is among the next in the
  /// rotation (at the smallest virtual time), as choose_only() would. Pinned
  /// to their forward's server, backwards (75% of a stage's work) arrived
  /// where forwards had gone hundreds of seconds before, whatever the stage
  /// looked like by then: a stage left with one server took every forward,
  /// and their backwards piled up on it after others joined (swarm-sim,
  /// 191 queued at one server while the stage's others idled). Free, the
  /// 240-peer pipeline went from 83% to 89% of the best assignment; against
  /// pinned backwards charged to their forward up front, three seeds of the
  /// g4dn trace from 71% to 77% and of 1,000 peers under churn from 73% to 77%.
  [[nodiscard]] std::optional<std::string> choose_backward(const std::string& preferred, double task_size, double now,
                                                           std::mt19937_64& rng,
                                                           const std::vector<std::string>& exclude = {});

  /// A request chosen by this router is over, whatever its outcome (answered,
  /// timed out, failed, re-sent): it no longer counts against its server's
  /// probe. Unknown ids are ignored.
  void release(const std::string& id);

  /// Requests chosen for `id` and not released yet (0 when unknown).
  [[nodiscard]] int64_t in_flight(const std::string& id) const;

  /// A task of `task_size` samples to `id` finished (`backward` as chosen):
  /// `seconds` end to end, of which its server says it computed
  /// `served_seconds` (0: it did not say). Feeds the EMA, in forward samples
  /// (a backward counts backward_cost of them) per second of the server's own
  /// time when known, else of the whole request; ends the peer's run of bans.
  /// Forwards and backwards measured alike: a mix of both in the EMA otherwise
  /// made a peer's rate swing by the backward's cost with the order they came.
  void on_success(const std::string& id, double task_size, bool backward, double seconds, double served_seconds = 0);

  /// A task of `task_size` samples to `id` ran past its deadline after
  /// `seconds`. Never banned (a timeout may be the network's fault; the caller
  /// retries elsewhere), but its virtual time is charged `seconds` and the EMA
  /// gets the rate the caller got at best (forward samples / seconds).
  void on_timeout(const std::string& id, double task_size, bool backward, double seconds);

  /// Number of timeouts seen from `id` (0 when unknown).
  [[nodiscard]] int64_t timeouts(const std::string& id) const;

  /// An error or down event from `id`: banned until now + backoff. Returns the
  /// ban length in seconds (0 for an unknown id, which is not banned).
  double ban(const std::string& id, double now);

  /// Whether `id` is banned at `now` (false for unknown ids).
  [[nodiscard]] bool banned(const std::string& id, double now) const;

  /// Measured throughput of `id` in samples per second; nullopt when unknown
  /// or never measured.
  [[nodiscard]] std::optional<double> ema(const std::string& id) const;

  /// Number of known servers, banned ones included.
  [[nodiscard]] size_t size() const { return peers_.size(); }

  /// Number of servers not banned at `now`.
  [[nodiscard]] size_t eligible(double now) const;

  /// Whether `id` is known (banned or not).
  [[nodiscard]] bool contains(const std::string& id) const { return find(id) != nullptr; }

private:
  struct peer {
    std::string id;
    uint64_t seq = 0;    // order of arrival: ties are broken in it
    double vtime = 0.0;  // virtual finish time, in seconds of that peer's work
    throughput_ema rate;
    double banned_until = 0.0;  // seconds on the caller's clock; banned while now < this
    bool returning = false;     // banned since last chosen: lift vtime when eligible again
    int ban_count = 0;          // consecutive bans without a success in between
    int64_t timeouts = 0;
    int64_t in_flight = 0;  // this router's requests at it not yet released
  };
  /// A task's size in forward samples: a backward counts backward_cost of them
  /// (what choices charge and what rates are measured in); never negative.
  [[nodiscard]] double forward_samples(double task_size, bool backward) const;
  /// Whether `p` is an unmeasured peer holding its probe's worth of requests.
  [[nodiscard]] bool capped(const peer& p) const;

  [[nodiscard]] const peer* find(const std::string& id) const;
  [[nodiscard]] peer* find(const std::string& id);
  [[nodiscard]] peer& at(uint64_t seq) { return *by_seq_.at(seq); }
  [[nodiscard]] bool is_banned(const peer& p, double now) const { return now < p.banned_until; }
  /// Smallest virtual time of peers in steady service at `now` (eligible, not
  /// just back from a ban, not in `exclude`, not `skip`); nullopt when none.
  [[nodiscard]] std::optional<double> floor(double now, const std::vector<std::string>& exclude,
                                            const peer* skip) const;
  /// choose() without the probe cap.
  [[nodiscard]] std::optional<std::string> pick_one(double task_size, bool backward, double now, std::mt19937_64& rng,
                                                    const std::vector<std::string>& exclude);
  /// Updates capped_ after p's in-flight count or measurement changed.
  void recap(peer& p);
  /// Samples per second used to advance `p`: its EMA, or the mean of measured
  /// peers while it has none (1 sample/s when nobody is measured).
  [[nodiscard]] double speed(const peer& p) const;
  /// Takes p out of the index it is in (steady_ or returning_).
  void unindex(const peer& p);
  /// Changes p's virtual time and whether it is returning, keeping the indexes.
  void place(peer& p, double vtime, bool returning);
  /// Folds a request into p's EMA, keeping the sum of measured rates.
  void measure(peer& p, double samples, double seconds);

  routing_config cfg_;
  // Thousands of servers per stage in swarm-sim: every operation is O(log n)
  // (ties and bans aside) instead of a scan of the stage.
  // Looked up by id on every call: one hash, and nodes stay put for the pointers below.
  std::unordered_map<std::string, peer> peers_;  // by id
  std::unordered_map<uint64_t, peer*> by_seq_;   // seq -> its peer
  // (vtime, seq) of peers not returning, with ranks: the ties of a fresh stage
  // (hundreds of unmeasured servers at one virtual time, for minutes when
  // each trainer uses each server rarely) are counted and drawn from in
  // O(log n) instead of walked.
  using ranked = __gnu_pbds::tree<std::pair<double, uint64_t>, peer*, std::less<std::pair<double, uint64_t>>,
                                  __gnu_pbds::rb_tree_tag, __gnu_pbds::tree_order_statistics_node_update>;
  ranked steady_;
  std::set<uint64_t> returning_;  // seqs of returning peers
  uint64_t next_seq_ = 0;
  std::set<uint64_t> capped_;  // seqs of peers capped() now
  double rate_sum_ = 0.0;      // sum of the measured peers' EMAs (for speed())
  int64_t rated_ = 0;          // number of measured peers
};

/// Static routing, the GPipe-style baseline of SWARM's comparison: one pinned
/// server per stage for one trainer. When the pin goes (down, or leaving the
/// stage), the servers there at that moment are retired for good (a static
/// pipeline is not rewired to them) and the stage waits for one that joins
/// later. Pure, as stage_router; used by the load balancer and by swarm-sim.
class static_pin {
public:
  /// The pinned server; empty when none is.
  [[nodiscard]] const std::string& pinned() const { return pinned_; }

  /// Without a pin: pins one of `candidates` (the stage's live servers, any
  /// order) that is not retired, uniformly with `rng` over their sorted ids.
  /// Returns the pin, or nullopt when every candidate is retired or none is.
  std::optional<std::string> pin(std::vector<std::string> candidates, std::mt19937_64& rng);

  /// `id` is gone. If it was the pin, it and `present` (the servers still
  /// there) are retired and the pin is cleared. Returns whether it was the pin.
  bool gone(const std::string& id, const std::vector<std::string>& present);

private:
  std::string pinned_;
  std::set<std::string> retired_;
};

}  // namespace swarm::policy
