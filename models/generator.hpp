#pragma once
// Text out: the sampling loop of --role generate, and the whole model in this
// process with a KV cache. Where the logits come from is a function, so the
// same loop runs on a local model or through a swarm's stages.
//
// The context window: a model trained on seq_len positions sees at most
// seq_len tokens. When the text outgrows the window, the window jumps ahead to
// its newest seq_len / 2 tokens (the cache is rebuilt from them once) rather
// than sliding by one, which would rebuild it every token. With and without
// the cache the windows are the same, so both give the same text.

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <ATen/core/Tensor.h>

#include "base/error.hpp"
#include "config/config.hpp"
#include "models/named_tensors.hpp"

namespace swarm {

/// Where the window of `n` tokens starts, given where it started before (pure).
[[nodiscard]] int64_t window_start(int64_t n, int64_t previous, int64_t seq_len);

/// The next token from logits [vocab]: argmax at temperature 0, else a draw from
/// softmax(logits / temperature) over the top_k likeliest (0: all).
[[nodiscard]] int64_t pick_token(const at::Tensor& logits, double temperature, int64_t top_k, std::mt19937_64& rng);

/// Logits [vocab] of the position after tokens[window, end).
using next_logits_fn = std::function<result<at::Tensor>(const std::vector<int64_t>& tokens, int64_t window)>;

/// The whole model in this process (cut as one stage), with or without a KV cache.
class local_model {
public:
  /// Throws std::invalid_argument when `params` do not fit the model (the message names the parameter).
  /// `bf16`: forwards under autocast (--precision bf16); logits in float32.
  local_model(const model_config& m, const named_tensors& params, bool kv_cache, bool bf16 = false);
  ~local_model();
  local_model(local_model&&) noexcept;
  [[nodiscard]] result<at::Tensor> next_logits(const std::vector<int64_t>& tokens, int64_t window);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

struct generation_request {
  std::vector<int64_t> context;  ///< the prompt's tokens (at least one)
  int64_t max_new_tokens = 200;
  int64_t eos = -1;  ///< stop once this is drawn (-1: never)
  int64_t seq_len = 128;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 1;
  std::function<bool()> stopped;  ///< asked before each token: true ends generation early (Ctrl-C)
};

struct generation_result {
  std::vector<int64_t> tokens;  ///< the new tokens (without the prompt)
  bool ended = false;           ///< the model drew eos
  bool interrupted = false;     ///< `stopped` said so
  double seconds = 0;           ///< from the first request for logits (the prompt's) to the last token
};

/// Draws tokens one at a time, handing each to `on_token` as it comes.
[[nodiscard]] result<generation_result> generate(const generation_request& r, const next_logits_fn& logits,
                                                 const std::function<void(int64_t)>& on_token);

}  // namespace swarm
