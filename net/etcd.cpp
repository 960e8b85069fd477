#include "net/etcd.hpp"

#include <cstring>

#include <httplib.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "messages/errors.hpp"

namespace swarm {

namespace {

using json = nlohmann::json;

constexpr char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(in[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(in[i + 1])} << 8) | static_cast<uint8_t>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6)
      out += b64_chars[(v >> s) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16;
    if (i + 1 < in.size())
      v |= uint32_t{static_cast<uint8_t>(in[i + 1])} << 8;
    out += b64_chars[(v >> 18) & 63];
    out += b64_chars[(v >> 12) & 63];
    out += i + 1 < in.size() ? b64_chars[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

/// Decodes base64 (padding optional); nullopt for any other character.
std::optional<std::string> b64_decode(const std::string& in) {
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=')
      break;
    const char* at = std::strchr(b64_chars, c);
    if (c == '\0' || !at)
      return std::nullopt;
    v = (v << 6) | static_cast<uint32_t>(at - b64_chars);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

/// The gateway writes 64-bit integers as strings; absent (or not a number) means 0.
int64_t int_field(const json& j, const char* name) {
  if (!j.is_object())
    return 0;
  const auto it = j.find(name);
  if (it == j.end())
    return 0;
  if (it->is_number_integer())
    return it->get<int64_t>();
  if (!it->is_string())
    return 0;
  const auto text = it->get<std::string>();
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  return end != nullptr && *end == '\0' ? v : 0;
}

std::string text_field(const json& j, const char* name) {
  if (!j.is_object())
    return {};
  const auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

std::string bytes_field(const json& j, const char* name) {
  return b64_decode(text_field(j, name)).value_or(std::string{});
}

/// `j[name]` when it is an object, else an empty object.
json object_field(const json& j, const char* name) {
  if (!j.is_object())
    return json::object();
  const auto it = j.find(name);
  return it != j.end() && it->is_object() ? *it : json::object();
}

etcd_kv kv_of(const json& j) {
  return {bytes_field(j, "key"), bytes_field(j, "value"), int_field(j, "create_revision"), int_field(j, "mod_revision"),
          int_field(j, "lease")};
}

}  // namespace

namespace {

/// The member that answered last in this process, "host:port": where a new
/// client starts. A process's clients come and go (one per campaign's lease
/// keeper), and each starting from a member cut off from the rest would wait
/// out its connection timeout first, every time.
std::mutex last_good_mutex;
std::string last_good;

/// The most bytes of one reply read from a member (Content-Length or chunks
/// alike): etcd refuses requests over 1.5 MiB by default, and the replies
/// read here (a key, a prefix of members' keys, a lease) are far smaller, so
/// a longer one is not etcd's and must not grow this process without bound.
constexpr size_t max_reply_bytes = size_t{8} << 20;

/// The key just past every key that starts with `prefix` (etcd's range_end).
std::string prefix_end(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff)
    prefix.pop_back();
  if (prefix.empty())
    return std::string(1, '\0');  // every key
  prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

std::string endpoint_of(const etcd_member& m) { return m.host + ":" + std::to_string(m.port); }

}  // namespace

struct etcd_client::impl {
  std::vector<etcd_member> members;
  std::chrono::milliseconds timeout;
  etcd_tls tls;
  size_t next = 0;  ///< the member that answered last: asked first

  /// An HTTP(S) client of member `i` whose reads wait up to `read`.
  httplib::Client client_for(size_t i, std::chrono::milliseconds read) const {
    const auto& m = members[i];
    httplib::Client http = tls.enabled() ? httplib::Client("https://" + endpoint_of(m), tls.cert, tls.key)
                                         : httplib::Client(m.host, m.port);
    if (tls.enabled()) {
      http.set_ca_cert_path(tls.ca);
      http.enable_server_certificate_verification(true);
    }
    http.set_connection_timeout(timeout);
    http.set_read_timeout(read);
    http.set_write_timeout(timeout);
    return http;
  }

  static httplib::Request post(const std::string& path, std::string body) {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = std::move(body);
    req.set_header("Content-Type", "application/json");
    return req;
  }

  /// POSTs `body` to `path` on the first member that takes it and hands each
  /// line of the streamed answer, parsed, to `on_message` until it returns
  /// false or the stream ends; TIMEOUT when nothing came for `idle`.
  caf::error stream(const std::string& path, const json& body, std::chrono::milliseconds idle,
                    const std::function<bool(const json&)>& on_message) {
    std::string why = "no member";
    for (size_t n = 0; n < members.size(); ++n) {
      const size_t i = (next + n) % members.size();
      const std::string who = endpoint_of(members[i]);
      auto http = client_for(i, idle);
      auto req = post(path, body.dump());
      std::string pending;
      bool streamed = false, stopped = false;
      req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
        streamed = true;
        pending.append(data, len);
        for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
          const json message = json::parse(pending.substr(0, end), nullptr, false);
          pending.erase(0, end + 1);
          if (!message.is_discarded() && message.is_object() && !on_message(message)) {
            stopped = true;
            return false;
          }
        }
        return pending.size() < (1u << 20);  // no line of a watch is this long: not etcd
      };
      httplib::Response res;
      httplib::Error error = httplib::Error::Success;
      http.send(req, res, error);
      if (stopped)
        return caf::none;
      if (streamed)  // it took the stream; it ended (etcd stopped, or went quiet for `idle`)
        return error == httplib::Error::Read
                   ? make_error(errc::TIMEOUT, "etcd " + path + ": quiet for " + std::to_string(idle.count()) + " ms")
                   : make_error(errc::PEER_GONE, "etcd " + who + " " + path + ": stream ended");
      why = who + ": " + httplib::to_string(error);
    }
    return make_error(errc::PEER_GONE, "etcd " + path + ": no member answered (" + why + ")");
  }

  /// POSTs `body` to `path` on the members in turn, the first that answers
  /// (any HTTP status) wins; `wait` bounds each member's reply. `repeatable`
  /// false: a member that took the request and said nothing within `wait` may
  /// have carried it out, so it is not sent to another (a campaign: etcd
  /// withdraws the silent one later by deleting the candidate's key, which a
  /// second campaign under the same lease would share).
  caf::expected<json> call(const std::string& path, const json& body, std::chrono::milliseconds wait,
                           bool repeatable = true) {
    std::string why = "no member";
    bool silent = false;  // a member took the request and said nothing within `wait`
    const std::string text = body.dump();
    for (size_t n = 0; n < members.size(); ++n) {
      const size_t i = (next + n) % members.size();
      const std::string who = endpoint_of(members[i]);
      auto http = client_for(i, wait);
      // Through a content receiver: the gateway ends an error's chunked
      // body with a gRPC trailer, which cpp-httplib 0.11 refuses (a read
      // error after the whole body came); the body is what counts.
      auto req = post(path, text);
      std::string got;
      bool too_long = false;
      req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t announced) {
        // announced: its Content-Length (0 when chunked); either way no more than the cap is held.
        too_long = announced > max_reply_bytes || got.size() + n > max_reply_bytes;
        if (!too_long)
          got.append(data, n);
        return !too_long;
      };
      httplib::Response res;
      httplib::Error error = httplib::Error::Success;
      const bool sent = http.send(req, res, error);
      if (too_long)
        return make_error(errc::INTERNAL, "etcd " + who + " " + path + ": a reply over " +
                                              std::to_string(max_reply_bytes) + " bytes (not etcd's)");
      json reply = json::parse(got, nullptr, false);
      if (!sent && (got.empty() || reply.is_discarded())) {
        silent = silent || error == httplib::Error::Read;
        why = who + ": " + httplib::to_string(error);
        if (silent && !repeatable)
          break;
        continue;
      }
      if (reply.is_discarded() || !reply.is_object())
        return make_error(errc::INTERNAL,
                          "etcd " + who + " " + path + ": not a JSON object (HTTP " + std::to_string(res.status) + ")");
      if (res.status != 200) {
        std::string message = text_field(reply, "message");
        if (message.empty())
          message = "HTTP " + std::to_string(res.status);
        // Unavailable (14) and deadline exceeded (4): a member without quorum; try another.
        const int64_t code = int_field(reply, "code");
        if (code == 14 || code == 4) {
          why = who + ": " + message;
          continue;
        }
        return make_error(errc::BAD_REQUEST, "etcd " + who + " " + path + ": " + message);
      }
      next = i;
      {
        std::lock_guard<std::mutex> lock(last_good_mutex);
        last_good = who;
      }
      return reply;
    }
    if (silent)
      return make_error(errc::TIMEOUT, "etcd " + path + ": no reply within " + std::to_string(wait.count()) + " ms");
    return make_error(errc::PEER_GONE, "etcd " + path + ": no member answered (" + why + ")");
  }
};

etcd_client::etcd_client(std::vector<etcd_member> members, std::chrono::milliseconds timeout, etcd_tls tls)
    : impl_(std::make_unique<impl>()) {
  impl_->members = std::move(members);
  impl_->timeout = timeout;
  impl_->tls = std::move(tls);
  std::lock_guard<std::mutex> lock(last_good_mutex);
  for (size_t i = 0; i < impl_->members.size(); ++i)
    if (endpoint_of(impl_->members[i]) == last_good)
      impl_->next = i;
}

etcd_client::~etcd_client() = default;

caf::expected<int64_t> etcd_client::grant(int64_t ttl_s) {
  auto r = impl_->call("/v3/lease/grant", {{"TTL", ttl_s}}, impl_->timeout);
  if (!r)
    return r.error();
  return int_field(*r, "ID");
}

caf::expected<int64_t> etcd_client::keep_alive(int64_t lease) {
  // A stream in gRPC; through the gateway one request gets one answer.
  auto r = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}, impl_->timeout);
  if (!r)
    return r.error();
  return int_field(object_field(*r, "result"), "TTL");
}

caf::error etcd_client::revoke(int64_t lease) {
  auto r = impl_->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}, impl_->timeout);
  return r ? caf::error{} : r.error();
}

caf::expected<int64_t> etcd_client::put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", b64_encode(key)}, {"value", b64_encode(value)}};
  if (lease != 0)
    body["lease"] = std::to_string(lease);
  auto r = impl_->call("/v3/kv/put", body, impl_->timeout);
  if (!r)
    return r.error();
  return int_field(object_field(*r, "header"), "revision");
}

caf::expected<std::optional<etcd_kv>> etcd_client::get(const std::string& key) {
  auto r = impl_->call("/v3/kv/range", {{"key", b64_encode(key)}}, impl_->timeout);
  if (!r)
    return r.error();
  const auto it = r->find("kvs");
  if (it == r->end() || !it->is_array() || it->empty())
    return std::optional<etcd_kv>{};
  return std::optional<etcd_kv>{kv_of(it->front())};
}

caf::error etcd_client::status() {
  auto r = impl_->call("/v3/maintenance/status", json::object(), impl_->timeout);
  return r ? caf::error{} : r.error();
}

caf::expected<std::vector<etcd_kv>> etcd_client::get_prefix(const std::string& prefix) {
  auto r = impl_->call("/v3/kv/range", {{"key", b64_encode(prefix)}, {"range_end", b64_encode(prefix_end(prefix))}},
                       impl_->timeout);
  if (!r)
    return r.error();
  std::vector<etcd_kv> out;
  const auto it = r->find("kvs");
  if (it != r->end() && it->is_array())
    for (const auto& kv : *it)
      out.push_back(kv_of(kv));
  return out;
}

caf::expected<bool> etcd_client::put_if_leader(const etcd_leadership& l, const std::string& key,
                                               const std::string& value) {
  // One transaction: the put happens only while the leader key still exists
  // with the creation revision this leader won with.
  const json body{
      {"compare", json::array({{{"key", b64_encode(l.key)},
                                {"target", "CREATE"},
                                {"result", "EQUAL"},
                                {"create_revision", std::to_string(l.term)}}})},
      {"success", json::array({{{"request_put", {{"key", b64_encode(key)}, {"value", b64_encode(value)}}}}})}};
  auto r = impl_->call("/v3/kv/txn", body, impl_->timeout);
  if (!r)
    return r.error();
  const auto it = r->find("succeeded");
  return it != r->end() && it->is_boolean() && it->get<bool>();
}

caf::error etcd_client::watch(const std::string& prefix, const std::function<bool()>& on_change,
                              std::chrono::milliseconds idle) {
  // One member, the first that takes the stream; the gateway writes one JSON
  // object per line: {"result": {"created": true, ...}}, then one per batch of
  // events ({"result": {"events": [...]}}).
  const json body{{"create_request", {{"key", b64_encode(prefix)}, {"range_end", b64_encode(prefix_end(prefix))}}}};
  return impl_->stream("/v3/watch", body, idle, [&](const json& message) {
    const auto result = object_field(message, "result");
    if (result.empty())
      return true;  // an error object ends the stream from etcd's side
    const auto events = result.find("events");
    const bool created = result.contains("created");
    return (created || (events != result.end() && events->is_array())) ? on_change() : true;
  });
}

caf::expected<etcd_leadership> etcd_client::campaign(const std::string& name, const std::string& value, int64_t lease,
                                                     std::chrono::milliseconds wait) {
  auto r = impl_->call("/v3/election/campaign",
                       {{"name", b64_encode(name)}, {"value", b64_encode(value)}, {"lease", std::to_string(lease)}},
                       wait, false);
  if (!r)
    return r.error();
  const auto l = object_field(*r, "leader");
  return etcd_leadership{bytes_field(l, "name"), bytes_field(l, "key"), int_field(l, "rev"), int_field(l, "lease")};
}

caf::expected<std::optional<etcd_kv>> etcd_client::leader(const std::string& name) {
  auto r = impl_->call("/v3/election/leader", {{"name", b64_encode(name)}}, impl_->timeout);
  if (!r) {
    // etcd says so only in words ("election: no leader", gRPC code 2: unknown).
    if (describe(r.error()).find("no leader") != std::string::npos)
      return std::optional<etcd_kv>{};
    return r.error();
  }
  return std::optional<etcd_kv>{kv_of(object_field(*r, "kv"))};
}

caf::error etcd_client::resign(const etcd_leadership& l) {
  const json leader{{"name", b64_encode(l.name)},
                    {"key", b64_encode(l.key)},
                    {"rev", std::to_string(l.term)},
                    {"lease", std::to_string(l.lease)}};
  auto r = impl_->call("/v3/election/resign", {{"leader", leader}}, impl_->timeout);
  return r ? caf::error{} : r.error();
}

}  // namespace swarm
