#include "actors/round_peer.hpp"

#include <thread>

#include <unistd.h>

#include <caf/all.hpp>

#include "actors/dial.hpp"
#include "policy/averaging.hpp"
#include "base/freeze_watch.hpp"
#include "base/log.hpp"
#include "messages/float_codec.hpp"
#include "messages/wire.hpp"
#include "net/peer_roles.hpp"

namespace swarm {

namespace {

using self_ptr = round_peer_actor::stateful_pointer<round_peer_state>;
using exchange_round = round_peer_state::exchange_round;
using clock_type = std::chrono::steady_clock;

std::string who(const exchange_round& r) { return "stage " + std::to_string(r.stage); }

/// The lowest rank not gone: the member that writes the stage's checkpoint.
bool writes(const exchange_round& r) {
  for (int i = 0; i < r.exchange->members(); ++i)
    if (!r.exchange->is_gone(i))
      return i == r.exchange->rank();
  return false;
}

/// Ends the round here and tells the server: complete, or given up (`why`).
/// High priority: the server takes it after the request it is computing, not
/// after every request queued behind it.
void finish(self_ptr self, const std::string& why, bool reply_late = false) {
  auto& r = *self->state.round;
  if (r.finished)
    return;
  r.finished = true;
  proto::round_outcome o;
  o.set_round(r.id);
  o.set_complete(why.empty() && r.exchange->complete());
  o.set_why(why);
  o.set_members(static_cast<uint32_t>(r.exchange->members()));
  o.set_gone(static_cast<uint32_t>(r.exchange->gone_count()));
  o.set_reassigned(static_cast<uint32_t>(r.exchange->reassigned()));
  for (double x : r.exchange->outlying())
    o.add_outlying(x);
  o.set_bytes_sent(static_cast<uint64_t>(r.bytes_sent));
  o.set_bytes_received(static_cast<uint64_t>(r.bytes_received));
  o.set_raw_bytes(static_cast<uint64_t>(r.exchange->bytes_sent()));
  o.set_writer(writes(r));
  o.set_parts_sent(r.begun);
  o.set_reply_late(reply_late);
  // The mean moves out (repairs use the reduced shards); the own gradient is
  // copied: it repairs a gone owner's shard (a failure, so rare).
  auto values = o.complete() ? r.exchange->take_result() : r.exchange->input();
  self->send<caf::message_priority::high>(self->state.server, done_atom::value, wrap(o), std::move(values));
}

void send_pieces(self_ptr self, std::vector<policy::piece> out) {
  auto& st = self->state;
  auto& r = *st.round;
  const auto codec = codec_of(st.cfg.compression);
  for (auto& p : out) {
    proto::allreduce_piece msg;
    msg.set_stage(r.stage);
    msg.set_round(r.id);
    msg.set_from_rank(static_cast<uint32_t>(p.from));
    msg.set_kind(p.reduced ? proto::allreduce_piece::REDUCED : proto::allreduce_piece::PART);
    msg.set_shard(static_cast<uint32_t>(p.shard));
    msg.set_offset(static_cast<uint64_t>(p.offset));
    msg.set_shard_size(static_cast<uint64_t>(p.shard_size));
    msg.set_samples(static_cast<uint64_t>(p.samples));
    msg.set_codec(codec);
    msg.set_count(p.values.size());
    auto values = encode_floats(p.values.data(), static_cast<int64_t>(p.values.size()), codec);
    r.bytes_sent += static_cast<int64_t>(values.size());
    const auto& to = r.members[static_cast<size_t>(p.to)];
    if (st.cfg.bulk && st.cfg.bulk_min_bytes > 0 && static_cast<int64_t>(values.size()) >= st.cfg.bulk_min_bytes)
      msg.set_bulk_key(st.cfg.bulk->push(caf::actor_cast<caf::actor>(to), std::move(values)));
    else
      msg.set_values(std::move(values));
    self->send(to, piece_atom::value, wrap(msg));
  }
  if (!r.finished && r.exchange->complete())
    finish(self, "");
}

void feed(self_ptr self, const caf::actor_addr& from, const proto::allreduce_piece& piece) {
  auto& r = *self->state.round;
  const auto* msg = &piece;
  std::string why;
  if ((msg->from_rank() >= r.members.size() || r.members[msg->from_rank()].address() != from))
    why = "sender is not the member of that rank";
  caf::expected<std::vector<float>> values{std::vector<float>{}};
  if (why.empty()) {
    values = decode_floats(msg->values(), msg->codec(),
                           static_cast<int64_t>(std::min<uint64_t>(msg->count(), 1ULL << 40)), "values");
    if (!values)
      why = describe(values.error());
  }
  if (!why.empty()) {
    get_logger("stage_server")->warn("{}: round {}: ignored a piece: {}", who(r), r.number, why);
    return;
  }
  policy::piece p;
  p.from = static_cast<int>(msg->from_rank());
  p.to = r.exchange->rank();
  p.reduced = msg->kind() == proto::allreduce_piece::REDUCED;
  p.shard = static_cast<int>(std::min<uint32_t>(msg->shard(), 1u << 30));
  p.offset = static_cast<int64_t>(std::min<uint64_t>(msg->offset(), uint64_t{1} << 62));
  p.shard_size = static_cast<int64_t>(std::min<uint64_t>(msg->shard_size(), uint64_t{1} << 62));
  p.samples = static_cast<int64_t>(std::min<uint64_t>(msg->samples(), uint64_t{1} << 62));
  p.values = std::move(*values);
  r.bytes_received += static_cast<int64_t>(msg->values().size());
  auto out = r.exchange->receive(p, &why);
  if (!why.empty())
    get_logger("stage_server")
        ->warn("{}: round {}: refused a piece from {}: {}", who(r), r.number, r.ids[static_cast<size_t>(p.from)], why);
  send_pieces(self, std::move(out));
}

/// Test hook: a `fault` event for the running round (op: what the hook does).
void emit_fault(self_ptr self, const char* op) {
  auto& st = self->state;
  st.metrics->emit("fault", {{"server", st.cfg.server_id},
                             {"stage", int64_t{st.round->stage}},
                             {"op", std::string{op}},
                             {"pid", static_cast<int64_t>(::getpid())}});
}

/// Test hook: hang in the round, parts sent, holding its shard (round_peer_config::hang_after).
void maybe_hang(self_ptr self) {
  auto& st = self->state;
  if (st.cfg.hang_after <= 0 || st.rounds_seen != st.cfg.hang_after)
    return;
  get_logger("stage_server")->warn("fault hook: hanging in round {} until killed", st.round->number);
  emit_fault(self, "round");
  for (;;)
    std::this_thread::sleep_for(std::chrono::hours(1));
}

/// Sends this member's first pieces, then what came early: deaths and
/// exclusions heard while dialing, pieces that overtook the round's start.
void start_exchange(self_ptr self) {
  auto& st = self->state;
  auto& r = *st.round;
  if (r.begun || r.finished)
    return;
  if (r.window_end != clock_type::time_point{}) {
    const auto now = clock_type::now();
    if (now < r.window_end) {
      if (!r.start_timed)
        send_later(self, r.window_end - now, round_peer_local::window_over{r.id});
      r.start_timed = true;
      return;
    }
    if (std::chrono::duration<double>(longest_stall_between(r.sent_at, r.window_end)).count() >= r.slack_s) {
      finish(self,
             "this process stood still while the reply of a microbatch in its gradient was leaving, so the "
             "trainer may have re-sent it elsewhere",
             true);
      return;
    }
  }
  ++st.rounds_seen;
  if (st.cfg.fail_after > 0 && r.samples > 0 && ++st.rounds_with_gradient == st.cfg.fail_after) {  // test hook
    emit_fault(self, "fail-round");
    finish(self, "fault hook: gave the round up before sending any part");
    return;
  }
  r.begun = true;
  send_pieces(self, r.exchange->start());
  for (int gone : r.gone_early)
    if (!r.finished)
      send_pieces(self, r.exchange->gone(gone));
  maybe_hang(self);
  auto early = st.early_pieces.find(r.id);
  if (early != st.early_pieces.end()) {
    auto pieces = std::move(early->second);
    for (auto& [from, piece] : pieces)
      feed(self, from, piece);
  }
  st.early_pieces.erase(st.early_pieces.begin(), st.early_pieces.upper_bound(r.id));
}

/// Rank `i` of the running round is linked directly, or gone: the exchange
/// starts once every member is.
void linked(self_ptr self, int i) {
  auto& r = *self->state.round;
  if (r.unready.erase(i) > 0 && r.unready.empty() && !r.begun && !r.finished)
    start_exchange(self);
}

/// Rank `i` died or was excluded.
void gone(self_ptr self, int i) {
  auto& r = *self->state.round;
  if (!r.begun) {
    r.gone_early.push_back(i);
    linked(self, i);
  } else {
    send_pieces(self, r.exchange->gone(i));
  }
}

/// A HELLO: its sender dialed this peer for round `round`.
void on_hello(self_ptr self, const caf::actor_addr& from, uint64_t round) {
  auto& st = self->state;
  if (st.round && st.round->id == round) {
    for (size_t i = 0; i < st.round->members.size(); ++i)
      if (st.round->members[i].address() == from)
        linked(self, static_cast<int>(i));
  } else if ((!st.round || round > st.round->id) &&
             (st.early_hellos.size() < 4 || st.early_hellos.count(round) > 0)) {  // bounded, as early pieces
    st.early_hellos[round].insert(from);
  }
}

/// A piece whose values are here, from member `from`: fed to the round, kept
/// for a round not begun yet, or dropped (an old round's).
void route_piece(self_ptr self, const caf::actor_addr& from, proto::allreduce_piece piece) {
  auto& st = self->state;
  const uint64_t round = piece.round();
  if (st.round && round == st.round->id && st.round->begun) {
    feed(self, from, piece);
  } else if (!st.round || round >= st.round->id) {
    // Bounded: a round that never begins here must not grow this forever.
    if (st.early_pieces.size() < 4 || st.early_pieces.count(round) > 0)
      st.early_pieces[round].emplace_back(from, std::move(piece));
  }
}

void on_piece(self_ptr self, const encoded<proto::allreduce_piece>& bytes) {
  auto& st = self->state;
  auto parsed = decode(bytes);
  if (!parsed)
    return;
  auto& head = *parsed;
  const auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (head.kind() == proto::allreduce_piece::HELLO) {
    on_hello(self, from, head.round());
    return;
  }
  if (head.bulk_key() == 0) {
    route_piece(self, from, std::move(head));
    return;
  }
  // Its values come over the bulk connection; a piece that never comes is a
  // member that never sent it, which the round's deadlines already handle.
  const uint64_t key = head.bulk_key() | bulk_flag;
  const bool here = st.inbox.claim(
      key,
      [self, from, head](caf::expected<bulk_parts> values) mutable {
        if (values && values->size() != 1)
          values =
              make_error(errc::BAD_REQUEST, "a piece's frame has " + std::to_string(values->size()) + " parts, not 1");
        if (!values) {
          get_logger("stage_server")
              ->warn("stage {}: a piece's values of round id {} never came: {}", head.stage(), head.round(),
                     describe(values.error()));
          return;
        }
        head.set_values(std::move(values->front()));
        head.set_bulk_key(0);
        route_piece(self, from, std::move(head));
      },
      bulk_inbox::clock::now());
  if (!here)
    send_later(self, seconds(st.cfg.bulk_wait_s), bulk_expired{key});
}

void on_round(self_ptr self, const encoded<proto::round_begin>& bytes, const std::vector<caf::actor>& members,
              std::vector<float> grad, int64_t samples, const std::vector<int64_t>& check) {
  auto& st = self->state;
  auto begin = decode(bytes);
  // Its server checked these already; a round begin from anyone else is refused before (round_peer()).
  if (!begin || begin->members_size() != static_cast<int>(members.size()) || !std::isfinite(begin->timeout_s()) ||
      begin->timeout_s() <= 0) {
    get_logger("stage_server")->warn("{}: ignored a round begin that does not fit its members", st.cfg.server_id);
    return;
  }
  int rank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].address() == self->address())
      rank = static_cast<int>(i);
  if (rank < 0)
    return;
  if (st.round && !st.round->finished)
    finish(self, "a newer round began");
  exchange_round r;
  r.id = begin->round();
  r.number = begin->number();
  r.stage = begin->stage();
  r.samples = samples;
  for (int i = 0; i < begin->members_size(); ++i) {
    r.ids.push_back(begin->members(i));
    r.members.push_back(caf::actor_cast<round_peer_actor>(members[static_cast<size_t>(i)]));
    if (i != rank && st.monitored.insert(members[static_cast<size_t>(i)].address()).second)
      self->monitor(members[static_cast<size_t>(i)]);
  }
  r.exchange = std::make_unique<policy::butterfly_round>(
      rank, static_cast<int>(members.size()), std::move(grad), samples,
      static_cast<int64_t>(std::max<uint64_t>(1, begin->piece_elements())),
      [codec = codec_of(st.cfg.compression)](float* v, int64_t n) { round_trip_floats(v, n, codec); },
      policy::aggregation{begin->clip(), begin->clip_radius() > 0 ? begin->clip_radius() : 1.0,
                          static_cast<int>(std::min<uint32_t>(std::max<uint32_t>(begin->clip_iterations(), 1), 100))});
  if (check.size() == 3) {
    r.sent_at = clock_type::time_point{clock_type::duration{check[0]}};
    r.window_end = clock_type::time_point{clock_type::duration{check[1]}};
    r.slack_s = static_cast<double>(check[2]) / 1e6;
  }
  st.round = std::move(r);
  using clock = policy::round_clock;
  send_later(self, seconds(clock::report * begin->timeout_s()), round_peer_local::report_due{begin->round()});
  send_later(self, seconds(clock::end * begin->timeout_s()), round_peer_local::round_end{begin->round()});
  auto& rr = *st.round;
  if (begin->member_endpoints_size() != begin->members_size()) {
    start_exchange(self);  // an averager that sends no endpoints
    return;
  }
  const auto hellos = std::move(st.early_hellos[rr.id]);
  st.early_hellos.erase(st.early_hellos.begin(), st.early_hellos.upper_bound(rr.id));
  const auto& mine = rr.ids[static_cast<size_t>(rank)];
  for (int i = 0; i < begin->members_size(); ++i) {
    const auto& id = rr.ids[static_cast<size_t>(i)];
    if (i == rank || (id > mine && hellos.count(rr.members[static_cast<size_t>(i)].address()) > 0))
      continue;
    rr.unready.insert(i);
    if (id < mine)
      dial_then(self, who(rr), begin->member_endpoints(i), [self, id = rr.id, i] {
        auto& r = self->state.round;
        if (!r || r->id != id)
          return;
        proto::allreduce_piece hello;
        hello.set_stage(r->stage);
        hello.set_round(id);
        hello.set_kind(proto::allreduce_piece::HELLO);
        self->send(r->members[static_cast<size_t>(i)], piece_atom::value, wrap(hello));
        linked(self, i);
      });
  }
  if (rr.unready.empty())
    start_exchange(self);
}

void on_exclude(self_ptr self, const encoded<proto::round_exclude>& bytes) {
  auto& st = self->state;
  auto ex = decode(bytes);
  if (!ex || !st.round || ex->round() != st.round->id || ex->rank() >= st.round->members.size())
    return;
  if (static_cast<int>(ex->rank()) == st.round->exchange->rank())
    finish(self, "excluded by the averager");
  else
    gone(self, static_cast<int>(ex->rank()));
}

/// Whether `round` is the one running and not finished: a timer of an older one is spent.
bool running(self_ptr self, uint64_t round) {
  const auto& r = self->state.round;
  return r && r->id == round && !r->finished;
}

/// Half the round's timeout passed: tells the averager whom it still waits for.
void report_waiting(self_ptr self, uint64_t round) {
  auto& st = self->state;
  if (!running(self, round) || !st.averager)
    return;
  proto::round_waiting w;
  w.set_stage(st.round->stage);
  w.set_server_id(st.cfg.server_id);
  w.set_round(round);
  std::string names;
  for (int r : st.round->exchange->waiting_on()) {
    w.add_waiting_on(static_cast<uint32_t>(r));
    names += (names.empty() ? "" : ", ") + st.round->ids[static_cast<size_t>(r)];
  }
  get_logger("stage_server")
      ->warn("{}: round {} not done after half its timeout; waiting for {}", who(*st.round), st.round->number, names);
  self->send(st.averager, waiting_atom::value, wrap(w));
}

}  // namespace

round_peer_actor::behavior_type round_peer(self_ptr self, round_peer_config cfg, std::shared_ptr<metrics_sink> metrics,
                                           stage_actor server) {
  self->state.cfg = std::move(cfg);
  self->state.metrics = std::move(metrics);
  self->state.server = std::move(server);
  if (self->state.cfg.bulk)
    self->state.cfg.bulk->attach(caf::actor_cast<caf::actor>(self));
  // A member's peer that dies (its process with it) is out of the round.
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    st.monitored.erase(msg.source);
    if (!st.round)
      return;  // finished rounds too: a member still finishing may need this one's repair material
    for (size_t i = 0; i < st.round->members.size(); ++i)
      if (st.round->members[i].address() == msg.source)
        gone(self, static_cast<int>(i));
  });
  handle_local(
      self,
      [self](bulk_delivery& d) { self->state.inbox.arrived(d.key, std::move(d.parts), bulk_inbox::clock::now()); },
      [self](bulk_expired e) { self->state.inbox.expire(e.key); },
      [self](round_peer_local::window_over t) {
        if (running(self, t.round) && self->state.round->unready.empty())
          start_exchange(self);
      },
      [self](round_peer_local::report_due t) { report_waiting(self, t.round); },
      [self](round_peer_local::round_end t) {
        if (running(self, t.round))
          finish(self, "round deadline passed");
      });
  return {
      [self](round_atom, const encoded<proto::round_begin>& bytes, const std::vector<caf::actor>& members,
             std::vector<float>& grad, int64_t samples, const averager_actor& averager,
             const std::vector<int64_t>& check) {
        if (!sent_by(self, self->state.server.address(), self->state.cfg.server_id, "server", "round begin"))
          return;
        self->state.averager = averager;
        on_round(self, bytes, members, std::move(grad), samples, check);
      },
      // Pieces come from the round's members only (on_piece), and from servers:
      // members without a connection here reach it through the coordinator.
      [self](piece_atom, const encoded<proto::allreduce_piece>& bytes) {
        if (sent_as(self, role_server, self->state.cfg.server_id, "round piece", true))
          on_piece(self, bytes);
      },
      [self](exclude_atom, const encoded<proto::round_exclude>& bytes) {
        if (sent_by(self, self->state.averager.address(), self->state.cfg.server_id, "averager", "round exclusion"))
          on_exclude(self, bytes);
      },
      [self](abandon_atom, uint64_t round) {
        if (!sent_by(self, self->state.server.address(), self->state.cfg.server_id, "server", "round abandon"))
          return;
        auto& r = self->state.round;
        if (r && r->id == round)
          r->finished = true;  // the server gave it up already: no outcome owed
      },
  };
}

}  // namespace swarm
