#include "apps/local_train.hpp"

#include "models/optimizer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>

#include "base/metrics.hpp"
#include "apps/roles.hpp"
#include "messages/errors.hpp"
#include "models/checkpoint.hpp"
#include "models/stage_module.hpp"
#include "apps/data_roles.hpp"
#include "apps/weight_roles.hpp"
#include "models/stage_worker.hpp"

namespace swarm {

namespace {

using clock_type = std::chrono::steady_clock;

at::Tensor to_tensor(const std::vector<int64_t>& values, int64_t batch, int64_t seq_len) {
  return torch::tensor(values, torch::kLong).reshape({batch, seq_len});
}

/// --checkpoint-dir for the local run: the model as stage 0 of a one-stage
/// model (the stage server's format) and the position as trainer slot 0.
struct local_checkpoints {
  std::optional<checkpoint_store> store;
  int slot = 0;

  /// Loads the newest state and position; false (said on stderr) when the
  /// folder holds another model's checkpoints or they do not load.
  bool resume(const app_config& cfg, stage_worker& worker, int64_t& step, int64_t& samples, std::mt19937_64& rng) {
    if (cfg.checkpoint.dir.empty())
      return true;
    store.emplace(cfg.checkpoint.dir, cfg.checkpoint.keep);
    const auto hash = cfg.model.hash();
    auto fail = [](const error& err) {
      std::cerr << "local: " << describe(err) << "\n";
      return false;
    };
    if (auto err = store->check_all(1, hash))
      return fail(err);
    auto claimed = claim_trainer_slot(*store);
    if (!claimed)
      return fail(claimed.error());
    slot = *claimed;
    auto state = store->newest(checkpoint_header::kind::stage, 0, 1, hash);
    auto position = store->newest(checkpoint_header::kind::trainer, slot, 1, hash);
    if (!state)
      return fail(state.error());
    if (!position)
      return fail(position.error());
    if (!*state)
      return true;
    if (auto err = worker.import_state((*state)->payload))
      return fail(err);
    step = worker.steps();
    std::cout << "local: resumed from " << (*state)->path << " at step " << step;
    if (*position) {
      auto p = decode_position((*position)->payload);
      if (p && p->step == step) {  // the position of that same step: the data goes on where it was
        std::istringstream in(p->rng);
        in >> rng;
        samples = p->samples;
        std::cout << ", data sampler where it was";
      }
    }
    std::cout << std::endl;
    return true;
  }

  /// Writes state and position when one is due (or `now`).
  void save(const app_config& cfg, const stage_worker& worker, int64_t samples, const std::mt19937_64& rng,
            double since_s, bool now, metrics_sink& metrics) {
    if (!store)
      return;
    const int64_t step = worker.steps();
    const auto newest = store->latest_written(checkpoint_header::kind::stage, 0);
    if (now ? step <= 0 || (newest && newest->step == step)
            : !checkpoint_due(step, newest, cfg.checkpoint.every_steps, cfg.checkpoint.every_s, since_s))
      return;
    const auto started = clock_type::now();
    const auto state = worker.export_state();
    std::ostringstream generator;
    generator << rng;
    auto written = store->write({checkpoint_header::kind::stage, 0, 1, cfg.model.hash(), step}, state);
    auto position = store->write({checkpoint_header::kind::trainer, slot, 1, cfg.model.hash(), step},
                                 encode_position({step, samples, generator.str()}));
    if (!written || !position) {
      std::cerr << "local: checkpoint at step " << step
                << " failed: " << describe(written ? position.error() : written.error()) << std::endl;
      return;
    }
    metrics.emit("checkpoint", {{"stage", int64_t{0}},
                                {"step", step},
                                {"file", *written},
                                {"bytes", static_cast<int64_t>(state.size())},
                                {"seconds", seconds_since(started)}});
  }
};

/// --init-from's weights into `worker`; false (and why on stderr) when they do not load.
bool load_initial(const app_config& cfg, stage_worker& worker) {
  auto weights = initial_weights(cfg);
  const error err = weights ? worker.load_parameters(**weights) : weights.error();
  if (err) {
    std::cerr << "local: --init-from: " << err.what() << "\n";
    return false;
  }
  std::cout << "local: weights from " << cfg.init_from << std::endl;
  return true;
}

/// One optimizer step over `microbatches` sampled microbatches, gradients
/// accumulated as a stage server does; their mean loss, or why the data
/// could not be read.
result<double> train_step(stage_worker& worker, const token_source& text, int64_t microbatches, const model_config& m,
                          std::mt19937_64& rng) {
  double loss_sum = 0;
  for (int64_t i = 0; i < microbatches; ++i) {
    auto drawn = sample_microbatch(text, m.microbatch, m.seq_len, rng);
    if (!drawn)
      return drawn.error();
    const auto& mb = *drawn;
    const auto targets = to_tensor(mb.targets, mb.batch, mb.seq_len);
    auto result = worker.forward(to_tensor(mb.inputs, mb.batch, mb.seq_len), &targets);
    if (!result) {
      std::cerr << "local: microbatch skipped: " << describe(result.error()) << "\n";
      continue;
    }
    loss_sum += result->loss;
  }
  worker.apply_step();
  return loss_sum / static_cast<double>(microbatches);
}

/// The validation loss at `step` on the same windows as a swarm trainer's
/// (data/corpus.hpp, eval_batches): an eval event and a line.
void validate_at(stage_worker& worker, const std::vector<microbatch_tokens>& eval_set, int64_t step, int64_t seq_len,
                 metrics_sink& metrics) {
  const auto started = clock_type::now();
  double loss_sum = 0;
  int64_t measured = 0, failed = 0;
  for (const auto& mb : eval_set) {
    auto loss =
        worker.evaluate(to_tensor(mb.inputs, mb.batch, mb.seq_len), to_tensor(mb.targets, mb.batch, mb.seq_len));
    if (!loss) {
      failed += mb.batch;
      continue;
    }
    loss_sum += static_cast<double>(*loss) * static_cast<double>(mb.batch);
    measured += mb.batch;
  }
  const double loss = measured ? loss_sum / static_cast<double>(measured) : std::nan("");
  metrics.emit("eval", {{"step", step},
                        {"samples", measured},
                        {"tokens", measured * seq_len},
                        {"loss", loss},
                        {"perplexity", std::exp(loss)},
                        {"failed", failed},
                        {"seconds", seconds_since(started)}});
  std::printf("local validation at step %lld: loss %.4f (perplexity %.1f) on %lld samples\n",
              static_cast<long long>(step), loss, std::exp(loss), static_cast<long long>(measured));
  std::fflush(stdout);
}

}  // namespace

int run_local(const app_config& cfg, metrics_sink& metrics, const std::atomic<bool>& stop_requested) {
  const auto& m = cfg.model;
  const auto threads = set_torch_threads(cfg.threads, m.d_model, cfg.bf16());
  if (auto err = whole_model_error(m, "local")) {
    std::cerr << err.what() << "\n";
    return 2;
  }
  auto text = training_text(cfg);
  if (!text) {
    std::cerr << "local: " << text.error().what() << "\n";
    return 2;
  }
  // The whole model is stage 0 of a one-stage cut: the stage server's worker,
  // so gradients accumulate and steps apply exactly as on a server.
  std::optional<stage_worker> worker;
  try {
    worker.emplace(m, 0, 1, cfg.device);
    worker->set_bf16(cfg.bf16());
  } catch (const std::exception& e) {
    std::cerr << "local: " << e.what() << "\n";
    return 2;
  }
  std::mt19937_64 rng(m.seed);
  int64_t step = 0, samples = 0;
  local_checkpoints checkpoints;
  if (!checkpoints.resume(cfg, *worker, step, samples, rng))
    return 2;
  if (step == 0 && !cfg.init_from.empty() && !load_initial(cfg, *worker))  // a checkpoint is further along
    return 2;
  // Gradient accumulation: the batch is cut into microbatches exactly as the swarm does.
  const int64_t microbatches = std::max<int64_t>(1, cfg.trainer.batch_size / m.microbatch);
  const int64_t samples_per_step = microbatches * m.microbatch;
  std::cout << "local: " << (*text)->tokens() << (cfg.trainer.data.empty() ? " corpus bytes" : " tokens") << ", batch "
            << samples_per_step << " = " << microbatches << " x " << m.microbatch << ", " << threads.torch
            << " torch + " << threads.blas << " BLAS threads, device " << cfg.device << std::endl;

  // Validation on the same windows as a swarm trainer's (data/corpus.hpp, eval_batches).
  std::vector<microbatch_tokens> eval_set;
  if (cfg.trainer.eval_every > 0) {
    auto val = validation_text(cfg);
    if (!val) {
      std::cerr << "local: validation: " << val.error().what() << "\n";
      return 2;
    }
    auto batches = eval_batches(**val, m.seq_len, cfg.trainer.eval_tokens, m.microbatch);
    if (!batches) {
      std::cerr << "local: validation: " << batches.error().what() << "\n";
      return 2;
    }
    eval_set = std::move(*batches);
  }
  auto evaluate = [&] {
    if (!eval_set.empty() && step % cfg.trainer.eval_every == 0)
      validate_at(*worker, eval_set, step, m.seq_len, metrics);
  };
  evaluate();

  const auto start = clock_type::now();
  while ((cfg.trainer.max_steps == 0 || step < cfg.trainer.max_steps) && !stop_requested) {
    const auto step_start = clock_type::now();
    const auto trained = train_step(*worker, **text, microbatches, m, rng);
    if (!trained) {
      std::cerr << "local: " << trained.error().what() << "\n";
      return 2;
    }
    const double loss = *trained;
    step = worker->steps();
    const double step_s = seconds_since(step_start);
    samples += samples_per_step;
    const double tokens_per_s = static_cast<double>(samples_per_step * m.seq_len) / std::max(step_s, 1e-9);
    metrics.emit("step", {{"step", int64_t{step}},
                          {"loss", loss},
                          {"samples", int64_t{samples}},
                          {"tokens", int64_t{samples * m.seq_len}},
                          {"tokens_per_s", tokens_per_s},
                          {"lr", learning_rate(m, step - 1)},
                          {"elapsed_s", seconds_since(start)}});
    std::printf("local step %lld loss %.3f tokens/s %.0f\n", static_cast<long long>(step), loss, tokens_per_s);
    std::fflush(stdout);
    checkpoints.save(cfg, *worker, samples, rng, seconds_since(start), false, metrics);
    evaluate();
  }
  checkpoints.save(cfg, *worker, samples, rng, seconds_since(start), true, metrics);
  return 0;
}

}  // namespace swarm
