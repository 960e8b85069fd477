#include "models/device.hpp"

#include <optional>
#include <stdexcept>

namespace swarm {

torch::Device usable_device(const std::string& name) {
  std::optional<torch::Device> d;
  try {
    d.emplace(name);
  } catch (const std::exception&) {
    throw std::invalid_argument("device '" + name + "' is not a torch device: use cpu, cuda or cuda:N");
  }
  if (d->is_cpu())
    return *d;
  if (!d->is_cuda())
    throw std::invalid_argument("device '" + name + "' is not supported: use cpu, cuda or cuda:N");
  if (!torch::cuda::is_available())
    throw std::invalid_argument("device '" + name +
                                "' is not available: this libtorch has no CUDA or no GPU is visible (Debian's "
                                "libtorch is CPU-only; see docs/deploy.md, \"Running on a GPU\"); use --device cpu");
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (d->has_index() && d->index() >= count)
    throw std::invalid_argument("device '" + name + "' is not available: " + std::to_string(count) +
                                " CUDA device(s) visible");
  return *d;
}

}  // namespace swarm
