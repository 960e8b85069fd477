// Benchmark: tensor transfer between two processes on loopback.
//
//   build/swarm_bench_transfer [--reps N] [--chunk-bytes B]
//
// For 1, 16 and 64 MiB float32 tensors it measures, in one run and on the same
// machine, the throughput of:
//   bulk request: the bytes over the bulk connection (net/bulk.hpp), a
//                 CAF request naming their key; the receiver pairs them;
//   bulk reply:   the same for replies: a small CAF request, the bytes back
//                 over the bulk connection to the requester;
//   bulk pieces:  all-reduce pieces: one-way messages whose bytes go bulk, the
//                 last one acknowledged;
//   bulk e2e:     a forward request holding the tensor, built beforehand, its
//                 bytes beside the encoded rest (the swarm's path), decoded
//                 and checked by the receiver into a torch tensor, as a server;
//   caf e2e:      the same request serialized whole over CAF alone (chunks of
//                 --chunk-bytes), the path below the bulk threshold;
//   raw tcp:      the bytes alone over a plain TCP socket, the ceiling.
// Each transfer is acknowledged before the next starts; each figure is the best
// of 3 rounds of --reps transfers, the variants alternating. CPU seconds per GB
// are the sender's and receiver's user + system time over the bulk request runs.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "apps/bench_transfer.hpp"
#include "apps/huge_pages.hpp"
#include "apps/malloc_reuse.hpp"
#include "base/buffer_pool.hpp"
#include "base/clock.hpp"
#include "net/bulk.hpp"
#include "net/chunks.hpp"
#include "net/tcp.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/types.hpp"
#include "messages/wire.hpp"

using namespace swarm;
using namespace swarm::bench;

namespace {

/// The requesting side of the bulk variants: receives bulk replies.
struct requester_state {
  bulk_inbox inbox;
  std::shared_ptr<const bulk_parts> payload;    ///< what the transport-only variants send
  std::shared_ptr<std::function<void()>> next;  ///< sends the next transfer
  caf::actor dest;
  std::shared_ptr<bulk_endpoint> bulk;
  std::function<void(bool)> done;
};

double mb_per_s(size_t bytes, int reps, std::chrono::steady_clock::time_point start) {
  const double secs = seconds_since(start);
  return static_cast<double>(bytes) * reps / secs / 1e6;
}

double caf_throughput(caf::actor_system& sys, const caf::actor& dest, size_t bytes, size_t chunk, int reps) {
  caf::scoped_actor self{sys};
  const auto tensor = make_request(bytes);
  uint64_t next = 0;
  const auto start = clock_type::now();
  for (int r = 0; r < reps; ++r) {
    auto piece = cut(encode(tensor), chunk, next);  // encoding counts: the swarm pays it too
    send_lead(self.ptr(), dest, piece);
    bool ok = false;
    self->request(dest, std::chrono::seconds(120), transfer_atom::value, piece.transfer_id, std::move(piece.tail))
        .receive([&](int64_t n) { ok = n == static_cast<int64_t>(bytes / 4); },
                 [&](caf::error& err) { std::fprintf(stderr, "transfer failed: %s\n", describe(err).c_str()); });
    if (!ok)
      return 0;
  }
  return mb_per_s(bytes, reps, start);
}

enum class bulk_kind { request, reply, pieces, encoded_request };

using requester = caf::stateful_actor<requester_state>*;

/// Bulk reply: asks `dest` for `bytes`, which come back over the bulk
/// connection; the next transfer once they are all here.
template <class Fail>
void fetch_reply(requester self, const caf::actor& dest, size_t bytes,
                 const std::shared_ptr<std::function<void()>>& next, Fail fail) {
  self->request(dest, std::chrono::seconds(120), fetch_atom::value, uint64_t{bytes}, true)
      .then(
          [self, next, bytes](uint64_t key) {
            self->state.inbox.claim(
                key,
                [next, bytes](caf::expected<bulk_parts> whole) {
                  if (whole && whole->size() == 2 && (*whole)[1].size() == bytes) {
                    give_back(*whole);
                    (*next)();
                  }
                },
                bulk_inbox::clock::now());
          },
          fail);
}

/// Bulk pieces: all `reps` go out at once, as a member's parts do; the last is
/// acknowledged, which finishes the run.
template <class Fail>
void send_pieces(requester self, bulk_endpoint& bulk, const caf::actor& dest, int reps, std::promise<bool>& finished,
                 Fail fail) {
  for (int i = 0; i < reps; ++i) {
    const auto key = bulk.push(dest, std::string{}, self->state.payload);
    if (i + 1 < reps)
      self->send(dest, piece_atom::value, key, false);
    else
      self->request(dest, std::chrono::seconds(120), piece_atom::value, key, true)
          .then(
              [self, &finished](int64_t) {
                finished.set_value(true);
                self->quit();
              },
              fail);
  }
}

/// One bulk variant, run by an event-based actor (bulk replies arrive as
/// messages to an attached actor, which a scoped actor is not).
double bulk_throughput(caf::actor_system& sys, const std::shared_ptr<bulk_endpoint>& bulk, const caf::actor& dest,
                       size_t bytes, int reps, bulk_kind kind) {
  std::promise<bool> finished;
  auto result = finished.get_future();
  const auto tensor = make_request(bytes);
  // End to end starts from a request built (the tensor's bytes in the message,
  // as the trainer's encode_tensor leaves them): that copy is the codec's, which
  // every transport pays alike, so its time is not counted.
  clock_type::duration building{};
  const auto start = clock_type::now();
  auto actor =
      sys.spawn([&, bulk, dest, kind, reps, bytes](caf::stateful_actor<requester_state>* self) -> caf::behavior {
        bulk->attach(caf::actor_cast<caf::actor>(self));
        self->state.payload = std::make_shared<const bulk_parts>(bulk_parts{std::string(bytes, 'q')});
        auto left = std::make_shared<int>(reps);
        auto fail = [self, &finished](caf::error& err) {
          std::fprintf(stderr, "transfer failed: %s\n", describe(err).c_str());
          finished.set_value(false);
          self->quit();
        };
        auto next = std::make_shared<std::function<void()>>();
        std::weak_ptr<std::function<void()>> weak = next;  // not `next`: a cycle would keep the endpoint alive
        *next = [self, &finished, &tensor, &building, bulk, dest, kind, bytes, left, weak, fail, reps] {
          auto next = weak.lock();
          if ((*left)-- == 0) {
            finished.set_value(true);
            self->quit();
            return;
          }
          if (kind == bulk_kind::encoded_request) {
            const auto built = clock_type::now();
            auto req = tensor;
            building += clock_type::now() - built;
            auto parts = encode_parts(req);
            auto head = std::move(parts.front());
            parts.erase(parts.begin());
            const auto key = bulk->push(dest, std::move(head), shared_parts(std::move(parts)));
            self->request(dest, std::chrono::seconds(120), transfer_atom::value, key, std::string{})
                .then([next](int64_t) { (*next)(); }, fail);
          } else if (kind == bulk_kind::request) {
            const auto key = bulk->push(dest, std::string{}, self->state.payload);
            self->request(dest, std::chrono::seconds(120), bytes_atom::value, key, uint64_t{bytes})
                .then([next](uint64_t) { (*next)(); }, fail);
          } else if (kind == bulk_kind::reply) {
            fetch_reply(self, dest, bytes, next, fail);
          } else {
            send_pieces(self, *bulk, dest, reps, finished, fail);
            *left = -1;
          }
        };
        self->state.next = next;  // alive as long as the actor
        (*next)();
        return {[self](bulk_delivery& d) {
          self->state.inbox.arrived(d.key, std::move(d.parts), bulk_inbox::clock::now());
        }};
      });
  const bool ok = result.get();
  bulk->detach(actor.id());
  return ok ? mb_per_s(bytes, reps, start + building) : 0;
}

double tcp_throughput(int fd, size_t bytes, int reps) {
  const std::string payload = make_request(bytes).inputs().data();
  char ack = 0;
  const auto start = clock_type::now();
  for (int r = 0; r < reps; ++r) {
    const uint64_t n = payload.size();
    send_all(fd, reinterpret_cast<const char*>(&n), sizeof n);
    send_all(fd, payload.data(), n);
    read_all(fd, &ack, 1);
  }
  const double secs = seconds_since(start);
  return static_cast<double>(bytes) * reps / secs / 1e6;
}

/// A loopback connection with the socket's defaults (Nagle on), as a user's
/// own raw TCP would be: the baseline the figures in docs/benchmarks.md used.
int connect_plain(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// What the table measures, and its column heads.
void print_header(int reps, size_t chunk) {
  std::printf(
      "payloads between two processes on loopback, %d reps each, best of 3 rounds; MB/s, and ratios to raw\n"
      "TCP measured in the same run. Transport: the bytes reach the receiving actor (raw TCP: its reader).\n"
      "End to end: a forward request holding a float32 tensor (built beforehand, as the trainer's encode_tensor\n"
      "leaves it) sent, decoded into a torch tensor and checked, as a server does: bulk (the tensor's bytes\n"
      "beside the encoded rest, as every request and reply travels), and CAF alone (serialized whole, in\n"
      "chunks of %zu bytes).\n",
      reps, chunk);
  std::printf("%5s | %9s %9s %9s %9s | %7s %7s %7s | %9s %9s %7s %7s\n", "MiB", "request", "reply", "pieces", "raw tcp",
              "req/raw", "rep/raw", "pcs/raw", "bulk e2e", "caf e2e", "b/raw", "c/raw");
}

}  // namespace

int main(int argc, char** argv) {
  restart_with_huge_pages(argv);  // as the cluster launcher gives its children
  keep_freed_memory();            // as every role does
  int reps = 5;
  size_t chunk = 16 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0)
      reps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--chunk-bytes") == 0)
      chunk = static_cast<size_t>(std::atoll(argv[i + 1]));
  }
  // The receivers live in a child process: a real process boundary, as in a swarm.
  const auto listening = listen_tcp("127.0.0.1", 0, "raw TCP receiver");
  if (!listening)
    return 1;
  const auto [listen_fd, tcp_port] = *listening;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0)
    return 1;
  const pid_t child = ::fork();
  if (child == 0)
    run_receivers(listen_fd, pipe_fds[1]);
  uint16_t caf_port = 0;
  read_all(pipe_fds[0], reinterpret_cast<char*>(&caf_port), sizeof caf_port);
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto dest = sys.middleman().remote_actor("127.0.0.1", caf_port);
  if (!dest) {
    std::fprintf(stderr, "cannot reach the receiver: %s\n", sys.render(dest.error()).c_str());
    return 1;
  }
  auto bulk = bulk_endpoint::start(sys);
  if (!bulk) {
    std::fprintf(stderr, "no bulk endpoint: %s\n", describe(bulk.error()).c_str());
    return 1;
  }
  const int tcp_fd = connect_plain(tcp_port);
  if (tcp_fd < 0)
    return 1;
  print_header(reps, chunk);
  auto remote_cpu = [&] {
    caf::scoped_actor self{sys};
    double secs = 0;
    self->request(*dest, std::chrono::seconds(10), cpu_atom::value)
        .receive([&](double s) { secs = s; }, [](caf::error&) {});
    return secs;
  };
  double cpu_bytes = 0, cpu_secs = 0;
  for (size_t mib : {1, 16, 64}) {
    const size_t bytes = mib << 20;
    // Warm-up (connections, first-touch pages), then alternate the variants
    // and keep each one's best round, so none pays for going first.
    caf_throughput(sys, *dest, bytes, chunk, 2);
    bulk_throughput(sys, *bulk, *dest, bytes, 2, bulk_kind::request);
    bulk_throughput(sys, *bulk, *dest, bytes, 2, bulk_kind::reply);
    tcp_throughput(tcp_fd, bytes, 2);
    double request = 0, reply = 0, pieces = 0, raw = 0, e2e = 0, chunked = 0;
    for (int round = 0; round < 3; ++round) {
      const double cpu0 = cpu_seconds() + remote_cpu();
      request = std::max(request, bulk_throughput(sys, *bulk, *dest, bytes, reps, bulk_kind::request));
      cpu_secs += cpu_seconds() + remote_cpu() - cpu0;
      cpu_bytes += static_cast<double>(bytes) * reps;
      reply = std::max(reply, bulk_throughput(sys, *bulk, *dest, bytes, reps, bulk_kind::reply));
      pieces = std::max(pieces, bulk_throughput(sys, *bulk, *dest, bytes, reps, bulk_kind::pieces));
      raw = std::max(raw, tcp_throughput(tcp_fd, bytes, reps));
      e2e = std::max(e2e, bulk_throughput(sys, *bulk, *dest, bytes, reps, bulk_kind::encoded_request));
      chunked = std::max(chunked, caf_throughput(sys, *dest, bytes, chunk, reps));
    }
    std::printf("%5zu | %9.1f %9.1f %9.1f %9.1f | %7.3f %7.3f %7.3f | %9.1f %9.1f %7.3f %7.3f\n", mib, request, reply,
                pieces, raw, request / raw, reply / raw, pieces / raw, e2e, chunked, e2e / raw, chunked / raw);
    std::fflush(stdout);
  }
  std::printf("CPU time of both processes over the transport request runs: %.2f s per GB\n",
              cpu_secs / (cpu_bytes / 1e9));
  ::close(tcp_fd);
  int status = 0;
  ::waitpid(child, &status, 0);
  return 0;
}
