#pragma once
// The 256-entry codebook of 8-bit blockwise dynamic quantization, bit for bit
// the one bitsandbytes' create_dynamic_map(signed=True) builds with torch 1.13
// (see ../shared/notes/blockwise8.md). A constant table built from float32
// operations in a fixed order: torch::linspace would give other values on other
// CPUs, and a sender and receiver must agree on nothing but the table they send.

#include <array>
#include <cstddef>
#include <cstdint>

namespace swarm {

/// The codebook as bitsandbytes builds it, ascending: code[127] = 0,
/// code[255] = 1, code[0] = -0.99296874. FNV-1a 52084853a0e35a1c.
[[nodiscard]] const std::array<float, 256>& dynamic_codebook();

/// What quantization uses and puts on the wire: the same with code[0] = -1,
/// so -absmax is exact too (bitsandbytes writes it in place before quantizing).
/// FNV-1a f02be9abae46842c.
[[nodiscard]] const std::array<float, 256>& wire_codebook();

}  // namespace swarm
