// Benchmark: tensor transfer between two processes on loopback.
//
//   build/swarm_bench_transfer [--reps N] [--chunk-bytes B]
//
// For 1, 16 and 64 MiB float32 tensors it measures, in one run and on the same
// machine, the throughput of:
//   caf chunked: the swarm's path (proto encode, chunks of --chunk-bytes, CAF
//                messages to a remote actor that reassembles, decodes and checks);
//   caf single:  the same payload as one CAF message (to show why we chunk);
//   raw tcp:     the bytes alone over a plain TCP socket, the ceiling.
// Each transfer is acknowledged by the receiver before the next starts; each
// figure is the best of 3 rounds of --reps transfers, the variants alternating.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "messages/chunks.hpp"
#include "messages/wire.hpp"

using namespace swarm;
using transfer_atom = caf::atom_constant<caf::atom("transfer")>;
using clock_type = std::chrono::steady_clock;

namespace {

struct receiver_state {
  chunk_assembler chunks;
};

/// Reassembles, decodes and checks each tensor; replies with its element count.
caf::behavior receiver(caf::stateful_actor<receiver_state>* self) {
  return {
      [self](chunk_atom, uint64_t id, const std::string& piece) {
        self->state.chunks.add(caf::actor_cast<caf::actor_addr>(self->current_sender()), id, piece);
      },
      [self](transfer_atom, uint64_t id, std::string& tail) -> caf::result<int64_t> {
        auto whole = self->state.chunks.finish(caf::actor_cast<caf::actor_addr>(self->current_sender()), id,
                                               std::move(tail));
        if (!whole)
          return whole.error();
        auto t = decode<proto::tensor>(*whole, "tensor");
        if (!t)
          return t.error();
        if (auto err = check_tensor(*t, "tensor"))
          return err;
        return numel(*t);
      },
  };
}

proto::tensor make_tensor(size_t bytes) {
  proto::tensor t;
  t.add_shape(static_cast<int64_t>(bytes / 4));
  t.set_dtype(proto::FLOAT32);
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; i += 4096)
    data[i] = static_cast<char>(i);
  t.set_data(std::move(data));
  return t;
}

void configure(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  register_error_category(cfg);
  cfg.set("logger.console", caf::atom("none"));
}

double caf_throughput(caf::actor_system& sys, const caf::actor& dest, size_t bytes, size_t chunk, int reps) {
  caf::scoped_actor self{sys};
  const auto tensor = make_tensor(bytes);
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
  const double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>(bytes) * reps / secs / 1e6;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const auto w = ::write(fd, p, n);
    if (w <= 0)
      throw std::runtime_error("tcp write failed");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const auto r = ::read(fd, p, n);
    if (r <= 0)
      throw std::runtime_error("tcp read failed");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

/// Raw TCP: length-prefixed payloads, one-byte acknowledgements.
void tcp_receiver(int listen_fd) {
  const int fd = ::accept(listen_fd, nullptr, nullptr);
  std::vector<char> buf;
  for (;;) {
    uint64_t n = 0;
    try {
      read_all(fd, reinterpret_cast<char*>(&n), sizeof n);
    } catch (...) {
      return;
    }
    buf.resize(n);
    read_all(fd, buf.data(), n);
    write_all(fd, "k", 1);
  }
}

double tcp_throughput(int fd, size_t bytes, int reps) {
  const std::string payload = make_tensor(bytes).data();
  char ack = 0;
  const auto start = clock_type::now();
  for (int r = 0; r < reps; ++r) {
    const uint64_t n = payload.size();
    write_all(fd, reinterpret_cast<const char*>(&n), sizeof n);
    write_all(fd, payload.data(), n);
    read_all(fd, &ack, 1);
  }
  const double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  return static_cast<double>(bytes) * reps / secs / 1e6;
}

int listen_socket(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(fd, 1);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

int connect_socket(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error("tcp connect failed");
  return fd;
}

} // namespace

int main(int argc, char** argv) {
  int reps = 5;
  size_t chunk = 16 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0)
      reps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--chunk-bytes") == 0)
      chunk = static_cast<size_t>(std::atoll(argv[i + 1]));
  }
  // The receivers live in a child process: a real process boundary, as in a swarm.
  uint16_t tcp_port = 0;
  const int listen_fd = listen_socket(tcp_port);
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0)
    return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    caf::actor_system_config cfg;
    configure(cfg);
    caf::actor_system sys{cfg};
    auto recv = sys.spawn(receiver);
    auto port = sys.middleman().publish(recv, 0, "127.0.0.1");
    const uint16_t p = port ? *port : 0;
    write_all(pipe_fds[1], reinterpret_cast<const char*>(&p), sizeof p);
    tcp_receiver(listen_fd);  // returns when the parent closes its socket
    caf::anon_send_exit(recv, caf::exit_reason::user_shutdown);
    std::_Exit(0);
  }
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
  const int tcp_fd = connect_socket(tcp_port);
  std::printf("tensor transfer between two processes on loopback, %d reps each, chunks of %zu bytes\n", reps, chunk);
  std::printf("%8s %16s %16s %16s %14s\n", "MiB", "caf chunked MB/s", "caf single MB/s", "raw tcp MB/s",
              "chunked/raw");
  for (size_t mib : {1, 16, 64}) {
    const size_t bytes = mib << 20;
    // Warm-up (connection buffers, first-touch pages), then alternate the
    // variants and keep each one's best round, so neither pays for going first.
    caf_throughput(sys, *dest, bytes, bytes * 2, 2);
    tcp_throughput(tcp_fd, bytes, 2);
    double chunked = 0, single = 0, raw = 0;
    for (int round = 0; round < 3; ++round) {
      chunked = std::max(chunked, caf_throughput(sys, *dest, bytes, chunk, reps));
      single = std::max(single, caf_throughput(sys, *dest, bytes, bytes * 2, reps));
      raw = std::max(raw, tcp_throughput(tcp_fd, bytes, reps));
    }
    std::printf("%8zu %16.1f %16.1f %16.1f %14.3f\n", mib, chunked, single, raw, chunked / raw);
    std::fflush(stdout);
  }
  ::close(tcp_fd);
  int status = 0;
  ::waitpid(child, &status, 0);
  return 0;
}
