// Kept in its own torch translation unit so the role code compiles without torch.
#include <dlfcn.h>

#include <thread>

#include <torch/torch.h>

#include "apps/roles.hpp"
#include "apps/thread_split.hpp"

namespace swarm {

thread_split set_torch_threads(int threads, int64_t width, bool bf16) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto split = split_threads(n, width, bf16);
  torch::set_num_threads(split.torch);
  // Debian's libtorch calls OpenBLAS, which starts its own pool on top of
  // torch's; split_threads says which of the two gets the cores (looked up at
  // run time because the BLAS behind libtorch is chosen by Debian's
  // alternatives, not at link time).
  using set_threads_fn = void (*)(int);
  if (auto set_blas = reinterpret_cast<set_threads_fn>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas(split.blas);
  return split;
}

}  // namespace swarm
