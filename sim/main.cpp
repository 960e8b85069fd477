// swarm-sim: the swarm simulated with SimGrid, running swarm's own policies
// (policy/*) over peers, trainers and a coordinator on a generated
// platform. See docs/simulator.md.
//   swarm-sim --config config/sim-small --duration 300
//   swarm-sim --peers 1000 --stages 16 --churn trace --trace ../shared/data/traces/g4dn-trace.csv
#include <simgrid/s4u.hpp>
#include <malloc.h>
#include <sys/resource.h>
#include <xbt/log.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "sim/scenario.hpp"
#include "sim/trace.hpp"
#include "sim/world.hpp"

#ifndef SWARM_SOURCE_DIR
#define SWARM_SOURCE_DIR "."
#endif

using namespace swarm;
using namespace swarm::sim;

namespace {

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

/// Initial servers: --stage-servers counts, else every peer round-robin; with a
/// trace only the machines its first lifetimes start at 0 (the churn actor
/// brings the rest). Placed ones need no state copy: the swarm starts fresh.
void start_initial(world& w) {
  const auto& c = w.cfg;
  if (c.churn == "trace")
    return;  // churn_main brings up every machine when its trace says
  std::vector<int> stage_of(w.peers.size(), -1);
  if (!c.cluster.stage_servers.empty()) {
    const auto counts = *number_list(c.cluster.stage_servers);
    size_t next = 0;
    for (int s = 0; s < c.stages; ++s)
      for (int k = 0; k < static_cast<int>(counts[static_cast<size_t>(s)]); ++k)
        stage_of[next++] = s;
  } else {
    for (size_t i = 0; i < w.peers.size(); ++i)
      stage_of[i] = static_cast<int>(i) % c.stages;
  }
  // Replaying a real run: its servers start in the order, and as far apart, as
  // they joined there (they came up 0.5-3 s apart; with static routing the
  // first of a stage is the trainer's only choice, so which one is pinned
  // follows). "server S.I" is the I-th peer of stage S; unrecorded ones start at 0.
  std::map<std::pair<int, int>, double> joined;
  double first = std::numeric_limits<double>::infinity();
  for (const auto& a : w.replayed)
    if (a.join)
      first = std::min(first, a.t);
  for (const auto& a : w.replayed)
    if (a.join)
      joined[{a.stage, a.index}] = a.t - first;
  std::vector<std::pair<double, size_t>> starts;
  std::map<int, int> started;  // stage -> peers started on it so far
  for (size_t i = 0; i < w.peers.size(); ++i) {
    if (stage_of[i] < 0)
      continue;  // a spare machine: --stage-servers used fewer than --peers
    peer& p = w.peers[i];
    p.initial_stage = stage_of[i];
    p.initial_index = started[p.initial_stage]++;
    const auto at = joined.find({p.initial_stage, p.initial_index});
    starts.push_back({at == joined.end() ? 0.0 : at->second, i});
  }
  std::stable_sort(starts.begin(), starts.end());
  for (const auto& [t, i] : starts) {
    if (t > w.now())
      s4u::this_actor::sleep_until(t);
    start_server(w.peers[i], stage_of[i]);
  }
}

/// The trainers' microbatches summed over all of them.
struct microbatch_totals {
  int64_t issued = 0, completed = 0, dropped = 0, reroutes = 0, busy = 0;
};

/// Each trainer's last event; their microbatches summed.
microbatch_totals trainers_exit(world& w) {
  microbatch_totals n;
  for (const auto& t : w.trainers) {
    n.issued += t.issued, n.completed += t.completed, n.dropped += t.dropped;
    n.reroutes += t.reroutes, n.busy += t.busy;
    w.emit("trainer_exit",
           {{"trainer", t.name},
            {"steps", t.steps},
            {"issued", t.issued},
            {"completed", t.completed},
            {"dropped", t.dropped},
            {"in_flight", t.issued - t.completed - t.dropped},
            {"retries", t.retries},
            {"samples", t.samples}},
           "trainer");
  }
  return n;
}

/// Each server's last event, as swarm's servers write it when they stop.
void servers_exit(world& w) {
  for (const auto& p : w.peers)
    if (p.state != peer::off)
      w.emit("server_exit",
             {{"stage", int64_t{p.stage}},
              {"server", p.name},
              {"served", p.served},
              {"late", p.late},
              {"moved_to", int64_t{-1}}},
             "server");
}

/// Closes the books (sim/ledger.hpp) on `counted` samples after the warm-up:
/// where the gap to the best assignment went.
ledger::report close_books(world& w, double counted, double opt, double flu) {
  std::vector<const work_books*> workers;
  for (const auto& t : w.trainers)
    for (const auto& b : t.workers)
      workers.push_back(&b);
  double per_sample = 0;
  for (int s = 0; s < w.cfg.stages; ++s)
    per_sample += w.seconds_per_sample(s);
  return w.books.close(w.peers, workers, counted, opt, flu, per_sample, w.now());
}

/// The summary's figures after the warm-up, and the simulator's wall time.
struct figures {
  double tps, share, fluid, mean_alive, wall;
};

/// Throughput over time, in at most 10 spans of equal length.
void print_timeline(const world& w) {
  if (w.timeline.empty())
    return;
  const size_t n = w.timeline.size(), spans = std::min<size_t>(10, n);
  std::printf("  over time (end of span: tokens/s, %% of best):");
  for (size_t k = 0; k < spans; ++k) {
    const size_t a = k * n / spans, b = (k + 1) * n / spans;
    double tps = 0, opt = 0;
    for (size_t i = a; i < b; ++i)
      tps += w.timeline[i].tokens_per_s, opt += w.timeline[i].optimal_tokens_per_s;
    std::printf("  %.0fs: %.0f, %.0f%%", w.timeline[b - 1].t, tps / static_cast<double>(b - a),
                opt > 0 ? 100 * tps / opt : 0.0);
  }
  std::printf("\n");
}

/// What the trainers' verification did (issue #47), all trainers together.
struct verification_totals {
  int64_t forwards = 0, requests = 0, disagreed = 0, inconclusive = 0, strikes = 0;
  int liars = 0, banned_liars = 0;
  double first_ban = -1, last_ban = -1;  ///< simulated seconds of the liars' bans
};

verification_totals verification_of(const world& w) {
  verification_totals v;
  for (const auto& t : w.trainers) {
    v.forwards += t.forwards;
    v.requests += t.verify_requests;
    v.disagreed += t.verify_disagreed;
    v.inconclusive += t.verify_inconclusive;
    v.strikes += t.verify_strikes;
  }
  for (const auto& p : w.peers) {
    v.liars += p.liar;
    if (p.liar && p.banned) {
      ++v.banned_liars;
      v.first_ban = v.first_ban < 0 ? p.banned_at : std::min(v.first_ban, p.banned_at);
      v.last_ban = std::max(v.last_ban, p.banned_at);
    }
  }
  return v;
}

void print_verification(const world& w) {
  const auto v = verification_of(w);
  if (!(w.cfg.trainer.verify_fraction > 0) && v.liars == 0)
    return;
  std::printf(
      "  verification (--verify-fraction %g): %lld second opinions for %lld forwards (%.1f%% extra), "
      "%lld disagreed, %lld inconclusive, %lld strikes; liars banned %d of %d (first at %.0f s, last at "
      "%.0f s), honest servers banned %lld\n",
      w.cfg.trainer.verify_fraction, static_cast<long long>(v.requests), static_cast<long long>(v.forwards),
      v.forwards > 0 ? 100.0 * static_cast<double>(v.requests) / static_cast<double>(v.forwards) : 0.0,
      static_cast<long long>(v.disagreed), static_cast<long long>(v.inconclusive), static_cast<long long>(v.strikes),
      v.banned_liars, v.liars, v.first_ban, v.last_ban, static_cast<long long>(w.total.false_bans));
}

/// The summary on standard output.
void print_summary(const world& w, const figures& f, const microbatch_totals& n, const ledger::report& gap) {
  const auto& cfg = w.cfg;
  const auto& tot = w.total;
  std::printf("swarm-sim: %.0f simulated s, %d peers (%.1f up on average), %d stages, %d trainers\n", cfg.duration,
              cfg.peers, f.mean_alive, cfg.stages, cfg.cluster.trainers);
  std::printf(
      "  throughput  %.0f tokens/s after the %.0f s warm-up, %.1f%% of the best assignment's (%.1f%% of the "
      "fluid bound)\n",
      f.tps, cfg.warmup, 100 * f.share, 100 * f.fluid);
  print_timeline(w);
  std::printf("  the gap to the best assignment: %.1f points; where it went (points, they sum to %.1f):\n",
              gap.gap_points, gap.sum_points);
  for (const auto& p : gap.parts)
    std::printf("    %6.2f  %s\n", p.points, p.label.c_str());
  std::printf("  microbatches issued %lld, completed %lld, dropped %lld, reroutes %lld; busy answers %lld\n",
              static_cast<long long>(n.issued), static_cast<long long>(n.completed), static_cast<long long>(n.dropped),
              static_cast<long long>(n.reroutes), static_cast<long long>(n.busy));
  std::printf(
      "  rounds applied %lld, failed %lld; moves: load %lld, redundancy %lld, empty %lld; joins %lld, downs %lld\n",
      static_cast<long long>(tot.rounds_applied), static_cast<long long>(tot.rounds_failed),
      static_cast<long long>(tot.moves_load), static_cast<long long>(tot.moves_redundancy),
      static_cast<long long>(tot.moves_empty), static_cast<long long>(tot.joins), static_cast<long long>(tot.downs));
  print_verification(w);
  std::printf("  simulator: %.1f s wall, peak RSS %.0f MiB\n", f.wall, peak_rss_mib());
}

}  // namespace

namespace swarm::sim {

/// The run's last events and the summary on standard output, then the
/// process ends: the daemon actors still parked in the engine (servers,
/// workers, rounds in flight) need no teardown.
[[noreturn]] void finish(world& w) {
  const auto& cfg = w.cfg;
  const double wall = seconds_since(w.wall_start);

  const microbatch_totals n = trainers_exit(w);
  servers_exit(w);
  const auto& tot = w.total;
  // After the warm-up: the pipeline is full.
  const auto counted = static_cast<double>(w.samples() - tot.warm_samples);
  const double tps = counted * static_cast<double>(cfg.model.seq_len) / (cfg.duration - cfg.warmup);
  const double opt = tot.optimal_samples - tot.warm_optimal, flu = tot.fluid_samples - tot.warm_fluid;
  const double share = opt > 0 ? counted / opt : std::nan("");
  const double fluid = flu > 0 ? counted / flu : std::nan("");
  const double mean_alive = tot.alive_peer_seconds / cfg.duration;
  const auto gap = close_books(w, counted, opt, flu);
  std::vector<metrics_sink::field> parts{{"gap_points", gap.gap_points}, {"gap_sum_points", gap.sum_points}};
  for (const auto& p : gap.parts)
    parts.emplace_back(p.key.c_str(), p.points);
  w.emit("sim_gap", parts, "sim");
  w.emit("sim_summary",
         {{"tokens_per_s", tps},
          {"share_of_optimal", share},
          {"share_of_fluid", fluid},
          {"samples", w.samples()},
          {"issued", n.issued},
          {"completed", n.completed},
          {"dropped", n.dropped},
          {"reroutes", n.reroutes},
          {"busy", n.busy},
          {"rounds_applied", tot.rounds_applied},
          {"rounds_failed", tot.rounds_failed},
          {"moves_load", tot.moves_load},
          {"moves_redundancy", tot.moves_redundancy},
          {"moves_empty", tot.moves_empty},
          {"joins", tot.joins},
          {"downs", tot.downs},
          {"mean_peers_up", mean_alive},
          {"simulated_s", cfg.duration},
          {"warmup_s", cfg.warmup},
          {"wall_s", wall},
          {"peak_rss_mib", peak_rss_mib()},
          {"seed", static_cast<int64_t>(cfg.seed)}},
         "sim");
  const auto v = verification_of(w);
  w.emit("sim_verification",
         {{"fraction", cfg.trainer.verify_fraction},
          {"forwards", v.forwards},
          {"requests", v.requests},
          {"share", v.forwards > 0 ? static_cast<double>(v.requests) / static_cast<double>(v.forwards) : 0.0},
          {"disagreed", v.disagreed},
          {"inconclusive", v.inconclusive},
          {"strikes", v.strikes},
          {"liars", int64_t{v.liars}},
          {"liars_banned", int64_t{v.banned_liars}},
          {"honest_banned", w.total.false_bans},
          {"first_ban_s", v.first_ban},
          {"last_ban_s", v.last_ban}},
         "sim");
  w.emit("cluster_exit", {{"code", int64_t{0}}}, "sim");
  w.metrics.flush();
  print_summary(w, {tps, share, fluid, mean_alive, wall}, n, gap);
  std::fflush(stdout);
  std::_Exit(0);
}

/// What the scenario names: the calibration and the stage costs it gives, a
/// churn trace or chaos log, the metrics file. 0, or 2 with the reason said.
int load_inputs(world& w) {
  const auto& cfg = w.cfg;
  const auto& m = cfg.model;
  std::string error;
  const std::string cal_path = cfg.calibration.empty() ? SWARM_SOURCE_DIR "/config/calibration" : cfg.calibration;
  auto cal = read_calibration(cal_path, &error);
  if (!cal) {
    std::cerr << "swarm-sim: " << error << "\n";
    return 2;
  }
  w.cal = *cal;
  const model_shape shape{m, cfg.stages, cfg.trainer.compression};
  w.costs = request_costs(shape, w.cal);
  if (w.costs.empty()) {
    std::cerr << "swarm-sim: bad config: cannot cut " << m.n_layers << " layers into " << cfg.stages << " stages\n";
    return 2;
  }
  for (const auto& c : w.costs)
    w.rebalance_cost.push_back(c.madds_per_sample);
  if (cfg.churn == "trace" && !read_trace(cfg.trace, &error)) {
    std::cerr << "swarm-sim: " << error << "\n";
    return 2;
  }
  if (cfg.churn == "replay") {
    int skipped = 0;
    auto log = read_chaos_log(cfg.churn_log, &skipped, &error);
    if (!log) {
      std::cerr << "swarm-sim: " << error << "\n";
      return 2;
    }
    if (skipped > 0)
      std::cerr << "swarm-sim: " << cfg.churn_log << ": " << skipped
                << " chaos event(s) other than server kills and restarts are not replayed\n";
    w.replayed = std::move(*log);
  }
  if (!cfg.metrics.empty()) {
    w.metrics.open(cfg.metrics, std::ios::out | std::ios::trunc);
    if (!w.metrics) {
      std::cerr << "swarm-sim: cannot write the metrics file " << cfg.metrics << "\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace swarm::sim

int main(int argc, char** argv) {
  // Actor stacks (1 MiB each, see below) must come from mmap, touched page by
  // page: glibc's dynamic threshold otherwise moves them onto the heap after
  // the first large free, and 10,000 peers took 1.4 GB before a step.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  auto parsed = parse_scenario(argc, argv);
  if (!parsed.config) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  auto& w = the_world();
  w.cfg = *parsed.config;
  const auto& cfg = w.cfg;
  if (const int bad = load_inputs(w); bad != 0)
    return bad;
  w.rng.seed(cfg.seed);
  w.stage_step.assign(static_cast<size_t>(cfg.stages), 0);
  w.round_running.assign(static_cast<size_t>(cfg.stages), false);
  w.joined_mutex = s4u::Mutex::create();
  for (int s = 0; s < cfg.stages; ++s)
    w.server_joined.push_back(s4u::ConditionVariable::create());

  w.wall_start = std::chrono::steady_clock::now();
  xbt_log_control_set("root.thresh:critical");
  int sg_argc = 1;
  char* sg_argv[] = {argv[0], nullptr};
  s4u::Engine engine(&sg_argc, sg_argv);
  // Long-lived connections: no slow-start latency factor, no ACK cross-traffic
  // (../shared/notes/simgrid.md); TCP's window cap over the RTT stays.
  engine.set_config("network/latency-factor:1");
  engine.set_config("network/bandwidth-factor:0.97");
  engine.set_config("network/crosstraffic:0");
  // Tens of thousands of actors: no guard pages (each is a memory mapping, and
  // Linux allows 65,530 per process) and 1 MiB stacks, which glibc maps
  // lazily (measured: 3,000 peers took 95 MB with them, 250-494 MB with
  // 64-256 KiB stacks taken from the heap).
  engine.set_config("contexts/stack-size:1024");
  engine.set_config("contexts/guard-size:0");
  build_platform(w);
  w.strikes = policy::strike_book{cfg.trainer.verify_strikes};
  for (auto& t : w.trainers) {
    t.rng.seed(cfg.seed * 1000003 + static_cast<uint64_t>(t.index));
    t.routers.assign(static_cast<size_t>(cfg.stages), policy::stage_router(cfg.trainer.router));
    t.pins.assign(static_cast<size_t>(cfg.stages), policy::static_pin{});
    t.workers.assign(static_cast<size_t>(cfg.trainer.in_flight), work_books{});
    t.latency_s.assign(w.peers.size(), -1.0);
  }
  // The summary's window starts at the coordinator's last whole-second tick within the warm-up.
  w.books.open(cfg.warmup >= 1 ? std::floor(cfg.warmup + 1e-9) : 0.0, cfg.duration, cfg.stages);
  w.emit("cluster_start",
         {{"stages", int64_t{cfg.stages}},
          {"peers", int64_t{cfg.peers}},
          {"trainers", int64_t{cfg.cluster.trainers}},
          {"microbatch", cfg.model.microbatch},
          {"seq_len", cfg.model.seq_len},
          {"simulated", true}},
         "sim");
  for (size_t k = 0; k < w.costs.size(); ++k) {
    const auto& c = w.costs[k];
    w.emit("stage_cost",
           {{"stage", static_cast<int64_t>(k)},
            {"forward_s", c.forward_s},
            {"backward_s", c.backward_s},
            {"forward_in_bytes", c.forward_in_bytes},
            {"forward_out_bytes", c.forward_out_bytes},
            {"backward_in_bytes", c.backward_in_bytes},
            {"backward_out_bytes", c.backward_out_bytes},
            {"parameters", c.parameters},
            {"state_bytes", c.state_bytes}},
           "sim");
  }
  s4u::Actor::create("coordinator", w.coordinator_host, coordinator_main);
  s4u::Actor::create("churn", w.coordinator_host, churn_main);
  s4u::Actor::create("start", w.coordinator_host, [&w] { start_initial(w); });
  for (auto& t : w.trainers)
    for (int k = 0; k < cfg.trainer.in_flight; ++k)
      s4u::Actor::create(t.name + "/" + std::to_string(k), t.host, [i = t.index, k] { trainer_worker(i, k); });
  engine.run();  // finish() ends the process when the coordinator reaches --duration
  return 1;
}
