#pragma once
// A client of etcd v3 (3.4, Debian's etcd-server) through its HTTP/JSON
// gateway (the gRPC API's published mapping: POST /v3/<service>/<method>,
// bytes as base64, 64-bit integers as strings), for issue 27's standby
// coordinators: leases, keys, and the election service (campaign, leader,
// resign), whose leader key's creation revision is the term that fences a
// deposed leader's orders.
//
// Every call goes to the members in turn until one answers, bounded by the
// client's timeout per member (campaign: by its own wait). Errors are values
// (messages/errors.hpp): PEER_GONE (retryable) when no member answered or
// the cluster has no quorum, TIMEOUT when a campaign's wait ran out,
// BAD_REQUEST for what etcd refused.
// Blocking: use it from a thread or actor of its own, never from a CAF
// worker that others wait on.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace swarm {

struct etcd_member {
  std::string host;
  uint16_t port = 0;
};

/// TLS to etcd (its own --cert-file/--trusted-ca-file, beside the swarm's
/// --tls-*): PEM files; `ca` empty = plain HTTP. With cert and key this
/// client presents them (etcd's --client-cert-auth).
struct etcd_tls {
  std::string ca, cert, key;
  [[nodiscard]] bool enabled() const { return !ca.empty(); }
};

struct etcd_kv {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, lease = 0;
};

/// A won election: what resign() needs, and the term (the leader key's
/// creation revision: larger for every later leader of the same election).
struct etcd_leadership {
  std::string name, key;
  int64_t term = 0, lease = 0;
};

class etcd_client {
public:
  etcd_client(std::vector<etcd_member> members, std::chrono::milliseconds timeout, etcd_tls tls = {});
  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  /// A lease of `ttl_s` seconds; its id.
  [[nodiscard]] caf::expected<int64_t> grant(int64_t ttl_s);
  /// Renews `lease`: its TTL in seconds, 0 when it has expired (or was revoked).
  [[nodiscard]] caf::expected<int64_t> keep_alive(int64_t lease);
  [[nodiscard]] caf::error revoke(int64_t lease);

  /// Sets `key` (tied to `lease` unless 0); the store's revision after it.
  [[nodiscard]] caf::expected<int64_t> put(const std::string& key, const std::string& value, int64_t lease = 0);
  /// The key, or none.
  [[nodiscard]] caf::expected<std::optional<etcd_kv>> get(const std::string& key);

  /// Whether a member answers etcd's status call (the first that does).
  [[nodiscard]] caf::error status();

  /// Every key starting with `prefix`, in key order.
  [[nodiscard]] caf::expected<std::vector<etcd_kv>> get_prefix(const std::string& prefix);
  /// Sets `key` only while `l` still leads (its leader key exists with its
  /// term as creation revision): false when it no longer does. A deposed
  /// leader's late writes cannot overwrite its successor's.
  [[nodiscard]] caf::expected<bool> put_if_leader(const etcd_leadership& l, const std::string& key,
                                                  const std::string& value);

  /// Watches every key starting with `prefix` (etcd's watch stream): calls
  /// `on_change` once the watch is in place and after each batch of changes,
  /// until it returns false, the stream ends, or nothing came for `idle`
  /// (then TIMEOUT: watch again). Blocks meanwhile.
  [[nodiscard]] caf::error watch(const std::string& prefix, const std::function<bool()>& on_change,
                                 std::chrono::milliseconds idle);

  /// Waits, up to `wait`, until this candidate (`value`, held by `lease`) leads
  /// election `name`; TIMEOUT when it did not within `wait`. etcd withdraws a
  /// campaign whose caller gave up (it deletes the candidate's key, some time
  /// later): campaign again under a fresh lease, never the same one.
  [[nodiscard]] caf::expected<etcd_leadership> campaign(const std::string& name, const std::string& value,
                                                        int64_t lease, std::chrono::milliseconds wait);
  /// The current leader's key and value (create_revision: its term), or none.
  [[nodiscard]] caf::expected<std::optional<etcd_kv>> leader(const std::string& name);
  [[nodiscard]] caf::error resign(const etcd_leadership& l);

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

}  // namespace swarm
