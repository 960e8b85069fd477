#pragma once
// A small HTTP/1.1 server for the coordinator's status page and /metrics: one
// thread and one epoll set for every connection, so an idle or slow client
// costs a descriptor and a few KiB, never a thread. (cpp-httplib, used before,
// spends a pool thread on each connection until its read timeout: 300 idle
// sockets kept /api/status from answering for minutes.) Only what a browser,
// curl and Prometheus send is understood: GET and HEAD without a body.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

namespace swarm {

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// Answers one request for `path` (without its query string); runs on the
/// server's thread, so it must be quick and thread-safe against its data.
using http_handler = std::function<http_response(const std::string& path)>;

struct http_options {
  /// Connections held at once; past it the oldest one without a request in
  /// progress is closed to make room, so a new client is always answered.
  size_t max_connections = 2048;
  /// Bytes of request line and headers; more is refused with 431.
  size_t max_request_bytes = 8192;
  /// From connecting (or the last answer on a kept-alive connection) to a
  /// complete request, and for an answer to be taken by a slow reader.
  std::chrono::milliseconds request_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  /// A 2xx answer is given again to requests for the same path for this long
  /// (0: never): renders take the status board's lock, and a client that
  /// pipelines 400 small requests must not cost 400 of them.
  std::chrono::milliseconds reuse_for{500};
  /// When not empty, every request must carry it (`Authorization: Bearer
  /// TOKEN`, or `?token=TOKEN` for a browser); others get 401.
  std::string token;
};

struct http_stats {
  uint64_t accepted = 0, answered = 0, timed_out = 0, evicted = 0, refused = 0;
  uint64_t rendered = 0;  ///< calls of the handler (answers not reused)
  uint64_t events = 0;    ///< epoll events handled: a loop that spins shows here
  size_t open = 0;
};

class http_server {
public:
  /// Listens on host:port (port 0: any free one) and serves from its own thread.
  static caf::expected<std::unique_ptr<http_server>> start(const std::string& host, uint16_t port, http_handler handler,
                                                           http_options options = {});
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  [[nodiscard]] uint16_t port() const;
  [[nodiscard]] http_stats stats() const;

  struct impl;

private:
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace swarm
