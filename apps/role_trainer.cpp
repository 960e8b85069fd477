// --role trainer: reads the corpus and drives microbatches through the
// stages: one load balancer per stage, the trainer actor, and a reporter that
// tells the coordinator's status page how training goes.

#include <iostream>

#include <malloc.h>
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/load_balancer.hpp"
#include "apps/balancer_config.hpp"
#include "actors/status_reporter.hpp"
#include "actors/trainer.hpp"
#include "apps/node.hpp"
#include "apps/roles.hpp"
#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "apps/data_roles.hpp"

namespace swarm {

namespace {

/// With --checkpoint-dir: claims a trainer slot and continues from its newest
/// position; false (said on stderr) when that cannot be done.
bool resume_trainer(const app_config& cfg, trainer_settings& tcfg) {
  auto checkpoints = checkpoints_of(cfg, "trainer");
  if (!checkpoints)
    return false;
  tcfg.checkpoints = *checkpoints;
  if (!checkpoints->store)
    return true;
  const auto& store = *checkpoints->store;
  auto slot = claim_trainer_slot(store, cfg.trainer.slot);
  if (!slot) {
    std::cerr << "swarm: trainer: " << describe(slot.error()) << "\n";
    return false;
  }
  tcfg.slot = *slot;
  auto found =
      store.newest(checkpoint_header::kind::trainer, *slot, static_cast<uint32_t>(cfg.stages), cfg.model.hash());
  if (!found) {
    std::cerr << "swarm: trainer: " << describe(found.error()) << "\n";
    return false;
  }
  auto log = get_logger("trainer");
  if (!*found) {
    log->info("checkpoints of this trainer go to {} (slot {}): none to resume from", store.dir(), *slot);
    return true;
  }
  auto position = decode_position((*found)->payload);
  if (!position) {
    log->error("checkpoint {} is not a trainer position; starting at step 0", (*found)->path);
    return true;
  }
  log->info("resuming from {}: step {}, {} samples done, data sampler where it was", (*found)->path, position->step,
            position->samples);
  tcfg.resume = *position;
  return true;
}

}  // namespace

load_balancer_config balancer_config(const app_config& cfg, const std::string& trainer_id, int stage,
                                     std::shared_ptr<bulk_endpoint> bulk) {
  load_balancer_config lb;
  lb.trainer = cfg.trainer;
  lb.net = cfg.net;
  lb.stage = stage;
  lb.last_stage = stage == cfg.stages - 1;
  lb.trainer_id = trainer_id;
  lb.config_hash = cfg.model.hash();
  lb.tokenizer = cfg.model.tokenizer_label();
  lb.bulk = std::move(bulk);
  lb.seed = cfg.model.seed * 1000003 + static_cast<uint64_t>(::getpid()) * 31 + static_cast<uint64_t>(stage);
  return lb;
}

int run_trainer(const app_config& cfg) {
  // Two malloc arenas, not glibc's 8 per core: a trainer's CAF workers and a
  // bulk reader thread per server connection (a new one for every restarted
  // server) each filled an arena of their own with free chunks it kept
  // (chaos soak: thread arenas +2.8 MB in 5 min, the main one flat; the
  // trainer +13% in 30 min).
  ::mallopt(M_ARENA_MAX, 2);
  const std::string trainer_id = "t" + std::to_string(::getpid());
  node n{cfg, "trainer " + trainer_id, "trainer", "trainer"};
  auto text = training_text(cfg);
  if (!text) {
    std::cerr << "swarm: trainer: " << text.error().what() << "\n";
    return 2;
  }
  trainer_settings tcfg{trainer_id, cfg.stages, cfg.model, cfg.trainer};
  if (cfg.trainer.eval_every > 0) {
    auto val = validation_text(cfg);
    if (!val) {
      std::cerr << "swarm: trainer: validation: " << val.error().what() << "\n";
      return 2;
    }
    auto batches = eval_batches(**val, cfg.model.seq_len, cfg.trainer.eval_tokens, cfg.model.microbatch);
    if (!batches) {
      std::cerr << "swarm: trainer: validation: " << batches.error().what() << "\n";
      return 2;
    }
    tcfg.eval_set = std::move(*batches);
  }
  if (cfg.trainer.slot >= 0)
    tcfg.slot = cfg.trainer.slot;
  if (!resume_trainer(cfg, tcfg))
    return 2;
  // A slot, given or claimed, draws the same windows in every run; without
  // one each process samples anew.
  const bool has_slot = cfg.trainer.slot >= 0 || tcfg.checkpoints.store;
  tcfg.sampler_seed = sampler_seed(cfg.model.seed, has_slot ? static_cast<uint64_t>(tcfg.slot)
                                                            : (uint64_t{1} << 32) + static_cast<uint64_t>(::getpid()));
  if (has_slot)
    get_logger("trainer")->info("trainer slot {}: the data sampler draws the same windows in every run", tcfg.slot);
  else
    get_logger("trainer")->info(
        "no trainer slot: the data sampler is seeded by the process id ({}); --trainer-slot N "
        "repeats a run's windows",
        ::getpid());
  auto& sys = n.start();
  auto coord = n.connect(cfg.trainer.coordinator);
  auto bulk = n.bulk();
  std::vector<caf::actor> balancers;
  auto busy = std::make_shared<std::atomic<int64_t>>(0);
  tcfg.busy_answers = busy;
  auto verified = std::make_shared<policy::verify_counters>();
  tcfg.verified = verified;
  for (int s = 0; s < cfg.stages; ++s) {
    auto lb = balancer_config(cfg, trainer_id, s, bulk);
    lb.busy_answers = busy;
    lb.verified = verified;
    balancers.push_back(sys.spawn(load_balancer, std::move(lb), coord, n.metrics()));
  }
  n.phase("training");
  auto t = sys.spawn(trainer, tcfg, *text, balancers, n.metrics());
  auto reporter = sys.spawn(status_reporter, trainer_id, cfg.trainer.max_steps, tally_of(*n.metrics()), coord);
  // Train until done; after a coordinator restart the load balancers subscribe
  // to the new one (they keep routing to the servers they know meanwhile).
  const auto reason = n.run_with_coordinator(caf::actor_cast<caf::actor>(t), coord, cfg.trainer.coordinator,
                                             [&](const coordinator_actor& fresh) {
                                               for (auto& lb : balancers)
                                                 caf::anon_send(lb, coordinator_changed{fresh});
                                               caf::anon_send(reporter, coordinator_changed{fresh});
                                               return caf::error{};
                                             });
  for (auto& lb : balancers)
    caf::anon_send_exit(lb, caf::exit_reason::user_shutdown);
  report_last(sys, reporter);
  caf::anon_send_exit(reporter, caf::exit_reason::user_shutdown);
  n.emit_bulk(trainer_id);
  if (exit_code_of(reason) != 0)
    std::cerr << "swarm: trainer stopped: " << describe(reason) << "\n";
  n.end(exit_code_of(reason));
}

}  // namespace swarm
