#pragma once
// 64-bit FNV-1a: parameter hashes (peers of a stage compare them), checkpoint
// checksums, the codebook's fingerprint and the model config's hash. Not
// cryptographic: it finds accidents (corrupt files, diverged parameters), not foes.

#include <cstddef>
#include <cstdint>

namespace swarm {

constexpr uint64_t fnv1a64_basis = 14695981039346656037ULL;

/// FNV-1a over `n` bytes, continuing from `h` (chain calls to hash several buffers as one).
[[nodiscard]] uint64_t fnv1a64(const void* data, size_t n, uint64_t h = fnv1a64_basis);

} // namespace swarm
