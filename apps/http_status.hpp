#pragma once
// The coordinator's HTTP port (--http-port): the status page at /, its JSON at
// /api/status and Prometheus' text at /metrics, rendered from the status
// board. cpp-httplib serves it on its own threads, so a slow or hostile client
// costs a thread for at most the read timeout and never the actors' time.
#include <cstdint>
#include <memory>
#include <string>

#include "observe/status_board.hpp"

namespace swarm {

class http_status {
public:
  /// Listens on host:port (0: any free port) and serves from another thread;
  /// null with `error` set when the port cannot be bound.
  static std::unique_ptr<http_status> start(const std::string& host, uint16_t port,
                                            std::shared_ptr<const status_board> board, std::string& error);
  ~http_status();
  http_status(const http_status&) = delete;
  http_status& operator=(const http_status&) = delete;

  [[nodiscard]] uint16_t port() const { return port_; }

private:
  struct impl;
  explicit http_status(std::unique_ptr<impl> p, uint16_t port);
  std::unique_ptr<impl> impl_;
  uint16_t port_;
};

} // namespace swarm
