#pragma once
// Plain TCP pieces shared by the bulk plane (messages/bulk.*) and the guard in
// front of CAF ports (messages/basp_guard.*).

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <caf/expected.hpp>

namespace swarm {

/// A listening socket on host:port (empty host: every IPv4 interface; port 0:
/// any free one) and the port it got; BAD_CONFIG naming `who` when it cannot.
[[nodiscard]] caf::expected<std::pair<int, uint16_t>> listen_tcp(const std::string& host, uint16_t port,
                                                                 const std::string& who);

/// A connection to 127.0.0.1:port with TCP_NODELAY, or -1.
[[nodiscard]] int connect_loopback(uint16_t port);

/// Writes all `n` bytes; false when the peer is gone or a write timed out.
bool write_all(int fd, const char* p, size_t n, int flags = 0);

} // namespace swarm
