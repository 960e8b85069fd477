#pragma once
// The torch device a stage runs on (--device).

#include <string>

#include <torch/torch.h>

namespace swarm {

/// "cpu", "cuda" or "cuda:N" as a device this process can use; throws
/// std::invalid_argument with a fix-it message when it cannot (no CUDA in this
/// libtorch, no GPU visible, index out of range).
[[nodiscard]] torch::Device usable_device(const std::string& name);

}  // namespace swarm
