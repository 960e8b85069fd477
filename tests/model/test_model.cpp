// Tier (a/b): both model families and their stage cut against the whole model as reference.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "base/metrics.hpp"
#include "config/family.hpp"
#include "models/llama_block.hpp"
#include "models/losses.hpp"
#include "models/norm.hpp"
#include "models/stage_backward.hpp"
#include "models/optimizer.hpp"
#include "apps/local_train.hpp"
#include "apps/thread_split.hpp"

#include <catch2/catch.hpp>

#include "model_configs.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

using namespace swarm;

namespace {

using testing::family_model;
using testing::small_model;

std::string family_name(const model_config& cfg) {
  return cfg.arch + " kv " + std::to_string(cfg.kv_heads()) + "/" + std::to_string(cfg.n_heads) + " share " +
         std::to_string(cfg.share_layers);
}

torch::Tensor random_tokens(int64_t b, int64_t t, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randint(0, 256, {b, t}, gen, torch::kLong);
}

std::vector<stage_module> make_stages(const model_config& cfg, int num_stages) {
  std::vector<stage_module> stages;
  for (const auto& span : partition_layers(cfg, num_stages))
    stages.emplace_back(cfg, span);
  return stages;
}

/// The swarm's schedule: forwards without grad stage by stage, loss and backward
/// on the last stage, then stateless backwards in reverse with the returned grads.
float run_staged(std::vector<stage_module>& stages, const torch::Tensor& x, const torch::Tensor& y) {
  std::vector<torch::Tensor> inputs{x};
  for (size_t k = 0; k + 1 < stages.size(); ++k) {
    torch::NoGradGuard no_grad;
    inputs.push_back(stages[k]->forward(inputs[k]));
  }
  auto last = last_stage_forward_backward(stages.back(), inputs.back(), y);
  auto grad = last.input_grad;
  for (size_t k = stages.size() - 1; k-- > 0;)
    grad = stage_backward(stages[k], inputs[k], grad);
  REQUIRE(!grad.defined());  // stage 0's inputs are token ids
  return last.loss;
}

std::map<std::string, torch::Tensor> named(torch::nn::Module& m, bool grads) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m.named_parameters())
    out[item.key()] = grads ? item.value().grad() : item.value();
  return out;
}

/// Max |a - b| over every tensor of `full`, which `staged` must hold under the same names.
double max_diff(const std::map<std::string, torch::Tensor>& full, const std::map<std::string, torch::Tensor>& staged) {
  REQUIRE(full.size() == staged.size());
  double worst = 0;
  for (const auto& [name, t] : full) {
    INFO("parameter " << name);
    auto it = staged.find(name);
    REQUIRE(it != staged.end());
    REQUIRE(t.defined());
    REQUIRE(it->second.defined());
    REQUIRE(it->second.sizes() == t.sizes());
    worst = std::max(worst, (t - it->second).abs().max().item<double>());
  }
  return worst;
}

std::map<std::string, torch::Tensor> merged(std::vector<stage_module>& stages, bool grads) {
  std::map<std::string, torch::Tensor> all;
  for (auto& s : stages)
    for (auto& [name, t] : named(*s, grads))
      REQUIRE(all.emplace(name, t).second);  // every parameter lives on exactly one stage
  return all;
}

}  // namespace

TEST_CASE("a stage built alone holds the full model's weights", "[model]") {
  const auto cfg = family_model(GENERATE(0, 1, 2, 3, 4));
  INFO(family_name(cfg));
  auto full = make_full_model(cfg);
  for (int s : {1, 2, 3, 4}) {
    if (s > cfg.n_layers / cfg.share_layers)
      continue;  // sharing in pairs: 2 stages at most
    auto stages = make_stages(cfg, s);
    const double diff = max_diff(named(*full, false), merged(stages, false));
    std::cout << "init S=" << s << ": max |w_full - w_staged| = " << diff << "\n";
    REQUIRE(diff == 0.0);
  }
  // Another seed gives other weights.
  auto other_cfg = cfg;
  other_cfg.seed = 99;
  auto other = make_full_model(other_cfg);
  REQUIRE(max_diff(named(*full, false), named(*other, false)) > 0.01);
}

TEST_CASE("the staged chain reproduces the full model's loss and every gradient", "[model]") {
  const auto cfg = family_model(GENERATE(0, 1, 2, 3, 4));
  INFO(family_name(cfg));
  for (int64_t t : {cfg.seq_len, int64_t{10}}) {
    const auto x = random_tokens(cfg.microbatch, t, 1);
    const auto y = random_tokens(cfg.microbatch, t, 2);
    auto full = make_full_model(cfg);
    auto full_loss = lm_loss(full->forward(x), y);
    full_loss.backward();
    for (int s : {2, 3, 4}) {
      if (s > cfg.n_layers / cfg.share_layers)
        continue;
      auto stages = make_stages(cfg, s);
      const float loss = run_staged(stages, x, y);
      const double grad_diff = max_diff(named(*full, true), merged(stages, true));
      const double loss_diff = std::abs(loss - full_loss.item<float>());
      std::cout << family_name(cfg) << " T=" << t << " S=" << s << ": loss " << loss << " |dloss| " << loss_diff
                << " max |dgrad| " << grad_diff << "\n";
      CHECK(loss_diff < 1e-5);
      CHECK(grad_diff < 1e-5);
    }
  }
}

TEST_CASE("--boundary: the cut carries d/K features through trained layers on either side", "[model]") {
  auto cfg = family_model(GENERATE(0, 1, 4));
  cfg.boundary = GENERATE(std::string{"bottleneck:4"}, std::string{"maxout:2"});
  INFO(family_name(cfg) << " " << cfg.boundary);
  const auto x = random_tokens(cfg.microbatch, cfg.seq_len, 1);
  const auto y = random_tokens(cfg.microbatch, cfg.seq_len, 2);
  auto stages = make_stages(cfg, 3);
  // Stage 0 ends in the boundary's norm (and down), stage 1 has both sides, stage 2 begins with up.
  const auto names = [](stage_module& s) {
    std::set<std::string> out;
    for (const auto& p : s->named_parameters())
      if (p.key().rfind("boundary_", 0) == 0)
        out.insert(p.key().substr(0, p.key().find('.')));
    return out;
  };
  const bool maxout = cfg.boundary.rfind("maxout", 0) == 0;
  const std::set<std::string> out_side =
      maxout ? std::set<std::string>{"boundary_norm"} : std::set<std::string>{"boundary_norm", "boundary_down"};
  auto both = out_side;
  both.insert("boundary_up");
  CHECK(names(stages[0]) == out_side);
  CHECK(names(stages[1]) == both);
  CHECK(names(stages[2]) == std::set<std::string>{"boundary_up"});
  torch::Tensor wire;
  {
    torch::NoGradGuard no_grad;
    wire = stages[0]->forward(x);
  }
  CHECK(wire.sizes() == torch::IntArrayRef{cfg.microbatch, cfg.seq_len, cfg.wire_width()});
  CHECK(cfg.wire_width() == cfg.d_model / (maxout ? 2 : 4));
  {
    // By hand from the same stage without a boundary (its blocks are seeded alike):
    // the norm at its initial unit gain, then down or the max of each pair.
    torch::NoGradGuard no_grad;
    auto plain_cfg = cfg;
    plain_cfg.boundary = "none";
    const auto h = make_stages(plain_cfg, 3)[0]->forward(x);
    const auto n = family_of(cfg).norm == norm_kind::rms_norm ? h * torch::rsqrt(h.pow(2).mean(-1, true) + cfg.norm_eps)
                                                              : torch::layer_norm(h, {cfg.d_model}, {}, {}, 1e-5);
    torch::Tensor expected;
    if (maxout) {
      expected = std::get<0>(n.unflatten(-1, {cfg.d_model / 2, 2}).max(-1));
    } else {
      const auto params = named(*stages[0], false);
      const auto bias = params.count("boundary_down.bias") ? params.at("boundary_down.bias") : torch::Tensor{};
      expected = torch::nn::functional::linear(n, params.at("boundary_down.weight"), bias);
    }
    CHECK((wire - expected).abs().max().item<double>() < 1e-5);
  }
  // Trained like any weight: the staged chain gives every boundary layer a gradient.
  const float loss = run_staged(stages, x, y);
  CHECK(std::isfinite(loss));
  for (auto& s : stages)
    for (const auto& p : s->named_parameters())
      if (p.key().rfind("boundary_", 0) == 0) {
        INFO(p.key());
        REQUIRE(p.value().grad().defined());
        CHECK(p.value().grad().abs().sum().item<double>() > 0);
      }
  // Another boundary is another model.
  auto other = cfg;
  other.boundary = "none";
  CHECK(other.hash() != cfg.hash());
}

TEST_CASE("attention is causal", "[model]") {
  const auto cfg = family_model(GENERATE(0, 1, 2, 4));
  INFO(family_name(cfg));
  auto model = make_full_model(cfg);
  torch::NoGradGuard no_grad;
  auto x = random_tokens(2, cfg.seq_len, 3);
  auto changed = x.clone();
  changed.index_put_({torch::indexing::Slice(), 10}, (x.index({torch::indexing::Slice(), 10}) + 1) % 256);
  auto a = model->forward(x), b = model->forward(changed);
  const double before = (a.narrow(1, 0, 10) - b.narrow(1, 0, 10)).abs().max().item<double>();
  const double at = (a.narrow(1, 10, 1) - b.narrow(1, 10, 1)).abs().max().item<double>();
  std::cout << "causality: max change before pos 10 " << before << ", at pos 10 " << at << "\n";
  REQUIRE(before == 0.0);
  REQUIRE(at > 1e-4);
}

TEST_CASE("qwen2 is llama with q, k and v biases: at zero biases the same model", "[model][qwen2]") {
  const auto q = family_model(4);
  auto l = q;
  l.arch = "llama";
  auto qwen2 = make_full_model(q), llama = make_full_model(l);
  const auto qp = named(*qwen2, false), lp = named(*llama, false);
  // The same parameters and draws, plus three biases per block (zero at initialisation).
  CHECK(qp.size() == lp.size() + 3 * static_cast<size_t>(q.n_layers));
  for (const auto& [name, t] : lp) {
    INFO(name);
    REQUIRE(qp.count(name));
    CHECK(torch::equal(qp.at(name), t));
  }
  REQUIRE(qp.count("block0.q_proj.bias"));
  CHECK(qp.at("block0.q_proj.bias").sizes() == torch::IntArrayRef{q.d_model});
  CHECK(qp.at("block0.k_proj.bias").sizes() == torch::IntArrayRef{q.kv_heads() * (q.d_model / q.n_heads)});
  CHECK(qp.at("block2.v_proj.bias").abs().max().item<double>() == 0.0);
  const auto x = random_tokens(2, q.seq_len, 3), y = random_tokens(2, q.seq_len, 4);
  {
    torch::NoGradGuard no_grad;
    // Equal up to rounding: a linear with a bias may take another kernel (addmm) than one without.
    CHECK((qwen2->forward(x) - llama->forward(x)).abs().max().item<double>() < 1e-5);
  }
  // The biases train: each gets a gradient, and a non-zero bias changes the logits.
  lm_loss(qwen2->forward(x), y).backward();
  for (const auto& [name, g] : named(*qwen2, true))
    if (name.find("_proj.bias") != std::string::npos) {
      INFO(name);
      CHECK(g.abs().sum().item<double>() > 0);
    }
  torch::NoGradGuard no_grad;
  for (auto& p : qwen2->named_parameters())
    if (p.key() == "block1.k_proj.bias")
      p.value().fill_(0.5);
  CHECK((qwen2->forward(x) - llama->forward(x)).abs().max().item<double>() > 1e-3);
}

TEST_CASE("lm_loss is the mean next-byte cross-entropy", "[model]") {
  auto gen = at::detail::createCPUGenerator(5);
  auto logits = torch::randn({2, 3, 256}, gen);
  auto targets = random_tokens(2, 3, 6);
  auto reference = -torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).mean();
  const double diff = std::abs(lm_loss(logits, targets).item<double>() - reference.item<double>());
  std::cout << "lm_loss vs log_softmax reference: |diff| " << diff << "\n";
  REQUIRE(diff < 1e-6);
}

TEST_CASE("an untrained model predicts bytes almost uniformly", "[model]") {
  const auto cfg = family_model(GENERATE(0, 2));
  INFO(family_name(cfg));
  auto model = make_full_model(cfg);
  torch::NoGradGuard no_grad;
  const double loss =
      lm_loss(model->forward(random_tokens(8, cfg.seq_len, 7)), random_tokens(8, cfg.seq_len, 8)).item<double>();
  std::cout << "untrained loss " << loss << " (ln 256 = " << std::log(256.0) << ")\n";
  REQUIRE(std::abs(loss - std::log(256.0)) < 0.3);
}

TEST_CASE("the optimizer decays matrices only", "[model]") {
  auto cfg = small_model();
  auto model = make_full_model(cfg);
  auto opt = make_optimizer(*model, cfg);
  REQUIRE(opt->param_groups().size() == 2);
  size_t total = 0;
  for (auto& group : opt->param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params())
      REQUIRE(o.weight_decay() == (p.dim() >= 2 ? cfg.weight_decay : 0.0));
    REQUIRE(o.lr() == cfg.lr);
    REQUIRE(std::get<1>(o.betas()) == cfg.beta2);
    total += group.params().size();
  }
  REQUIRE(total == model->parameters().size());
}

TEST_CASE("a shared block is the unshared model with equal blocks; its gradient is their sum", "[model][llama]") {
  // Independent of the sharing code: the unshared model, its blocks 2k and
  // 2k + 1 set to the shared model's block 2k, computes the same logits, and
  // the shared block's gradient is the sum of the two blocks' gradients.
  auto shared_cfg = family_model(3);
  auto plain_cfg = shared_cfg;
  plain_cfg.share_layers = 1;
  auto shared = make_full_model(shared_cfg), plain = make_full_model(plain_cfg);
  auto shared_params = named(*shared, false);
  CHECK(shared_params.size() < named(*plain, false).size());
  const auto source = [](const std::string& name) {  // plain's name -> shared's
    if (name.rfind("block", 0) != 0)
      return name;
    const auto dot = name.find('.');
    const int k = std::stoi(name.substr(5, dot - 5));
    return "block" + std::to_string(k - k % 2) + name.substr(dot);
  };
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : named(*plain, false))
      p.copy_(shared_params.at(source(name)));
  }
  const auto x = random_tokens(2, shared_cfg.seq_len, 21), y = random_tokens(2, shared_cfg.seq_len, 22);
  auto a = shared->forward(x), b = plain->forward(x);
  CHECK((a - b).abs().max().item<double>() < 1e-5);
  lm_loss(a, y).backward();
  lm_loss(b, y).backward();
  std::map<std::string, torch::Tensor> summed;
  for (auto& [name, g] : named(*plain, true)) {
    auto& s = summed[source(name)];
    s = s.defined() ? s + g : g.clone();
  }
  const double diff = max_diff(named(*shared, true), summed);
  std::cout << "sharing: max |grad_shared - sum of unshared grads| = " << diff << "\n";
  CHECK(diff < 1e-5);
}

TEST_CASE("rotary embeddings: attention scores depend on relative positions only", "[model][llama]") {
  // q at position i and k at position j score the same as at i + s and j + s;
  // different offsets score differently.
  auto gen = at::detail::createCPUGenerator(11);
  const auto q = torch::randn({1, 1, 1, 16}, gen), k = torch::randn({1, 1, 1, 16}, gen);
  const auto score = [&](int64_t i, int64_t j) {
    const auto [cq, sq] = rotary_tables(i, 1, 16, 10000, torch::kCPU);
    const auto [ck, sk] = rotary_tables(j, 1, 16, 10000, torch::kCPU);
    return (apply_rotary(q, cq, sq) * apply_rotary(k, ck, sk)).sum().item<double>();
  };
  CHECK(score(5, 2) == Approx(score(105, 102)).epsilon(1e-4));
  CHECK(score(7, 7) == Approx(score(0, 0)).epsilon(1e-4));
  CHECK(std::abs(score(5, 2) - score(5, 4)) > 1e-3);
  // Position 0 is the identity; a rotation keeps the norm.
  const auto [c0, s0] = rotary_tables(0, 1, 16, 10000, torch::kCPU);
  CHECK((apply_rotary(q, c0, s0) - q).abs().max().item<double>() == 0.0);
  const auto [c9, s9] = rotary_tables(9, 1, 16, 10000, torch::kCPU);
  CHECK(apply_rotary(q, c9, s9).norm().item<double>() == Approx(q.norm().item<double>()).epsilon(1e-5));
}

TEST_CASE("RMSNorm divides by the root mean square", "[model][llama]") {
  rms_norm norm(4, 1e-6);
  const auto x = torch::tensor({1.0f, -2.0f, 3.0f, -4.0f}).view({1, 4});
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0);
  const auto y = norm(x);
  for (int i = 0; i < 4; ++i)
    CHECK(y[0][i].item<double>() == Approx(x[0][i].item<double>() / rms).epsilon(1e-5));
}

TEST_CASE("training on a repeated string drives the loss down", "[model]") {
  auto cfg = family_model(GENERATE(0, 2));
  INFO(family_name(cfg));
  cfg.lr = 3e-3;
  const std::string pattern = "hello swarm! ";
  std::vector<int64_t> text;
  for (int i = 0; i < 40; ++i)
    for (unsigned char c : pattern)
      text.push_back(c);
  auto model = make_full_model(cfg);
  auto opt = make_optimizer(*model, cfg);
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<size_t> start(0, text.size() - cfg.seq_len - 1);
  const auto t0 = std::chrono::steady_clock::now();
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto x = torch::empty({8, cfg.seq_len}, torch::kLong), y = torch::empty({8, cfg.seq_len}, torch::kLong);
    for (int64_t b = 0; b < 8; ++b) {
      const size_t i = start(rng);
      x[b] = torch::tensor(std::vector<int64_t>(text.begin() + i, text.begin() + i + cfg.seq_len));
      y[b] = torch::tensor(std::vector<int64_t>(text.begin() + i + 1, text.begin() + i + 1 + cfg.seq_len));
    }
    auto loss = lm_loss(model->forward(x), y);
    opt->zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.grad_clip);
    opt->step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "training: loss " << first << " -> " << last << " in 200 steps, " << secs << " s\n";
  REQUIRE(last < 0.5);
}

TEST_CASE("run_local trains a few steps and reports a missing corpus or device", "[model]") {
  app_config cfg;
  cfg.model = small_model();
  cfg.threads = 2;
  cfg.trainer.batch_size = 6;  // two microbatches of 3
  cfg.trainer.max_steps = 3;
  cfg.trainer.corpus = "/tmp/swarm_test_model_corpus.txt";
  {
    std::ofstream out(cfg.trainer.corpus);
    for (int i = 0; i < 50; ++i)
      out << "the quick brown fox jumps over the lazy dog\n";
  }
  metrics_sink none;
  std::atomic<bool> stop{false};
  REQUIRE(run_local(cfg, none, stop) == 0);
  if (!torch::cuda::is_available()) {  // this machine: the CPU-only Debian libtorch
    cfg.device = "cuda";
    REQUIRE(run_local(cfg, none, stop) == 2);
    cfg.device = "cpu";
  }
  cfg.model.boundary = "bottleneck:2";  // one stage has no cut to put it at
  REQUIRE(run_local(cfg, none, stop) == 2);
  CHECK(whole_model_error(cfg.model, "local").code() == errc::BAD_CONFIG);
  cfg.model.boundary = "none";
  CHECK(whole_model_error(cfg.model, "local").code() == errc::OK);
  cfg.trainer.corpus = "/nonexistent/corpus";
  REQUIRE(run_local(cfg, none, stop) == 2);
  std::remove("/tmp/swarm_test_model_corpus.txt");
}

TEST_CASE("a process's threads go to torch for narrow models and bf16, to OpenBLAS from a width of 512", "[config]") {
  using swarm::split_threads;
  auto is = [](swarm::thread_split s, int torch, int blas) { return s.torch == torch && s.blas == blas; };
  CHECK(is(split_threads(2, 128), 2, 1));
  CHECK(is(split_threads(2, 0), 2, 1));  // width unknown: as a narrow model
  CHECK(is(split_threads(2, 511), 2, 1));
  CHECK(is(split_threads(2, 512), 1, 2));
  CHECK(is(split_threads(4, 1024), 1, 4));
  // bf16 products run on torch's pool (oneDNN) at every width.
  CHECK(is(split_threads(2, 1024, true), 2, 1));
  CHECK(is(split_threads(2, 128, true), 2, 1));
  // Never more than it was given, never none.
  CHECK(is(split_threads(1, 1024), 1, 1));
  CHECK(is(split_threads(0, 128), 1, 1));
  CHECK(is(split_threads(-3, 4096), 1, 1));
}
