#pragma once
// Everything one swarm-sim run is: the model (as swarm's flags spell it), the
// swarm, the platform, the churn and the policies' knobs. One struct, every
// field a flag and a key of a --config file (the syntax of swarm's config
// files); parse_scenario() is the only parser and checks every value.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace swarm::sim {

struct scenario {
  // The model (swarm's flags of the same names).
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t seq_len = 128;
  int64_t microbatch = 8;
  int stages = 2;
  std::string compression = "blockwise8";            ///< activations on the wire
  std::string averaging_compression = "fp16";        ///< all-reduce pieces
  int64_t batch_size = 64;                           ///< samples per stage-wide optimizer step
  double averaging_timeout = 30;                     ///< rounds end by 3x this, as swarm's
  std::string calibration;                           ///< file from `swarm --role calibrate`; empty = the source tree's
  // The swarm.
  int peers = 4;                  ///< server machines (trace: slots the trace is laid over)
  std::string stage_servers;      ///< initial servers per stage, e.g. "3,1"; empty: peers dealt round-robin
  std::string slowdowns;          ///< per-peer slowdown (swarm's --server-slowdowns), cycled; empty: 1
  double speed = 1;               ///< compute speed of a peer relative to this machine's calibrated core
  double speed_spread = 0;        ///< peers' speeds drawn log-normal with this sigma around `speed`
  int trainers = 1;
  int in_flight = 4;              ///< microbatches in the pipeline per trainer
  double ramp_s = 0;              ///< each trainer slot starts at a random time in [0, ramp_s): no start-up wave
  // Routing (swarm's trainer flags).
  std::string routing = "swarm";  ///< swarm | static
  double forward_timeout = 30;
  double backward_timeout = 75;
  int max_retries = 5;
  double commit_grace = 0.1;      ///< servers refuse work they reach later than (1 - this) x its timeout
  double no_server_wait = 600;
  double ema_alpha = 0.1;
  double backward_cost = 2.5;
  double ban_base = 1;
  double ban_max = 60;
  // Rebalancing (the coordinator's flags).
  std::string rebalance = "on";   ///< on | off
  std::string join = "placed";    ///< placed: the rebalancer's placement (swarm --stage auto) | random: any stage
  double rebalance_period = 30;
  double rebalance_min_gain = 0.1;
  int min_replicas = 2;
  // The platform.
  std::string platform = "wan";   ///< wan: a host per peer in regions | local: one machine of `cores` cores on loopback
  int cores = 2;                  ///< local: cores shared by every process
  int regions = 1;                ///< wan: peers and trainers dealt round-robin over regions on a circle
  double region_latency_ms = 50;  ///< wan: one-way latency between neighbouring regions
  double local_latency_ms = 5;    ///< wan: one-way latency between two peers of one region
  double bandwidth_mbps = 100;    ///< wan: each peer's up and down link, Mbit/s
  double loopback_gbps = 8;       ///< local: the loopback's bandwidth, Gbit/s
  // Churn.
  std::string churn = "none";     ///< none | kill (as swarm --chaos kill) | rate | trace | replay
  double churn_every = 30;        ///< kill: one random serving peer every this many seconds
  double churn_down = 10;         ///< kill: back after this long; rate: mean time down, seconds
  double mtbf = 3600;             ///< rate: mean time between failures of a peer, seconds
  std::string trace;              ///< trace: a file of ../shared/data/traces' formats
  double trace_speedup = 1;       ///< trace: replay this many times faster
  double trace_jitter = 300;      ///< trace: per-lifetime shift of each copy of the trace, +- seconds
  std::string churn_log;          ///< replay: a swarm --role cluster metrics file whose chaos kills and restarts are redone
  double start_s = 0;             ///< a (re)started server asks to join this long after its machine came up (process start)
  double start_cpu_s = 0;         ///< core-seconds its start-up burns on its machine's cores
  // The run.
  double duration = 600;          ///< simulated seconds
  uint64_t seed = 1;
  std::string metrics;            ///< JSON-lines events (swarm's vocabulary); empty = none
  double warmup = -1;             ///< simulated seconds left out of the summary's tokens/s and shares; < 0: 10% of duration
  double report_every = 60;       ///< simulated seconds between progress lines and `sim_throughput` events
  bool quiet = false;             ///< no progress lines
  std::string config_file;
};

struct parse_result {
  std::optional<scenario> config;
  int exit_code = 0;    ///< 0: --help; 2: bad flags or config
  std::string message;
};

[[nodiscard]] parse_result parse_scenario(int argc, char** argv);

/// Comma-separated numbers; nullopt when one is not a number.
[[nodiscard]] std::optional<std::vector<double>> number_list(const std::string& text);

} // namespace swarm::sim
