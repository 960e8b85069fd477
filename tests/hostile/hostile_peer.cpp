// swarm-hostile: a stranger (plain) or a member holding a valid certificate
// (TLS) that joins a running swarm and sends every message of every public
// interface it can reach, as no honest peer would (tests/hostile/hostile_cases.hpp),
// for a while. Used by test_hostile (tests/process/test_hostile.cpp).
//
//   swarm-hostile HOST:PORT SECONDS SEED CONFIG [CA CERT KEY]
//
// SEED "probes": only the two probes (see probe()), then SECONDS of watching.
//
// CONFIG: the swarm's --config file (its model hash lets some messages past
// the first check, as a stranger who read the swarm's config would).
//
// It learns what any trainer can: the coordinator's averager, each stage's
// servers (subscribed), their doors. Its own actor, the bait, is named wherever a
// message names a source, a member or a coordinator; an order obeyed would
// reach it. Prints one line per interface (cases tried, messages sent) and
// the bait's catch; exits 0 when the bait caught nothing and the coordinator
// still answers, 1 otherwise, 2 when it could not reach the swarm.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "config/config.hpp"
#include "messages/types.hpp"
#include "messages/wire.hpp"
#include "net/tls.hpp"
#include "hostile/hostile_cases.hpp"

using namespace swarm;
using namespace std::chrono_literals;

namespace {

std::atomic<int> caught{0};

/// Anything that reaches it means a forged order was obeyed (a state request
/// of a reload, a piece of a round, a server asking it for an averager).
caf::behavior bait(caf::event_based_actor* self) {
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    std::fprintf(stderr, "swarm-hostile: the bait caught %s\n", caf::to_string(x.content()).substr(0, 120).c_str());
    ++caught;
    return caf::sec::unexpected_message;
  });
  return {[](caf::ok_atom) {}};
}

template <class Handle>
caf::actor reach(caf::actor_system& sys, const std::string& host, uint16_t port) {
  auto ptr = dial(sys, host, port, 10s);
  return ptr ? caf::actor_cast<caf::actor>(*ptr) : caf::actor{};
}

/// The handles any peer can learn: the averager, each stage's servers and their doors.
bool learn(caf::actor_system& sys, hostile::targets& t) {
  caf::scoped_actor self{sys};
  bool ok = true;
  self->request(caf::actor_cast<coordinator_actor>(t.coordinator), 10s, averager_atom::value)
      .receive([&](const averager_actor& a) { t.averager = caf::actor_cast<caf::actor>(a); },
               [&](caf::error&) { ok = false; });
  // As a trainer learns them (a trainer's certificate may not ask for peers):
  // subscribed, the coordinator sends each stage's servers as JOINs first.
  for (uint32_t stage = 0; stage < 2 && ok; ++stage) {
    proto::subscribe sub;
    sub.set_stage(stage);
    sub.set_config_hash(t.config_hash);
    self->request(caf::actor_cast<coordinator_actor>(t.coordinator), 10s, subscribe_atom::value, wrap(sub))
        .receive([](const std::string&) {}, [&](caf::error&) { ok = false; });
    for (bool more = ok; more;)
      self->receive(
          [&](membership_atom, const encoded<proto::membership_update>& bytes) {
            auto up = decode(bytes);
            if (!up || up->kind() != proto::membership_update::JOIN)
              return;
            if (auto h = reach<stage_actor>(sys, up->host(), static_cast<uint16_t>(up->port()))) {
              t.servers.push_back(h);
              t.server_stages.push_back(stage);
              t.server_ids.push_back(up->server_id());
            }
          },
          caf::after(std::chrono::milliseconds(200)) >> [&] { more = false; });
  }
  for (const auto& s : t.servers) {
    caf::actor door;
    self->request(caf::actor_cast<stage_actor>(s), 10s, door_atom::value)
        .receive([&](const caf::actor& d) { door = d; }, [](caf::error&) {});
    t.doors.push_back(door);
  }
  return ok && t.averager && !t.servers.empty();
}

bool coordinator_answers(caf::actor_system& sys, const caf::actor& coordinator) {
  caf::scoped_actor self{sys};
  bool ok = false;
  self->request(caf::actor_cast<coordinator_actor>(coordinator), 10s, averager_atom::value)
      .receive([&](const averager_actor& a) { ok = bool(a); }, [](caf::error&) {});
  return ok;
}

/// The two probes, once each: a `deadline` for stage 1,000,000 at the
/// averager (it killed the coordinator) and a move order for a stage the
/// first server does not serve with term 2^63-1 (it fenced that server off);
/// then `seconds` of watching. Exit as main's.
int probe(caf::actor_system& sys, const hostile::targets& t, double seconds) {
  using old_deadline = caf::atom_constant<caf::atom("deadline")>;
  caf::scoped_actor self{sys};
  self->send(t.averager, old_deadline::value, uint32_t{1000000}, uint64_t{0}, uint64_t{0});
  proto::move_order move;
  move.set_stage(t.server_stages.front() == 0 ? 1 : 0);
  move.set_to_stage(t.server_stages.front());
  move.set_reason("load");
  move.set_term(std::numeric_limits<int64_t>::max());
  self->send(t.servers.front(), move_atom::value, wrap(move));
  std::printf("hostile: probes sent to the averager and to server %s\n", t.server_ids.front().c_str());
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const bool alive = coordinator_answers(sys, t.coordinator);
  std::printf("hostile: coordinator answers: %s\n", alive ? "yes" : "no");
  std::fflush(stdout);
  sys.middleman().stop();
  std::_Exit(alive ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 8) {
    std::fprintf(stderr, "usage: swarm-hostile HOST:PORT SECONDS SEED CONFIG [CA CERT KEY]\n");
    return 2;
  }
  const std::string address = argv[1];
  const auto colon = address.rfind(':');
  const std::string host = address.substr(0, colon);
  const auto port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
  const double seconds = std::stod(argv[2]);
  const bool probes_only = std::string{argv[3]} == "probes";
  std::mt19937_64 rng(probes_only ? 0 : std::stoull(argv[3]));
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  if (argc == 8) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_cafile = argv[5];
    cfg.openssl_certificate = argv[6];
    cfg.openssl_key = argv[7];
  }
  register_types(cfg);
  cfg.set("logger.console", caf::atom("none"));
  // As every node: a link silent for 5 s is dropped (the probes' watch is silent).
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  caf::actor_system sys{cfg};

  const char* config_args[] = {"swarm-hostile", "--role", "trainer", "--config", argv[4], "--coordinator", argv[1]};
  const auto parsed = parse_config(7, config_args);
  if (!parsed.config) {
    std::fprintf(stderr, "swarm-hostile: %s\n", parsed.message.c_str());
    return 2;
  }
  hostile::targets t;
  t.config_hash = parsed.config->model.hash();
  t.coordinator = reach<coordinator_actor>(sys, host, port);
  t.bait = sys.spawn(bait);
  auto published = argc == 8 ? caf::openssl::publish(t.bait, 0, "127.0.0.1") : sys.middleman().publish(t.bait, 0);
  if (!t.coordinator || !published || !learn(sys, t)) {
    std::fprintf(stderr, "swarm-hostile: cannot reach the swarm at %s\n", address.c_str());
    return 2;
  }
  t.bait_endpoint = "127.0.0.1:" + std::to_string(*published);

  if (probes_only)
    return probe(sys, t, seconds);
  // Every case, reshuffled with fresh fields, until the time is up; a request
  // among them is answered to this scoped actor, whose mailbox is emptied as it goes.
  std::map<std::string, std::set<std::string>> kinds;
  std::map<std::string, int> sent;
  caf::scoped_actor self{sys};
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    for (auto& c : hostile::cases(t, rng)) {
      self->send(c.target, c.msg);
      kinds[c.interface].insert(c.what);
      ++sent[c.interface];
    }
    std::this_thread::sleep_for(100ms);
    for (bool more = true; more;)
      self->receive([](caf::message&) {}, [](caf::error&) {},
                    caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
  }
  for (const auto& [interface, what] : kinds)
    std::printf("hostile: %s: %zu kinds of message, %d sent\n", interface.c_str(), what.size(), sent[interface]);
  std::this_thread::sleep_for(2s);  // an obeyed order's request may still be on its way to the bait
  const bool alive = coordinator_answers(sys, t.coordinator);
  std::printf("hostile: bait caught %d; coordinator answers: %s\n", caught.load(), alive ? "yes" : "no");
  std::fflush(stdout);
  sys.middleman().stop();  // no destructor wait (CAF 0.17 can hang there); the links simply drop
  std::_Exit(caught == 0 && alive ? 0 : 1);
}
