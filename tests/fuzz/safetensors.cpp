// A safetensors file (models/safetensors.hpp: --init-from's input, from
// anywhere): refused with an error or parsed into tensors that lie inside the
// file, tile its data and fit their dtype and shape; what parses writes back
// to a file that parses the same.
#include "fuzz.hpp"
#include "models/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  auto parsed = swarm::parse_safetensors(file);
  if (!parsed)
    return 0;
  size_t bytes = 0;
  for (const auto& t : parsed->tensors) {
    SWARM_FUZZ_EXPECT(t.data.data() >= file.data() && t.data.data() + t.data.size() <= file.data() + file.size());
    bytes += t.data.size();
  }
  SWARM_FUZZ_EXPECT(bytes <= size);
  auto again = swarm::write_safetensors(parsed->tensors, parsed->metadata);
  SWARM_FUZZ_EXPECT(static_cast<bool>(again));
  auto back = swarm::parse_safetensors(*again);
  SWARM_FUZZ_EXPECT(static_cast<bool>(back) && back->tensors.size() == parsed->tensors.size());
  return 0;
}
