#include "config/config.hpp"

#include "base/hash.hpp"
#include "base/metrics_events.hpp"
#include "config/family.hpp"
#include "config/key_words.hpp"
#include "config/keys.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <sstream>
#include <tuple>

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
    case role::tokenizer: return "tokenizer";
    case role::prepare: return "prepare";
    case role::export_weights: return "export";
    case role::generate: return "generate";
  }
  return "?";
}

uint64_t model_config::hash() const {
  // FNV-1a over the printed fields: stable across processes and builds.
  std::ostringstream s;
  s << d_model << ' ' << n_heads << ' ' << n_layers << ' ' << seq_len << ' ' << microbatch << ' ' << vocab << ' ' << lr
    << ' ' << weight_decay << ' ' << beta1 << ' ' << beta2 << ' ' << grad_clip << ' ' << seed;
  // This basis is one digit short of FNV's; it stays, or every checkpoint
  // written so far would belong to "another model config".
  if (tokenizer_hash != 0)  // bytes leave the hash as it was before tokenizers
    s << " tok " << tokenizer_hash;
  if (share_layers != 1)  // unshared models hash as before sharing existed
    s << " share " << share_layers;
  if (optimizer != "adamw")  // AdamW runs hash as they did before LAMB
    s << " opt " << optimizer;
  if (lr_schedule != "constant" || warmup_steps != 0)  // and constant rates as before schedules
    s << " sched " << lr_schedule << ' ' << warmup_steps << ' ' << min_lr << ' ' << decay_steps;
  if (boundary != "none")
    s << " boundary " << boundary;
  // The family's own fields; gpt writes none, so its hash is what it was before model families.
  if (const auto* f = find_family(arch); f && f->hash)
    f->hash(*this, s);
  const auto text = s.str();
  return fnv1a64(text.data(), text.size(), 1469598103934665603ull);
}

int64_t model_config::kv_heads() const {
  const auto* f = find_family(arch);
  return f && f->grouped_query && n_kv_heads > 0 ? n_kv_heads : n_heads;
}

int64_t model_config::ffn_width() const {
  const auto* f = find_family(arch);
  return f && f->ffn_width ? f->ffn_width(*this) : 4 * d_model;  // 4 d: what an unknown --model is refused with
}

std::pair<std::string, int64_t> model_config::boundary_kind() const {
  const auto colon = boundary.find(':');
  if (colon == std::string::npos)
    return {boundary, 1};
  const auto k = boundary.substr(colon + 1);
  const bool digits = !k.empty() && k.size() <= 6 && k.find_first_not_of("0123456789") == std::string::npos;
  return {boundary.substr(0, colon), digits ? std::max<int64_t>(1, std::stoll(k)) : 1};
}

std::string model_config::tokenizer_label() const {
  if (tokenizer_hash == 0)
    return tokenizer;
  char hex[24];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(tokenizer_hash));
  return tokenizer + " (hash " + hex + ")";
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

std::optional<std::vector<std::pair<std::string, uint16_t>>> parse_control(const std::string& url, std::string& why) {
  const std::string scheme = "etcd://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    why = "--control " + url + ": expected etcd://HOST:PORT[,HOST:PORT...]";
    return std::nullopt;
  }
  std::vector<std::pair<std::string, uint16_t>> out;
  std::stringstream in(url.substr(scheme.size()) + ",");  // a trailing comma names an empty member
  for (std::string item; std::getline(in, item, ',');) {
    auto hp = split_host_port(item);
    if (!hp) {
      why = "--control " + url + ": member '" + item + "' is not HOST:PORT";
      return std::nullopt;
    }
    out.push_back(*hp);
  }
  if (out.empty()) {
    why = "--control " + url + ": names no member";
    return std::nullopt;
  }
  return out;
}

namespace {

template <class T>
void require(std::string& err, bool ok, const char* flag, const T& value, const char* rule) {
  if (!ok && err.empty()) {
    std::ostringstream s;
    s << "--" << flag << " " << value << ": " << rule;
    err = s.str();
  }
}

/// The values a role needs beyond every role's (a coordinator, inputs, an
/// output, a model source): the first one missing, or empty.
std::string role_rules(const app_config& c) {
  const bool needs_coordinator = c.which == role::server || c.which == role::trainer || c.which == role::status;
  if (!c.net.control.empty()) {
    std::string why;
    if (!parse_control(c.net.control, why))
      return why;
  }
  if (c.which == role::cluster && c.cluster.control_replicas > 0 && !c.net.control.empty())
    return "--control with --control-replicas: the cluster starts its own etcd members and sets --control itself";
  if (needs_coordinator && c.net.control.empty() && !split_host_port(c.server.coordinator))
    return "--coordinator '" + c.server.coordinator + "': " + to_string(c.which) +
           " needs HOST:PORT of the coordinator "
           "(or --control etcd://...)";
  if (c.which == role::server && c.server.stage >= c.stages)
    return "--stage " + std::to_string(c.server.stage) + ": server needs auto or a stage in [0, " +
           std::to_string(c.stages) + ")";
  const bool makes_tokenizer = c.which == role::tokenizer && !c.data.encode;
  if ((makes_tokenizer || c.which == role::prepare) && c.data.inputs().empty())
    return std::string{"--input: "} + to_string(c.which) + " needs the text files or folders to read";
  if ((makes_tokenizer || c.which == role::prepare) && (c.out.empty() || c.out == "-"))
    return std::string{"--out: "} + to_string(c.which) + " needs " +
           (makes_tokenizer ? "the model file to write" : "the folder to write the shards to");
  if (c.which == role::prepare && c.model.tokenizer == "bytes")
    return "--tokenizer bytes: prepare needs a SentencePiece model (--role tokenizer makes one; bytes have no "
           "end-of-document token, and --corpus trains on raw bytes without preparing)";
  if (c.which == role::export_weights && (c.out.empty() || c.out == "-"))
    return "--out: export needs the folder to write model.safetensors, config.json and the tokenizer to";
  if (c.which == role::export_weights && c.checkpoint.dir.empty() == c.init_from.empty())
    return "export needs exactly one source: --checkpoint-dir DIR (a run's checkpoints) or --init-from FILE";
  if (c.which == role::generate &&
      int{!c.checkpoint.dir.empty()} + int{!c.init_from.empty()} + int{!c.server.coordinator.empty()} != 1)
    return "generate needs exactly one model: --checkpoint-dir DIR, --init-from FILE or --coordinator HOST:PORT "
           "(a running swarm)";
  if (c.which == role::generate && !c.server.coordinator.empty() && !split_host_port(c.server.coordinator))
    return "--coordinator '" + c.server.coordinator + "': generate needs HOST:PORT of the coordinator";
  if (c.trainer.eval_every > 0 && c.trainer.data.empty() &&
      (c.which == role::trainer || c.which == role::local || c.which == role::cluster))
    return "--eval-every " + std::to_string(c.trainer.eval_every) +
           ": validation needs --data (the held-out shards of --role prepare)";
  return {};
}

}  // namespace

std::string validate(const app_config& c) {
  // Each key's own check comes from its row; `copy` because a binding may write.
  app_config copy = c;
  if (auto e = keys::check_all(bind_keys(copy)); !e.empty())
    return e;
  // Rules across keys.
  std::string e;
  const auto& m = c.model;
  require(e, m.d_model % m.n_heads == 0, "n-heads", m.n_heads, "must be >= 1 and divide d-model");
  if (const auto* f = find_family(m.arch); e.empty() && f && f->validate)
    e = f->validate(m);  // the family's own rules: "--flag value: rule"
  const auto [cut, k] = m.boundary_kind();
  require(e, cut == "none" || (k >= 2 && m.d_model % k == 0), "boundary", m.boundary,
          "needs a K of at least 2 that divides --d-model");
  require(e, cut == "none" || c.stages >= 2, "boundary", m.boundary,
          "changes the model only at stage cuts: it needs --stages 2 or more");
  require(e, m.n_layers % m.share_layers == 0, "share-layers", m.share_layers, "must divide n-layers");
  require(e, m.lr_schedule != "cosine" || c.trainer.max_steps > m.warmup_steps, "lr-schedule", m.lr_schedule,
          "decays to --min-lr at --max-steps: set --max-steps above --warmup-steps (on every role: it is part of the "
          "config hash)");
  require(e, m.min_lr <= m.lr, "min-lr", m.min_lr, "must be <= --lr");
  require(e, c.stages <= m.n_layers / std::max<int64_t>(1, m.share_layers), "stages", c.stages,
          "must be in [1, n-layers / share-layers]");
  require(e, c.net.connection_timeout_s > c.net.heartbeat_s, "connection-timeout", c.net.connection_timeout_s,
          "must exceed --heartbeat");
  const int tls_files = !c.net.tls_ca.empty() + !c.net.tls_cert.empty() + !c.net.tls_key.empty();
  require(e, tls_files == 0 || tls_files == 3, "tls-ca", c.net.tls_ca,
          "--tls-ca, --tls-cert and --tls-key go together (all three for TLS, none for plain TCP)");
  require(e, c.net.control_cert.empty() == c.net.control_key.empty(), "control-cert", c.net.control_cert,
          "--control-cert and --control-key go together");
  require(e, c.net.control_cert.empty() || !c.net.control_ca.empty(), "control-cert", c.net.control_cert,
          "needs --control-ca (the CA that signed etcd's certificate)");
  require(e, c.server.batch_size >= m.microbatch, "batch-size", c.server.batch_size, "must be >= microbatch");
  require(e, !c.server.lies() || c.server.allow_faults, "fault", key_words::fault_text(c.server),
          "makes this server lie, for tests and benchmarks only: it needs --allow-faults too");
  const auto& t = c.trainer;
  require(e, t.router.ban_max_s >= t.router.ban_base_s, "ban-base", t.router.ban_base_s,
          "must be > 0 and <= --ban-max");
  require(e, c.cluster.chaos_stage < c.stages, "chaos-stage", c.cluster.chaos_stage, "must be -1 or a stage index");
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
  return role_rules(c);
}

std::vector<std::string> data_config::inputs() const {
  std::vector<std::string> out;
  std::stringstream in(input);
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      out.push_back(line);
  return out;
}

std::vector<int> cluster_config::servers_of_stages(int stages) const {
  if (auto counts = int_list(stage_servers); counts && !stage_servers.empty())
    return *counts;
  return std::vector<int>(static_cast<size_t>(std::max(stages, 0)), servers_per_stage);
}

parse_result parse_config(int argc, const char* const* argv) {
  parse_result result;
  app_config c;
  auto bound = bind_keys(c);
  if (keys::has_arg(argc, argv, "--help-markdown")) {
    result.message = keys::markdown_table(bound);
    return result;
  }
  if (keys::has_arg(argc, argv, "--help-metrics-markdown")) {
    result.message = metrics_events_markdown();
    return result;
  }
  CLI::App app{
      "swarm: SWARM-parallel training of a GPT- or Llama-style model on CAF actors.\n"
      "One binary; --role picks what this process is. Every option is also a key of the\n"
      "--config file (`key = value`, the flag's name without dashes in front).\n"
      "--help-markdown prints this list as docs/flags.md's table, --help-metrics-markdown\n"
      "the metrics events as docs/metrics.md's."};
  // The last occurrence wins, so a launcher can append overrides to a full flag list.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  app.set_config("--config", "", "read options from this file (see config/); flags override it");
  keys::add_options(app, bound);
  // --input takes several paths (--input a b, or repeated); they are kept one per line.
  app.get_option("--input")->multi_option_policy(CLI::MultiOptionPolicy::Join)->delimiter('\n')->expected(1, 1 << 20);
  if (const auto file = keys::config_file_arg(argc, argv))
    if (auto err = keys::check_config_file(app, *file, "swarm"); !err.empty()) {
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
  if (auto err = keys::apply_text(bound); !err.empty()) {
    result.message = "swarm: bad config: " + err;
    result.exit_code = 2;
    return result;
  }
  if (auto opt = app.get_option("--config"); opt->count() > 0)
    c.config_file = opt->as<std::string>();
  c.trainer.batch_size = c.server.batch_size;  // one --batch-size for both roles
  std::tie(c.checkpoint.every_steps, c.checkpoint.every_s) = checkpoint_interval(c.checkpoint.every);
  c.trainer.coordinator = c.server.coordinator;
  c.model.decay_steps = c.model.lr_schedule == "cosine" ? c.trainer.max_steps : 0;
  if (auto err = validate(c); !err.empty()) {
    result.message = "swarm: bad config: " + err;
    result.exit_code = 2;
    return result;
  }
  result.warnings = config_warnings(c);
  result.config = std::move(c);
  return result;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::vector<std::string> config_warnings(const app_config& c) {
  std::vector<std::string> out;
  std::string why;
  const auto members = c.net.control.empty() ? std::nullopt : parse_control(c.net.control, why);
  const auto loopback = [](const std::pair<std::string, uint16_t>& m) { return is_loopback_host(m.first); };
  // Whoever can answer for etcd names the leader every node follows: TLS on
  // the swarm's links is worth little if that answer travels in the clear.
  if (members && !c.net.tls_ca.empty() && c.net.control_ca.empty() &&
      !std::all_of(members->begin(), members->end(), loopback))
    out.push_back("--control " + c.net.control +
                  " is plain HTTP while this swarm uses TLS (--tls-ca): anyone on the path can read and forge etcd's "
                  "answers, who leads included. Give etcd TLS (--control-ca, --control-cert, --control-key; "
                  "docs/deploy.md) or keep it on this machine.");
  return out;
}

std::vector<std::string> to_flags(const app_config& c, bool every_key) {
  app_config copy = c;  // a binding may write; this one only reads
  return keys::to_flags(bind_keys(copy), every_key);
}

}  // namespace swarm
