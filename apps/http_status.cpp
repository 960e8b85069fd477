#include "apps/http_status.hpp"

#include <chrono>
#include <thread>

#include <httplib.h>

#include "observe/status_page.hpp"

namespace swarm {

struct http_status::impl {
  httplib::Server server;
  std::thread thread;
};

std::unique_ptr<http_status> http_status::start(const std::string& host, uint16_t port,
                                                std::shared_ptr<const status_board> board, std::string& error) {
  auto p = std::make_unique<impl>();
  auto& s = p->server;
  // Requests are small GETs: a body, a slow sender or a stalled reader is cut off.
  s.set_payload_max_length(4096);
  s.set_read_timeout(3, 0);
  s.set_write_timeout(5, 0);
  s.set_keep_alive_timeout(3);
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(status_page_html(), "text/html; charset=utf-8");
  });
  s.Get("/api/status", [board](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(board->json(unix_seconds()), "application/json");
  });
  s.Get("/metrics", [board](const httplib::Request&, httplib::Response& res) {
    res.set_content(board->prometheus(unix_seconds()), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    const std::string what = res.status == 404 ? "no such page: " + req.path + " (try /, /api/status or /metrics)"
                                               : "HTTP " + std::to_string(res.status);
    res.set_content(what + "\n", "text/plain; charset=utf-8");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content("internal error\n", "text/plain; charset=utf-8");
  });
  int bound = port;
  if (port == 0)
    bound = s.bind_to_any_port(host);
  else if (!s.bind_to_port(host, port))
    bound = -1;
  if (bound <= 0) {
    error = "cannot listen for HTTP on " + host + ":" + std::to_string(port) + " (in use, or not an address here)";
    return nullptr;
  }
  auto* raw = p.get();
  p->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  return std::unique_ptr<http_status>(new http_status(std::move(p), static_cast<uint16_t>(bound)));
}

http_status::http_status(std::unique_ptr<impl> p, uint16_t port) : impl_(std::move(p)), port_(port) {}

http_status::~http_status() {
  impl_->server.stop();
  if (impl_->thread.joinable())
    impl_->thread.join();
}

} // namespace swarm
