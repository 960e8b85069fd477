#include "actors/load_balancer.hpp"
#include "actors/load_balancer_members.hpp"
#include "base/clock.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "base/log.hpp"
#include "actors/stage_server.hpp"
#include "net/peer_roles.hpp"
#include "net/tls.hpp"
#include "messages/local.hpp"
#include "messages/wire.hpp"

namespace swarm::load_balancer_local {
struct tick {};  ///< its own timer, every second: routing statistics, servers to dial again
}  // namespace swarm::load_balancer_local

SWARM_LOCAL_MESSAGE(swarm::load_balancer_local::tick)

namespace swarm {

// The request side; the membership side is actors/load_balancer_members.cpp.
namespace balancing {

double now_s() { return monotonic_seconds(); }

std::optional<request> take(std::map<uint64_t, request>& pending, uint64_t key) {
  auto it = pending.find(key);
  if (it == pending.end())
    return std::nullopt;
  auto req = std::move(it->second);
  pending.erase(it);
  return req;
}

const char* op_name(const request& r) { return r.history.backward ? "backward" : "forward"; }

/// The deadline of one attempt of `r`, seconds.
double attempt_timeout_s(const load_balancer_state& st, const request& r) {
  return r.history.backward ? st.cfg.trainer.backward_timeout_s : st.cfg.trainer.forward_timeout_s;
}

/// How long a door's answer is waited for before the request goes elsewhere:
/// a door answers at once, so no answer means its process is gone or stands still.
constexpr auto ask_timeout = std::chrono::seconds(5);

/// Appends the commit and reply deadlines and the door's ticket to a serialized
/// request: protobuf merges concatenated messages field by field, so no parse
/// and re-encode is needed.
std::string with_deadlines(const std::string& head, bool forward, double commit, double reply, uint64_t ticket) {
  auto add = [&](auto d) {
    d.set_commit_deadline(commit);
    d.set_reply_deadline(reply);
    d.set_ticket(ticket);
    return head + d.SerializeAsString();
  };
  return forward ? add(proto::forward_request{}) : add(proto::backward_request{});
}

/// The whole encoding of a request held as parts, for the CAF path: its
/// tensors' bytes copied back into it (small requests, or no bulk plane).
std::string whole_payload(std::string head, const bulk_parts& data, bool forward) {
  if (data.empty())
    return head;
  bulk_parts parts{std::move(head)};
  parts.insert(parts.end(), data.begin(), data.end());
  // The trainer built the parts: they decode, or the server refuses what is left.
  if (forward) {
    auto req = decode_parts<proto::forward_request>(std::move(parts), "forward_request");
    return req ? encode(*req) : std::string{};
  }
  auto req = decode_parts<proto::backward_request>(std::move(parts), "backward_request");
  return req ? encode(*req) : std::string{};
}

/// The server of `req`'s next attempt (policy::next_server); logs the pin
/// static routing makes.
std::optional<std::string> choose(self_ptr self, const request& req) {
  auto& st = self->state;
  const bool pinning = st.cfg.trainer.attempts.pinned && st.pin.pinned().empty();
  auto live = [&st] {
    std::vector<std::string> ids;
    for (const auto& [id, handle] : st.servers)
      if (st.leaving.count(id) == 0 && st.caught.count(id) == 0)
        ids.push_back(id);
    return ids;
  };
  auto pick = policy::next_server(st.cfg.trainer.attempts, req.history, st.router, st.pin, now_s(), st.rng, live);
  if (pinning && pick)
    get_logger("load_balancer")->info("stage {}: static routing pinned to server {}", st.cfg.stage, *pick);
  return pick;
}

/// The seconds the server says it computed a reply (its head, parts[0]; 0
/// when it does not say or the head does not parse: the router then rates the
/// whole request).
template <class Reply>
double compute_seconds(const bulk_parts& parts) {
  Reply head;
  return !parts.empty() && head.ParseFromString(parts[0]) && std::isfinite(head.compute_s()) ? head.compute_s() : 0;
}

/// The end of `req`: its answer (or error) to the trainer, or to the verification it belongs to.
void finish(self_ptr self, request& req, caf::expected<bulk_parts> whole) {
  if (req.verification != 0) {
    on_verify_answer(self, req, std::move(whole));
    return;
  }
  if (!whole) {
    req.promise.deliver(whole.error());
    return;
  }
  maybe_verify(self, req, *whole);
  req.promise.deliver(std::move(*whole), req.server_id, int32_t{req.history.attempts});
}

void deliver_error(self_ptr self, request& req, caf::error err) { finish(self, req, std::move(err)); }

void on_attempt_failed(self_ptr self, request req, const caf::error& err, const char* reason) {
  auto& st = self->state;
  const auto& server = req.server_id;
  const double waited = seconds_since(req.sent_at);
  policy::on_ended(req.history, st.router, server);
  auto log = get_logger("load_balancer");
  const auto code = code_of(err);
  if (!is_retryable(err)) {
    log->warn("stage {}: {} of {} items failed at {}: {} (not retried)", st.cfg.stage, op_name(req),
              req.history.samples, server, describe(err));
    deliver_error(self, req, err);
    return;
  }
  if (code == errc::TIMEOUT) {
    st.router.on_timeout(server, req.history.samples, req.history.backward, waited);
    st.metrics->emit("timeout", {{"stage", int64_t{st.cfg.stage}},
                                 {"trainer", st.cfg.trainer_id},
                                 {"server", server},
                                 {"op", std::string{op_name(req)}},
                                 {"seconds", waited}});
  } else if (code == errc::LEAVING) {
    leave_server(self, server);  // it told us before the coordinator did
  } else if (code != errc::PEER_GONE && st.servers.count(server) > 0) {
    const double ban_s = st.router.ban(server, now_s());
    log->warn("stage {}: server {} banned for {:.1f} s: {}", st.cfg.stage, server, ban_s, describe(err));
    st.metrics->emit("ban", {{"stage", int64_t{st.cfg.stage}},
                             {"trainer", st.cfg.trainer_id},
                             {"server", server},
                             {"seconds", ban_s},
                             {"reason", describe(err)}});
  }
  req.last_error = err;
  req.failed_reason = reason;
  if (!policy::attempts_left(st.cfg.trainer.attempts, req.history)) {
    log->warn("stage {}: {} gave up after {} attempts: {}", st.cfg.stage, op_name(req), req.history.attempts,
              describe(err));
    deliver_error(self, req, err);
    return;
  }
  dispatch(self, std::move(req));
}

/// The whole reply of `attempt` (or why there is none).
void on_reply_payload(self_ptr self, uint64_t attempt, caf::expected<bulk_parts> whole) {
  auto& st = self->state;
  auto req = take(st.in_flight, attempt);
  if (!req)
    return;  // already re-sent after its server went down
  if (!whole) {
    on_attempt_failed(self, std::move(*req), whole.error(), "error");
    return;
  }
  const double secs = seconds_since(req->sent_at);
  st.router.release(req->server_id);
  st.router.on_success(req->server_id, req->history.samples, req->history.backward, secs,
                       req->history.backward ? compute_seconds<proto::backward_reply>(*whole)
                                             : compute_seconds<proto::forward_reply>(*whole));
  finish(self, *req, std::move(*whole));
}

void on_reply(self_ptr self, uint64_t attempt, uint64_t transfer_id, std::string tail) {
  auto& st = self->state;
  auto it = st.in_flight.find(attempt);
  if (it == st.in_flight.end())
    return;  // already re-sent after its server went down
  if (is_bulk(transfer_id)) {
    // The attempt stays in flight until its bytes are here: a server that dies
    // meanwhile gets it re-sent like any other pending request.
    const bool here = st.inbox.claim(
        transfer_id,
        [self, attempt](caf::expected<bulk_parts> whole) { on_reply_payload(self, attempt, std::move(whole)); },
        clock_type::now());
    if (!here)
      send_later(self, seconds(attempt_timeout_s(st, it->second)), bulk_expired{transfer_id});
    return;
  }
  auto handle = st.servers.find(it->second.server_id);
  on_reply_payload(self, attempt,
                   one_part(st.chunks.finish(handle != st.servers.end() ? handle->second.address() : caf::actor_addr{},
                                             transfer_id, std::move(tail))));
}

void send_attempt(self_ptr self, request req, const std::string& server_id) {
  auto& st = self->state;
  const auto& target = st.servers.at(server_id);
  const auto& tried = req.history.tried;
  if (req.history.attempts > 0) {
    get_logger("load_balancer")
        ->debug("stage {}: {} re-sent {} -> {} ({})", st.cfg.stage, op_name(req), tried.empty() ? "?" : tried.back(),
                server_id, req.failed_reason);
    st.metrics->emit("reroute", {{"stage", int64_t{st.cfg.stage}},
                                 {"trainer", st.cfg.trainer_id},
                                 {"op", std::string{op_name(req)}},
                                 {"from", tried.empty() ? std::string{} : tried.back()},
                                 {"to", server_id},
                                 {"reason", req.failed_reason}});
  }
  ++req.history.attempts;
  req.queued_at = {};
  req.server_id = server_id;
  req.sent_at = clock_type::now();
  const double timeout = attempt_timeout_s(st, req);
  const double now = unix_seconds();
  auto head = with_deadlines(req.head, !req.history.backward, now + timeout * (1.0 - st.cfg.trainer.commit_grace),
                             now + timeout, req.ticket);
  cut_payload piece;
  if (st.cfg.bulk && st.cfg.net.bulk_min_bytes > 0 && req.bytes >= st.cfg.net.bulk_min_bytes) {
    piece.transfer_id = st.cfg.bulk->push(caf::actor_cast<caf::actor>(target), std::move(head), req.data);
  } else {
    piece = cut(whole_payload(std::move(head), *req.data, !req.history.backward),
                static_cast<size_t>(st.cfg.net.chunk_bytes), st.next_transfer);
    send_lead(self, target, piece);
  }
  const uint64_t attempt = ++st.next_attempt;
  const bool forward = !req.history.backward;
  st.in_flight.emplace(attempt, std::move(req));
  // The reply's bytes are parsed once whole (on_reply_payload), whichever way they came.
  auto ok = [self, attempt](uint64_t transfer_id, auto& tail) {
    on_reply(self, attempt, transfer_id, std::move(tail.bytes));
  };
  auto fail = [self, attempt](caf::error& err) {
    auto req = take(self->state.in_flight, attempt);
    if (!req)
      return;
    const auto code = code_of(err);
    on_attempt_failed(self, std::move(*req), err,
                      code == errc::TIMEOUT   ? "timeout"
                      : code == errc::LEAVING ? "leaving"
                                              : "error");
  };
  if (forward)
    self->request(target, seconds(timeout), forward_atom::value, piece.transfer_id,
                  encoded<proto::forward_request>{std::move(piece.tail)})
        .then([ok](uint64_t id, encoded<proto::forward_reply>& tail) { ok(id, tail); }, fail);
  else
    self->request(target, seconds(timeout), backward_atom::value, piece.transfer_id,
                  encoded<proto::backward_request>{std::move(piece.tail)})
        .then([ok](uint64_t id, encoded<proto::backward_reply>& tail) { ok(id, tail); }, fail);
}

/// The door of `server_id` answered `ask` with `ticket` (0: busy): send it
/// there with the grant, or choose again.
void on_door_answer(self_ptr self, uint64_t ask, const std::string& server_id, uint64_t ticket) {
  auto& st = self->state;
  auto req = take(st.asking, ask);
  if (!req)
    return;  // its server went down meanwhile and it was chosen again (remove_server)
  const bool usable = st.servers.count(server_id) > 0 && st.leaving.count(server_id) == 0;
  if (ticket != 0 && usable) {
    req->ticket = ticket;
    send_attempt(self, std::move(*req), server_id);
    return;
  }
  // Busy, or gone from the stage meanwhile: not the server's fault, not an attempt.
  if (ticket == 0 && st.cfg.busy_answers)
    st.cfg.busy_answers->fetch_add(1, std::memory_order_relaxed);
  policy::on_busy(req->history, st.router, server_id);
  dispatch(self, std::move(*req));
}

/// Asks the door of `server_id` for room before sending it `req`. A door
/// answers at once, so no answer by the request's own deadline (or
/// ask_timeout, if sooner) is that server's failure: a timeout, as if the
/// request had been sent (its process stands still, or is gone).
void ask_door(self_ptr self, request req, const std::string& server_id) {
  auto& st = self->state;
  const uint64_t ask = ++st.next_attempt;
  auto door = st.doors.at(server_id);
  req.server_id = server_id;  // so that its going down sends this one elsewhere at once (remove_server)
  req.sent_at = clock_type::now();
  const double timeout = std::min(std::chrono::duration<double>(ask_timeout).count(), attempt_timeout_s(st, req));
  st.asking.emplace(ask, std::move(req));
  self->request(door, seconds(timeout), reserve_atom::value)
      .then([self, ask, server_id](uint64_t ticket) { on_door_answer(self, ask, server_id, ticket); },
            [self, ask, timeout](caf::error& err) {
              auto req = take(self->state.asking, ask);
              if (!req)
                return;
              ++req->history.attempts;
              const bool timed_out = err == caf::sec::request_timeout;
              on_attempt_failed(
                  self, std::move(*req),
                  timed_out ? make_error(errc::TIMEOUT, fmt::format("its door did not answer within {:g} s", timeout))
                            : make_error(errc::PEER_GONE, "its door is gone: " + describe(err)),
                  timed_out ? "timeout" : "down");
            });
}

void dispatch(self_ptr self, request req) {
  auto& st = self->state;
  req.ticket = 0;
  auto pick = choose(self, req);
  if (pick && req.verification != 0 && asked_already(self, req, *pick))
    pick.reset();                        // a second opinion from the first server is none
  if (!pick && req.verification != 0) {  // it does not wait for a server: the trainer has its answer
    deliver_error(self, req, make_error(errc::NO_SERVER, "no other server to compare with"));
    return;
  }
  if (!pick) {
    if (!st.stalled)
      get_logger("load_balancer")
          ->warn("stage {}: no eligible server ({} connected); requests wait up to {} s", st.cfg.stage,
                 st.servers.size(), st.cfg.trainer.no_server_wait_s);
    st.stalled = true;
    // Keep the time it first waited: every tick re-queues what still finds no server.
    if (req.queued_at == clock_type::time_point{})
      req.queued_at = clock_type::now();
    st.waiting.push_back(std::move(req));
    return;
  }
  if (st.stalled && st.waiting.empty()) {
    st.stalled = false;
    get_logger("load_balancer")->info("stage {}: requests flow again", st.cfg.stage);
  }
  if (policy::asks(st.cfg.trainer.attempts, req.history) && st.doors.count(*pick) > 0)
    ask_door(self, std::move(req), *pick);
  else
    send_attempt(self, std::move(req), *pick);
}

void flush_waiting(self_ptr self) {
  auto waiting = std::move(self->state.waiting);
  self->state.waiting.clear();
  for (auto& req : waiting)
    dispatch(self, std::move(req));
}

/// Fails requests that waited too long for any server, then retries the rest
/// (a ban may have ended since).
void on_tick(self_ptr self) {
  auto& st = self->state;
  const auto limit =
      std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(st.cfg.trainer.no_server_wait_s));
  const auto now = clock_type::now();
  while (!st.waiting.empty() && now - st.waiting.front().queued_at > limit) {
    deliver_error(self, st.waiting.front(),
                  make_error(errc::NO_SERVER, "stage " + std::to_string(st.cfg.stage) + " had no eligible server for " +
                                                  std::to_string(st.cfg.trainer.no_server_wait_s) + " s"));
    st.waiting.pop_front();
  }
  flush_waiting(self);
}

}  // namespace balancing

using namespace balancing;

caf::behavior load_balancer(self_ptr self, load_balancer_config cfg, coordinator_actor coordinator,
                            std::shared_ptr<metrics_sink> metrics) {
  auto& st = self->state;
  st.rng.seed(cfg.seed);
  st.router = policy::stage_router{cfg.trainer.router};
  st.strikes = policy::strike_book{cfg.trainer.verify_strikes};
  st.cfg = std::move(cfg);
  st.metrics = std::move(metrics);
  self->set_down_handler([self](caf::down_msg& msg) {
    for (const auto& [id, handle] : self->state.servers)
      if (handle.address() == msg.source) {
        const std::string gone = id;  // remove_server erases the map entry `id` refers to
        remove_server(self, gone, caf::to_string(msg.reason));
        return;
      }
  });
  if (self->state.cfg.bulk)
    self->state.cfg.bulk->attach(caf::actor_cast<caf::actor>(self));
  subscribe(self, coordinator);
  self->send(self, load_balancer_local::tick{});
  auto enqueue = [self](bool forward, bulk_parts& payload, int64_t samples, std::string preferred) {
    auto promise = self->make_response_promise();
    request req;
    req.history.backward = !forward;
    for (const auto& part : payload)
      req.bytes += static_cast<int64_t>(part.size());
    if (!payload.empty()) {
      req.head = std::move(payload.front());
      payload.erase(payload.begin());
    }
    req.data = shared_parts(std::move(payload));
    req.history.samples = static_cast<double>(samples);
    req.history.preferred = std::move(preferred);
    req.promise = promise;
    if (forward && self->state.cfg.verified)
      self->state.cfg.verified->forward_samples.fetch_add(samples, std::memory_order_relaxed);
    dispatch(self, std::move(req));
    return promise;
  };
  return {
      [enqueue](forward_atom, bulk_parts& payload, int64_t samples) { return enqueue(true, payload, samples, {}); },
      [enqueue](backward_atom, bulk_parts& payload, int64_t samples, std::string& preferred) {
        return enqueue(false, payload, samples, std::move(preferred));
      },
      [self](membership_atom, const encoded<proto::membership_update>& bytes) {
        const auto me = "trainer " + self->state.cfg.trainer_id + " stage " + std::to_string(self->state.cfg.stage);
        if (sent_by(self, self->state.coordinator, me, "coordinator", "membership update") &&
            sent_as(self, role_coordinator, me, "membership update"))
          on_membership(self, bytes);
      },
      // A restarted coordinator: the servers it knows arrive as JOINs again;
      // those still connected here are kept as they are.
      [self](coordinator_changed& c) { subscribe(self, c.coordinator); },
      [self](chunk_atom, uint64_t transfer_id, const std::string& piece) {
        (void)self->state.chunks.add(caf::actor_cast<caf::actor_addr>(self->current_sender()), transfer_id, piece,
                                     clock_type::now());  // a refusal fails the reply's finish()
      },
      // Local messages (messages/local.hpp): no peer can send these.
      [self](bulk_delivery& d) { self->state.inbox.arrived(d.key, std::move(d.parts), clock_type::now()); },
      [self](bulk_expired e) { self->state.inbox.expire(e.key); },
      [self](load_balancer_local::tick) {
        on_tick(self);
        retry_unreachable(self);
        self->delayed_send(self, std::chrono::seconds(1), load_balancer_local::tick{});
      },
  };
}

caf::expected<proto::forward_reply> forward_blocking(caf::actor_system& sys, const caf::actor& balancer,
                                                     proto::forward_request req, int64_t samples,
                                                     caf::timespan deadline) {
  caf::scoped_actor self{sys};
  caf::expected<proto::forward_reply> out{caf::error{}};
  auto replied = [&](bulk_parts& parts, const std::string& /*server*/, int32_t /*attempts*/) {
    out = decode_parts<proto::forward_reply>(std::move(parts), "forward_reply");
  };
  self->request(balancer, deadline, forward_atom::value, encode_parts(req), samples)
      .receive(replied, [&](caf::error& err) { out = std::move(err); });
  return out;
}

}  // namespace swarm
