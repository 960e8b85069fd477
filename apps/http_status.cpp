#include "apps/http_status.hpp"

#include "observe/status_page.hpp"

namespace swarm {

std::unique_ptr<http_status> http_status::start(const std::string& host, uint16_t port, const std::string& token,
                                                std::shared_ptr<const status_board> board, std::string& error) {
  auto route = [board](const std::string& path) {
    http_response r;
    if (path == "/") {
      r.content_type = "text/html; charset=utf-8";
      r.body = status_page_html();
    } else if (path == "/api/status") {
      r.content_type = "application/json";
      r.headers.emplace_back("Cache-Control", "no-store");
      r.body = board->json(unix_seconds());
    } else if (path == "/metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = board->prometheus(unix_seconds());
    } else {
      r.status = 404;
      r.body = "no such page: " + path + " (try /, /api/status or /metrics)\n";
    }
    return r;
  };
  http_options options;
  options.token = token;
  auto server = http_server::start(host, port, route, options);
  if (!server) {
    error = "cannot listen for HTTP on " + host + ":" + std::to_string(port) + " (in use, or not an address here)";
    return nullptr;
  }
  return std::unique_ptr<http_status>(new http_status(std::move(*server)));
}

}  // namespace swarm
