// Kept in its own torch translation unit so the role code compiles without torch.
#include <dlfcn.h>

#include <thread>

#include <torch/torch.h>

#include "apps/roles.hpp"

namespace swarm {

void set_torch_threads(int threads) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(n);
  // Debian's libtorch calls OpenBLAS, which starts its own pool of one thread per
  // core on top of torch's: measured here, config/small trained at 2,400 tokens/s
  // that way against 7,200 with OpenBLAS on one thread. Torch parallelises around
  // BLAS calls itself, so OpenBLAS gets one thread (looked up at run time because
  // the BLAS behind libtorch is chosen by Debian's alternatives, not at link time).
  using set_threads_fn = void (*)(int);
  if (auto set_blas = reinterpret_cast<set_threads_fn>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas(1);
}

} // namespace swarm
