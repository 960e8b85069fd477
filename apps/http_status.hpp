#pragma once
// The coordinator's HTTP port (--http-port): the status page at /, its JSON at
// /api/status and Prometheus' text at /metrics, rendered from the status
// board on net/http_server's own thread (never the actors' time; an idle or
// slow client costs a descriptor, not a thread).
#include <cstdint>
#include <memory>
#include <string>

#include "net/http_server.hpp"
#include "observe/status_board.hpp"

namespace swarm {

class http_status {
public:
  /// Listens on host:port (0: any free port) and serves from another thread,
  /// to requests carrying `token` only when it is not empty (--http-token);
  /// null with `error` set when the port cannot be bound.
  static std::unique_ptr<http_status> start(const std::string& host, uint16_t port, const std::string& token,
                                            std::shared_ptr<const status_board> board, std::string& error);
  http_status(const http_status&) = delete;
  http_status& operator=(const http_status&) = delete;

  [[nodiscard]] uint16_t port() const { return server_->port(); }

private:
  explicit http_status(std::unique_ptr<http_server> s) : server_(std::move(s)) {}
  std::unique_ptr<http_server> server_;
};

}  // namespace swarm
