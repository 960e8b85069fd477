#include "net/http_request.hpp"

#include <algorithm>
#include <cstdlib>

namespace swarm {

namespace {

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return status >= 500 ? "Internal Server Error" : "Error";
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// The value of header `name` (lower case, with its colon) in `head`, as
/// sent; `lowered` is `head` in lower case, so offsets agree.
std::string header_value(const std::string& head, const std::string& lowered, const std::string& name) {
  const auto at = lowered.find("\n" + name);
  if (at == std::string::npos)
    return {};
  auto begin = at + 1 + name.size();
  const auto end = head.find_first_of("\r\n", begin);
  std::string v = head.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  v.erase(0, v.find_first_not_of(" \t"));
  v.erase(v.find_last_not_of(" \t") + 1);
  return v;
}

/// Whether the request carries `token`: as a bearer token or as ?token= in `target`.
bool authorized(const std::string& head, const std::string& lowered, const std::string& target,
                const std::string& token) {
  const std::string auth = header_value(head, lowered, "authorization:");
  if (lower(auth.substr(0, 7)) == "bearer " && same_secret(auth.substr(7), token))
    return true;
  const auto query = target.find('?');
  for (auto at = query; at != std::string::npos; at = target.find('&', at + 1)) {
    if (target.compare(at + 1, 6, "token=") != 0)
      continue;
    const auto end = target.find('&', at + 1);
    if (same_secret(
            std::string_view(target).substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7),
            token))
      return true;
  }
  return false;
}

}  // namespace

bool same_secret(std::string_view given, std::string_view secret) {
  unsigned char differ = given.size() != secret.size() ? 1 : 0;
  for (size_t i = 0; i < secret.size(); ++i)
    differ |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ secret[i]);
  return differ == 0;
}

http_response http_plain(int status, const std::string& why) {
  http_response r;
  r.status = status;
  r.body = "HTTP " + std::to_string(status) + ": " + why + "\n";
  return r;
}

http_answer answer_request(const std::string& head, const std::string& token,
                           const std::function<http_response(const std::string&)>& route) {
  http_answer p;
  const auto line_end = head.find_first_of("\r\n");
  const std::string line = head.substr(0, line_end);
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos) {
    p.response = http_plain(400, "not an HTTP request line");
    return p;
  }
  const std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                    version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    p.response = http_plain(version.rfind("HTTP/", 0) == 0 ? 505 : 400, "only HTTP/1.0 and 1.1 are spoken here");
    return p;
  }
  const std::string rest = head.substr(line_end == std::string::npos ? head.size() : line_end);
  const std::string headers = lower(rest);
  if (!token.empty() && !authorized(rest, headers, target, token)) {
    p.response = http_plain(401, "this page needs its token (Authorization: Bearer TOKEN, or ?token=TOKEN)");
    p.response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"swarm\"");
    return p;
  }
  // A body is never expected: refusing it beats reading and discarding it.
  const auto length = headers.find("\ncontent-length:");
  const bool has_body = headers.find("\ntransfer-encoding:") != std::string::npos ||
                        (length != std::string::npos && std::atoll(headers.c_str() + length + 16) != 0);
  if (has_body) {
    p.response = http_plain(413, "requests here carry no body");
    return p;
  }
  if (method != "GET" && method != "HEAD") {
    p.response = http_plain(405, "only GET and HEAD");
    p.response.headers.emplace_back("Allow", "GET, HEAD");
    return p;
  }
  p.head_only = method == "HEAD";
  p.keep_alive = version == "HTTP/1.1" ? headers.find("\nconnection: close") == std::string::npos
                                       : headers.find("\nconnection: keep-alive") != std::string::npos;
  try {
    p.response = route(target.substr(0, target.find('?')));
  } catch (const std::exception& e) {
    p.response = http_plain(500, "internal error");
  }
  return p;
}

std::string encode_answer(const http_answer& p) {
  const auto& r = p.response;
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += p.keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [k, v] : r.headers)
    out += k + ": " + v + "\r\n";
  out += "\r\n";
  if (!p.head_only)
    out += r.body;
  return out;
}

}  // namespace swarm
