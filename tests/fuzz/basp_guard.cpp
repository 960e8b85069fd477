// A byte stream judged by the guard in front of a CAF port (net/basp_guard.hpp)
// as BASP (or TLS records): header by header, skipping each accepted payload,
// as the guard does. An accepted header never announces more than the limits.
#include "fuzz.hpp"
#include "net/basp_guard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  swarm::fuzz::reader in(data, size);
  const bool tls = in.take<uint8_t>() & 1;
  const swarm::basp_limits limits;
  for (bool first = true;; first = false) {
    const auto header = in.bytes(tls ? swarm::tls_header_size : swarm::basp_header_size);
    if (header.size() < (tls ? swarm::tls_header_size : swarm::basp_header_size))
      return 0;
    const auto* h = reinterpret_cast<const unsigned char*>(header.data());
    if (tls) {
      if (!swarm::judge_tls_header(h, first).empty())
        return 0;
      SWARM_FUZZ_EXPECT(swarm::tls_record_size(h) <= swarm::max_tls_record);
      in.bytes(swarm::tls_record_size(h));
    } else {
      if (!swarm::judge_basp_header(h, first, limits).empty())
        return 0;
      const auto payload = swarm::basp_payload_size(h);
      SWARM_FUZZ_EXPECT(payload <= limits.max_payload);
      SWARM_FUZZ_EXPECT(!first || payload <= limits.max_handshake);
      in.bytes(payload);
    }
  }
}
