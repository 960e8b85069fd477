#pragma once
// 64-bit FNV-1a: parameter hashes (peers of a stage compare them), checkpoint
// checksums, the codebook's fingerprint and the model config's hash. Not
// cryptographic: it finds accidents (corrupt files, diverged parameters), not foes.
// And SplitMix64's finaliser, which turns neighbouring numbers into unrelated seeds.

#include <cstddef>
#include <cstdint>

namespace swarm {

constexpr uint64_t fnv1a64_basis = 14695981039346656037ULL;

/// FNV-1a over `n` bytes, continuing from `h` (chain calls to hash several buffers as one).
[[nodiscard]] uint64_t fnv1a64(const void* data, size_t n, uint64_t h = fnv1a64_basis);

/// SplitMix64's output function of state `z` (the generator adds 0x9e3779b97f4a7c15 before it).
[[nodiscard]] constexpr uint64_t splitmix64_finish(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace swarm
