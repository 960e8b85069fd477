#include "sim/scenario.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <sstream>

#include "config/keys.hpp"

namespace swarm::sim {

std::optional<std::vector<double>> number_list(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      size_t used = 0;
      out.push_back(std::stod(item, &used));
      if (used != item.size() || !std::isfinite(out.back()))
        return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return out;
}

namespace {

bool slowdown_list(const std::string& text) {
  if (text.empty())
    return true;
  const auto n = number_list(text);
  return n && !n->empty() && std::all_of(n->begin(), n->end(), [](double v) { return v >= 1; });
}

/// swarm's keys swarm-sim shares, in --help order: the rows of config/keys.cpp,
/// bound into the scenario's copies of swarm's structs. To give one of them
/// another default here, set it in `scenario` and say why; none differs now.
// clang-format off
const char* const shared_keys[] = {
    "d-model", "n-layers", "seq-len", "microbatch",                                   // model_config
    "stages",                                                                          // app_config
    "batch-size", "averaging-compression", "max-outstanding",                          // server_config
    "averaging-timeout", "rebalance", "rebalance-period", "rebalance-min-gain", "min-replicas",  // coordinator_config
    "trainers",                                                                        // cluster_config
    "in-flight", "routing", "compression", "forward-timeout", "backward-timeout", "commit-grace",
    "max-retries", "no-server-wait", "ema-alpha", "backward-cost", "ban-base", "ban-max",
    "busy-retries", "verify-fraction", "verify-strikes", "verify-probation"};                              // trainer_config
// clang-format on

/// swarm-sim's own keys.
const std::vector<keys::row>& sim_keys() {
  using keys::check;
  using keys::key;
  using s = scenario;
  const auto range = [](const char* spec) { return check::range(spec); };
  static const std::vector<keys::row> rows = {
      key("calibration", &s::calibration, "", {},
          "calibration file (swarm --role calibrate); default: config/calibration"),
      key("peers", &s::peers, "", range(">= 1"), "server machines (trace: slots the trace is replayed over)"),
      key("stage-servers", &s::cluster, &cluster_config::stage_servers, "", {},
          "initial servers per stage, e.g. 3,1; default: peers dealt round-robin"),
      key("slowdowns", &s::slowdowns, "", check::custom(slowdown_list, "must be comma-separated numbers >= 1"),
          "per-peer slowdown, comma-separated, cycled (as swarm --server-slowdowns)"),
      key("speed", &s::speed, "", range("> 0"),
          "peer compute speed relative to the calibrated core (e.g. 50 for a GPU)"),
      key("speed-spread", &s::speed_spread, "", range(">= 0"),
          "log-normal sigma of peer speeds around --speed; 0 = all equal"),
      key("ramp-s", &s::ramp_s, "", range(">= 0"),
          "each in-flight slot of a trainer starts at a random time in [0, ramp-s): with tens of thousands in flight, "
          "all at once is a wave that times out at stage 0"),
      key("routing-probe", &trainer_config::router, &policy::routing_config::probe_requests, "", range(">= 0"),
          "requests an unmeasured server holds at once from one trainer while a measured one is eligible "
          "(swarm's routing policy; 0: no cap, as before it had one)"),
      key("liars", &s::liars, "", range("[0, 1)"),
          "share of the peers whose every answer is wrong (issue #47's noise fault): the trainers' verification "
          "(--verify-fraction) must find and ban them; chosen at random under --seed"),
      key("join", &s::join, "", check::one_of({"placed", "random"}),
          "where a (re)started server goes: placed (swarm's --stage auto: an empty, thin or the slowest stage) | "
          "random (a uniformly random stage: a swarm without rebalancing)"),
      key("platform", &s::platform, "", check::one_of({"wan", "local"}),
          "wan: a host per peer, in regions | local: one machine, --cores shared, loopback"),
      key("cores", &s::cores, "", range(">= 1"), "local: cores of the one machine"),
      key("regions", &s::regions, "", range(">= 1"), "wan: regions (peers and trainers dealt round-robin)"),
      key("region-latency-ms", &s::region_latency_ms, "ms", range(">= 0"),
          "wan: one-way latency between neighbouring regions"),
      key("local-latency-ms", &s::local_latency_ms, "ms", range(">= 0"), "wan: one-way latency inside a region"),
      key("bandwidth-mbps", &s::bandwidth_mbps, "Mbit/s", range("> 0"),
          "wan: each peer's up and down link (trainers and the coordinator have no access link: well connected)"),
      key("loopback-gbps", &s::loopback_gbps, "Gbit/s", range("> 0"), "local: loopback bandwidth"),
      key("churn", &s::churn, "", check::one_of({"none", "kill", "rate", "trace", "replay"}),
          "none | kill (one random server every churn-every s, back after churn-down s) | rate (exponential: mtbf up, "
          "churn-down down) | trace (--trace FILE) | replay (--churn-log FILE)"),
      key("churn-log", &s::churn_log, "", {},
          "replay: a swarm --role cluster metrics file; its chaos kills and restarts of \"server S.I\" happen to the "
          "I-th initial server of stage S at the same times, and its initial servers start as far apart as they "
          "joined there"),
      key("start-s", &s::start_s, "seconds", range(">= 0"),
          "time from a machine coming up to its server asking to join (process start-up)"),
      key("start-cpu-s", &s::start_cpu_s, "core-seconds", range(">= 0"),
          "CPU a server's start-up burns on its machine"),
      key("churn-every", &s::churn_every, "seconds", range("> 0"), "kill: time between kills"),
      key("churn-down", &s::churn_down, "seconds", range("> 0"), "kill: time down; rate: mean time down"),
      key("mtbf", &s::mtbf, "seconds", range("> 0"), "rate: mean time between failures of one peer"),
      key("trace", &s::trace, "", {}, "trace: ms,event,node or t,n file (shared/data/traces)"),
      key("trace-speedup", &s::trace_speedup, "", range("> 0"), "trace: replay this many times faster"),
      key("trace-jitter", &s::trace_jitter, "seconds", range(">= 0"),
          "trace: shift each copy's lifetimes by up to +- this much"),
      key("duration", &s::duration, "simulated seconds", range("> 0"), "length of the run"),
      key("seed", &s::seed, "", {}, "seed of every random choice (same seed, same run)"),
      key("metrics", &s::metrics, "", {}, "write JSON-lines events here (swarm's vocabulary, t in simulated seconds)"),
      key("warmup", &s::warmup, "simulated seconds", {},
          "what the summary leaves out at the start (pipeline filling); < 0: 10% of duration"),
      key("report-every", &s::report_every, "simulated seconds", range("> 0"),
          "time between progress lines and sim_throughput events"),
      key("quiet", &s::quiet, "", {}, "no progress lines"),
  };
  return rows;
}

}  // namespace

std::vector<keys::binding> bind_keys(scenario& s) {
  std::vector<keys::binding> out;
  for (const char* flag : shared_keys) {
    const auto& row = keys::find(swarm_keys(), flag);
    out.push_back(std::string{flag} == "stages"
                      ? keys::bind_value(row, s.stages)
                      : keys::bind(row, s.model, s.server, s.trainer, s.coordinator, s.cluster));
  }
  for (const auto& row : sim_keys())
    out.push_back(keys::bind(row, s, s.trainer));  // routing-probe: s.trainer's
  return out;
}

namespace {

/// Rules across keys; each key's own check is its row's.
std::string check(const scenario& s) {
  if (s.stages > s.model.n_layers)
    return "stages must be 1..n-layers (" + std::to_string(s.model.n_layers) + ")";
  if (s.warmup >= s.duration)
    return "warmup must be shorter than duration";
  if (s.churn == "trace" && s.trace.empty())
    return "--churn trace needs --trace FILE";
  if (s.churn == "replay" && s.churn_log.empty())
    return "--churn replay needs --churn-log FILE";
  if (!s.cluster.stage_servers.empty()) {
    auto n = number_list(s.cluster.stage_servers);
    if (!n || static_cast<int>(n->size()) != s.stages)
      return "stage-servers needs one count per stage";
    double sum = 0;
    for (double v : *n) {
      if (v < 0 || v != std::floor(v))
        return "stage-servers: counts must be whole numbers >= 0";
      sum += v;
    }
    if (static_cast<int>(sum) > s.peers)
      return "stage-servers places more servers than --peers";
  }
  return {};
}

}  // namespace

parse_result parse_scenario(int argc, char** argv) {
  scenario s;
  auto bound = bind_keys(s);
  parse_result r;
  if (keys::has_arg(argc, argv, "--help-markdown")) {
    r.message = keys::markdown_table(bound);
    return r;
  }
  CLI::App app{
      "swarm-sim: a simulated swarm (SimGrid) that runs swarm's own routing, rebalancing and averaging "
      "policies over thousands of peers. Every flag is also a key of a --config file; swarm's flags mean "
      "what they mean there. --help-markdown prints this list as docs/simulator.md's table."};
  app.option_defaults()->always_capture_default();
  app.set_config("--config", "", "read key = value lines (keys are these flags without dashes)");
  keys::add_options(app, bound);
  if (const auto file = keys::config_file_arg(argc, argv))
    if (auto err = keys::check_config_file(app, *file, "swarm-sim"); !err.empty()) {
      r.message = "swarm-sim: bad config file: " + err;
      r.exit_code = 2;
      return r;
    }
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
  if (auto c = app.get_option("--config"); c->count() > 0)
    s.config_file = c->as<std::string>();
  auto why = keys::apply_text(bound);  // --routing's word into trainer.attempts.pinned
  if (why.empty())
    why = keys::check_all(bound);
  if (why.empty())
    why = check(s);
  if (!why.empty()) {
    r.message = "swarm-sim: bad config: " + why;
    r.exit_code = 2;
    return r;
  }
  if (s.warmup < 0)
    s.warmup = 0.1 * s.duration;
  r.config = s;
  return r;
}

}  // namespace swarm::sim
