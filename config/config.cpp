#include "config/config.hpp"

#include "base/hash.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

namespace swarm {

const char* to_string(role r) {
  switch (r) {
    case role::coordinator: return "coordinator";
    case role::server: return "server";
    case role::trainer: return "trainer";
    case role::local: return "local";
    case role::calibrate: return "calibrate";
    case role::cluster: return "cluster";
    case role::status: return "status";
  }
  return "?";
}

uint64_t model_config::hash() const {
  // FNV-1a over the printed fields: stable across processes and builds.
  std::ostringstream s;
  s << d_model << ' ' << n_heads << ' ' << n_layers << ' ' << seq_len << ' ' << microbatch << ' ' << vocab << ' '
    << lr << ' ' << weight_decay << ' ' << beta1 << ' ' << beta2 << ' ' << grad_clip << ' ' << seed;
  // This basis is one digit short of FNV's; it stays, or every checkpoint
  // written so far would belong to "another model config".
  const auto text = s.str();
  return fnv1a64(text.data(), text.size(), 1469598103934665603ull);
}

std::optional<std::pair<std::string, uint16_t>> split_host_port(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    return std::nullopt;
  const auto port_str = s.substr(colon + 1);
  if (port_str.find_first_not_of("0123456789") != std::string::npos || port_str.size() > 5)
    return std::nullopt;
  const long port = std::stol(port_str);
  if (port < 1 || port > 65535)
    return std::nullopt;
  return std::make_pair(s.substr(0, colon), static_cast<uint16_t>(port));
}

namespace {

/// Declares every option; the same table serves flags, config files and --help.
/// `stage`: the text of --stage ("auto" or an index), converted after parsing.
void add_options(CLI::App& app, app_config& c, std::string& role_name, std::string& stage) {
  // The last occurrence wins, so a launcher can append overrides to a full flag list.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  app.add_option("--role", role_name,
                 "what this process is: coordinator | server | trainer | local | cluster | status (print a running "
                 "swarm's overview: --coordinator HOST:PORT) | calibrate (measure this machine's stage costs for "
                 "swarm-sim: --out FILE)")
      ->required()
      ->check(CLI::IsMember({"coordinator", "server", "trainer", "local", "cluster", "status", "calibrate"}));
  app.add_option("--out", c.out, "calibrate: file to write the calibration to (- = standard output)");
  app.add_option("--stages", c.stages, "pipeline stages the model is cut into (1..n-layers)");
  app.add_option("--threads", c.threads, "torch intra-op threads per process; 0 = all cores (cluster: cores / servers)");
  app.add_option("--device", c.device, "server, local: torch device: cpu | cuda | cuda:N (needs a CUDA build of libtorch)");
  app.add_option("--metrics", c.metrics, "append JSON-lines metrics to this file (see README)");
  app.add_option("--log-level", c.log_level, "trace | debug | info | warn | error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));

  auto& m = c.model;
  app.add_option("--d-model", m.d_model, "hidden width, features");
  app.add_option("--n-heads", m.n_heads, "attention heads (must divide d-model)");
  app.add_option("--n-layers", m.n_layers, "transformer blocks in the whole model");
  app.add_option("--seq-len", m.seq_len, "context length, bytes per sample");
  app.add_option("--microbatch", m.microbatch, "samples per microbatch");
  app.add_option("--lr", m.lr, "AdamW learning rate");
  app.add_option("--weight-decay", m.weight_decay, "AdamW weight decay on 2-D weights");
  app.add_option("--beta1", m.beta1, "AdamW first-moment decay");
  app.add_option("--beta2", m.beta2, "AdamW second-moment decay");
  app.add_option("--grad-clip", m.grad_clip, "clip the gradient norm per step to this; 0 = off");
  app.add_option("--seed", m.seed, "seed of parameter initialisation and data sampling");

  auto& n = c.net;
  app.add_option("--heartbeat", n.heartbeat_s, "CAF heartbeat interval, seconds");
  app.add_option("--connection-timeout", n.connection_timeout_s, "drop a connection silent this long, seconds");
  app.add_option("--chunk-bytes", n.chunk_bytes, "largest single message payload, bytes");
  app.add_option("--bulk-min-bytes", n.bulk_min_bytes,
                 "payloads of at least this many bytes go over a dedicated bulk connection; 0 = all through CAF");
  app.add_option("--tls-ca", n.tls_ca, "mutual TLS: PEM certificate of the cluster CA (with --tls-cert and --tls-key)");
  app.add_option("--tls-cert", n.tls_cert, "mutual TLS: PEM certificate of this node, signed by the cluster CA");
  app.add_option("--tls-key", n.tls_key, "mutual TLS: PEM private key of this node's certificate (unencrypted)");

  app.add_option("--port", c.coordinator.port, "coordinator: TCP port to listen on; 0 = any free port");
  app.add_option("--port-file", c.coordinator.port_file, "coordinator: write the bound port to this file");
  app.add_option("--http-port", c.coordinator.http_port,
                 "coordinator: serve the status page, /api/status and /metrics on this port; 0 = none (cluster: any "
                 "free port, -1 = none)");
  app.add_option("--http-host", c.coordinator.http_host,
                 "coordinator: address the HTTP port binds to (127.0.0.1: this machine only; 0.0.0.0: every interface)");
  app.add_option("--averaging-timeout", c.coordinator.averaging_timeout_s,
                 "coordinator: averaging rounds find late servers after this and exclude them at 1.5x, seconds");
  app.add_option("--rebalance", c.coordinator.rebalance,
                 "coordinator: on | off (servers stay on their stage; cluster restarts go back to theirs)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--rebalance-period", c.coordinator.rebalance_period_s,
                 "coordinator: seconds between load moves (one server each); empty or thin stages are served at once");
  app.add_option("--rebalance-min-gain", c.coordinator.rebalance_min_gain,
                 "coordinator: move only when the slowest stage's predicted capacity rises by more than this fraction");
  app.add_option("--min-replicas", c.coordinator.min_replicas,
                 "coordinator: servers per stage kept before optimising throughput, where other stages can spare them");

  app.add_option("--coordinator", c.server.coordinator, "server, trainer: HOST:PORT of the coordinator");
  app.add_option("--stage", stage, "server: pipeline stage to serve, 0-based, or auto: where the coordinator needs it");
  app.add_option("--host", c.server.host, "server, trainer: address peers use to reach this process (its actors and its bulk connection)");
  app.add_option("--server-port", c.server.port, "server: TCP port to listen on; 0 = any free port");
  app.add_option("--batch-size", c.server.batch_size,
                 "samples per optimizer step: stage-wide target batch (coordinator), batch (local), reported step (trainer)");

  app.add_option("--slowdown", c.server.slowdown, "server: emulate a device this many times slower (>= 1)");
  app.add_option("--averaging-compression", c.server.averaging_compression,
                 "server: encoding of the all-reduce pieces it sends: none | fp16 | blockwise8")
      ->check(CLI::IsMember({"none", "fp16", "blockwise8"}));
  app.add_option("--fault", c.server.fault,
                 "server, test hook: none | hang-forward | hang-backward | hang-round | hang-state")
      ->check(CLI::IsMember({"none", "hang-forward", "hang-backward", "hang-round", "hang-state"}));
  app.add_option("--fault-after", c.server.fault_after, "server, test hook: the Nth request (or round) of that kind hangs");

  auto& t = c.trainer;
  app.add_option("--corpus", t.corpus, "training text: a file, or a folder of text files");
  app.add_option("--in-flight", t.in_flight, "trainer: microbatches in the pipeline at once");
  app.add_option("--max-steps", t.max_steps, "stop after this many steps; 0 = until Ctrl-C");
  app.add_option("--forward-timeout", t.forward_timeout_s, "trainer: deadline of one forward request, seconds");
  app.add_option("--backward-timeout", t.backward_timeout_s, "trainer: deadline of one backward request, seconds");
  app.add_option("--max-retries", t.max_retries, "trainer: attempts per stage request before a microbatch is dropped");
  app.add_option("--no-server-wait", t.no_server_wait_s,
                 "trainer: how long a request waits for a stage without servers, seconds");
  app.add_option("--routing", t.routing, "trainer: swarm (throughput-weighted, rerouting) | static (pinned)")
      ->check(CLI::IsMember({"swarm", "static"}));
  app.add_option("--compression", t.compression,
                 "trainer: encoding of activations and gradients between stages (all four directions): "
                 "none | fp16 | blockwise8")
      ->check(CLI::IsMember({"none", "fp16", "blockwise8"}));
  app.add_option("--ema-alpha", t.ema_alpha, "trainer: weight of the newest sample in the throughput average");
  app.add_option("--backward-cost", t.backward_cost, "trainer: a backward counts as this many forwards");
  app.add_option("--ban-base", t.ban_base_s, "trainer: first ban of a failing server, seconds (doubles per repeat)");
  app.add_option("--ban-max", t.ban_max_s, "trainer: longest ban, seconds");
  app.add_option("--commit-grace", t.commit_grace,
                 "trainer: servers must commit this fraction of a request's deadline before it ends");

  auto& k = c.checkpoint;
  app.add_option("--checkpoint-dir", k.dir,
                 "server, trainer, local: keep checkpoints in this folder and resume from them; empty = none");
  app.add_option("--checkpoint-every", k.every, "checkpoint every N optimizer steps (N) or every N seconds (Ns)");
  app.add_option("--checkpoint-keep", k.keep, "newest checkpoints kept per stage and per trainer");

  app.add_option("--servers-per-stage", c.cluster.servers_per_stage, "cluster: server processes per stage");
  app.add_option("--trainers", c.cluster.trainers, "cluster: trainer processes");
  auto& x = c.cluster;
  app.add_option("--chaos", x.chaos,
                 "cluster: none | kill (SIGKILL, fresh process later) | stop (SIGSTOP/SIGCONT) | mixed (either)")
      ->check(CLI::IsMember({"none", "kill", "stop", "mixed"}));
  app.add_option("--chaos-every", x.chaos_every_s, "cluster: hit one random server every this many seconds");
  app.add_option("--chaos-down", x.chaos_down_s, "cluster: restart (kill) or continue (stop) it after, seconds");
  app.add_option("--chaos-stage", x.chaos_stage, "cluster: only hit servers of this stage; -1 = any");
  app.add_option("--chaos-seed", x.chaos_seed, "cluster: seed of the victim choice");
  app.add_option("--chaos-coordinator-every", x.chaos_coordinator_every_s,
                 "cluster: SIGKILL the coordinator every this many seconds (restarted at once on its port); 0 = never");
  app.add_option("--chaos-wipe-at", x.chaos_wipe_at_s,
                 "cluster: once, this many seconds in, SIGKILL every server of one stage (--chaos-stage, or random); "
                 "0 = never");
  app.add_option("--server-slowdowns", x.server_slowdowns,
                 "cluster: per-server --slowdown, comma-separated, stage-major launch order (e.g. 1,3,1,1)");
  app.add_option("--stage-servers", x.stage_servers,
                 "cluster: servers per stage in stage order (e.g. 3,1); overrides servers-per-stage");
}

/// cpu, cuda or cuda:N. Whether this build and machine have it is the stage
/// worker's question, asked when a process starts.
bool valid_device(const std::string& d) {
  if (d == "cpu" || d == "cuda")
    return true;
  const std::string index = d.rfind("cuda:", 0) == 0 ? d.substr(5) : "";
  return !index.empty() && index.size() <= 3 && index.find_first_not_of("0123456789") == std::string::npos;
}

/// "3,1" as numbers; nullopt when an item is not a whole number.
std::optional<std::vector<int>> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    out.push_back(std::stoi(item));
  }
  return out;
}

template <class T>
void require(std::string& err, bool ok, const char* flag, const T& value, const char* rule) {
  if (!ok && err.empty()) {
    std::ostringstream s;
    s << "--" << flag << " " << value << ": " << rule;
    err = s.str();
  }
}

} // namespace

std::string validate(const app_config& c) {
  std::string e;
  const auto& m = c.model;
  require(e, m.d_model >= 1, "d-model", m.d_model, "must be >= 1");
  require(e, m.n_heads >= 1 && m.d_model % m.n_heads == 0, "n-heads", m.n_heads, "must be >= 1 and divide d-model");
  require(e, m.n_layers >= 1, "n-layers", m.n_layers, "must be >= 1");
  require(e, m.seq_len >= 1, "seq-len", m.seq_len, "must be >= 1");
  require(e, m.microbatch >= 1, "microbatch", m.microbatch, "must be >= 1");
  require(e, m.lr > 0 && m.lr < 1, "lr", m.lr, "must be in (0, 1)");
  require(e, m.weight_decay >= 0, "weight-decay", m.weight_decay, "must be >= 0");
  require(e, m.beta1 >= 0 && m.beta1 < 1, "beta1", m.beta1, "must be in [0, 1)");
  require(e, m.beta2 >= 0 && m.beta2 < 1, "beta2", m.beta2, "must be in [0, 1)");
  require(e, m.grad_clip >= 0, "grad-clip", m.grad_clip, "must be >= 0");
  require(e, c.stages >= 1 && c.stages <= m.n_layers, "stages", c.stages, "must be in [1, n-layers]");
  require(e, c.threads >= 0, "threads", c.threads, "must be >= 0");
  require(e, valid_device(c.device), "device", c.device, "must be cpu, cuda or cuda:N");
  require(e, c.net.heartbeat_s > 0, "heartbeat", c.net.heartbeat_s, "must be > 0");
  require(e, c.net.connection_timeout_s > c.net.heartbeat_s, "connection-timeout", c.net.connection_timeout_s,
          "must exceed --heartbeat");
  require(e, c.net.chunk_bytes >= 1024, "chunk-bytes", c.net.chunk_bytes, "must be >= 1024");
  require(e, c.net.bulk_min_bytes >= 0, "bulk-min-bytes", c.net.bulk_min_bytes, "must be >= 0");
  const int tls_files = !c.net.tls_ca.empty() + !c.net.tls_cert.empty() + !c.net.tls_key.empty();
  require(e, tls_files == 0 || tls_files == 3, "tls-ca", c.net.tls_ca,
          "--tls-ca, --tls-cert and --tls-key go together (all three for TLS, none for plain TCP)");
  require(e, c.coordinator.port >= 0 && c.coordinator.port <= 65535, "port", c.coordinator.port, "must be in [0, 65535]");
  require(e, c.coordinator.http_port >= -1 && c.coordinator.http_port <= 65535, "http-port", c.coordinator.http_port,
          "must be in [0, 65535] (-1: none, for the cluster)");
  require(e, c.coordinator.averaging_timeout_s > 0, "averaging-timeout", c.coordinator.averaging_timeout_s, "must be > 0");
  require(e, c.coordinator.rebalance_period_s > 0, "rebalance-period", c.coordinator.rebalance_period_s, "must be > 0");
  require(e, c.coordinator.rebalance_min_gain >= 0, "rebalance-min-gain", c.coordinator.rebalance_min_gain,
          "must be >= 0");
  require(e, c.coordinator.min_replicas >= 1, "min-replicas", c.coordinator.min_replicas, "must be >= 1");
  require(e, c.server.port >= 0 && c.server.port <= 65535, "server-port", c.server.port, "must be in [0, 65535]");
  require(e, c.server.batch_size >= m.microbatch, "batch-size", c.server.batch_size, "must be >= microbatch");
  const auto& t = c.trainer;
  require(e, t.in_flight >= 1, "in-flight", t.in_flight, "must be >= 1");
  require(e, t.max_steps >= 0, "max-steps", t.max_steps, "must be >= 0");
  require(e, t.forward_timeout_s > 0, "forward-timeout", t.forward_timeout_s, "must be > 0");
  require(e, t.backward_timeout_s > 0, "backward-timeout", t.backward_timeout_s, "must be > 0");
  require(e, t.max_retries >= 1, "max-retries", t.max_retries, "must be >= 1");
  require(e, t.no_server_wait_s > 0, "no-server-wait", t.no_server_wait_s, "must be > 0");
  require(e, c.cluster.servers_per_stage >= 1, "servers-per-stage", c.cluster.servers_per_stage, "must be >= 1");
  require(e, c.cluster.trainers >= 1, "trainers", c.cluster.trainers, "must be >= 1");
  require(e, c.server.slowdown >= 1, "slowdown", c.server.slowdown, "must be >= 1");
  require(e, c.server.fault_after >= 1, "fault-after", c.server.fault_after, "must be >= 1");
  require(e, t.ema_alpha > 0 && t.ema_alpha <= 1, "ema-alpha", t.ema_alpha, "must be in (0, 1]");
  require(e, t.backward_cost > 0, "backward-cost", t.backward_cost, "must be > 0");
  require(e, t.ban_base_s > 0 && t.ban_max_s >= t.ban_base_s, "ban-base", t.ban_base_s, "must be > 0 and <= --ban-max");
  require(e, t.commit_grace >= 0 && t.commit_grace < 1, "commit-grace", t.commit_grace, "must be in [0, 1)");
  require(e, c.checkpoint.keep >= 1, "checkpoint-keep", c.checkpoint.keep, "must be >= 1");
  require(e, c.checkpoint.every_steps > 0 || c.checkpoint.every_s > 0, "checkpoint-every", c.checkpoint.every,
          "must be a number of steps (e.g. 100) or of seconds (e.g. 60s), above 0");
  require(e, c.cluster.chaos_coordinator_every_s >= 0, "chaos-coordinator-every", c.cluster.chaos_coordinator_every_s,
          "must be >= 0");
  require(e, c.cluster.chaos_wipe_at_s >= 0, "chaos-wipe-at", c.cluster.chaos_wipe_at_s, "must be >= 0");
  require(e, c.cluster.chaos_every_s > 0, "chaos-every", c.cluster.chaos_every_s, "must be > 0");
  require(e, c.cluster.chaos_down_s >= 0, "chaos-down", c.cluster.chaos_down_s, "must be >= 0");
  require(e, c.cluster.chaos_stage >= -1 && c.cluster.chaos_stage < c.stages, "chaos-stage", c.cluster.chaos_stage,
          "must be -1 or a stage index");
  if (!c.cluster.stage_servers.empty()) {
    const auto counts = int_list(c.cluster.stage_servers);
    int total = 0, empty = 0;
    for (int n : counts.value_or(std::vector<int>{})) {
      total += n;
      empty += n == 0;
    }
    require(e, counts && static_cast<int>(counts->size()) == c.stages && total >= 1, "stage-servers",
            c.cluster.stage_servers, "must list one whole number per stage (--stages), at least one server in all");
    require(e, empty == 0 || c.coordinator.rebalance == "on", "stage-servers", c.cluster.stage_servers,
            "leaves a stage without servers, which only --rebalance on can fill");
  }
  if (!e.empty())
    return e;
  // Role-specific required values.
  const bool needs_coordinator = c.which == role::server || c.which == role::trainer || c.which == role::status;
  if (needs_coordinator && !split_host_port(c.server.coordinator))
    return "--coordinator '" + c.server.coordinator + "': " + to_string(c.which) + " needs HOST:PORT of the coordinator";
  if (c.which == role::server && c.server.stage >= c.stages)
    return "--stage " + std::to_string(c.server.stage) + ": server needs auto or a stage in [0, " +
           std::to_string(c.stages) + ")";
  return {};
}

/// --checkpoint-every: "120" (steps) or "90s" / "1.5s" (seconds); leaves both 0 when malformed.
static void parse_interval(checkpoint_config& k) {
  k.every_steps = 0;
  k.every_s = 0;
  const auto& s = k.every;
  const bool secs = !s.empty() && s.back() == 's';
  const auto number = secs ? s.substr(0, s.size() - 1) : s;
  if (number.empty() || number.find_first_not_of(secs ? "0123456789." : "0123456789") != std::string::npos ||
      number.size() > 12)
    return;
  if (secs)
    k.every_s = std::strtod(number.c_str(), nullptr);
  else
    k.every_steps = std::stoll(number);
}

std::vector<int> cluster_config::servers_of_stages(int stages) const {
  if (auto counts = int_list(stage_servers); counts && !stage_servers.empty())
    return *counts;
  return std::vector<int>(static_cast<size_t>(std::max(stages, 0)), servers_per_stage);
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

/// The --config file named on the command line, if any.
std::optional<std::string> config_file_arg(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      return std::string{argv[i + 1]};
    if (a.rfind("--config=", 0) == 0)
      return a.substr(9);
  }
  return std::nullopt;
}

/// CLI11 takes any line of a config file it cannot read as a key of its own
/// and ignores keys it does not know, so `d-modle = 64` or even /etc/passwd
/// started training on defaults. Every line must be blank, a comment, or
/// `key = value` with a key that is a flag; else the error names the file, the
/// line and the nearest flag.
std::string check_config_file(const CLI::App& app, const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return "";  // CLI11 says it cannot read it
  std::vector<std::string> keys;
  for (const CLI::Option* opt : app.get_options())
    for (const auto& name : opt->get_lnames())
      keys.push_back(name);
  const auto trim = [](std::string t) {
    const auto b = t.find_first_not_of(" \t\r");
    const auto e = t.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string{} : t.substr(b, e - b + 1);
  };
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto text = trim(line);
    if (text.empty() || text[0] == '#' || text[0] == ';')
      continue;
    const auto where = path + ":" + std::to_string(number) + ": ";
    const auto eq = text.find('=');
    const auto key = eq == std::string::npos ? std::string{} : trim(text.substr(0, eq));
    if (key.empty() || trim(text.substr(eq + 1)).empty() || key.find_first_of(" \t\"'[]") != std::string::npos)
      return where + "not `key = value`: " + (text.size() > 60 ? text.substr(0, 60) + "..." : text);
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      continue;
    std::string nearest;
    size_t best = std::string::npos;
    for (const auto& k : keys)
      if (const auto d = edit_distance(key, k); d < best)
        best = d, nearest = k;
    return where + "unknown key '" + key + "'; the nearest flag is '" + nearest + "' (swarm --help lists them all)";
  }
  return "";
}

} // namespace

parse_result parse_config(int argc, const char* const* argv) {
  parse_result result;
  app_config c;
  std::string role_name;
  std::string stage = "auto";
  CLI::App app{"swarm: SWARM-parallel training of a byte-level GPT on CAF actors.\n"
               "One binary; --role picks what this process is. Every option is also a key of the\n"
               "--config file (`key = value`, the flag's name without dashes in front)."};
  app.set_config("--config", "", "read options from this file (see config/); flags override it");
  add_options(app, c, role_name, stage);
  if (const auto file = config_file_arg(argc, argv))
    if (auto err = check_config_file(app, *file); !err.empty()) {
      result.message = "swarm: bad config file: " + err;
      result.exit_code = 2;
      return result;
    }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    result.message = app.help();
    result.exit_code = 0;
    return result;
  } catch (const CLI::ParseError& e) {
    result.message = std::string{"swarm: "} + e.what() + "\nRun with --help for every option and its unit.";
    result.exit_code = 2;
    return result;
  }
  static const std::pair<const char*, role> roles[] = {{"coordinator", role::coordinator},
                                                       {"server", role::server},
                                                       {"trainer", role::trainer},
                                                       {"local", role::local},
                                                       {"cluster", role::cluster},
                                                       {"status", role::status},
                                                       {"calibrate", role::calibrate}};
  for (const auto& [name, r] : roles)
    if (role_name == name)
      c.which = r;
  if (auto opt = app.get_option("--config"); opt->count() > 0)
    c.config_file = opt->as<std::string>();
  if (stage != "auto") {
    const auto index = int_list(stage);
    if (!index || index->size() != 1) {
      result.message = "swarm: bad config: --stage " + stage + ": must be auto or a stage index (0-based)";
      result.exit_code = 2;
      return result;
    }
    c.server.stage = index->front();
  }
  c.trainer.batch_size = c.server.batch_size;  // one --batch-size for both roles
  parse_interval(c.checkpoint);
  c.trainer.coordinator = c.server.coordinator;
  if (auto err = validate(c); !err.empty()) {
    result.message = "swarm: bad config: " + err;
    result.exit_code = 2;
    return result;
  }
  result.config = std::move(c);
  return result;
}

std::vector<std::string> to_flags(const app_config& c) {
  std::vector<std::string> f;
  auto add = [&f](const char* name, const auto& value) {
    std::ostringstream s;
    s.precision(17);
    s << value;
    f.push_back(std::string{"--"} + name);
    f.push_back(s.str());
  };
  add("stages", c.stages);
  add("threads", c.threads);
  add("device", c.device);
  add("log-level", c.log_level);
  if (!c.metrics.empty())
    add("metrics", c.metrics);
  const auto& m = c.model;
  add("d-model", m.d_model);
  add("n-heads", m.n_heads);
  add("n-layers", m.n_layers);
  add("seq-len", m.seq_len);
  add("microbatch", m.microbatch);
  add("lr", m.lr);
  add("weight-decay", m.weight_decay);
  add("beta1", m.beta1);
  add("beta2", m.beta2);
  add("grad-clip", m.grad_clip);
  add("seed", m.seed);
  add("heartbeat", c.net.heartbeat_s);
  add("connection-timeout", c.net.connection_timeout_s);
  add("chunk-bytes", c.net.chunk_bytes);
  add("bulk-min-bytes", c.net.bulk_min_bytes);
  if (!c.net.tls_ca.empty()) {
    add("tls-ca", c.net.tls_ca);
    add("tls-cert", c.net.tls_cert);
    add("tls-key", c.net.tls_key);
  }
  add("batch-size", c.server.batch_size);
  add("averaging-compression", c.server.averaging_compression);
  add("averaging-timeout", c.coordinator.averaging_timeout_s);
  add("rebalance", c.coordinator.rebalance);
  add("rebalance-period", c.coordinator.rebalance_period_s);
  add("rebalance-min-gain", c.coordinator.rebalance_min_gain);
  add("min-replicas", c.coordinator.min_replicas);
  const auto& t = c.trainer;
  add("corpus", t.corpus);
  add("in-flight", t.in_flight);
  add("max-steps", t.max_steps);
  add("forward-timeout", t.forward_timeout_s);
  add("backward-timeout", t.backward_timeout_s);
  add("max-retries", t.max_retries);
  add("no-server-wait", t.no_server_wait_s);
  add("routing", t.routing);
  add("compression", t.compression);
  add("ema-alpha", t.ema_alpha);
  add("backward-cost", t.backward_cost);
  add("ban-base", t.ban_base_s);
  add("ban-max", t.ban_max_s);
  add("commit-grace", t.commit_grace);
  if (!c.checkpoint.dir.empty()) {
    add("checkpoint-dir", c.checkpoint.dir);
    add("checkpoint-every", c.checkpoint.every);
    add("checkpoint-keep", c.checkpoint.keep);
  }
  return f;
}

} // namespace swarm
