#include "base/hash.hpp"

namespace swarm {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;  // the 64-bit FNV prime
  }
  return h;
}

}  // namespace swarm
