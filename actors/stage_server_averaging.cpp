#include "actors/stage_server_averaging.hpp"
#include "actors/policy/averaging.hpp"
#include "base/clock.hpp"

#include <cmath>
#include <cstring>
#include <thread>

#include <unistd.h>

#include <caf/all.hpp>

#include "base/freeze_watch.hpp"
#include "base/log.hpp"
#include "actors/stage_server_checkpoint.hpp"
#include "actors/stage_server_move.hpp"
#include "config/config.hpp"
#include "messages/float_codec.hpp"
#include "net/tls.hpp"
#include "messages/wire.hpp"

namespace swarm::averaging {

namespace {

using clock_type = std::chrono::steady_clock;

int64_t stage_of(server_ptr self) { return self->state.worker->span().stage; }

void send_done(server_ptr self, const server_round& r, bool applied) {
  auto& st = self->state;
  if (!st.member.averager)
    return;
  proto::round_done done;
  done.set_stage(static_cast<uint32_t>(stage_of(self)));
  done.set_server_id(st.cfg.server_id);
  done.set_round(r.id);
  done.set_applied(applied);
  done.set_step(static_cast<uint64_t>(st.worker->steps()));
  done.set_parameter_hash(st.avg.hash);
  done.set_samples(static_cast<uint64_t>(st.worker->accumulated_samples()));
  done.set_taken(static_cast<uint64_t>(r.samples));
  self->send(st.member.averager, done_atom::value, encode(done));
  st.avg.reported_samples = st.worker->accumulated_samples();
}

/// Ends the round here: applied (every shard reduced) or given up (`why`).
void finish(server_ptr self, const char* why) {
  auto& st = self->state;
  auto& r = *st.avg.round;
  if (r.finished)
    return;
  r.finished = true;
  if (why == nullptr && st.cfg.freeze_s > 0)
    if (auto thaw = thawed_after(st.member.registered_at);
        thaw && clock_type::now() - *thaw < std::chrono::duration<double>(2 * st.cfg.freeze_s))
      why = "this process stood still longer than the connection timeout: its peers counted it out of its rounds "
            "until it registers again";
  bool applied = why == nullptr && r.exchange->complete();
  if (applied) {
    if (auto err = st.worker->apply_gradient(r.exchange->result())) {
      // Every member got the same vector, so every member refuses it alike.
      get_logger("stage_server")->error("stage {}: round {}: averaged gradient refused: {}", stage_of(self), r.number,
                                        describe(err));
      applied = false;
      why = "averaged gradient refused";
    }
  }
  const double secs = seconds_since(r.started);
  if (applied) {
    ++st.counters->rounds;
    st.avg.hash = st.worker->parameter_hash();
    emit_params(self);
    checkpointing::after_round(self);
  } else {
    ++st.counters->rounds_failed;
    st.counters->dropped_samples += r.samples;
    get_logger("stage_server")->warn("stage {}: gave up round {} after {:.2f} s: {}; {} samples of gradient dropped",
                                     stage_of(self), r.number, secs, why, r.samples);
  }
  const int n = r.exchange->members();
  st.metrics->emit("averaging_round",
                   {{"stage", stage_of(self)},
                    {"server", st.cfg.server_id},
                    {"round", static_cast<int64_t>(r.id)},
                    {"step", st.worker->steps()},
                    {"applied", applied},
                    {"peers", int64_t{n}},
                    {"excluded", int64_t{r.exchange->gone_count()}},
                    {"reassigned", int64_t{r.exchange->reassigned()}},
                    {"samples", r.samples},
                    {"compression", st.cfg.averaging_compression},
                    {"bytes", r.bytes_sent},
                    {"bytes_received", r.bytes_received},
                    {"raw_bytes", r.exchange->bytes_sent()},
                    {"ideal_bytes", static_cast<int64_t>(policy::ideal_allreduce_bytes(
                                        4.0 * static_cast<double>(st.worker->parameter_count()), n))},
                    {"seconds", secs}});
  send_done(self, r, applied);
  moving::resume(self);
}

void send_pieces(server_ptr self, std::vector<policy::piece> out) {
  auto& st = self->state;
  auto& r = *st.avg.round;
  for (auto& p : out) {
    proto::allreduce_piece msg;
    msg.set_stage(static_cast<uint32_t>(stage_of(self)));
    msg.set_round(r.id);
    msg.set_from_rank(static_cast<uint32_t>(p.from));
    msg.set_kind(p.reduced ? proto::allreduce_piece::REDUCED : proto::allreduce_piece::PART);
    msg.set_shard(static_cast<uint32_t>(p.shard));
    msg.set_offset(static_cast<uint64_t>(p.offset));
    msg.set_shard_size(static_cast<uint64_t>(p.shard_size));
    msg.set_samples(static_cast<uint64_t>(p.samples));
    const auto codec = codec_of(st.cfg.averaging_compression);
    msg.set_codec(codec);
    msg.set_count(p.values.size());
    auto values = encode_floats(p.values.data(), static_cast<int64_t>(p.values.size()), codec);
    r.bytes_sent += static_cast<int64_t>(values.size());
    const auto& to = r.members[static_cast<size_t>(p.to)];
    if (st.cfg.bulk && st.cfg.bulk_min_bytes > 0 && static_cast<int64_t>(values.size()) >= st.cfg.bulk_min_bytes)
      msg.set_bulk_key(st.cfg.bulk->push(caf::actor_cast<caf::actor>(to), std::move(values)));
    else
      msg.set_values(std::move(values));
    self->send(to, piece_atom::value, encode(msg));
  }
  if (!r.finished && r.exchange->complete())
    finish(self, nullptr);
}

void feed(server_ptr self, const caf::actor_addr& from, const std::string& bytes) {
  auto& st = self->state;
  auto& r = *st.avg.round;
  auto msg = decode<proto::allreduce_piece>(bytes, "allreduce_piece");
  std::string why;
  if (msg && (msg->from_rank() >= r.members.size() || r.members[msg->from_rank()].address() != from))
    why = "sender is not the member of that rank";
  caf::expected<std::vector<float>> values{std::vector<float>{}};
  if (msg && why.empty()) {
    values = decode_floats(msg->values(), msg->codec(), static_cast<int64_t>(std::min<uint64_t>(msg->count(), 1ULL << 40)),
                           "values");
    if (!values)
      why = describe(values.error());
  }
  if (!msg || !why.empty()) {
    get_logger("stage_server")->warn("stage {}: round {}: ignored a piece: {}", stage_of(self), r.number,
                                     msg ? why : describe(msg.error()));
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
    get_logger("stage_server")->warn("stage {}: round {}: refused a piece from {}: {}", stage_of(self), r.number,
                                     r.ids[static_cast<size_t>(p.from)], why);
  send_pieces(self, std::move(out));
}

/// Test hook: hang in the round, parts sent, holding its shard (see stage_server_config::fault).
void maybe_hang(server_ptr self) {
  auto& st = self->state;
  if (st.cfg.fault != stage_server_config::fault_kind::hang_round || ++st.avg.rounds_seen != st.cfg.fault_after)
    return;
  get_logger("stage_server")->warn("fault hook: hanging in round {} until killed", st.avg.round->number);
  st.metrics->emit("fault", {{"server", st.cfg.server_id},
                             {"stage", stage_of(self)},
                             {"op", std::string{"round"}},
                             {"pid", static_cast<int64_t>(::getpid())}});
  for (;;)
    std::this_thread::sleep_for(std::chrono::hours(1));
}

/// Sends this member's first pieces, then what came early: deaths and
/// exclusions heard while dialing, pieces that overtook the round_begin.
void start_exchange(server_ptr self) {
  auto& st = self->state;
  auto& r = *st.avg.round;
  r.begun = true;
  send_pieces(self, r.exchange->start());
  for (int gone : r.gone_early)
    if (!r.finished)
      send_pieces(self, r.exchange->gone(gone));
  maybe_hang(self);
  auto early = st.avg.early_pieces.find(r.id);
  if (early != st.avg.early_pieces.end()) {
    auto pieces = std::move(early->second);
    for (auto& [from, piece] : pieces)
      feed(self, from, piece);
  }
  st.avg.early_pieces.erase(st.avg.early_pieces.begin(), st.avg.early_pieces.upper_bound(r.id));
}

/// Rank `i` of the running round is linked directly, or gone: the exchange
/// starts once every member is.
void linked(server_ptr self, int i) {
  auto& r = *self->state.avg.round;
  if (r.unready.erase(i) > 0 && r.unready.empty() && !r.begun && !r.finished)
    start_exchange(self);
}

/// A HELLO: its sender dialed this server for round `round`.
void on_hello(server_ptr self, const caf::actor_addr& from, uint64_t round) {
  auto& st = self->state;
  if (st.avg.round && st.avg.round->id == round) {
    for (size_t i = 0; i < st.avg.round->members.size(); ++i)
      if (st.avg.round->members[i].address() == from)
        linked(self, static_cast<int>(i));
  } else if ((!st.avg.round || round > st.avg.round->id) &&
             (st.avg.early_hellos.size() < 4 || st.avg.early_hellos.count(round) > 0)) {  // bounded, as early pieces
    st.avg.early_hellos[round].insert(from);
  }
}

} // namespace

void emit_params(server_ptr self) {
  self->state.metrics->emit("params", {{"stage", stage_of(self)},
                                       {"server", self->state.cfg.server_id},
                                       {"step", self->state.worker->steps()},
                                       {"hash", std::to_string(self->state.avg.hash)}});
}

// Why dial: without automatic connections, CAF routes a message to a
// node it learnt of through the coordinator via the coordinator; that route
// dies with the coordinator, the peer's proxy stays, and every message on it
// is dropped without a word (soak: rounds stuck after a coordinator restart).
// Tried again: in CI a dial between two servers starting at once timed out
// once (connection_timeout), and that stage's first round then never ended.
void dial_then(server_ptr self, const std::string& endpoint, std::function<void()> k, int tries) {
  const auto hp = split_host_port(endpoint);
  if (!hp) {
    k();
    return;
  }
  self->request(dialer(self->system()), std::chrono::seconds(5), caf::connect_atom::value, hp->first, hp->second)
      .then([k](const caf::node_id&, caf::strong_actor_ptr&, const std::set<std::string>&) mutable { k(); },
            [self, endpoint, k, tries](caf::error& err) mutable {
              get_logger("stage_server")->warn("stage {}: cannot dial peer {}: {}{}", stage_of(self), endpoint,
                                               self->system().render(err),
                                               tries > 1 ? "; dialing again" : "; giving up");
              if (tries > 1)
                dial_then(self, endpoint, std::move(k), tries - 1);
              else
                k();
            });
}


void report_progress(server_ptr self, bool force) {
  auto& st = self->state;
  const int64_t samples = st.worker->accumulated_samples();
  if (!st.member.averager || (!force && samples == st.avg.reported_samples))
    return;
  st.avg.reported_samples = samples;
  proto::progress_report rep;
  rep.set_stage(static_cast<uint32_t>(stage_of(self)));
  rep.set_server_id(st.cfg.server_id);
  rep.set_step(static_cast<uint64_t>(st.worker->steps()));
  rep.set_samples(static_cast<uint64_t>(samples));
  rep.set_parameter_hash(st.avg.hash);
  rep.set_reloads(st.avg.reloads);
  rep.set_busy_seconds(st.serving.busy_s);
  rep.set_committed_samples(static_cast<uint64_t>(st.counters->committed_samples));
  self->send(st.member.averager, progress_atom::value, encode(rep));
}

void on_round_begin(server_ptr self, const std::string& bytes, const std::vector<caf::actor>& members) {
  auto& st = self->state;
  auto log = get_logger("stage_server");
  auto begin = decode<proto::round_begin>(bytes, "round_begin");
  if (!begin || begin->members_size() != static_cast<int>(members.size()) || !std::isfinite(begin->timeout_s()) ||
      begin->timeout_s() <= 0) {
    log->warn("stage {}: ignored a malformed round_begin", stage_of(self));
    return;
  }
  if (begin->stage() != static_cast<uint32_t>(stage_of(self))) {
    log->info("stage {}: ignored a round of stage {} (this server left it)", stage_of(self), begin->stage());
    return;
  }
  int rank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].address() == self->address())
      rank = static_cast<int>(i);
  if (rank < 0)
    return;
  if (st.avg.in_round())
    finish(self, "a newer round began");
  server_round r;
  r.id = begin->round();
  r.number = begin->number();
  r.step = begin->step();
  r.started = clock_type::now();
  for (int i = 0; i < begin->members_size(); ++i) {
    r.ids.push_back(begin->members(i));
    r.members.push_back(caf::actor_cast<stage_actor>(members[static_cast<size_t>(i)]));
    if (i != rank && st.avg.round_peers.insert(members[static_cast<size_t>(i)].address()).second)
      self->monitor(members[static_cast<size_t>(i)]);
  }
  const bool in_step = static_cast<uint64_t>(st.worker->steps()) == r.step && !st.avg.reloading && !st.member.draining();
  auto grad = in_step ? st.worker->take_gradient() : local_gradient{};
  r.samples = grad.samples;
  r.exchange = std::make_unique<policy::butterfly_round>(rank, static_cast<int>(members.size()), std::move(grad.values),
                                                         grad.samples,
                                                         static_cast<int64_t>(std::max<uint64_t>(1, begin->piece_elements())),
                                                         [codec = codec_of(st.cfg.averaging_compression)](float* v, int64_t n) {
                                                           round_trip_floats(v, n, codec);
                                                         });
  st.avg.round = std::move(r);
  if (!in_step) {
    finish(self, st.member.draining() ? "this server is leaving the stage" : "this server is not at the round's step");
    return;
  }
  using clock = policy::round_clock;
  self->delayed_send(self, seconds(clock::report * begin->timeout_s()), deadline_atom::value, st.avg.round->id,
                     int32_t{1});
  self->delayed_send(self, seconds(clock::end * begin->timeout_s()), deadline_atom::value, st.avg.round->id,
                     int32_t{2});
  if (begin->member_endpoints_size() != begin->members_size()) {
    start_exchange(self);  // an averager that sends no endpoints
    return;
  }
  auto& r2 = *st.avg.round;
  const auto hellos = std::move(st.avg.early_hellos[r2.id]);
  st.avg.early_hellos.erase(st.avg.early_hellos.begin(), st.avg.early_hellos.upper_bound(r2.id));
  for (int i = 0; i < begin->members_size(); ++i) {
    if (i == rank || (r2.ids[static_cast<size_t>(i)] > r2.ids[static_cast<size_t>(rank)] && hellos.count(r2.members[static_cast<size_t>(i)].address()) > 0))
      continue;
    r2.unready.insert(i);
    if (r2.ids[static_cast<size_t>(i)] < r2.ids[static_cast<size_t>(rank)])
      dial_then(self, begin->member_endpoints(i), [self, id = r2.id, i] {
        auto& r = self->state.avg.round;
        if (!r || r->id != id)
          return;
        proto::allreduce_piece hello;
        hello.set_stage(static_cast<uint32_t>(stage_of(self)));
        hello.set_round(id);
        hello.set_kind(proto::allreduce_piece::HELLO);
        self->send(r->members[static_cast<size_t>(i)], piece_atom::value, encode(hello));
        linked(self, i);
      });
  }
  if (r2.unready.empty())
    start_exchange(self);
}

/// A piece whose values are here, from member `from`: fed to the round, kept
/// for a round not begun yet, or dropped (an old round's).
void route_piece(server_ptr self, const caf::actor_addr& from, const proto::allreduce_piece& head,
                 const std::string& bytes) {
  auto& st = self->state;
  if (st.avg.round && head.round() == st.avg.round->id && st.avg.round->begun) {
    feed(self, from, bytes);
  } else if (!st.avg.round || head.round() > st.avg.round->id || head.round() == st.avg.round->id) {
    // Bounded: a round that never begins here must not grow this forever.
    if (st.avg.early_pieces.size() < 4 || st.avg.early_pieces.count(head.round()) > 0)
      st.avg.early_pieces[head.round()].emplace_back(from, bytes);
  }
}

void on_piece(server_ptr self, const std::string& bytes) {
  auto& st = self->state;
  proto::allreduce_piece head;
  if (!head.ParseFromString(bytes))
    return;
  const auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (head.kind() == proto::allreduce_piece::HELLO) {
    on_hello(self, from, head.round());
    return;
  }
  if (head.bulk_key() == 0) {
    route_piece(self, from, head, bytes);
    return;
  }
  // Its values come over the bulk connection; a piece that never comes is a
  // member that never sent it, which the round's deadlines already handle.
  const uint64_t key = head.bulk_key() | bulk_flag;
  const bool here = st.inbox.claim(
      key,
      [self, from, head](caf::expected<bulk_parts> values) mutable {
        if (values && values->size() != 1)
          values = make_error(errc::BAD_REQUEST, "a piece's frame has " + std::to_string(values->size()) + " parts, not 1");
        if (!values) {
          get_logger("stage_server")->warn("stage {}: a piece's values of round id {} never came: {}",
                                           stage_of(self), head.round(), describe(values.error()));
          return;
        }
        head.set_values(std::move(values->front()));
        head.set_bulk_key(0);
        route_piece(self, from, head, encode(head));
      },
      bulk_inbox::clock::now());
  if (!here)
    self->delayed_send(self, seconds(st.cfg.bulk_wait_s), bulk_atom::value, key);
}

void on_exclude(server_ptr self, const std::string& bytes) {
  auto& st = self->state;
  auto ex = decode<proto::round_exclude>(bytes, "round_exclude");
  if (!ex || !st.avg.round || ex->round() != st.avg.round->id)
    return;
  if (static_cast<int>(ex->rank()) == st.avg.round->exchange->rank()) {
    finish(self, "excluded by the averager");
    return;
  }
  if (!st.avg.round->begun) {
    st.avg.round->gone_early.push_back(static_cast<int>(ex->rank()));
    linked(self, static_cast<int>(ex->rank()));
  } else {
    send_pieces(self, st.avg.round->exchange->gone(static_cast<int>(ex->rank())));
  }
}

bool on_member_down(server_ptr self, const caf::actor_addr& who) {
  auto& st = self->state;
  st.avg.round_peers.erase(who);
  if (!st.avg.round)
    return false;
  for (size_t i = 0; i < st.avg.round->members.size(); ++i)
    if (st.avg.round->members[i].address() == who) {
      if (!st.avg.round->begun) {
        st.avg.round->gone_early.push_back(static_cast<int>(i));
        linked(self, static_cast<int>(i));
      } else {
        send_pieces(self, st.avg.round->exchange->gone(static_cast<int>(i)));
      }
      return true;
    }
  return false;
}

void on_deadline(server_ptr self, uint64_t round, int32_t phase) {
  auto& st = self->state;
  if (!st.avg.round || st.avg.round->id != round || st.avg.round->finished)
    return;
  if (phase == 2) {
    finish(self, "round deadline passed");
    return;
  }
  if (!st.member.averager)
    return;
  proto::round_waiting w;
  w.set_stage(static_cast<uint32_t>(stage_of(self)));
  w.set_server_id(st.cfg.server_id);
  w.set_round(round);
  std::string names;
  for (int r : st.avg.round->exchange->waiting_on()) {
    w.add_waiting_on(static_cast<uint32_t>(r));
    names += (names.empty() ? "" : ", ") + st.avg.round->ids[static_cast<size_t>(r)];
  }
  get_logger("stage_server")->warn("stage {}: round {} not done after half its timeout; waiting for {}", stage_of(self),
                                   st.avg.round->number, names);
  self->send(st.member.averager, waiting_atom::value, encode(w));
}

void abandon_round(server_ptr self) {
  if (self->state.avg.in_round())
    finish(self, "its link to the coordinator dropped; the round went on without it");
}

} // namespace swarm::averaging
