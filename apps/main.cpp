// swarm: SWARM-parallel training of a GPT- or Llama-style model on CAF actors and libtorch.
//
//   swarm --role cluster --config config/small            # a local swarm, many processes
//   swarm --role local --config config/small              # the same model in one process
//   swarm --role coordinator --port 7000
//   swarm --role server --coordinator host:7000 --stage 1
//   swarm --role trainer --coordinator host:7000
//   swarm --role tokenizer --input DIR --vocab-size 8000 --out tok.model
//   swarm --role prepare --input DIR --tokenizer tok.model --out shards/
//   swarm --role export --config config/llama-small --checkpoint-dir ckpt --out hf/
//   swarm --role generate --config config/llama-small --checkpoint-dir ckpt --prompt "Once"
//
// Every option: swarm --help. Config files: config/. Metrics: docs/metrics.md.

#include <iostream>

#include "base/log.hpp"
#include "base/metrics.hpp"
#include "apps/data_roles.hpp"
#include "apps/local_train.hpp"
#include "apps/malloc_reuse.hpp"
#include "apps/roles.hpp"
#include "apps/weight_roles.hpp"
#include "messages/errors.hpp"
#include "net/peer_roles.hpp"
#include "net/tls.hpp"

namespace swarm {
namespace {

/// Why this node's own certificate cannot serve its --role (empty when it
/// can): peers would refuse every message of it, so it stops here instead.
std::string check_own_roles(const app_config& cfg) {
  role_set needed = 0;
  switch (cfg.which) {
    case role::coordinator: needed = role_coordinator; break;
    case role::server: needed = role_server; break;
    case role::trainer:
    case role::generate: needed = role_trainer; break;  // generate sends forward requests, as a trainer does
    case role::status: needed = role_status; break;
    case role::cluster: needed = role_any; break;  // every process of the cluster uses the one certificate
    default: return {};
  }
  const auto has = roles_of_certificate_file(cfg.net.tls_cert);
  if (!has || (*has & needed) == needed)
    return {};  // an unreadable file was reported by tls_context::load
  return "--tls-cert " + cfg.net.tls_cert + " names " + describe_roles(*has) + "; --role " + to_string(cfg.which) +
         " needs a certificate for " + describe_roles(needed) +
         " (the CA signs one so: scripts/make_certs.sh node DIR NAME " +
         (needed == role_any ? std::string{"all"} : describe_roles(needed)) + ")";
}

}  // namespace
}  // namespace swarm

int main(int argc, char** argv) {
  swarm::keep_freed_memory();
  auto parsed = swarm::parse_config(argc, argv);
  if (!parsed.config) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  auto cfg = *parsed.config;
  for (const auto& w : parsed.warnings)
    std::cerr << "swarm: warning: " << w << "\n";
  if (!cfg.net.tls_ca.empty()) {
    // A bad certificate or key must stop a node here, not at its first connection.
    auto tls = swarm::tls_context::load({cfg.net.tls_ca, cfg.net.tls_cert, cfg.net.tls_key});
    if (!tls) {
      std::cerr << "swarm: bad TLS files: " << swarm::describe(tls.error()) << "\n";
      return 2;
    }
    if (auto refused = swarm::check_own_roles(cfg); !refused.empty()) {
      std::cerr << "swarm: " << refused << "\n";
      return 2;
    }
    swarm::enforce_roles();
  }
  // Every role but status opens the tokenizer: its hash is part of the model hash peers compare.
  std::shared_ptr<const swarm::tokenizer> tok;
  if (cfg.which != swarm::role::status) {
    auto opened = swarm::use_tokenizer(cfg);
    if (!opened) {
      std::cerr << "swarm: " << opened.error().what() << "\n";
      return 2;
    }
    tok = *opened;
  }
  swarm::install_signal_handlers();
  try {
    switch (cfg.which) {
      case swarm::role::tokenizer: return swarm::run_tokenizer(cfg, *tok);
      case swarm::role::prepare: return swarm::run_prepare(cfg, *tok);
      case swarm::role::export_weights: return swarm::run_export(cfg, *tok);
      case swarm::role::generate: return swarm::run_generate(cfg, *tok);
      case swarm::role::coordinator: return swarm::run_coordinator(cfg);
      case swarm::role::server: return swarm::run_server(cfg);
      case swarm::role::trainer: return swarm::run_trainer(cfg);
      case swarm::role::cluster: return swarm::run_cluster(cfg);
      case swarm::role::status: return swarm::run_status(cfg);
      case swarm::role::calibrate: return swarm::run_calibrate(cfg);
      case swarm::role::local: {
        swarm::setup_logging("local", cfg.log_level);
        auto metrics = swarm::open_metrics(cfg.metrics, "local");
        return swarm::run_local(cfg, *metrics, swarm::stop_requested);
      }
    }
  } catch (const std::exception& e) {
    // Start-up misconfiguration (unreadable metrics file, bad corpus, ...).
    std::cerr << "swarm: " << e.what() << "\n";
    return 2;
  }
  return 2;
}
