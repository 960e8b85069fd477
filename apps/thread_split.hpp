#pragma once
// How a process splits its cores between torch's intra-op pool and OpenBLAS's
// (Debian's libtorch calls OpenBLAS for every matrix product, and torch does
// not split one product across its own threads). Both pools spin while they
// wait, so giving both all cores halves throughput; which one should get them
// depends on how large the products are. On 2 cores (docs/benchmarks.md,
// Threads): at d_model 128 and 256 torch's threads win by 1.2-2x, at 1024
// OpenBLAS's by 1.35x, at 512 OpenBLAS's by 1.0-1.3x.

#include <algorithm>
#include <cstdint>

namespace swarm {

struct thread_split {
  int torch = 1;  ///< torch::set_num_threads
  int blas = 1;   ///< openblas_set_num_threads
};

/// From this model width on, OpenBLAS gets the process's threads.
constexpr int64_t blas_width = 512;

/// `threads`: what the process may use (already resolved, >= 1); `width`: the
/// model's d_model, 0 when unknown (then torch gets them, as for small models).
/// `bf16` (--precision bf16): torch gets them at every width, as its bfloat16
/// products run in oneDNN on torch's own pool, not in OpenBLAS.
[[nodiscard]] inline thread_split split_threads(int threads, int64_t width, bool bf16 = false) {
  threads = std::max(threads, 1);
  if (width >= blas_width && !bf16)
    return {1, threads};
  return {threads, 1};
}

}  // namespace swarm
