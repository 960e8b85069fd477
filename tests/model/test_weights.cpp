// Weights in and out (models/hf_weights), the KV cache and the sampling loop
// (models/generator), and the independent NumPy forward of an exported model.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "models/generator.hpp"
#include "models/stage_module.hpp"
#include "models/hf_format.hpp"
#include "models/hf_weights.hpp"
#include "models/safetensors.hpp"

#include <catch2/catch.hpp>

#include "model_configs.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace swarm;

namespace {

namespace fs = std::filesystem;

/// testing::family_model(which), seed 99, positions turning faster.
model_config family(int which) {
  auto cfg = testing::family_model(which);
  cfg.seed = 99;
  cfg.microbatch = model_config{}.microbatch;  // as these files were written
  if (which > 0)
    cfg.rope_theta = 500;  // positions turn faster: a rotary mistake shows within 12 tokens
  return cfg;
}

named_tensors params_of(stage_module& m) {
  named_tensors out;
  for (const auto& p : m->named_parameters())
    out.emplace(p.key(), p.value().detach().clone());
  return out;
}

/// A model whose weights are far from their initialisation (gains and biases
/// too), so that logits are O(1) and a wrong transpose or rotary layout shows.
stage_module perturbed_model(const model_config& cfg) {
  auto m = make_full_model(cfg);
  auto gen = at::detail::createCPUGenerator(cfg.seed + 7);
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters())
    p.add_(torch::randn(p.sizes(), gen) * 0.3);
  return m;
}

/// Token ids [b, t] drawn from a fixed seed: every run checks the same sequences.
torch::Tensor tokens_of(const model_config& cfg, int64_t b, int64_t t) {
  auto gen = at::detail::createCPUGenerator(cfg.seed + 11);
  return torch::randint(0, cfg.vocab, {b, t}, gen, torch::kLong);
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/swarm-test-weights-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string file_of(const model_config& cfg, const named_tensors& params) {
  auto bytes = write_hf_weights(cfg, params);
  REQUIRE(bytes);
  return *bytes;
}

/// The error reading `bytes` as cfg's weights gives (empty when it reads).
std::string refusal(const model_config& cfg, const std::string& bytes) {
  temp_dir dir;
  write(dir.path / "w.safetensors", bytes);
  auto read = read_hf_weights(cfg, (dir.path / "w.safetensors").string());
  return read ? std::string{} : read.error().what();
}

/// `file` with its tensors changed by `change` (which may point them at bytes that outlive the call).
std::string rewritten(const std::string& file, const std::function<void(std::vector<safetensor>&)>& change) {
  auto parsed = parse_safetensors(file);
  REQUIRE(parsed);
  auto tensors = parsed->tensors;
  change(tensors);
  auto out = write_safetensors(tensors, parsed->metadata);
  REQUIRE(out);
  return *out;
}

}  // namespace

TEST_CASE("exported weights come back exactly, and the same weights give the same bytes", "[weights]") {
  const auto cfg = family(GENERATE(0, 1, 2, 3, 4));
  INFO(cfg.arch << " kv " << cfg.kv_heads() << " share " << cfg.share_layers);
  auto m = perturbed_model(cfg);
  const auto params = params_of(m);
  const auto bytes = file_of(cfg, params);
  CHECK(file_of(cfg, params) == bytes);
  auto parsed = parse_safetensors(bytes);
  REQUIRE(parsed);
  // A reader needs no notion of sharing: one tensor per layer, copies of a shared block equal.
  CHECK(parsed->tensors.size() == hf_layout(cfg).size());
  if (cfg.arch != "gpt") {
    REQUIRE(parsed->find("model.layers.3.self_attn.q_proj.weight"));
    CHECK((parsed->find("model.layers.1.mlp.up_proj.weight")->data ==
           parsed->find("model.layers.0.mlp.up_proj.weight")->data) == (cfg.share_layers == 2));
    // qwen2's q, k and v biases under Qwen2ForCausalLM's names; llama has none.
    const auto* k_bias = parsed->find("model.layers.3.self_attn.k_proj.bias");
    CHECK((k_bias != nullptr) == (cfg.arch == "qwen2"));
    if (k_bias)
      CHECK(k_bias->shape == std::vector<int64_t>{16});  // 2 key/value heads of 8
    CHECK((parsed->find("model.layers.0.self_attn.o_proj.bias") == nullptr));
  } else {
    CHECK(parsed->find("transformer.h.3.attn.c_attn.weight")->shape == std::vector<int64_t>{32, 96});  // Conv1D
  }
  temp_dir dir;
  write(dir.path / "w.safetensors", bytes);
  auto back = read_hf_weights(cfg, (dir.path / "w.safetensors").string());
  REQUIRE(back);
  REQUIRE(back->size() == params.size());
  for (const auto& [name, t] : params) {
    INFO(name);
    REQUIRE(back->count(name));
    CHECK(torch::equal(back->at(name), t));
  }
  // Into a model of another seed: it becomes this one.
  auto other_cfg = cfg;
  other_cfg.seed = 5;
  auto other = make_full_model(other_cfg);
  REQUIRE_FALSE(load_parameters(*other, *back));
  const auto x = tokens_of(cfg, 2, 9);
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(other->forward(x), m->forward(x)));
}

TEST_CASE("a weights file that does not fit is refused, naming the tensor", "[weights]") {
  const auto cfg = family(3);  // llama, GQA, shared pairs
  auto m = perturbed_model(cfg);
  const auto file = file_of(cfg, params_of(m));
  auto drop = [&](const std::string& name) {
    return rewritten(file, [&](std::vector<safetensor>& ts) {
      ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const safetensor& t) { return t.name == name; }), ts.end());
    });
  };
  CHECK_THAT(refusal(cfg, drop("model.layers.2.self_attn.k_proj.weight")),
             Catch::Contains("model.layers.2.self_attn.k_proj.weight is missing"));
  CHECK_THAT(refusal(cfg, drop("lm_head.weight")), Catch::Contains("lm_head.weight is missing"));

  auto wider = cfg;
  wider.n_kv_heads = 4;
  CHECK_THAT(refusal(wider, file), Catch::Contains("model.layers.0.self_attn.k_proj.weight is [16, 32], this model "
                                                   "needs [32, 32]"));
  auto fewer = cfg;
  fewer.n_layers = 2;
  CHECK_THAT(refusal(fewer, file), Catch::Contains("model.layers.2.input_layernorm.weight is not part of this model"));
  auto gpt = family(0);
  CHECK_THAT(refusal(gpt, file), Catch::Contains("transformer.wte.weight is missing"));

  // Another dtype: integers are no weights; F16 is read (and rounded).
  const std::string ints(4 * 32, '\0');
  auto retyped = [&](const std::string& dtype, std::string_view data) {
    return rewritten(file, [&](std::vector<safetensor>& ts) {
      for (auto& t : ts)
        if (t.name == "model.norm.weight") {
          t.dtype = dtype;
          t.data = data;
        }
    });
  };
  CHECK_THAT(refusal(cfg, retyped("I32", ints)), Catch::Contains("model.norm.weight is I32"));
  const auto halves = torch::full({32}, 1.5, torch::kHalf);
  CHECK(refusal(cfg, retyped("F16", std::string_view(static_cast<const char*>(halves.data_ptr()), 64))).empty());

  // NaN, and a shared block whose copies differ.
  const auto nan = torch::full({32}, std::nanf(""));
  CHECK_THAT(refusal(cfg, retyped("F32", std::string_view(static_cast<const char*>(nan.data_ptr()), 128))),
             Catch::Contains("model.norm.weight holds NaN or Inf"));
  const auto ones = torch::ones({32});
  const auto differing = rewritten(file, [&](std::vector<safetensor>& ts) {
    for (auto& t : ts)
      if (t.name == "model.layers.1.input_layernorm.weight")
        t.data = std::string_view(static_cast<const char*>(ones.data_ptr()), 128);
  });
  CHECK_THAT(refusal(cfg, differing), Catch::Contains("model.layers.1.input_layernorm.weight differs from the other "
                                                      "layers of its run"));
  CHECK_THAT(refusal(cfg, file.substr(0, file.size() / 2)), Catch::Contains("safetensors"));
  CHECK_THAT(refusal(cfg, "garbage"), Catch::Contains("safetensors"));
  CHECK(refusal(cfg, file).empty());
}

TEST_CASE("qwen2 and llama files are told apart by the q, k and v biases", "[weights][qwen2]") {
  const auto qwen2 = family(4);
  auto llama = qwen2;
  llama.arch = "llama";
  auto q = perturbed_model(qwen2);
  auto l = perturbed_model(llama);
  CHECK_THAT(refusal(qwen2, file_of(llama, params_of(l))),
             Catch::Contains("model.layers.0.self_attn.q_proj.bias is missing"));
  CHECK_THAT(refusal(llama, file_of(qwen2, params_of(q))), Catch::Contains("_proj.bias is not part of this model"));
  const auto config = hf_config_json(qwen2);
  CHECK_THAT(config, Catch::Contains("\"Qwen2ForCausalLM\""));
  CHECK_THAT(config, Catch::Contains("\"model_type\": \"qwen2\""));
  CHECK_THAT(config, Catch::Contains("\"num_key_value_heads\": 2"));
  auto parsed = parse_safetensors(file_of(qwen2, params_of(q)));
  REQUIRE(parsed);
  CHECK(parsed->metadata.at("swarm_model") == "qwen2");
}

TEST_CASE("the KV cache gives the logits of the whole forward", "[weights][generate]") {
  const auto cfg = family(GENERATE(0, 1, 2, 3, 4));
  INFO(cfg.arch << " kv " << cfg.kv_heads() << " share " << cfg.share_layers);
  auto m = perturbed_model(cfg);
  torch::NoGradGuard no_grad;
  const auto x = tokens_of(cfg, 2, 14);
  const auto whole = m->forward(x);
  std::vector<kv_slot> cache;
  std::vector<torch::Tensor> pieces;
  int64_t at = 0;
  for (const int64_t n : {5, 1, 1, 7}) {
    pieces.push_back(m->forward_cached(x.narrow(1, at, n), cache));
    at += n;
  }
  CHECK(cache.front().positions() == 14);
  CHECK((torch::cat(pieces, 1) - whole).abs().max().item<double>() < 1e-4);  // logits of O(10)
}

TEST_CASE("greedy generation is the same with and without the cache, past the context", "[weights][generate]") {
  const auto cfg = family(GENERATE(0, 2, 4));
  auto m = perturbed_model(cfg);
  const auto params = params_of(m);
  local_model cached(cfg, params, true), recomputed(cfg, params, false);
  generation_request r;
  r.context = {10, 20, 30};
  r.max_new_tokens = 40;  // the context is 16: the window jumps ahead three times
  r.seq_len = cfg.seq_len;
  r.temperature = 0;
  std::vector<int64_t> seen;
  auto a = generate(
      r, [&](const auto& t, int64_t w) { return cached.next_logits(t, w); }, [&](int64_t id) { seen.push_back(id); });
  auto b = generate(
      r, [&](const auto& t, int64_t w) { return recomputed.next_logits(t, w); }, [](int64_t) {});
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->tokens.size() == 40);
  CHECK(a->tokens == b->tokens);
  CHECK(seen == a->tokens);
  // Greedy is the argmax of the whole model's logits of the window.
  torch::NoGradGuard no_grad;
  std::vector<int64_t> all = r.context;
  all.insert(all.end(), a->tokens.begin(), a->tokens.begin() + 5);
  const auto logits = m->forward(torch::tensor(all, torch::kLong).unsqueeze(0));
  CHECK(logits[0][-1].argmax().item<int64_t>() == a->tokens[5]);
}

TEST_CASE("bf16 generation: logits near fp32's, the KV cache continuing as the recomputed window",
          "[weights][generate]") {
  const auto cfg = family(GENERATE(0, 2));
  auto m = perturbed_model(cfg);
  const auto params = params_of(m);
  local_model fp32(cfg, params, true), cached(cfg, params, true, true), recomputed(cfg, params, false, true);
  const std::vector<int64_t> tokens{3, 1, 4, 1, 5, 9, 2, 6};
  for (size_t n : {4u, 6u, 8u}) {  // fed on: the cache takes each continuation
    const std::vector<int64_t> head(tokens.begin(), tokens.begin() + static_cast<int64_t>(n));
    auto a = fp32.next_logits(head, 0), b = cached.next_logits(head, 0), c = recomputed.next_logits(head, 0);
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(c);
    CHECK(b->scalar_type() == torch::kFloat32);
    const double scale = a->abs().max().item<double>();
    INFO("context " << n << ": logits of scale " << scale);
    CHECK((*b - *a).abs().max().item<double>() < 0.05 * scale);
    CHECK_FALSE(torch::equal(*a, *b));                           // bfloat16's rounding, not float32's
    CHECK((*b - *c).abs().max().item<double>() < 0.02 * scale);  // cached k, v are bfloat16 too
  }
}

TEST_CASE("the cache serves only continuations: the same or other tokens are recomputed; a stop ends early",
          "[weights][generate]") {
  const auto cfg = family(2);
  auto m = perturbed_model(cfg);
  const auto params = params_of(m);
  local_model cached(cfg, params, true), recomputed(cfg, params, false);
  auto same = [&](const std::vector<int64_t>& tokens) {
    auto a = cached.next_logits(tokens, 0);
    auto b = recomputed.next_logits(tokens, 0);
    REQUIRE(a);
    REQUIRE(b);
    return (*a - *b).abs().max().item<double>() < 1e-4;
  };
  CHECK(same({1, 2, 3, 4}));
  CHECK(same({1, 2, 3, 4}));                   // asked again: nothing new to feed
  CHECK(same({1, 2, 3, 4, 5}));                // a continuation
  CHECK(same({1, 9, 3, 4, 5, 6}));             // an earlier token changed
  CHECK_FALSE(cached.next_logits({1, 2}, 2));  // an empty window is an error, not a throw
  generation_request r;
  r.context = {1, 2};
  r.max_new_tokens = 50;
  r.seq_len = cfg.seq_len;
  int asked = 0;
  r.stopped = [&] { return ++asked > 3; };
  auto out = generate(
      r, [&](const auto& t, int64_t w) { return cached.next_logits(t, w); }, [](int64_t) {});
  REQUIRE(out);
  CHECK(out->interrupted);
  CHECK(out->tokens.size() == 3);
}

TEST_CASE("the window jumps ahead by half a context when the text outgrows it", "[generate]") {
  CHECK(window_start(10, 0, 16) == 0);
  CHECK(window_start(16, 0, 16) == 0);
  CHECK(window_start(17, 0, 16) == 9);
  CHECK(window_start(25, 9, 16) == 9);
  CHECK(window_start(26, 9, 16) == 18);
  CHECK(window_start(2, 0, 1) == 1);
}

TEST_CASE("sampling: greedy at temperature 0, top-k, the seed fixes the draws", "[generate]") {
  const auto logits = torch::tensor({0.0, std::log(3.0), -50.0, 0.0}, torch::kFloat);
  std::mt19937_64 rng(1);
  CHECK(pick_token(logits, 0, 0, rng) == 1);
  CHECK(pick_token(logits, 5.0, 1, rng) == 1);
  int ones = 0, twos = 0;
  std::vector<int64_t> first, second;
  std::mt19937_64 a(7), b(7);
  for (int i = 0; i < 4000; ++i) {
    const auto t = pick_token(logits, 1.0, 2, a);  // top 2: ids 1 (p 3/4) and 0 or 3 (p 1/4)
    ones += t == 1;
    twos += t == 2;
    first.push_back(t);
    second.push_back(pick_token(logits, 1.0, 2, b));
  }
  CHECK(first == second);
  CHECK(twos == 0);
  CHECK(std::abs(ones / 4000.0 - 0.75) < 0.03);
}

TEST_CASE("an exported model's logits match an independent NumPy forward pass to 1e-4", "[weights][reference]") {
  const auto cfg = family(GENERATE(0, 1, 2, 3, 4));
  INFO(cfg.arch << " kv " << cfg.kv_heads() << " share " << cfg.share_layers);
  auto m = perturbed_model(cfg);
  temp_dir dir;
  write(dir.path / "model.safetensors", file_of(cfg, params_of(m)));
  write(dir.path / "config.json", hf_config_json(cfg));
  torch::NoGradGuard no_grad;
  const auto tokens = tokens_of(cfg, 3, 12);
  const auto logits = m->forward(tokens).contiguous();
  REQUIRE(logits.abs().max().item<double>() > 1.0);  // not a near-uniform model, where anything matches
  const std::vector<safetensor> cases = {
      {"tokens", "I64", {3, 12}, std::string_view(static_cast<const char*>(tokens.data_ptr()), tokens.nbytes())},
      {"logits",
       "F32",
       {3, 12, cfg.vocab},
       std::string_view(static_cast<const char*>(logits.data_ptr()), logits.nbytes())}};
  auto case_bytes = write_safetensors(cases, {});
  REQUIRE(case_bytes);
  write(dir.path / "cases.safetensors", *case_bytes);
  const std::string cmd = "/usr/bin/python3 " SWARM_SOURCE_DIR "/tests/reference_forward.py " + dir.path.string() +
                          " " + (dir.path / "cases.safetensors").string() + " > " + (dir.path / "out").string() +
                          " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(dir.path / "out");
  std::stringstream said;
  said << in.rdbuf();
  INFO(said.str());
  CHECK(rc == 0);
  CHECK_THAT(said.str(), Catch::Contains("max abs difference"));
}
