#pragma once
// Weights in and out: --role export, --role generate, and --init-from for the
// roles that build stages.

#include <memory>

#include "base/error.hpp"
#include "config/config.hpp"
#include "data/tokenizer.hpp"
#include "models/named_tensors.hpp"

namespace swarm {

/// --init-from's weights for the whole model (null when not given); BAD_CONFIG
/// naming the file and the tensor when they do not fit the model.
[[nodiscard]] result<std::shared_ptr<const named_tensors>> initial_weights(const app_config& cfg);

int run_export(const app_config& cfg, const tokenizer& tok);
int run_generate(const app_config& cfg, const tokenizer& tok);

}  // namespace swarm
