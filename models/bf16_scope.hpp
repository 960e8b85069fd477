#pragma once
// --precision bf16's autocast scope (models/stage_module.cpp's forwards).

#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>

namespace swarm {

/// Autocast to bfloat16 on the device of the tensors within its scope. Its
/// cache of casted parameters is cleared when the scope ends: the optimizer
/// changes the parameters in place, and a cast kept past a step would be stale.
class bf16_scope {
public:
  explicit bf16_scope(const at::Device& device) : cuda_(device.is_cuda()) {
    was_on_ = cuda_ ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
    was_dtype_ = cuda_ ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
    if (cuda_) {
      at::autocast::set_enabled(true);
      at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    } else {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    }
    at::autocast::increment_nesting();
  }
  ~bf16_scope() {
    if (at::autocast::decrement_nesting() == 0)
      at::autocast::clear_cache();
    if (cuda_) {
      at::autocast::set_enabled(was_on_);
      at::autocast::set_autocast_gpu_dtype(was_dtype_);
    } else {
      at::autocast::set_cpu_enabled(was_on_);
      at::autocast::set_autocast_cpu_dtype(was_dtype_);
    }
  }
  bf16_scope(const bf16_scope&) = delete;
  bf16_scope& operator=(const bf16_scope&) = delete;

private:
  bool cuda_;
  bool was_on_;
  at::ScalarType was_dtype_;
};

}  // namespace swarm
