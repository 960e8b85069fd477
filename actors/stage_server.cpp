#include "actors/stage_server.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <type_traits>

#include <unistd.h>

#include <caf/all.hpp>

#include "base/clock.hpp"
#include "base/freeze_watch.hpp"
#include "base/log.hpp"
#include "actors/door.hpp"
#include "actors/stage_server_averaging.hpp"
#include "actors/stage_server_checkpoint.hpp"
#include "actors/stage_server_move.hpp"
#include "actors/stage_calls.hpp"
#include "messages/wire.hpp"
#include "net/peer_roles.hpp"

namespace swarm {

namespace {

using self_ptr = stage_actor::stateful_pointer<stage_server_state>;
/// The reply a request of type Req gets: (transfer id, its encoded reply).
template <class Req>
struct reply_of;
template <>
struct reply_of<proto::forward_request> {
  using type = proto::forward_reply;
};
template <>
struct reply_of<proto::backward_request> {
  using type = proto::backward_reply;
};
template <class Req>
using reply_t = caf::result<uint64_t, encoded<typename reply_of<Req>::type>>;
template <class Req>
using promise_t = caf::typed_response_promise<uint64_t, encoded<typename reply_of<Req>::type>>;
using clock_type = std::chrono::steady_clock;

/// Where a reply goes: the transfer id and the inline bytes to answer with. A
/// forward or backward reply of at least bulk_min_bytes goes over the bulk
/// connection, its tensors' bytes beside it (the requester, a load balancer,
/// claims it); anything else in chunks, the last in the reply.
std::pair<uint64_t, std::string> send_reply(self_ptr self, const caf::strong_actor_ptr& requester,
                                            google::protobuf::Message& reply, bool bulk_ok) {
  auto& cfg = self->state.cfg;
  const auto to = caf::actor_cast<caf::actor>(requester);
  if (bulk_ok && cfg.bulk && cfg.net.bulk_min_bytes > 0 &&
      static_cast<int64_t>(reply.ByteSizeLong()) >= cfg.net.bulk_min_bytes) {
    auto data = shared_parts(take_tensor_data(reply));
    return {cfg.bulk->push(to, reply.SerializeAsString(), std::move(data)), std::string{}};
  }
  auto p = cut(reply.SerializeAsString(), static_cast<size_t>(cfg.net.chunk_bytes), self->state.next_transfer);
  send_lead(self, to, p);
  return {p.transfer_id, std::move(p.tail)};
}

caf::error reject(self_ptr self, const caf::strong_actor_ptr& requester, const char* op, caf::error err) {
  ++self->state.counters->rejected;
  // Refusals while moving are expected (load balancers re-send them): not worth a warning each.
  // Others are a peer's fault: warned about, but a flood of them is not a flood of lines.
  static std::atomic<uint64_t> rejected{0};
  const bool leaving = code_of(err) == errc::LEAVING;
  const uint64_t n = leaving ? 0 : worth_logging(rejected);
  if (leaving || n > 0)
    get_logger("stage_server")
        ->log(leaving ? spdlog::level::debug : spdlog::level::warn, "stage {}: rejected {} from {}: {}{}",
              self->state.worker->span().stage, op, caf::to_string(requester), describe(err),
              leaving ? std::string{} : " [" + std::to_string(n) + " rejected in this process]");
  return err;
}

/// Emulates a slower device: sleeps (slowdown - 1) times the compute time so far.
void slow_down(self_ptr self, clock_type::time_point started, bool& done) {
  if (done || self->state.cfg.server.slowdown <= 1.0)
    return;
  done = true;
  std::this_thread::sleep_for((clock_type::now() - started) * (self->state.cfg.server.slowdown - 1.0));
}

/// Whether `req`'s commit deadline (0 = none) has passed.
template <class Req>
bool past_deadline(const Req& req) {
  return req.commit_deadline() > 0 && unix_seconds() > req.commit_deadline();
}

/// Test hook: hang while holding the `seen`-th request of `op` (see server_config::fault).
void maybe_hang(self_ptr self, server_config::fault_kind kind, int64_t seen, const char* op) {
  auto& st = self->state;
  if (st.cfg.server.fault != kind || seen != st.cfg.server.fault_after)
    return;
  get_logger("stage_server")->warn("fault hook: hanging in {} #{} until killed", op, seen);
  st.metrics->emit("fault", {{"server", st.cfg.server_id},
                             {"stage", int64_t{st.worker->span().stage}},
                             {"op", std::string{op}},
                             {"pid", static_cast<int64_t>(::getpid())}});
  for (;;)
    std::this_thread::sleep_for(std::chrono::hours(1));
}

void maybe_hang(self_ptr self, bool forward) {
  using kind = server_config::fault_kind;
  auto& st = self->state;
  if (forward)
    maybe_hang(self, kind::hang_forward, ++st.serving.forwards_seen, "forward");
  else
    maybe_hang(self, kind::hang_backward, ++st.serving.backwards_seen, "backward");
}

/// The exactly-once rule (see the header), asked after compute, before adding.
template <class Req>
commit_decision decide_commit(self_ptr self, const Req& req, const char* direction, int64_t samples) {
  auto& st = self->state;
  if (past_deadline(req)) {
    ++st.counters->late;
    return {false, false, error{errc::TIMEOUT, "finished after the commit deadline; gradients discarded"}};
  }
  auto key = req.trainer_id() + "/" + std::to_string(req.microbatch_id()) + "/" + direction;
  if (!st.serving.committed.insert(key).second) {
    ++st.counters->duplicates;
    return {false, false, {}};
  }
  st.serving.committed_order.push_back(key);
  if (st.serving.committed_order.size() > serving_state::committed_window) {
    st.serving.committed.erase(st.serving.committed_order.front());
    st.serving.committed_order.pop_front();
  }
  if (req.reply_deadline() <= 0) {  // nobody retries it on a deadline: no late reply to fear
    st.counters->committed_samples += samples;
    return {};
  }
  st.serving.held = serving_state::held_reply{++st.serving.next_held, std::move(key), req.reply_deadline()};
  return {true, true, {}};
}

/// The held microbatch's reply was handed over now: settle it within settle_after.
void held_reply_sent(self_ptr self) {
  auto& h = self->state.serving.held;
  if (!h || h->sent)
    return;
  h->sent = true;
  h->sent_at = clock_type::now();
  h->slack_s = h->reply_deadline - unix_seconds();
  send_later(self, serving_state::settle_after, stage_server_local::settle_due{h->id});
}

/// Decodes, validates and runs one request of type Req on `run`: the reply
/// (transfer id, inline bytes) or the error to answer `requester` with.
template <class Req, class Run>
caf::expected<std::pair<uint64_t, std::string>> handle(self_ptr self, const caf::strong_actor_ptr& requester,
                                                       const char* op, caf::expected<bulk_parts> payload, Run run) {
  auto& st = self->state;
  if (!payload)
    return reject(self, requester, op, payload.error());
  auto req = decode_parts<Req>(std::move(*payload), op);
  if (!req)
    return reject(self, requester, op, req.error());
  // Whatever comes of it here, its grant (if it had one) frees room at the door when this returns.
  struct release_at_end {
    self_ptr self;
    uint64_t ticket;
    ~release_at_end() {
      if (ticket != 0)
        self->send(self->state.door, release_atom::value, ticket);
    }
  } release{self, req->ticket()};
  const auto stage = static_cast<uint32_t>(st.worker->span().stage);
  if (!takes_requests(st.member.phase) || (req->stage() != stage && st.member.left_stages.count(req->stage()) > 0))
    return reject(self, requester, op,
                  make_error(errc::LEAVING, "this server left stage " + std::to_string(req->stage())));
  if (past_deadline(*req)) {
    // It waited in the mailbox past its deadline: the caller has moved on.
    ++st.counters->late;
    return reject(self, requester, op, make_error(errc::TIMEOUT, "arrived after its commit deadline; not computed"));
  }
  maybe_hang(self, std::is_same_v<Req, proto::forward_request>);
  const auto started = clock_type::now();
  bool slept = false;
  const int64_t samples = req->has_inputs() && req->inputs().shape_size() > 0 ? req->inputs().shape(0) : 0;
  commit_gate gate = [&] {
    slow_down(self, started, slept);
    settle_held(self);  // the one before: its reply had this compute's time to leave
    return decide_commit(self, *req, op, samples);
  };
  auto rep = run(*req, gate);
  slow_down(self, started, slept);
  const double computed = seconds_since(started);
  st.serving.busy_s += computed;
  if (rep)
    rep->set_compute_s(computed);
  if (!rep) {
    settle_held(self);  // held but not answered (the reply failed): the trainer retries it
    return reject(self, requester, op, rep.error());
  }
  ++st.counters->served;
  averaging::report_progress(self, false);
  auto reply = send_reply(self, requester, *rep, true);
  held_reply_sent(self);
  return reply;
}

/// Runs one request on its payload and answers `rp`, or, when it would add
/// gradients while a round of its stage runs, keeps it for the round's step
/// (stage_server.hpp, "Staleness").
template <class Req, class Run>
void run_or_defer(self_ptr self, const caf::strong_actor_ptr& requester, const char* op,
                  caf::expected<bulk_parts> payload, Run run, promise_t<Req> rp) {
  auto& st = self->state;
  const bool adds = !std::is_same_v<Req, proto::forward_request> || st.worker->span().has_head();
  if (adds && st.cfg.server.stale_wait_s > 0 && st.avg.in_round() && st.serving.waited_out != st.avg.round->id &&
      st.serving.deferred.size() < serving_state::max_deferred) {
    st.serving.deferred.emplace_back([self, requester, op, payload = std::move(payload), run, rp]() mutable {
      run_or_defer<Req>(self, requester, op, std::move(payload), run, rp);
    });
    return;
  }
  auto r = handle<Req>(self, requester, op, std::move(payload), run);
  if (r)
    rp.deliver(r->first, encoded<typename reply_of<Req>::type>{std::move(r->second)});
  else
    rp.deliver(r.error());
}

/// A forward or backward request: its payload inline (reassembled from
/// chunks) or over the bulk connection (answered once its bytes are here).
/// Only trainers send them (net/peer_roles.hpp, with TLS).
template <class Req, class Run>
reply_t<Req> receive_request(self_ptr self, const char* op, uint64_t transfer_id, std::string tail, Run run) {
  if (!sent_as(self, role_trainer, self->state.cfg.server_id, op))
    return refused_for_role(op);
  auto& st = self->state;
  const auto requester = self->current_sender();
  auto rp = self->make_response_promise<uint64_t, encoded<typename reply_of<Req>::type>>();
  if (!is_bulk(transfer_id)) {
    run_or_defer<Req>(
        self, requester, op,
        one_part(st.chunks.finish(caf::actor_cast<caf::actor_addr>(requester), transfer_id, std::move(tail))), run, rp);
    return rp;
  }
  const bool here = st.inbox.claim(
      transfer_id,
      [self, requester, op, run, rp](caf::expected<bulk_parts> payload) mutable {
        run_or_defer<Req>(self, requester, op, std::move(payload), run, rp);
      },
      bulk_inbox::clock::now());
  if (!here)
    send_later(self, seconds(st.cfg.bulk_wait_s), bulk_expired{transfer_id});
  return rp;
}

}  // namespace

namespace {

/// Takes the server's parts into its state, watches the process for freezes
/// (base/freeze_watch.hpp) and attaches to the bulk connection.
void adopt(self_ptr self, stage_server_config cfg, std::shared_ptr<stage_worker> worker,
           std::shared_ptr<metrics_sink> metrics, std::shared_ptr<stage_server_counters> counters) {
  self->state.cfg = std::move(cfg);
  self->state.worker = std::move(worker);
  self->state.metrics = std::move(metrics);
  self->state.counters = std::move(counters);
  self->state.avg.hash = self->state.worker->parameter_hash();
  if (self->state.cfg.freeze_s > 0)
    watch_freezes(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(self->state.cfg.freeze_s)));
  if (self->state.cfg.bulk)
    self->state.cfg.bulk->attach(caf::actor_cast<caf::actor>(self));
}

/// The server's helpers: its door and its averaging round peer.
void spawn_helpers(self_ptr self) {
  // Linked: it ends with this server.
  self->state.door = self->spawn<caf::linked>(door, self->state.cfg.server.admission, self->address());
  const auto& c = self->state.cfg;
  round_peer_config pc{c.server_id,
                       c.server.averaging_compression,
                       c.bulk,
                       c.net.bulk_min_bytes,
                       c.bulk_wait_s,
                       c.server.fault == server_config::fault_kind::hang_round ? c.server.fault_after : 0,
                       c.server.fault == server_config::fault_kind::fail_round ? c.server.fault_after : 0};
  // Detached: its own thread, so a round moves on while this one computes.
  self->state.avg.peer = self->spawn<caf::detached + caf::linked>(round_peer, std::move(pc), self->state.metrics,
                                                                  caf::actor_cast<stage_actor>(self));
}

/// What the server does when a sender of chunks it monitors goes down, and when it is stopped.
void set_down_and_exit_handlers(self_ptr self) {
  // A trainer that dies mid-transfer leaves partial payloads; drop them with it.
  self->set_down_handler([self](caf::down_msg& msg) {
    self->state.chunks.forget(msg.source);
    self->state.chunk_senders.erase(msg.source);
  });
  // Its node stops it with an exit message: on purpose (user_shutdown), its
  // gradient goes into a round first; then it reports the stage it served last.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    settle_held(self);
    if (msg.reason == caf::exit_reason::user_shutdown && moving::hand_in_before_stop(self))
      return;
    moving::stop(self, msg.reason);
  });
}

/// A held microbatch's settle_after is over.
void on_settle_due(self_ptr self, stage_server_local::settle_due due) {
  const auto& h = self->state.serving.held;
  if (!h || h->id != due.held)
    return;  // settled already, by a later microbatch
  settle_held(self);
  averaging::report_progress(self, false);
}

/// Its local messages (messages/local.hpp): its own timers and the bulk plane's deliveries.
void handle_local_messages(self_ptr self) {
  handle_local(
      self,
      [self](bulk_delivery& d) { self->state.inbox.arrived(d.key, std::move(d.parts), bulk_inbox::clock::now()); },
      [self](bulk_expired e) { self->state.inbox.expire(e.key); },
      [self](stage_server_local::settle_due due) { on_settle_due(self, due); },
      [self](stage_server_local::round_overdue o) { averaging::on_round_overdue(self, o.round); },
      [self](stage_server_local::stale_wait_over o) { averaging::on_stale_wait_over(self, o.round); },
      [self](stage_server_local::leave_check) { moving::stop_when_handed_in(self, true); },
      [self](stage_server_local::move_again& m) { moving::resume_move(self, m.order); });
}

/// A state request (a joining server's download): the stage's state, in chunks.
caf::result<uint64_t, encoded<proto::state_reply>> serve_state(self_ptr self, uint64_t transfer_id,
                                                               encoded<proto::state_request>& tail) {
  auto& st = self->state;
  const auto requester = self->current_sender();
  auto payload = st.chunks.finish(caf::actor_cast<caf::actor_addr>(requester), transfer_id, std::move(tail.bytes));
  auto req = payload ? decode<proto::state_request>(*payload, "state_request")
                     : caf::expected<proto::state_request>{payload.error()};
  if (!req)
    return reject(self, requester, "state_request", req.error());
  if (static_cast<int>(req->stage()) != st.worker->span().stage)
    return reject(
        self, requester, "state_request",
        make_error(errc::UNKNOWN_STAGE, "state of stage " + std::to_string(req->stage()) +
                                            " asked of a server of stage " + std::to_string(st.worker->span().stage)));
  maybe_hang(self, server_config::fault_kind::hang_state, ++st.serving.states_seen, "state");
  proto::state_reply rep;
  rep.set_stage(req->stage());
  rep.set_step(static_cast<uint64_t>(st.worker->steps()));
  rep.set_parameter_hash(st.avg.hash);
  rep.set_state(st.worker->export_state());
  get_logger("stage_server")
      ->debug("stage {}: sent state at step {} ({} bytes) to {}", req->stage(), rep.step(), rep.state().size(),
              req->server_id());
  // Never bulk: a joining server downloads with a scoped actor, which cannot claim.
  auto [id, bytes] = send_reply(self, requester, rep, false);
  return {id, encoded<proto::state_reply>{std::move(bytes)}};
}

/// One chunk of a transfer; its sender is monitored from its first chunk on.
void add_chunk(self_ptr self, uint64_t transfer_id, const std::string& piece) {
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (self->state.chunk_senders.insert(from).second)
    self->monitor(from);
  // A refused piece is logged there; the request it ends then fails (finish()).
  (void)self->state.chunks.add(from, transfer_id, piece, std::chrono::steady_clock::now());
}

/// The seed of this server's next lie: deterministic for a server (its id) and a count.
uint64_t next_lie(self_ptr self) {
  static std::atomic<uint64_t> count{0};
  return std::hash<std::string>{}(self->state.cfg.server_id) ^ (0x9e3779b97f4a7c15ull * ++count);
}

/// --fault noise (issue #47): every tensor of the reply replaced by noise.
void lie_in(self_ptr self, proto::forward_reply& r) {
  replace_with_noise(*r.mutable_outputs(), next_lie(self));
  replace_with_noise(*r.mutable_input_grad(), next_lie(self));
}
void lie_in(self_ptr self, proto::backward_reply& r) { replace_with_noise(*r.mutable_input_grad(), next_lie(self)); }

/// A reply as this server sends it: as computed, or a lie when told to (--fault noise).
template <class Reply>
caf::expected<Reply> as_told(self_ptr self, caf::expected<Reply> reply) {
  if (reply && self->state.cfg.server.fault == server_config::fault_kind::noise)
    lie_in(self, *reply);
  return reply;
}

}  // namespace

stage_actor::behavior_type stage_server(self_ptr self, stage_server_config cfg, std::shared_ptr<stage_worker> worker,
                                        std::shared_ptr<metrics_sink> metrics,
                                        std::shared_ptr<stage_server_counters> counters) {
  adopt(self, std::move(cfg), std::move(worker), std::move(metrics), std::move(counters));
  spawn_helpers(self);
  set_down_and_exit_handlers(self);
  handle_local_messages(self);
  // Who may ask (net/peer_roles.hpp, with TLS): trainers send work, ask for
  // the door and send chunks; servers ask for state (and send chunks); the
  // coordinator gives orders (moving::from_coordinator).
  return {
      [self](forward_atom, uint64_t transfer_id, encoded<proto::forward_request>& tail) {
        return receive_request<proto::forward_request>(self, "forward_request", transfer_id, std::move(tail.bytes),
                                                       [self](proto::forward_request& r, const commit_gate& g) {
                                                         return as_told(
                                                             self, serve_forward(*self->state.worker, std::move(r), g));
                                                       });  // serve_forward takes only r's tensor bytes
      },
      [self](backward_atom, uint64_t transfer_id, encoded<proto::backward_request>& tail) {
        return receive_request<proto::backward_request>(
            self, "backward_request", transfer_id, std::move(tail.bytes),
            [self](proto::backward_request& r, const commit_gate& g) {
              return as_told(self, serve_backward(*self->state.worker, std::move(r), g));
            });
      },
      [self](state_atom, uint64_t transfer_id,
             encoded<proto::state_request>& tail) -> caf::result<uint64_t, encoded<proto::state_reply>> {
        if (!sent_as(self, role_server, self->state.cfg.server_id, "state request"))
          return refused_for_role("a state request");
        return serve_state(self, transfer_id, tail);
      },
      [self](round_atom, const encoded<proto::round_begin>& bytes, const std::vector<caf::actor>& members) {
        if (moving::from_coordinator(self, "round order"))
          averaging::on_round_begin(self, bytes, members);
      },
      [self](done_atom, const encoded<proto::round_outcome>& bytes, const std::vector<float>& mean) {
        averaging::on_outcome(self, bytes, mean);
      },
      [self](reload_atom, const encoded<proto::reload_order>& bytes, const caf::actor& peer) {
        if (moving::from_coordinator(self, "reload order"))
          averaging::on_reload(self, bytes, peer);
      },
      [self](register_atom, const encoded<proto::register_server>& bytes, const caf::actor& coordinator) {
        return moving::on_register(self, bytes, coordinator);
      },
      [self](move_atom, const encoded<proto::move_order>& bytes) { moving::on_move(self, bytes); },
      [self](door_atom) {
        return sent_as(self, role_trainer, self->state.cfg.server_id, "door request")
                   ? caf::actor_cast<caf::actor>(self->state.door)
                   : caf::actor{};
      },
      [self](chunk_atom, uint64_t transfer_id, const std::string& piece) {
        if (sent_as(self, role_trainer | role_server, self->state.cfg.server_id, "chunk"))
          add_chunk(self, transfer_id, piece);
      },
  };
}

}  // namespace swarm
