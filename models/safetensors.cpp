#include "models/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

namespace swarm {

namespace {

using json = nlohmann::json;

constexpr uint64_t max_header_bytes = 100'000'000;  // the reference implementation's cap
constexpr const char* metadata_key = "__metadata__";
// A real header nests 3 deep (file, tensor, shape). Deeper is refused while
// parsing (nlohmann's parser keeps its own stack), before anything that
// recurses per level, dump() and copies, can meet 200,000 nested brackets.
constexpr int max_header_depth = 8;

error bad(const std::string& what) { return error{errc::BAD_REQUEST, "safetensors: " + what}; }

/// An untrusted value for an error message: itself when it is a scalar or a
/// short flat array, else its kind and size; never more than 64 characters.
std::string brief(const json& v) {
  if (v.is_structured()) {
    const bool flat = v.size() <= 8 && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_primitive(); });
    if (!flat)
      return std::string(v.is_array() ? "an array of " : "an object of ") + std::to_string(v.size()) +
             (v.is_array() ? " values" : " keys");
  }
  const std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);  // flat: one level of recursion
  return s.size() > 64 ? s.substr(0, 61) + "..." : s;
}

/// Elements of `shape` times `size` bytes, or false on overflow or a negative dimension.
bool byte_count(const std::vector<int64_t>& shape, int size, uint64_t& out) {
  uint64_t n = static_cast<uint64_t>(size);
  for (const int64_t d : shape) {
    if (d < 0)
      return false;
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d))
      return false;
    n *= static_cast<uint64_t>(d);
  }
  out = n;
  return true;
}

/// One tensor's header entry `name`: its dtype, shape and bytes of `data`
/// (data_offsets, returned in `begin` and `end`), each checked.
result<safetensor> parse_entry(const std::string& name, const json& entry, std::string_view data, uint64_t& begin,
                               uint64_t& end) {
  const std::string where = "tensor '" + name + "': ";
  if (!entry.is_object())
    return bad(where + "not an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || shape == entry.end() || offsets == entry.end())
    return bad(where + "needs dtype, shape and data_offsets");
  if (!dtype->is_string() || safetensors_dtype_size(dtype->get<std::string>()) == 0)
    return bad(where + "dtype " + brief(*dtype) + " is not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL");
  safetensor t;
  t.name = name;
  t.dtype = dtype->get<std::string>();
  if (!shape->is_array())
    return bad(where + "shape is not an array");
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return bad(where + "shape " + brief(*shape) + " holds a value that is not a dimension");
    t.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    return bad(where + "data_offsets " + brief(*offsets) + " is not [begin, end]");
  begin = (*offsets)[0].get<uint64_t>();
  end = (*offsets)[1].get<uint64_t>();
  if (begin > end || end > data.size())
    return bad(where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] outside the " +
               std::to_string(data.size()) + " bytes of data");
  uint64_t bytes = 0;
  if (!byte_count(t.shape, safetensors_dtype_size(t.dtype), bytes) || bytes != end - begin)
    return bad(where + "shape " + brief(*shape) + " of " + t.dtype + " does not fill its " +
               std::to_string(end - begin) + " bytes");
  t.data = data.substr(begin, end - begin);
  return t;
}

}  // namespace

const safetensor* safetensors_file::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

int safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes{{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

result<safetensors_file> parse_safetensors(std::string_view file) {
  if (file.size() < 8)
    return bad("the file has " + std::to_string(file.size()) + " bytes, fewer than the 8 of its header size");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  if (n > max_header_bytes)
    return bad("header of " + std::to_string(n) + " bytes, more than the 100 MB allowed");
  if (n > file.size() - 8)
    return bad("header of " + std::to_string(n) + " bytes in a file of " + std::to_string(file.size()) +
               " (truncated?)");
  bool too_deep = false;
  const auto depth_check = [&too_deep](int depth, json::parse_event_t, json&) {
    too_deep = too_deep || depth > max_header_depth;
    return !too_deep;  // false discards the value: nothing deep is ever built
  };
  const auto header = json::parse(file.substr(8, n), depth_check, /*allow_exceptions=*/false);
  if (too_deep)
    return bad("the header nests deeper than " + std::to_string(max_header_depth) + " levels");
  if (header.is_discarded() || !header.is_object())
    return bad("the header is not a JSON object");
  const std::string_view data = file.substr(8 + n);
  safetensors_file out;
  struct span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == metadata_key) {
      if (!entry.is_object())
        return bad("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          return bad("__metadata__ '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    uint64_t begin = 0, end = 0;
    auto t = parse_entry(name, entry, data, begin, end);
    if (!t)
      return t.error();
    spans.push_back({begin, end, out.tensors.size()});
    out.tensors.push_back(std::move(*t));
  }
  // The tensors tile the data: sorted by offset, each begins where the last ended.
  std::sort(spans.begin(), spans.end(),
            [](const span& a, const span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t at = 0;
  for (const auto& s : spans) {
    if (s.begin != at)
      return bad("tensor '" + out.tensors[s.index].name + "' begins at byte " + std::to_string(s.begin) +
                 (s.begin < at ? ", inside the tensor before it" : ", after a gap") + " (expected " +
                 std::to_string(at) + ")");
    at = s.end;
  }
  if (at != data.size())
    return bad(std::to_string(data.size() - at) + " bytes of data after the last tensor");
  std::vector<safetensor> ordered;
  for (const auto& s : spans)
    ordered.push_back(std::move(out.tensors[s.index]));
  out.tensors = std::move(ordered);
  return out;
}

result<std::string> write_safetensors(const std::vector<safetensor>& tensors,
                                      const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps insertion order: the header lists the
  // tensors in data order, so the same tensors give the same bytes.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty())
    header[metadata_key] = metadata;
  std::set<std::string> names;
  uint64_t at = 0;
  for (const auto& t : tensors) {
    if (t.name == metadata_key || !names.insert(t.name).second)
      return bad("tensor name '" + t.name + "' is reserved or repeated");
    uint64_t bytes = 0;
    if (safetensors_dtype_size(t.dtype) == 0 || !byte_count(t.shape, safetensors_dtype_size(t.dtype), bytes) ||
        bytes != t.data.size())
      return bad("tensor '" + t.name + "': " + std::to_string(t.data.size()) + " bytes do not fit its dtype " +
                 t.dtype + " and shape");
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + at);
  for (const auto& t : tensors)
    out.append(t.data.data(), t.data.size());
  return out;
}

}  // namespace swarm
