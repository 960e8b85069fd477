#pragma once
// Mutual TLS with a cluster CA for every connection of a swarm, when
// configured (--tls-ca, --tls-cert, --tls-key): CAF's links (its openssl
// module, published behind the guard) and the bulk plane (this file's
// tls_link). A peer is a member when its certificate chains to the CA; both
// ends of every connection present one.
//
// Debian's CAF 0.17.6 leaves OpenSSL's per-thread error queue dirty after a
// failed handshake, so the next SSL call on its network thread reads the stale
// error and CAF closes that (healthy) link too: one refused stranger would cut
// every established link (../shared/notes/garbage.md). tls.cpp therefore
// interposes SSL_accept, SSL_connect, SSL_read and SSL_write for the whole
// process, clearing the queue before each call, and logs each refused
// handshake once per peer with OpenSSL's reason.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman_actor.hpp>

using SSL_CTX = struct ssl_ctx_st;
using SSL = struct ssl_st;

namespace swarm {

struct tls_files {
  std::string ca, cert, key;  ///< PEM files; all empty = plain TCP
  [[nodiscard]] bool enabled() const { return !ca.empty(); }
};

/// An OpenSSL context for mutual TLS with the cluster CA (TLS 1.3, a peer
/// certificate required both ways); shared by every bulk connection.
class tls_context {
public:
  /// Loads and checks the files: each readable PEM, the key matching the
  /// certificate, the certificate signed by the CA. BAD_CONFIG naming the file
  /// that is wrong, so a node fails at start-up, not at its first connection.
  static caf::expected<std::shared_ptr<tls_context>> load(const tls_files& files);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;
  [[nodiscard]] SSL_CTX* native() const { return ctx_; }

private:
  explicit tls_context(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

/// A connected socket, plain (no context) or after a TLS handshake. Used by
/// one thread at a time; owns neither the socket nor its closing.
class tls_link {
public:
  /// Plain TCP on `fd`.
  explicit tls_link(int fd) : fd_(fd) {}
  /// TLS on `fd` as server or client, the whole handshake done by `deadline`
  /// (one time point, not a wait per read: a peer trickling a byte at a time
  /// must not hold the connection longer); null when it fails (logged once
  /// per peer by the interposed calls, or here when late).
  static std::unique_ptr<tls_link> handshake(const tls_context& ctx, int fd, bool server,
                                             std::chrono::steady_clock::time_point deadline);
  ~tls_link();
  tls_link(const tls_link&) = delete;
  tls_link& operator=(const tls_link&) = delete;

  /// Up to `n` bytes; <= 0 when the peer is gone. Resumes after a signal (EINTR).
  long read_some(char* p, size_t n);
  bool read_all(char* p, size_t n);
  /// All `n` bytes by `deadline`, however they trickle in; false when the
  /// peer is gone or the deadline passed (errno ETIMEDOUT).
  bool read_all_by(char* p, size_t n, std::chrono::steady_clock::time_point deadline);
  /// All `n` bytes; false when the peer is gone or a write timed out. `more`:
  /// more follows at once (plain TCP holds the segment back).
  bool write_all(const char* p, size_t n, bool more = false);

private:
  tls_link(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  int fd_;
  SSL* ssl_ = nullptr;
};

/// The middleman to dial peers with: CAF's openssl manager when `sys` loaded
/// it (TLS), else the plain one. Send it (connect_atom, host, port) with a
/// deadline: CAF's remote_actor has none.
[[nodiscard]] caf::io::middleman_actor dialer(caf::actor_system& sys);

/// Dials host:port within `timeout`; what is published there, or the error.
[[nodiscard]] caf::expected<caf::strong_actor_ptr> dial(caf::actor_system& sys, const std::string& host, uint16_t port,
                                                        caf::timespan timeout);

/// The guard says whom it relays on the loopback connection from `local_port`
/// (its end towards CAF), so a refusal names the real peer; `peer` empty: the
/// relay closed (still named for 30 s, until CAF has looked; the port's next
/// relay replaces it).
void note_relayed_peer(uint16_t local_port, const std::string& peer);

/// Handshakes refused so far in this process (CAF links and bulk alike).
[[nodiscard]] uint64_t tls_refusals();

}  // namespace swarm
