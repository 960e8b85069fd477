#pragma once
// safetensors, Hugging Face's weight format, read and written without torch:
// an 8-byte little-endian header size N, N bytes of JSON
//   {"NAME": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// (padded with spaces to a multiple of 8), then the tensors' bytes, offsets
// counted from the end of the header. A file comes from anywhere, so parsing
// checks everything against the file before any tensor byte is touched: the
// header's size against the file and a 100 MB cap, the JSON (nlohmann's
// parser, no exceptions out), each entry's dtype, shape and offsets, that
// offsets and shape agree in bytes without overflow, and that the tensors
// tile the data exactly (no overlap, no gap, nothing after), as the reference
// implementation requires.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace swarm {

struct safetensor {
  std::string name;
  std::string dtype;  ///< F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL
  std::vector<int64_t> shape;
  std::string_view data;  ///< parse: a view into the file's bytes; write: the bytes to write
};

struct safetensors_file {
  std::vector<safetensor> tensors;  ///< in the order of their data
  std::map<std::string, std::string> metadata;
  [[nodiscard]] const safetensor* find(const std::string& name) const;
};

/// Bytes per element of a dtype; 0 for one this reader does not know.
[[nodiscard]] int safetensors_dtype_size(const std::string& dtype);

/// The tensors of a whole file's bytes (views into `file`, which must outlive
/// them); BAD_REQUEST naming what is wrong (and the tensor) otherwise.
[[nodiscard]] result<safetensors_file> parse_safetensors(std::string_view file);

/// A file of `tensors` in that order with `metadata`: the same input gives
/// the same bytes. BAD_REQUEST when a tensor's bytes do not fit its dtype and
/// shape, a name repeats or is "__metadata__".
[[nodiscard]] result<std::string> write_safetensors(const std::vector<safetensor>& tensors,
                                                    const std::map<std::string, std::string>& metadata);

}  // namespace swarm
