#pragma once
// One HTTP/1.1 request head turned into its answer, for net/http_server: the
// request line, the version, the token (--http-token), what is refused (a
// body, a method other than GET and HEAD) and keep-alive. No sockets here, so
// net/http_server's loop stays about connections.
#include <functional>
#include <string>
#include <string_view>

#include "net/http_server.hpp"

namespace swarm {

/// The answer to one request head and whether the connection stays open after it.
struct http_answer {
  http_response response;
  bool head_only = false;
  bool keep_alive = false;
};

/// A plain-text answer `status` saying why.
[[nodiscard]] http_response http_plain(int status, const std::string& why);

/// Answers `head` (request line and headers, without the blank line) through
/// `route` (the path, without its query string). With a `token`, a request
/// without it (`Authorization: Bearer TOKEN` or `?token=TOKEN`) gets 401.
[[nodiscard]] http_answer answer_request(const std::string& head, const std::string& token,
                                         const std::function<http_response(const std::string&)>& route);

/// The bytes of `a` on the wire.
[[nodiscard]] std::string encode_answer(const http_answer& a);

/// Whether `given` equals `secret`, in a time that depends on the secret's
/// length only (never on where the two first differ).
[[nodiscard]] bool same_secret(std::string_view given, std::string_view secret);

}  // namespace swarm
