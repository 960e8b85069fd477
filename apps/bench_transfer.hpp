#pragma once
// swarm_bench_transfer's two processes (apps/bench_transfer.cpp: the sender
// and its table; apps/bench_transfer_receiver.cpp: the receivers in the child)
// and what both use.

#include <chrono>
#include <cstddef>

#include <caf/all.hpp>

#include "net/bulk.hpp"
#include "swarm.pb.h"

namespace swarm::bench {

using transfer_atom = caf::atom_constant<caf::atom("transfer")>;
using fetch_atom = caf::atom_constant<caf::atom("fetch")>;
using cpu_atom = caf::atom_constant<caf::atom("cpu")>;
using bytes_atom = caf::atom_constant<caf::atom("bytes")>;
using clock_type = std::chrono::steady_clock;

/// A variant's receiver is done with the bytes: back to the pool, as the
/// swarm's receivers do once they decoded them (decode_tensor).
void give_back(bulk_parts& parts);
/// This process's user + system CPU seconds.
[[nodiscard]] double cpu_seconds();
/// A forward request whose inputs are a float32 tensor of `bytes` bytes.
[[nodiscard]] proto::forward_request make_request(size_t bytes);
/// The middleman and every message type, no console log: both processes.
void configure(caf::actor_system_config& cfg);
/// Raw TCP's reads and writes; a broken pipe ends the benchmark.
void send_all(int fd, const char* p, size_t n);
void read_all(int fd, char* p, size_t n);
/// The child process: the CAF receiver (its port told through `port_pipe`)
/// and the raw TCP receiver on `listen_fd`, until the parent closes its socket.
[[noreturn]] void run_receivers(int listen_fd, int port_pipe);

}  // namespace swarm::bench
