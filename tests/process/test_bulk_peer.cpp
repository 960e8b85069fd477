// Tier (c): the bulk plane's sending side against a real peer process that
// stops answering (SIGSTOP: its CAF connection stays open, nothing replies).
// Frames for it are dropped within the connect timeout, and an endpoint with
// a writer still waiting on it shuts down at once: a dead or frozen peer never
// holds a process's exit (it once held a trainer's for the 5 minutes of CAF's
// own remote_lookup).
#include <catch2/catch.hpp>

#include <csignal>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "net/bulk.hpp"
#include "messages/protocol.hpp"
#include "fixtures.hpp"
#include "process_util.hpp"

using namespace swarm;
using namespace swarm::test;
using namespace std::chrono_literals;

TEST_CASE("frames for a frozen peer are dropped in time, and it does not hold the sender's exit", "[faults][bulk]") {
  manual_swarm swarm({}, "bulk-peer");  // a coordinator: any real peer process would do
  REQUIRE(swarm.port != 0);
  const pid_t peer = swarm.coordinator;
  const int port = swarm.port;

  caf::actor_system_config cfg;
  swarm::testing::configure_node(cfg);
  caf::actor_system sys{cfg};
  auto coordinator = sys.middleman().remote_actor<coordinator_actor>("127.0.0.1", static_cast<uint16_t>(port));
  REQUIRE(coordinator);
  const auto handle = caf::actor_cast<caf::actor>(*coordinator);
  REQUIRE(kill(peer, SIGSTOP) == 0);

  bulk_options quick;
  quick.connect_timeout = 1s;
  auto bulk = bulk_endpoint::start(sys, quick);
  REQUIRE(bulk);
  (void)(*bulk)->push(handle, "one");
  (void)(*bulk)->push(handle, "two");
  const auto pushed = std::chrono::steady_clock::now();
  bool failed = false;
  for (int i = 0; i < 100 && !failed; ++i) {
    std::this_thread::sleep_for(100ms);
    failed = (*bulk)->stats().send_failures == 2;
  }
  const double failed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - pushed).count();
  std::printf("frames for a frozen peer dropped after %.1f s (connect timeout 1 s)\n", failed_s);
  CHECK(failed);           // both: the one that waited and the one queued behind it
  CHECK(failed_s >= 0.9);  // it did wait for an answer that never came
  CHECK((*bulk)->stats().frames_sent == 0);

  bulk_options patient;
  patient.connect_timeout = 120s;
  auto waiting = bulk_endpoint::start(sys, patient);
  REQUIRE(waiting);
  (void)(*waiting)->push(handle, "three");
  std::this_thread::sleep_for(300ms);  // its writer is waiting for the lookup's answer
  const auto before = std::chrono::steady_clock::now();
  CHECK((*waiting)->stats().send_failures == 0);  // still waiting: the timeout is 120 s
  waiting->reset();
  const double shutdown_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  std::printf("bulk endpoint shut down in %.2f s with a writer waiting on a frozen peer\n", shutdown_s);
  CHECK(shutdown_s < 10);  // not the lookup's 120 s
}
