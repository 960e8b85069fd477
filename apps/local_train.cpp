#include "apps/local_train.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>

#include "actors/metrics.hpp"
#include "apps/roles.hpp"
#include "models/corpus.hpp"
#include "models/gpt.hpp"

namespace swarm {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

torch::Tensor to_tensor(std::vector<int64_t>& values, int64_t batch, int64_t seq_len, const torch::Device& device) {
  return torch::from_blob(values.data(), {batch, seq_len}, torch::kLong).to(device, /*non_blocking=*/false, /*copy=*/true);
}

/// One optimizer step over `microbatches` microbatches; returns their mean loss.
double train_step(stage_module& model, torch::optim::Optimizer& opt, const corpus& text, const model_config& m,
                  int64_t microbatches, std::mt19937_64& rng, const torch::Device& device) {
  double loss_sum = 0;
  for (int64_t i = 0; i < microbatches; ++i) {
    auto mb = sample_microbatch(text, m.microbatch, m.seq_len, rng);
    auto loss = lm_loss(model->forward(to_tensor(mb.inputs, mb.batch, mb.seq_len, device)),
                        to_tensor(mb.targets, mb.batch, mb.seq_len, device));
    loss.backward();
    loss_sum += loss.item<double>();
  }
  // Same accounting as the stage workers: the mean of the microbatches' gradients.
  for (auto& p : model->parameters())
    if (p.grad().defined())
      p.mutable_grad().div_(static_cast<double>(microbatches));
  if (m.grad_clip > 0)
    torch::nn::utils::clip_grad_norm_(model->parameters(), m.grad_clip);
  opt.step();
  opt.zero_grad();
  return loss_sum / static_cast<double>(microbatches);
}

} // namespace

int run_local(const app_config& cfg, metrics_sink& metrics, const std::atomic<bool>& stop_requested) {
  set_torch_threads(cfg.threads);
  const int threads = torch::get_num_threads();
  const auto& m = cfg.model;
  std::optional<corpus> text;
  try {
    text.emplace(corpus::load(cfg.trainer.corpus, m.seq_len + 1));
  } catch (const std::exception& e) {
    std::cerr << "local: " << e.what() << "\n";
    return 2;
  }
  std::optional<torch::Device> device;
  try {
    device.emplace(usable_device(cfg.device));
  } catch (const std::exception& e) {
    std::cerr << "local: " << e.what() << "\n";
    return 2;
  }
  auto model = make_full_model(m);
  model->to(*device);  // before the optimizer, which holds the parameters it is given
  auto opt = make_optimizer(*model, m);
  std::mt19937_64 rng(m.seed);
  // Gradient accumulation: the batch is cut into microbatches exactly as the swarm does.
  const int64_t microbatches = std::max<int64_t>(1, cfg.trainer.batch_size / m.microbatch);
  const int64_t samples_per_step = microbatches * m.microbatch;
  std::cout << "local: " << text->size() << " corpus bytes, batch " << samples_per_step << " = " << microbatches
            << " x " << m.microbatch << ", " << threads << " threads, device " << cfg.device << std::endl;

  const auto start = clock_type::now();
  int64_t samples = 0;
  for (int64_t step = 1; (cfg.trainer.max_steps == 0 || step <= cfg.trainer.max_steps) && !stop_requested; ++step) {
    const auto step_start = clock_type::now();
    const double loss = train_step(model, *opt, *text, m, microbatches, rng, *device);
    const double step_s = seconds_since(step_start);
    samples += samples_per_step;
    const double tokens_per_s = static_cast<double>(samples_per_step * m.seq_len) / std::max(step_s, 1e-9);
    metrics.emit("step", {{"step", int64_t{step}},
                          {"loss", loss},
                          {"samples", int64_t{samples}},
                          {"tokens", int64_t{samples * m.seq_len}},
                          {"tokens_per_s", tokens_per_s},
                          {"elapsed_s", seconds_since(start)}});
    std::printf("local step %lld loss %.3f tokens/s %.0f\n", static_cast<long long>(step), loss, tokens_per_s);
    std::fflush(stdout);
  }
  return 0;
}

} // namespace swarm
