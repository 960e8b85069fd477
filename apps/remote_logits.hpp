#pragma once
// --role generate --coordinator: the next token's logits asked of a running
// swarm. Each token sends the window forward through one server per stage,
// chosen by the trainer's load balancers (rerouting and bans included); the
// last stage answers the logits of the last position (forward_request.logits),
// and no server keeps a gradient, so a swarm serves this while it trains.
// Servers keep no state between requests: the window is recomputed per token.

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "base/error.hpp"
#include "config/config.hpp"

namespace swarm {

class remote_logits {
public:
  /// Joins the swarm at --coordinator (ends the process with 1 when it cannot
  /// be reached, as every networked role).
  [[nodiscard]] static result<std::unique_ptr<remote_logits>> connect(const app_config& cfg);
  ~remote_logits();

  /// Logits [vocab] of the position after tokens[window, end); the error of
  /// the stage that could not serve it after the balancer's retries.
  [[nodiscard]] result<at::Tensor> next(const std::vector<int64_t>& tokens, int64_t window);

  /// Ends the process (CAF 0.17.6's actor system may not shut down cleanly).
  [[noreturn]] void end(int code);

private:
  remote_logits() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace swarm
