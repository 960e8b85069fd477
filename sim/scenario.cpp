#include "sim/scenario.hpp"

#include <CLI/CLI.hpp>
#include <cmath>
#include <sstream>

namespace swarm::sim {

std::optional<std::vector<double>> number_list(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      size_t used = 0;
      out.push_back(std::stod(item, &used));
      if (used != item.size() || !std::isfinite(out.back())) return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return out;
}

namespace {

std::string check(const scenario& s) {
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (s.d_model < 1 || s.n_layers < 1 || s.seq_len < 1 || s.microbatch < 1 || s.batch_size < 1)
    return "d-model, n-layers, seq-len, microbatch and batch-size must be >= 1";
  if (s.stages < 1 || s.stages > s.n_layers) return "stages must be 1..n-layers (" + std::to_string(s.n_layers) + ")";
  if (s.peers < 1) return "peers must be >= 1";
  if (s.trainers < 1 || s.in_flight < 1) return "trainers and in-flight must be >= 1";
  if (s.max_retries < 1) return "max-retries must be >= 1";
  for (double v : {s.forward_timeout, s.backward_timeout, s.ema_alpha, s.backward_cost, s.ban_base, s.ban_max,
                   s.rebalance_period, s.averaging_timeout, s.speed, s.bandwidth_mbps, s.loopback_gbps,
                   s.duration, s.report_every, s.churn_every, s.churn_down, s.mtbf, s.trace_speedup})
    if (!positive(v)) return "timeouts, periods, speeds, bandwidths, durations and churn times must be > 0";
  for (double v : {s.ramp_s, s.no_server_wait, s.rebalance_min_gain, s.region_latency_ms, s.local_latency_ms, s.speed_spread,
                   s.trace_jitter})
    if (!std::isfinite(v) || v < 0) return "latencies, spreads, jitter, min-gain and no-server-wait must be >= 0";
  if (s.warmup >= s.duration) return "warmup must be shorter than duration";
  if (!(s.commit_grace >= 0 && s.commit_grace < 1)) return "commit-grace must be in [0, 1)";
  if (s.ema_alpha > 1) return "ema-alpha must be in (0, 1]";
  if (s.min_replicas < 1) return "min-replicas must be >= 1";
  if (s.regions < 1 || s.cores < 1) return "regions and cores must be >= 1";
  if (s.churn == "trace" && s.trace.empty()) return "--churn trace needs --trace FILE";
  if (s.churn == "replay" && s.churn_log.empty()) return "--churn replay needs --churn-log FILE";
  if (!std::isfinite(s.start_s) || s.start_s < 0 || !std::isfinite(s.start_cpu_s) || s.start_cpu_s < 0)
    return "start-s and start-cpu-s must be >= 0";
  if (!s.stage_servers.empty()) {
    auto n = number_list(s.stage_servers);
    if (!n || static_cast<int>(n->size()) != s.stages) return "stage-servers needs one count per stage";
    double sum = 0;
    for (double v : *n) {
      if (v < 0 || v != std::floor(v)) return "stage-servers: counts must be whole numbers >= 0";
      sum += v;
    }
    if (static_cast<int>(sum) > s.peers) return "stage-servers places more servers than --peers";
  }
  if (!s.slowdowns.empty()) {
    auto n = number_list(s.slowdowns);
    if (!n || n->empty()) return "slowdowns: comma-separated numbers >= 1";
    for (double v : *n)
      if (!(v >= 1)) return "slowdowns: comma-separated numbers >= 1";
  }
  return {};
}

} // namespace

parse_result parse_scenario(int argc, char** argv) {
  scenario s;
  CLI::App app{"swarm-sim: a simulated swarm (SimGrid) that runs swarm's own routing, rebalancing and averaging "
               "policies over thousands of peers. Every flag is also a key of a --config file."};
  app.option_defaults()->always_capture_default();
  app.set_config("--config", "", "read key = value lines (keys are these flags without dashes)");
  const auto opt = [&](const char* name, auto& field, const char* help) { return app.add_option(name, field, help); };
  opt("--d-model", s.d_model, "model: hidden width");
  opt("--n-layers", s.n_layers, "model: transformer blocks");
  opt("--seq-len", s.seq_len, "model: tokens per sample");
  opt("--microbatch", s.microbatch, "model: samples per microbatch (one request)");
  opt("--stages", s.stages, "pipeline stages");
  opt("--compression", s.compression, "activations on the wire")->check(CLI::IsMember({"none", "fp16", "blockwise8"}));
  opt("--averaging-compression", s.averaging_compression, "all-reduce values")
      ->check(CLI::IsMember({"none", "fp16", "blockwise8"}));
  opt("--batch-size", s.batch_size, "samples per stage-wide optimizer step");
  opt("--averaging-timeout", s.averaging_timeout, "seconds; a round ends by 3x this");
  opt("--calibration", s.calibration, "calibration file (swarm --role calibrate); default: config/calibration");
  opt("--peers", s.peers, "server machines (trace: slots the trace is replayed over)");
  opt("--stage-servers", s.stage_servers, "initial servers per stage, e.g. 3,1; default: peers dealt round-robin");
  opt("--slowdowns", s.slowdowns, "per-peer slowdown, comma-separated, cycled (as swarm --server-slowdowns)");
  opt("--speed", s.speed, "peer compute speed relative to the calibrated core (e.g. 50 for a GPU)");
  opt("--speed-spread", s.speed_spread, "log-normal sigma of peer speeds around --speed; 0 = all equal");
  opt("--trainers", s.trainers, "trainers");
  opt("--in-flight", s.in_flight, "microbatches in the pipeline per trainer");
  opt("--ramp-s", s.ramp_s, "each in-flight slot of a trainer starts at a random time in [0, ramp-s): with tens of "
                            "thousands in flight, all at once is a wave that times out at stage 0");
  opt("--routing", s.routing, "swarm: throughput-weighted with rerouting | static: one pinned server per stage")
      ->check(CLI::IsMember({"swarm", "static"}));
  opt("--forward-timeout", s.forward_timeout, "seconds");
  opt("--backward-timeout", s.backward_timeout, "seconds");
  opt("--commit-grace", s.commit_grace, "a server refuses (does not compute) a request it reaches after (1 - this) "
                                        "x the request's timeout, as swarm's commit deadline");
  opt("--max-retries", s.max_retries, "attempts per stage request before a microbatch is dropped");
  opt("--no-server-wait", s.no_server_wait, "seconds a request waits for a stage without servers");
  opt("--ema-alpha", s.ema_alpha, "routing: weight of the newest request in the throughput average");
  opt("--backward-cost", s.backward_cost, "routing: a backward counts as this many forwards");
  opt("--ban-base", s.ban_base, "routing: first ban of a failing server, seconds");
  opt("--ban-max", s.ban_max, "routing: longest ban, seconds");
  opt("--rebalance", s.rebalance, "move servers between stages")->check(CLI::IsMember({"on", "off"}));
  opt("--join", s.join, "where a (re)started server goes: placed (swarm's --stage auto: an empty, thin or the slowest "
                        "stage) | random (a uniformly random stage: a swarm without rebalancing)")
      ->check(CLI::IsMember({"placed", "random"}));
  opt("--rebalance-period", s.rebalance_period, "seconds between load moves");
  opt("--rebalance-min-gain", s.rebalance_min_gain, "a load move must raise the bottleneck by more than this");
  opt("--min-replicas", s.min_replicas, "servers per stage kept before optimising throughput");
  opt("--platform", s.platform, "wan: a host per peer, in regions | local: one machine, --cores shared, loopback")
      ->check(CLI::IsMember({"wan", "local"}));
  opt("--cores", s.cores, "local: cores of the one machine");
  opt("--regions", s.regions, "wan: regions (peers and trainers dealt round-robin)");
  opt("--region-latency-ms", s.region_latency_ms, "wan: one-way latency between neighbouring regions, ms");
  opt("--local-latency-ms", s.local_latency_ms, "wan: one-way latency inside a region, ms");
  opt("--bandwidth-mbps", s.bandwidth_mbps, "wan: each peer's up and down link, Mbit/s (trainers and the coordinator have no access link: well connected)");
  opt("--loopback-gbps", s.loopback_gbps, "local: loopback bandwidth, Gbit/s");
  opt("--churn", s.churn, "none | kill (one random server every churn-every s, back after churn-down s) | rate "
                          "(exponential: mtbf up, churn-down down) | trace (--trace FILE) | replay (--churn-log FILE)")
      ->check(CLI::IsMember({"none", "kill", "rate", "trace", "replay"}));
  opt("--churn-log", s.churn_log, "replay: a swarm --role cluster metrics file; its chaos kills and restarts of "
                                  "\"server S.I\" happen to the I-th initial server of stage S at the same times, "
                                  "and its initial servers start as far apart as they joined there");
  opt("--start-s", s.start_s, "seconds from a machine coming up to its server asking to join (process start-up)");
  opt("--start-cpu-s", s.start_cpu_s, "core-seconds a server's start-up burns on its machine");
  opt("--churn-every", s.churn_every, "kill: seconds between kills");
  opt("--churn-down", s.churn_down, "kill: seconds down; rate: mean seconds down");
  opt("--mtbf", s.mtbf, "rate: mean seconds between failures of one peer");
  opt("--trace", s.trace, "trace: ms,event,node or t,n file (shared/data/traces)");
  opt("--trace-speedup", s.trace_speedup, "trace: replay this many times faster");
  opt("--trace-jitter", s.trace_jitter, "trace: shift each copy's lifetimes by up to +- this many seconds");
  opt("--duration", s.duration, "simulated seconds");
  opt("--seed", s.seed, "seed of every random choice (same seed, same run)");
  opt("--metrics", s.metrics, "write JSON-lines events here (swarm's vocabulary, t in simulated seconds)");
  opt("--warmup", s.warmup, "simulated seconds the summary leaves out (pipeline filling); default 10% of duration");
  opt("--report-every", s.report_every, "simulated seconds between progress lines and sim_throughput events");
  app.add_flag("--quiet", s.quiet, "no progress lines");
  parse_result r;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    r.message = app.help();
    return r;
  } catch (const CLI::ParseError& e) {
    r.message = std::string("swarm-sim: ") + e.what() + "\nRun with --help for every option.";
    r.exit_code = 2;
    return r;
  }
  if (auto c = app.get_option("--config"); c->count() > 0) s.config_file = c->as<std::string>();
  if (auto why = check(s); !why.empty()) {
    r.message = "swarm-sim: bad config: " + why;
    r.exit_code = 2;
    return r;
  }
  if (s.warmup < 0) s.warmup = 0.1 * s.duration;
  r.config = s;
  return r;
}

} // namespace swarm::sim
