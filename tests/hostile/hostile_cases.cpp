#include "hostile/hostile_cases.hpp"

#include <algorithm>
#include <limits>

#include "messages/protocol.hpp"
#include "messages/wire.hpp"

namespace swarm::hostile {

namespace {

// Atoms of messages that used to be public (timers, issue #46): refused now.
using old_deadline = caf::atom_constant<caf::atom("deadline")>;
using old_tick = caf::atom_constant<caf::atom("tick")>;
using old_settle = caf::atom_constant<caf::atom("settle")>;

constexpr int64_t huge_term = std::numeric_limits<int64_t>::max();
constexpr uint64_t huge = std::numeric_limits<uint64_t>::max();

std::string garbage(std::mt19937_64& rng, size_t max_size) {
  std::string s(rng() % (max_size + 1), '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  return s;
}

template <class P>
encoded<P> junk(std::mt19937_64& rng) {
  return encoded<P>{garbage(rng, 512)};
}

/// Cases that build the lists below: one interface and target at a time.
struct builder {
  const targets& t;
  std::mt19937_64& rng;
  std::vector<message_case> out;

  template <class... Ts>
  void add(const char* interface, std::string what, const caf::actor& target, Ts&&... xs) {
    if (target)
      out.push_back({interface, std::move(what), target, caf::make_message(std::forward<Ts>(xs)...)});
  }

  proto::register_server registration(uint32_t stage, uint64_t hash) {
    proto::register_server reg;
    reg.set_stage(stage);
    reg.set_server_id("stranger-" + std::to_string(rng() % 1000));
    const auto colon = t.bait_endpoint.rfind(':');
    reg.set_host(t.bait_endpoint.substr(0, colon));
    reg.set_port(static_cast<uint32_t>(std::stoul(t.bait_endpoint.substr(colon + 1))));
    reg.set_num_stages(2);
    reg.set_config_hash(hash);
    return reg;
  }

  void coordinator();
  void averager();
  void server(size_t i);
  void door(size_t i);
};

void builder::coordinator() {
  const auto& c = t.coordinator;
  add("coordinator", "register: garbage", c, register_atom::value, junk<proto::register_server>(rng),
      caf::actor_cast<caf::actor>(t.bait), t.bait);
  add("coordinator", "register: another model's hash", c, register_atom::value,
      wrap(registration(0, t.config_hash + 1)), t.bait, t.bait);
  add("coordinator", "register: stage 1,000,000", c, register_atom::value, wrap(registration(1000000, t.config_hash)),
      t.bait, t.bait);
  add("coordinator", "register: no server handle", c, register_atom::value, wrap(registration(0, t.config_hash)),
      caf::actor{}, caf::actor{});
  proto::subscribe sub;
  sub.set_stage(1000000);
  sub.set_config_hash(t.config_hash);
  add("coordinator", "subscribe: stage 1,000,000", c, subscribe_atom::value, wrap(sub));
  add("coordinator", "subscribe: garbage", c, subscribe_atom::value, junk<proto::subscribe>(rng));
  add("coordinator", "peers: stage 1,000,000", c, peers_atom::value, wrap(sub));
  add("coordinator", "peers: garbage", c, peers_atom::value, junk<proto::subscribe>(rng));
  proto::leave_notice note;
  note.set_stage(0);
  note.set_to_stage(1);
  note.set_server_id(t.server_ids.empty() ? "x" : t.server_ids.front());
  add("coordinator", "leave in a server's name", c, leave_atom::value, wrap(note));
  add("coordinator", "leave: garbage", c, leave_atom::value, junk<proto::leave_notice>(rng));
  for (int k = 0; k < 20; ++k) {
    proto::placement_request place;
    place.set_server_id("phantom-" + std::to_string(rng()));
    place.set_config_hash(t.config_hash);
    add("coordinator", "place: made-up server ids", c, place_atom::value, wrap(place));
  }
  add("coordinator", "place: garbage", c, place_atom::value, junk<proto::placement_request>(rng));
  for (int k = 0; k < 20; ++k) {
    proto::trainer_report rep;
    rep.set_trainer_id(k == 0 ? "trainer-0" : "made-up-" + std::to_string(rng()));
    rep.set_step(static_cast<int64_t>(rng() >> 1));
    rep.set_loss(std::numeric_limits<double>::quiet_NaN());
    rep.set_tokens_per_s(-1e308);
    add("coordinator", "report: made-up trainers, NaN and huge figures", c, report_atom::value, wrap(rep));
  }
  for (const auto& s : t.servers)
    add("coordinator", "evict a real server", c, evict_atom::value, s);
  add("coordinator", "status: unknown format", c, status_atom::value, garbage(rng, 4096));
  add("coordinator", "old timer: tick", c, old_tick::value);
}

void builder::averager() {
  const auto& a = t.averager;
  for (size_t i = 0; i < t.servers.size(); ++i) {
    proto::progress_report rep;
    rep.set_stage(t.server_stages[i]);
    rep.set_server_id(t.server_ids[i]);
    rep.set_step(huge >> 1);
    rep.set_parameter_hash(rng());
    rep.set_samples(huge);
    add("averager", "progress in a real server's name, step 2^63", a, progress_atom::value, wrap(rep));
    proto::round_done done;
    done.set_stage(t.server_stages[i]);
    done.set_server_id(t.server_ids[i]);
    done.set_round(rng());
    done.set_applied(true);
    done.set_step(huge);
    add("averager", "round result in a real server's name", a, done_atom::value, wrap(done));
    proto::round_waiting waiting;
    waiting.set_stage(t.server_stages[i]);
    waiting.set_server_id(t.server_ids[i]);
    waiting.add_waiting_on(1000000);
    add("averager", "waiting in a real server's name", a, waiting_atom::value, wrap(waiting));
    add("averager", "join: a real server with the stranger as its round peer", a, join_atom::value,
        wrap(registration(t.server_stages[i], t.config_hash)), t.servers[i], t.bait);
    add("averager", "leave: a real server", a, leave_atom::value, t.servers[i]);
  }
  add("averager", "progress: garbage", a, progress_atom::value, junk<proto::progress_report>(rng));
  add("averager", "round result: garbage", a, done_atom::value, junk<proto::round_done>(rng));
  add("averager", "join: stage 1,000,000", a, join_atom::value, wrap(registration(1000000, t.config_hash)), t.bait,
      t.bait);
  add("averager", "old timer: deadline for stage 1,000,000", a, old_deadline::value, uint32_t{1000000}, uint64_t{0},
      uint64_t{0});
}

void builder::server(size_t i) {
  const auto& s = t.servers[i];
  const uint32_t stage = t.server_stages[i];
  const uint32_t other = stage == 0 ? 1 : 0;
  add("server", "forward: garbage", s, forward_atom::value, uint64_t{rng()}, junk<proto::forward_request>(rng));
  add("server", "backward: garbage", s, backward_atom::value, uint64_t{rng()}, junk<proto::backward_request>(rng));
  add("server", "state: garbage", s, state_atom::value, uint64_t{0}, junk<proto::state_request>(rng));
  add("server", "chunk: pieces of a transfer never finished", s, chunk_atom::value, uint64_t{rng()},
      garbage(rng, 64 << 10));
  add("server", "chunk: transfer id 2^64-1", s, chunk_atom::value, huge, garbage(rng, 1024));
  proto::round_begin begin;
  begin.set_stage(stage);
  begin.set_round(rng());
  begin.set_step(huge);
  begin.add_members("stranger");
  begin.add_members(t.server_ids[i]);
  begin.set_timeout_s(std::numeric_limits<double>::quiet_NaN());
  begin.set_piece_elements(huge);
  begin.set_term(huge_term);
  add("server", "round order: the stranger a member, NaN timeout, term 2^63-1", s, round_atom::value, wrap(begin),
      std::vector<caf::actor>{t.bait, t.bait});
  begin.set_timeout_s(30);
  begin.set_piece_elements(16);
  begin.set_term(0);
  add("server", "round order: the stranger a member", s, round_atom::value, wrap(begin),
      std::vector<caf::actor>{t.bait, t.bait});
  add("server", "round order: 2 members, 1 handle", s, round_atom::value, wrap(begin), std::vector<caf::actor>{t.bait});
  add("server", "round order: garbage", s, round_atom::value, junk<proto::round_begin>(rng), std::vector<caf::actor>{});
  proto::round_outcome outcome;
  outcome.set_round(begin.round());
  outcome.set_complete(true);
  add("server", "round outcome: a chosen mean", s, done_atom::value, wrap(outcome), std::vector<float>(1024, 1e30f));
  proto::reload_order reload;
  reload.set_stage(stage);
  reload.set_from_server_id("stranger");
  reload.set_step(huge >> 1);
  reload.set_from_endpoint(t.bait_endpoint);
  reload.set_term(huge_term);
  add("server", "reload from the stranger, term 2^63-1", s, reload_atom::value, wrap(reload), t.bait);
  reload.set_term(0);
  add("server", "reload from the stranger", s, reload_atom::value, wrap(reload), t.bait);
  add("server", "reload: from checkpoint (no source)", s, reload_atom::value, wrap(reload), caf::actor{});
  add("server", "reload: garbage", s, reload_atom::value, junk<proto::reload_order>(rng), t.bait);
  add("server", "register with the stranger's coordinator", s, register_atom::value,
      wrap(registration(stage, t.config_hash)), t.bait);
  proto::move_order move;
  move.set_stage(other);
  move.set_to_stage(stage);
  move.set_reason("load");
  move.set_term(huge_term);
  add("server", "move order for a stage it does not serve, term 2^63-1", s, move_atom::value, wrap(move));
  move.set_stage(stage);
  move.set_to_stage(other);
  move.set_term(0);
  add("server", "move order from the stranger", s, move_atom::value, wrap(move));
  move.set_to_stage(1000000);
  add("server", "move order to stage 1,000,000", s, move_atom::value, wrap(move));
  add("server", "move order: garbage", s, move_atom::value, junk<proto::move_order>(rng));
  add("server", "door", s, door_atom::value);
  add("server", "old timer: deadline", s, old_deadline::value, uint64_t{1}, uint64_t{2});
  add("server", "old timer: settle", s, old_settle::value, uint64_t{1});
}

void builder::door(size_t i) {
  if (i >= t.doors.size())
    return;
  for (int k = 0; k < 4; ++k)  // grants held and never used: they lapse (actors/door.hpp)
    add("door", "reserve, never used", t.doors[i], reserve_atom::value);
  for (uint64_t ticket = 1; ticket <= 8; ++ticket)
    add("door", "release of a guessed ticket", t.doors[i], release_atom::value, ticket);
  add("door", "release of ticket 2^64-1", t.doors[i], release_atom::value, huge);
}

}  // namespace

std::vector<message_case> cases(const targets& t, std::mt19937_64& rng) {
  builder b{t, rng, {}};
  b.coordinator();
  b.averager();
  for (size_t i = 0; i < t.servers.size(); ++i) {
    b.server(i);
    b.door(i);
  }
  std::shuffle(b.out.begin(), b.out.end(), rng);
  return std::move(b.out);
}

}  // namespace swarm::hostile
