#pragma once
// Everything one swarm-sim run is: the model and the roles' knobs (swarm's own
// config structs and keys), the swarm, the platform, the churn. One struct,
// every key a flag and a key of a --config file (the syntax of swarm's config
// files); parse_scenario() is the only parser and checks every value.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/key_table.hpp"

namespace swarm::sim {

struct scenario {
  // swarm's own structs: their keys (d-model, routing, rebalance-period, ...)
  // are swarm's rows of config/keys.cpp, registered by scenario.cpp with the
  // same names, defaults, help and checks. Only the keys scenario.cpp lists
  // are flags here; the other members keep swarm's defaults and are not read.
  model_config model;                ///< d-model, n-layers, seq-len, microbatch
  int stages = app_config{}.stages;  ///< swarm's --stages (app_config holds it outside its sections)
  server_config server;              ///< batch-size, averaging-compression
  /// in-flight, routing, compression, timeouts, retries, commit-grace, EMA,
  /// bans, verify-fraction, verify-strikes; routing-probe (swarm-sim's own
  /// flag for swarm's probe cap). --verify-fraction defaults to 0 here, not
  /// swarm's 0.03: the simulator's figures (docs/simulator.md) and its
  /// checks against the binary were measured without verification; give it
  /// to simulate its cost.
  trainer_config trainer = [] {
    trainer_config t;
    t.verify_fraction = 0;
    return t;
  }();
  coordinator_config coordinator;  ///< averaging-timeout, rebalance, rebalance-period, -min-gain, min-replicas
  cluster_config cluster;          ///< trainers; stage_servers is swarm-sim's own --stage-servers
  std::string calibration;         ///< file from `swarm --role calibrate`; empty = the source tree's
  // The swarm.
  int peers = 4;                ///< server machines (trace: slots the trace is laid over)
  std::string slowdowns;        ///< per-peer slowdown (swarm's --server-slowdowns), cycled; empty: 1
  double speed = 1;             ///< compute speed of a peer relative to this machine's calibrated core
  double speed_spread = 0;      ///< peers' speeds drawn log-normal with this sigma around `speed`
  double ramp_s = 0;            ///< each trainer slot starts at a random time in [0, ramp_s): no start-up wave
  std::string join = "placed";  ///< placed: the rebalancer's placement (swarm --stage auto) | random: any stage
  double liars = 0;             ///< share of peers answering wrongly (issue #47), caught by --verify-fraction
  // The platform.
  std::string platform = "wan";   ///< wan: a host per peer in regions | local: one machine of `cores` cores on loopback
  int cores = 2;                  ///< local: cores shared by every process
  int regions = 1;                ///< wan: peers and trainers dealt round-robin over regions on a circle
  double region_latency_ms = 50;  ///< wan: one-way latency between neighbouring regions
  double local_latency_ms = 5;    ///< wan: one-way latency between two peers of one region
  double bandwidth_mbps = 100;    ///< wan: each peer's up and down link, Mbit/s
  double loopback_gbps = 8;       ///< local: the loopback's bandwidth, Gbit/s
  // Churn.
  std::string churn = "none";  ///< none | kill (as swarm --chaos kill) | rate | trace | replay
  double churn_every = 30;     ///< kill: one random serving peer every this many seconds
  double churn_down = 10;      ///< kill: back after this long; rate: mean time down, seconds
  double mtbf = 3600;          ///< rate: mean time between failures of a peer, seconds
  std::string trace;           ///< trace: a file of ../shared/data/traces' formats
  double trace_speedup = 1;    ///< trace: replay this many times faster
  double trace_jitter = 300;   ///< trace: per-lifetime shift of each copy of the trace, +- seconds
  std::string churn_log;   ///< replay: a swarm --role cluster metrics file whose chaos kills and restarts are redone
  double start_s = 0;      ///< a (re)started server asks to join this long after its machine came up (process start)
  double start_cpu_s = 0;  ///< core-seconds its start-up burns on its machine's cores
  // The run.
  double duration = 600;     ///< simulated seconds
  uint64_t seed = 1;         ///< of every random choice (model.seed is swarm's, not read here)
  std::string metrics;       ///< JSON-lines events (swarm's vocabulary); empty = none
  double warmup = -1;        ///< simulated seconds left out of the summary's tokens/s and shares; < 0: 10% of duration
  double report_every = 60;  ///< simulated seconds between progress lines and `sim_throughput` events
  bool quiet = false;        ///< no progress lines
  std::string config_file;
};

struct parse_result {
  std::optional<scenario> config;
  int exit_code = 0;  ///< 0: --help or --help-markdown; 2: bad flags or config
  std::string message;
};

[[nodiscard]] parse_result parse_scenario(int argc, char** argv);

/// Every key of swarm-sim bound into `s`, in --help order: swarm's shared keys
/// (config/keys.cpp), then swarm-sim's own.
[[nodiscard]] std::vector<keys::binding> bind_keys(scenario& s);

/// Comma-separated numbers; nullopt when one is not a number.
[[nodiscard]] std::optional<std::vector<double>> number_list(const std::string& text);

}  // namespace swarm::sim
