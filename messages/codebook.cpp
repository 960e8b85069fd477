#include "messages/codebook.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

// Built with -ffp-contract=off (CMakeLists.txt): a fused multiply-add where the
// recipe has none would change the last bit of some entries.

namespace swarm {

namespace {

/// torch 1.13's CPU linspace(0.1, 1, n) in float32, as its vectorized kernel
/// computes it: the lower half from the start, the upper half from the end,
/// and for n >= 17 runs of 8 that add multiples of the step to their first value.
std::vector<float> linspace_01_1(int n) {
  const float start = 0.1f, end = 1.0f;
  const float step = (end - start) / static_cast<float>(n - 1);
  auto p = [&](int k) {
    return k < n / 2 ? std::fmaf(step, static_cast<float>(k), start)
                     : std::fmaf(-step, static_cast<float>(n - 1 - k), end);
  };
  std::vector<float> b(static_cast<size_t>(n));
  if (n <= 9) {
    for (int k = 0; k < n; ++k)
      b[k] = p(k);
    return b;
  }
  for (int g = 0; g + 9 <= n; g += 8) {
    b[g] = p(g);
    for (int j = 1; j <= 7; ++j)
      b[g + j] = b[g] + static_cast<float>(j) * step;
  }
  b[n - 1] = p(n - 1);
  return b;
}

std::array<float, 256> build() {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const int n = (1 << i) + 1;
    const auto b = linspace_01_1(n);
    const auto scale = static_cast<float>(std::pow(10.0, i - 6));
    for (int k = 0; k + 1 < n; ++k) {
      const float mean = (b[k] + b[k + 1]) / 2.0f;
      data.push_back(mean * scale);
      data.push_back(-(mean * scale));
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

}  // namespace

const std::array<float, 256>& dynamic_codebook() {
  static const std::array<float, 256> code = build();
  return code;
}

const std::array<float, 256>& wire_codebook() {
  static const std::array<float, 256> code = [] {
    auto c = dynamic_codebook();
    c[0] = -1.0f;
    return c;
  }();
  return code;
}

}  // namespace swarm
