// Kept in its own torch translation unit so the role code compiles without torch.
#include <thread>

#include <torch/torch.h>

#include "apps/roles.hpp"

namespace swarm {

void set_torch_threads(int threads) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(n);
}

} // namespace swarm
