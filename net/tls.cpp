#include "net/tls.hpp"

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <climits>
#include <csignal>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/scoped_actor.hpp>

#include "base/log.hpp"
#include "messages/errors.hpp"
#include "messages/local.hpp"
#include "net/basp_watch.hpp"
#include "net/peer_roles.hpp"
#include "net/tcp.hpp"

namespace swarm {

namespace {

std::atomic<uint64_t> refusals{0};

struct peer_book {
  std::mutex m;
  /// Guard's loopback port -> the peer it relays, and until when to keep it:
  /// the relay may close before CAF's first handshake step asks (a prober that
  /// hangs up at once), so a closed one is kept a while. At most one per port.
  std::map<uint16_t, std::pair<std::string, std::chrono::steady_clock::time_point>> relayed;
  std::set<std::string> warned;  ///< peers whose refusal was logged
};

peer_book& book() {
  static peer_book b;
  return b;
}

/// "ip:port" of the other end of `fd`; for a connection from the guard, the
/// peer it relays. `ip` alone goes to `host`.
std::string peer_of(int fd, std::string& host) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (fd < 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET)
    return host = "an unknown peer";
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  if (ntohl(a.sin_addr.s_addr) == INADDR_LOOPBACK) {
    auto& b = book();
    std::lock_guard<std::mutex> lock(b.m);
    if (auto i = b.relayed.find(ntohs(a.sin_port));
        i != b.relayed.end() && i->second.second > std::chrono::steady_clock::now())
      return host = i->second.first;
  }
  host = ip;
  return host + ":" + std::to_string(ntohs(a.sin_port));
}

/// OpenSSL's reason for the newest error on this thread's queue, if any.
std::string openssl_reason() {
  const unsigned long code = ERR_peek_last_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  return reason ? reason : "";
}

/// Who is at the other end of a handshake, noted at its first step: once
/// the peer hung up, its socket no longer says. Freed with the SSL object.
struct handshake_peer {
  std::string name, host;
};

int peer_slot() {
  static const int slot = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr,
      [](void*, void* p, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<handshake_peer*>(p); });
  return slot;
}

/// A handshake call returned `r`: a refusal (not a "try again") is counted
/// and logged, once per peer address.
void note_handshake(SSL* ssl, int r, bool accepting) {
  auto* peer = static_cast<handshake_peer*>(SSL_get_ex_data(ssl, peer_slot()));
  if (!peer) {
    peer = new handshake_peer;
    peer->name = peer_of(SSL_get_fd(ssl), peer->host);
    SSL_set_ex_data(ssl, peer_slot(), peer);
  }
  if (r > 0)
    return;
  const int e = SSL_get_error(ssl, r);  // reads the queue, leaves it for the caller
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
    return;
  ++refusals;
  std::string why = openssl_reason();
  if (why.empty() || why == "unexpected eof while reading")
    why = "the connection closed during the handshake (the peer may have refused this node's certificate)";
  const auto& host = peer->host;
  auto& b = book();
  std::lock_guard<std::mutex> lock(b.m);
  if (b.warned.size() < 1024 && b.warned.insert(host).second)
    get_logger("tls")->warn("refused a TLS handshake {} {}: {} (further ones from it are not logged)",
                            accepting ? "from" : "with", peer->name, why);
}

/// One step of a handshake through OpenSSL's own `step`, on a clean error queue.
int handshake_step(int (*step)(SSL*), SSL* ssl, bool accepting) {
  ERR_clear_error();
  const int r = step(ssl);
  note_handshake(ssl, r, accepting);
  return r;
}

/// What SSL_read has seen of one connection's stream (net/basp_watch.hpp);
/// freed with the SSL object, which gives its node id back.
struct stream_watch {
  explicit stream_watch(bool accepting) : basp(accepting) {}
  ~stream_watch() {
    if (claimed)
      release_node(basp.node());
  }
  bool bulk = false;  ///< the bulk plane's (net/bulk.hpp): not BASP
  bool claimed = false;
  bool said = false;  ///< its refusal was logged
  basp_watch basp;
};

int watch_slot() {
  static const int slot = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr,
      [](void*, void* p, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<stream_watch*>(p); });
  return slot;
}

stream_watch& watch_of(SSL* ssl) {
  auto* w = static_cast<stream_watch*>(SSL_get_ex_data(ssl, watch_slot()));
  if (!w) {
    w = new stream_watch(SSL_is_server(ssl) == 1);
    SSL_set_ex_data(ssl, watch_slot(), w);
  }
  return *w;
}

/// SHA-256 of the peer's certificate; empty without one.
std::string fingerprint_of(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!cert || X509_digest(cert, EVP_sha256(), md, &len) != 1)
    return {};
  return std::string(reinterpret_cast<const char*>(md), len);
}

/// CAF read `n` decrypted bytes at `p` from `ssl`: whether they may pass. A
/// connection refused here is closed by CAF (its read fails), logged once.
bool watch_read(SSL* ssl, const char* p, size_t n) {
  auto& w = watch_of(ssl);
  if (w.bulk)
    return true;
  auto why = w.basp.feed(p, n, [&](const caf::node_id& node) {
    X509* cert = SSL_get0_peer_certificate(ssl);
    const role_set roles = roles_of_certificate(cert);
    basp_watch::verdict v{claim_node(node, fingerprint_of(cert), roles), (roles & role_coordinator) != 0};
    w.claimed = v.refused.empty();
    return v;
  });
  if (why.empty())
    return true;
  if (!w.said) {
    w.said = true;
    static std::atomic<uint64_t> count{0};
    std::string host;
    if (const uint64_t k = worth_logging(count))
      get_logger("tls")->warn("closed the connection with {}: {} [{} connections closed so]",
                              peer_of(SSL_get_fd(ssl), host), why, k);
  }
  return false;
}

template <class F>
F next_definition(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

/// The OpenSSL error as a BAD_CONFIG naming the flag and file it concerns.
caf::error bad_file(const char* flag, const std::string& file, const std::string& what) {
  auto reason = openssl_reason();
  ERR_clear_error();
  return make_error(errc::BAD_CONFIG, std::string{flag} + " " + file + ": " + what +
                                          (reason.empty() ? std::string{} : " (" + reason + ")"));
}

/// What a TLS call that returned `r` waits for (POLLIN, POLLOUT), or 0 when it failed for good.
short wanted(SSL* ssl, int r) {
  const int e = SSL_get_error(ssl, r);
  return e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
}

/// O_NONBLOCK on a socket while it lives; its flags as they were afterwards.
class nonblocking {
public:
  explicit nonblocking(int fd) : fd_(fd), flags_(::fcntl(fd, F_GETFL, 0)) { ::fcntl(fd, F_SETFL, flags_ | O_NONBLOCK); }
  ~nonblocking() { ::fcntl(fd_, F_SETFL, flags_); }
  nonblocking(const nonblocking&) = delete;
  nonblocking& operator=(const nonblocking&) = delete;

private:
  int fd_, flags_;
};

/// A handshake that did not finish by its deadline: counted and logged like
/// a refusal, once per peer address.
void note_late(SSL* ssl, bool accepting) {
  ++refusals;
  auto* peer = static_cast<handshake_peer*>(SSL_get_ex_data(ssl, peer_slot()));
  const std::string host = peer ? peer->host : "an unknown peer";
  auto& b = book();
  std::lock_guard<std::mutex> lock(b.m);
  if (b.warned.size() < 1024 && b.warned.insert(host).second)
    get_logger("tls")->warn(
        "gave up a TLS handshake {} {}: not complete by its deadline (further ones from it are "
        "not logged)",
        accepting ? "from" : "with", peer ? peer->name : host);
}

/// No prompt for an encrypted key's passphrase: a node runs unattended.
int no_passphrase(char*, int, int, void*) { return 0; }

}  // namespace

caf::expected<std::shared_ptr<tls_context>> tls_context::load(const tls_files& f) {
  const std::pair<const char*, const std::string*> files[] = {
      {"--tls-ca", &f.ca}, {"--tls-cert", &f.cert}, {"--tls-key", &f.key}};
  for (const auto& [flag, path] : files)
    if (path->empty() || ::access(path->c_str(), R_OK) != 0)
      return make_error(errc::BAD_CONFIG,
                        std::string{flag} + " " + (path->empty() ? "is missing" : *path) +
                            (path->empty() ? "" : ": cannot read it: " + std::string{std::strerror(errno)}) +
                            " (--tls-ca, --tls-cert and --tls-key go together)");
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (!ctx)
    return make_error(errc::BAD_CONFIG, "cannot create a TLS context: " + openssl_reason());
  std::shared_ptr<tls_context> result{new tls_context(ctx)};
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  if (SSL_CTX_load_verify_locations(ctx, f.ca.c_str(), nullptr) != 1)
    return bad_file("--tls-ca", f.ca, "not a PEM certificate");
  if (SSL_CTX_use_certificate_chain_file(ctx, f.cert.c_str()) != 1)
    return bad_file("--tls-cert", f.cert, "not a PEM certificate");
  if (SSL_CTX_use_PrivateKey_file(ctx, f.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return bad_file("--tls-key", f.key,
                    openssl_reason() == "key values mismatch" ? "does not match the certificate in " + f.cert
                                                              : "not an unencrypted PEM private key");
  if (SSL_CTX_check_private_key(ctx) != 1)
    return bad_file("--tls-key", f.key, "does not match the certificate in " + f.cert);
  // The node's own certificate must pass what its peers will check: signed by
  // the CA, valid now, usable as client and as server.
  for (int purpose : {X509_PURPOSE_SSL_CLIENT, X509_PURPOSE_SSL_SERVER}) {
    X509_STORE_CTX* check = X509_STORE_CTX_new();
    const bool ok =
        check && X509_STORE_CTX_init(check, SSL_CTX_get_cert_store(ctx), SSL_CTX_get0_certificate(ctx), nullptr) == 1 &&
        X509_STORE_CTX_set_purpose(check, purpose) == 1 && X509_verify_cert(check) == 1;
    const std::string why = check ? X509_verify_cert_error_string(X509_STORE_CTX_get_error(check)) : "out of memory";
    X509_STORE_CTX_free(check);
    if (!ok)
      return bad_file("--tls-cert", f.cert, "does not verify against --tls-ca " + f.ca + ": " + why);
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // A peer gone mid-write must be an error, not a signal that ends the process.
  std::signal(SIGPIPE, SIG_IGN);
  return result;
}

tls_context::~tls_context() { SSL_CTX_free(ctx_); }

std::unique_ptr<tls_link> tls_link::handshake(const tls_context& ctx, int fd, bool server,
                                              std::chrono::steady_clock::time_point deadline) {
  SSL* ssl = SSL_new(ctx.native());
  if (!ssl || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  int r = 0;
  {
    const nonblocking during(fd);  // each step returns when it would wait: the wait is ours, up to `deadline`
    while ((r = server ? SSL_accept(ssl) : SSL_connect(ssl)) != 1) {
      const short events = wanted(ssl, r);
      if (events == 0)
        break;  // refused: logged by the interposed call
      if (!wait_ready(fd, events, deadline)) {
        note_late(ssl, server);
        break;
      }
    }
  }
  if (r != 1) {
    SSL_free(ssl);
    return nullptr;
  }
  watch_of(ssl).bulk = true;
  return std::unique_ptr<tls_link>(new tls_link(fd, ssl));
}

tls_link::~tls_link() { SSL_free(ssl_); }

long tls_link::read_some(char* p, size_t n) {
  for (;;) {
    errno = 0;
    const long r = ssl_ ? SSL_read(ssl_, p, static_cast<int>(std::min<size_t>(n, INT_MAX))) : ::recv(fd_, p, n, 0);
    if (r > 0 || errno != EINTR || (ssl_ && wanted(ssl_, static_cast<int>(r)) == 0))
      return r;  // a signal's handler ran (one without SA_RESTART): read on
  }
}

bool tls_link::read_all(char* p, size_t n) {
  while (n > 0) {
    const long r = read_some(p, n);
    if (r <= 0)
      return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool tls_link::read_all_by(char* p, size_t n, std::chrono::steady_clock::time_point deadline) {
  const nonblocking during(fd_);
  while (n > 0) {
    errno = 0;
    const long r = read_some(p, n);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    const short events = ssl_ ? wanted(ssl_, static_cast<int>(r))
                              : static_cast<short>(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? POLLIN : 0);
    if (events == 0 || !wait_ready(fd_, events, deadline))
      return false;
  }
  return true;
}

bool tls_link::write_all(const char* p, size_t n, bool more) {
  if (!ssl_)
    return swarm::write_all(fd_, p, n, more ? MSG_MORE : 0);
  while (n > 0) {
    // Without partial writes, SSL_write sends all it was given or fails.
    const int chunk = static_cast<int>(std::min<size_t>(n, size_t{1} << 20));
    errno = 0;
    const int w = SSL_write(ssl_, p, chunk);
    if (w != chunk && errno == EINTR && wanted(ssl_, w) != 0)
      continue;  // interrupted by a signal: the same call again, as OpenSSL requires
    if (w != chunk)
      return false;
    p += chunk;
    n -= static_cast<size_t>(chunk);
  }
  return true;
}

caf::io::middleman_actor dialer(caf::actor_system& sys) {
  return sys.has_openssl_manager() ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
}

caf::expected<caf::strong_actor_ptr> dial(caf::actor_system& sys, const std::string& host, uint16_t port,
                                          caf::timespan timeout) {
  caf::expected<caf::strong_actor_ptr> result{caf::error{}};
  caf::scoped_actor self{sys};
  self->request(dialer(sys), timeout, caf::connect_atom::value, host, port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (ptr)
              result = std::move(ptr);
            else
              result = make_error(errc::PEER_GONE, "nothing published at " + host + ":" + std::to_string(port));
          },
          [&](caf::error& err) { result = std::move(err); });
  return result;
}

void note_relayed_peer(uint16_t local_port, const std::string& peer) {
  auto& b = book();
  std::lock_guard<std::mutex> lock(b.m);
  const auto now = std::chrono::steady_clock::now();
  if (peer.empty()) {
    if (auto i = b.relayed.find(local_port); i != b.relayed.end())
      i->second.second = now + std::chrono::seconds(30);
  } else {
    b.relayed[local_port] = {peer, std::chrono::steady_clock::time_point::max()};
  }
}

uint64_t tls_refusals() { return refusals.load(); }

}  // namespace swarm

// The interposed OpenSSL calls (see tls.hpp): this executable's definitions
// come first in the dynamic symbol lookup, so CAF's openssl module calls
// these; each clears the thread's error queue and calls OpenSSL's own.
extern "C" {

int SSL_accept(SSL* ssl) {
  static const auto next = swarm::next_definition<int (*)(SSL*)>("SSL_accept");
  return swarm::handshake_step(next, ssl, true);
}

int SSL_connect(SSL* ssl) {
  static const auto next = swarm::next_definition<int (*)(SSL*)>("SSL_connect");
  return swarm::handshake_step(next, ssl, false);
}

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto next = swarm::next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  const int r = next(ssl, buf, num);
  if (r > 0 && !swarm::watch_read(ssl, static_cast<const char*>(buf), static_cast<size_t>(r))) {
    ERR_raise(ERR_LIB_USER, 0);  // a fatal SSL_ERROR_SSL for the caller: CAF closes the connection
    return -1;
  }
  return r;
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto next = swarm::next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return next(ssl, buf, num);
}

}  // extern "C"
