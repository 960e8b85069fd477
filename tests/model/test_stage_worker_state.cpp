// Tier (a): the stage worker's state transfer: a joining server imports parameters and
// optimizer state, garbage and other stages' states are refused untouched; and the cost
// model's parameter counts and state sizes equal the real stages'.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "models/shape/cost_model.hpp"
#include "models/stage_worker.hpp"

#include <catch2/catch.hpp>

#include "stage_worker_helpers.hpp"

#include <algorithm>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace swarm;
using namespace swarm::testing::stage_worker_helpers;

namespace {

/// `state` with its parameters but a fresh AdamW state: what a download that
/// forgot the optimizer would install. Follows the key layout in stage_worker.cpp.
std::string without_optimizer_state(const std::string& state) {
  torch::serialize::InputArchive in;
  std::istringstream is(state);
  in.load_from(is);
  torch::serialize::OutputArchive out;
  for (const char* key : {"format", "names"}) {
    c10::IValue v;
    in.read(key, v);
    out.write(key, v);
  }
  for (const char* key : {"span", "steps"}) {
    torch::Tensor t;
    in.read(key, t);
    out.write(key, t);
  }
  const auto keys = in.keys();
  const auto n =
      std::count_if(keys.begin(), keys.end(), [](const std::string& k) { return k.rfind("param_", 0) == 0; });
  REQUIRE(n > 0);
  for (int64_t i = 0; i < n; ++i) {
    const auto idx = std::to_string(i);
    torch::Tensor p;
    in.read("param_" + idx, p);
    out.write("param_" + idx, p);
    out.write("exp_avg_" + idx, torch::zeros_like(p));
    out.write("exp_avg_sq_" + idx, torch::zeros_like(p));
    out.write("step_" + idx, torch::tensor(int64_t{0}));
  }
  std::ostringstream os;
  out.save_to(os);
  return os.str();
}

}  // namespace

TEST_CASE("a joining server imports parameters and optimizer state", "[worker]") {
  const auto cfg = small_model();
  stage_worker a(cfg, 0, 2, "cpu");
  for (uint64_t step = 0; step < 3; ++step) {
    feed(a, 200 + 2 * step);
    feed(a, 201 + 2 * step);
    a.apply_step();
  }
  REQUIRE(a.steps() == 3);
  const auto state = a.export_state();
  const double param_bytes = static_cast<double>(a.parameter_count()) * sizeof(float);
  std::cout << "export_state: " << state.size() << " bytes for " << a.parameter_count()
            << " parameters = " << state.size() / param_bytes
            << " x parameter bytes (params + exp_avg + exp_avg_sq = 3x = " << 3 * param_bytes << " bytes)\n";
  REQUIRE(state.size() >= 3 * param_bytes);
  REQUIRE(state.size() < 3 * param_bytes + 64 * 1024);

  stage_worker b(cfg, 0, 2, "cpu"), c(cfg, 0, 2, "cpu");
  feed(b, 7);  // import drops whatever b had accumulated
  REQUIRE(b.parameter_hash() != a.parameter_hash());
  REQUIRE(code(b.import_state(state)) == errc::OK);
  REQUIRE(b.parameter_hash() == a.parameter_hash());
  REQUIRE(b.steps() == 3);
  REQUIRE(b.accumulated_samples() == 0);
  // c gets the parameters only: the check below must tell it apart.
  REQUIRE(code(c.import_state(without_optimizer_state(state))) == errc::OK);
  REQUIRE(c.parameter_hash() == a.parameter_hash());

  for (uint64_t round = 0; round < 2; ++round) {
    feed(a, 300 + round);
    const auto g = a.take_gradient();
    for (auto* w : {&a, &b, &c})
      REQUIRE(code(w->apply_gradient(g.values)) == errc::OK);
  }
  const double c_drift = (probe(c) - probe(a)).abs().max().item<double>();
  std::cout << "after 2 more steps: a " << std::hex << a.parameter_hash() << " b " << b.parameter_hash()
            << " params-only c " << c.parameter_hash() << std::dec << ", max |c - a| on a probe " << c_drift << "\n";
  REQUIRE(b.parameter_hash() == a.parameter_hash());
  REQUIRE(torch::equal(probe(b), probe(a)));
  REQUIRE(c.parameter_hash() != a.parameter_hash());
  const bool same_state = b.export_state() == a.export_state();  // bool: Catch would print the bytes
  REQUIRE(same_state);
}

TEST_CASE("import_state refuses garbage and other stages' states untouched", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 0, 2, "cpu");
  feed(w, 1);
  w.apply_step();
  const auto before = w.parameter_hash();
  const auto good = w.export_state();
  auto wider = cfg;
  wider.d_model = 64;

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"empty", ""},
      {"garbage", "this is not a torch archive"},
      {"truncated", good.substr(0, good.size() / 2)},
      {"params only, no format",
       [] {
         torch::serialize::OutputArchive out;
         out.write("param_0", torch::zeros({3}));
         std::ostringstream os;
         out.save_to(os);
         return os.str();
       }()},
  };
  for (const auto& [what, bytes] : bad) {
    const auto err = w.import_state(bytes);
    std::cout << what << ": " << (err ? describe(err) : "OK") << "\n";
    REQUIRE(code(err) == errc::BAD_REQUEST);
  }
  const std::vector<std::pair<std::string, std::string>> foreign = {
      {"last stage", stage_worker(cfg, 1, 2, "cpu").export_state()},
      {"stage 0 of 4", stage_worker(cfg, 0, 4, "cpu").export_state()},
      {"d_model 64", stage_worker(wider, 0, 2, "cpu").export_state()},
  };
  for (const auto& [what, bytes] : foreign) {
    const auto err = w.import_state(bytes);
    std::cout << what << ": " << (err ? describe(err) : "OK") << "\n";
    REQUIRE(code(err) == errc::WRONG_SHAPE);
  }
  REQUIRE(w.parameter_hash() == before);
  REQUIRE(w.steps() == 1);
  const bool same_state = w.export_state() == good;  // optimizer state untouched too
  REQUIRE(same_state);
}

TEST_CASE("cost model: parameter counts equal the real stages'", "[model][sim]") {
  // swarm-sim sizes state copies and all-reduces from models/shape/cost_model's
  // formula; it must count what models/stage_module.cpp builds.
  for (int stages : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
    model_config m;
    m.d_model = 64;
    m.n_layers = 3;
    m.seq_len = 32;
    if (stages > 7) {  // --boundary on 3 stages: gpt bottleneck, llama maxout
      m.boundary = stages == 8 ? "bottleneck:4" : "maxout:2";
      m.arch = stages == 8 ? "gpt" : "llama";
      stages = 3;
    }
    if (stages > 3) {  // llama, with grouped-query attention from 5 on, sharing at 7
      m.arch = "llama";
      m.n_kv_heads = stages > 4 ? 2 : 0;
      m.ffn_dim = stages > 5 ? 100 : 0;
      stages -= 3;
    }
    if (stages == 4) {  // 6 layers in runs of 3 on 2 stages: one block each
      m.n_layers = 6;
      m.share_layers = 3;
      stages = 2;
    }
    INFO(m.arch << " kv " << m.kv_heads() << " ffn " << m.ffn_width() << " share " << m.share_layers << " boundary "
                << m.boundary << ", " << stages << " stages");
    const model_shape shape{m, stages, "none"};
    for (int k = 0; k < stages; ++k) {
      stage_worker worker(m, k, stages, "cpu");
      CHECK(worker.parameter_count() == stage_parameters(shape, k));
      // The bulk plane refuses frames above this (net/bulk.hpp max_frame): a
      // state copy, the largest payload, must stay under it.
      CHECK(worker.export_state().size() <= largest_payload_bytes(shape));
    }
  }
  // qwen2: llama's counts and its q, k and v biases, with grouped-query attention, with and without a boundary.
  for (const std::string boundary : {"none", "bottleneck:4"}) {
    model_config m;
    m.arch = "qwen2";
    m.d_model = 64;
    m.n_layers = 3;
    m.seq_len = 32;
    m.n_kv_heads = 2;
    m.boundary = boundary;
    INFO("qwen2 boundary " << boundary);
    const model_shape shape{m, 3, "none"};
    for (int k = 0; k < 3; ++k) {
      stage_worker worker(m, k, 3, "cpu");
      CHECK(worker.parameter_count() == stage_parameters(shape, k));
    }
  }
}
