#include "models/init.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "base/hash.hpp"

namespace swarm {

namespace {

/// One SplitMix64 step: neighbouring tags give unrelated seeds.
uint64_t mix(uint64_t x) { return splitmix64_finish(x + 0x9e3779b97f4a7c15ULL); }

}  // namespace

at::Generator generator_for(const model_config& cfg, uint64_t tag) {
  return at::detail::createCPUGenerator(mix(cfg.seed ^ mix(tag)));
}

void init_linear(torch::nn::LinearImpl& l, double std, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  l.weight.normal_(0.0, std, gen);
  if (l.bias.defined())
    l.bias.zero_();
}

void init_embedding(torch::nn::EmbeddingImpl& e, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  e.weight.normal_(0.0, init_std, gen);
}

}  // namespace swarm
