// A trainer's in-flight microbatches (swarm's actors/trainer + load_balancer):
// each worker runs one microbatch at a time through every stage forward and
// back, choosing a server per stage with the trainer's policy::stage_router
// (the same object swarm's load balancer holds), re-sending on down, leaving
// and timeout as swarm does, and counting issued = completed + dropped.
#include <algorithm>
#include <optional>
#include <cmath>
#include <mutex>

#include "sim/world.hpp"

namespace swarm::sim {

namespace {

enum class outcome { done, dropped };

/// The server of `h`'s next attempt (policy::next_server, as swarm's load
/// balancer), or empty after waiting `no_server_wait` for one.
std::string choose(world& w, trainer_state& t, int stage, const policy::attempt_history& h) {
  auto& router = t.routers[static_cast<size_t>(stage)];
  auto& pin = t.pins[static_cast<size_t>(stage)];
  auto serving = [&] {
    std::vector<std::string> names;
    for (peer* p : w.serving(stage))
      names.push_back(p->name);
    return names;
  };
  const double give_up = w.now() + w.cfg.trainer.no_server_wait_s;
  for (;;) {
    const double now = w.now();
    if (auto pick = policy::next_server(w.cfg.trainer.attempts, h, router, pin, now, t.rng, serving))
      return *pick;
    if (now >= give_up)
      return {};
    // Until a server joins the stage, or a second passes (bans expire).
    std::unique_lock lock(*w.joined_mutex);
    w.server_joined[static_cast<size_t>(stage)]->wait_until(lock, std::min(now + 1.0, give_up));
  }
}

peer* find_peer(world& w, const std::string& name) {
  // "s<index>.<life>"
  const auto dot = name.find('.');
  const auto index = static_cast<size_t>(std::stoul(name.substr(1, dot - 1)));
  peer& p = w.peers[index];
  return p.name == name && p.state != peer::off ? &p : nullptr;
}

/// Sends `r` (attempt `id`, `bytes` on the wire) to `p` and waits for its
/// reply on `box` until `deadline`: the reply, a `down` one when its server
/// died with the reply on its way, or nullopt when the deadline passed.
std::optional<reply> send_and_wait(world& w, peer& p, request* r, s4u::Mailbox* box, uint64_t id, double deadline,
                                   double bytes) {
  // Sent by this worker (not detached: SimGrid 3.32 scans one list of all
  // detached activities at every completion); it returns once the bytes are
  // on the server's machine, queued for the server.
  try {
    p.inbox->put(r, static_cast<uint64_t>(bytes), std::max(deadline - w.now(), 1e-9));
  } catch (const simgrid::TimeoutException&) {
    delete r;  // never delivered
    return std::nullopt;
  }
  for (;;) {
    const double left = deadline - w.now();
    reply* rep = nullptr;
    try {
      rep = left > 0 ? box->get<reply>(left) : nullptr;
    } catch (const simgrid::TimeoutException&) {
    } catch (const simgrid::NetworkFailureException&) {
      return reply{id, reply::down};  // its server died while the reply was on its way
    }
    if (!rep)
      return std::nullopt;
    const reply got = *rep;
    delete rep;
    if (got.attempt == id)
      return got;  // others are answers to attempts given up on
  }
}

/// One-way latency from t's host to p's (SimGrid's route), looked up once per pair.
double latency(trainer_state& t, const peer& p) {
  double& l = t.latency_s[static_cast<size_t>(p.index)];
  if (l < 0) {
    std::vector<s4u::Link*> links;
    l = 0;
    t.host->route_to(p.host, links, &l);
  }
  return l;
}

/// A re-send of `op` at `to` after the attempt that failed at `from`.
void emit_reroute(world& w, const trainer_state& t, int stage, const char* op, const std::string& from,
                  const std::string& to, const std::string& why) {
  w.emit("reroute",
         {{"stage", int64_t{stage}},
          {"trainer", t.name},
          {"op", std::string(op)},
          {"from", from},
          {"to", to},
          {"reason", why}},
         "trainer");
}

/// Sends the request of one attempt to `p` (its ticket from an ask, if any,
/// `delay_s` for the asks' round trips, `sent` when it leaves after them) and
/// waits for its reply until the timeout: the reply, or nullopt (timed out).
std::optional<reply> send_attempt(world& w, trainer_state& t, work_books& books, s4u::Mailbox* box, peer& p, int stage,
                                  bool backward, uint64_t ticket, double delay_s, double sent, bool verify = false) {
  const auto& c = w.costs[static_cast<size_t>(stage)];
  const double timeout = backward ? w.cfg.trainer.backward_timeout_s : w.cfg.trainer.forward_timeout_s;
  const uint64_t id = t.next_attempt++;
  const auto kind = backward ? request::backward : request::forward;
  const double reply_bytes = backward ? c.backward_out_bytes : c.forward_out_bytes;
  auto* r = new request{kind, stage, p.epoch, w.cfg.model.microbatch, reply_bytes, box, id};
  r->books = verify ? nullptr : &books;
  r->verify = verify;
  r->ticket = ticket;
  r->delay_s = delay_s;
  if (!verify)
    books.attempt = id;
  r->commit_by = sent + (1 - w.cfg.trainer.commit_grace) * timeout;
  // The trainer's CPU per request (its codec, messages), measured by
  // scripts/calibrate.sh on this machine: charged where it competes, on the
  // local platform's one machine.
  if (w.cfg.platform == "local" && w.cal.trainer_s_per_request > 0)
    s4u::this_actor::exec_init(w.cal.trainer_s_per_request)->set_host(t.cpu)->wait();
  p.waiters.emplace_back(box, id);
  auto answer = send_and_wait(w, p, r, box, id, sent + timeout, backward ? c.backward_in_bytes : c.forward_in_bytes);
  auto& ws = p.waiters;
  ws.erase(std::remove(ws.begin(), ws.end(), std::make_pair(box, id)), ws.end());
  return answer;
}

/// Books the end of an attempt at `name`, sent at `sent`, that got `answer`
/// (nullopt: timed out), and tells the router: empty when it was answered,
/// else why it failed ("timeout", "down" or "leaving").
std::string end_attempt(world& w, trainer_state& t, work_books& books, int stage, bool backward,
                        const std::string& name, double sent, const std::optional<reply>& answer) {
  const auto microbatch = static_cast<double>(w.cfg.model.microbatch);
  const char* op = backward ? "backward" : "forward";
  auto& router = t.routers[static_cast<size_t>(stage)];
  const bool timed_out = !answer;
  const reply::status_t status = answer ? answer->status : reply::down;
  const double took = w.now() - sent;
  w.books.attempt_over(books, timed_out               ? attempt_end::timed_out
                              : status == reply::ok   ? attempt_end::accepted
                              : status == reply::down ? attempt_end::down
                                                      : attempt_end::leaving);
  if (timed_out) {
    router.on_timeout(name, microbatch, backward, took);
    w.emit(
        "timeout",
        {{"stage", int64_t{stage}}, {"trainer", t.name}, {"server", name}, {"op", std::string(op)}, {"seconds", took}},
        "trainer");
    return "timeout";
  }
  if (status == reply::ok) {
    router.on_success(name, microbatch, backward, took, answer->served_s);
    return {};
  }
  if (status == reply::down) {
    const double ban = router.ban(name, w.now());
    w.emit("ban",
           {{"stage", int64_t{stage}},
            {"trainer", t.name},
            {"server", name},
            {"seconds", ban},
            {"reason", std::string("down")}},
           "trainer");
  }
  // leaving: re-sent elsewhere without a ban, as swarm does.
  return status == reply::down ? "down" : "leaving";
}

/// One stage call with retries; the server that answered, or empty (dropped).
std::string call(world& w, trainer_state& t, work_books& books, s4u::Mailbox* box, int stage, bool backward,
                 const std::string& preferred) {
  const char* op = backward ? "backward" : "forward";
  const auto& attempts = w.cfg.trainer.attempts;
  policy::attempt_history h;
  h.backward = backward;
  h.samples = static_cast<double>(w.cfg.model.microbatch);
  h.preferred = preferred;
  std::string last, why = "down";
  double asking_s = 0;  // round trips of the asks since the last request sent
  while (policy::attempts_left(attempts, h)) {
    const bool ask = policy::asks(attempts, h);
    const std::string name = choose(w, t, stage, h);
    if (name.empty())
      break;
    peer* p = find_peer(w, name);
    auto& router = t.routers[static_cast<size_t>(stage)];
    if (!p) {  // gone between the routers' update and now
      policy::on_ended(h, router, name);
      ++h.attempts;
      router.remove(name);
      last = name;
      why = "down";
      continue;
    }
    // Ask first (policy::admission): a busy server costs a round trip of a
    // few bytes, not the request's tensors. Static routing has nowhere else to
    // go. Modelled without messages (as messages, asks made a run 2.4x
    // slower): each door decides as its ask leaves, and the request, sent at
    // once, is ready at its server only after the asks' round trips
    // (request::delay_s), as if it had left after them.
    uint64_t ticket = 0;
    std::optional<reply> answer;  // set by an ask that ended the attempt (leaving)
    if (ask) {
      asking_s += 2 * latency(t, *p);
      if (p->state != peer::serving || p->stage != stage) {
        answer = reply{0, reply::leaving};
      } else if (const auto grant = p->admission.grant(w.now())) {
        ticket = *grant;
      } else {
        policy::on_busy(h, router, name);  // not an attempt: no server was at fault
        ++t.busy;                          // counted, not an event: ~1 per call
        continue;
      }
    }
    const double sent = w.now() + asking_s;  // when it would leave, after its asks
    if (!answer) {                           // granted, or not asked
      if (h.attempts > 0) {                  // a re-send: after the attempt that failed at `last`
        ++t.retries;
        ++t.reroutes;
        emit_reroute(w, t, stage, op, last, name, why);
      }
      answer = send_attempt(w, t, books, box, *p, stage, backward, ticket, asking_s, sent);
      asking_s = 0;
    }
    // Else the ask found its server gone from the stage: that is this attempt's end.
    last = name;
    policy::on_ended(h, router, name);
    ++h.attempts;
    const std::string failed = end_attempt(w, t, books, stage, backward, name, sent, answer);
    if (failed.empty())
      return name;
    why = failed;
  }
  w.emit("dropped",
         {{"trainer", t.name},
          {"stage", int64_t{stage}},
          {"op", std::string(op)},
          {"reason", std::string("no server answered in max-retries attempts")}},
         "trainer");
  return {};
}

/// A second (or third) opinion of a forward of `stage` from a server none of
/// `asked` (swarm's load balancer: one attempt chain that never falls back to
/// them): the server that answered and whether it lies, or nullopt.
std::optional<std::pair<std::string, bool>> opinion(world& w, trainer_state& t, s4u::Mailbox* box, int stage,
                                                    const std::vector<std::string>& asked) {
  policy::attempt_history h;
  h.samples = static_cast<double>(w.cfg.model.microbatch);
  h.tried = asked;
  auto& router = t.routers[static_cast<size_t>(stage)];
  work_books unused;  // its compute is booked as verification's (ledger::verified)
  while (policy::attempts_left(w.cfg.trainer.attempts, h)) {
    auto pick = policy::next_server(w.cfg.trainer.attempts, h, router, t.pins[static_cast<size_t>(stage)], w.now(),
                                    t.rng, [] { return std::vector<std::string>{}; });
    if (!pick || std::find(asked.begin(), asked.end(), *pick) != asked.end())
      return std::nullopt;
    peer* p = find_peer(w, *pick);
    ++h.attempts;
    policy::on_ended(h, router, *pick);
    if (!p)
      continue;
    const bool liar = p->liar;
    const double sent = w.now();
    auto answer = send_attempt(w, t, unused, box, *p, stage, false, 0, 0, sent, true);
    if (answer && answer->status == reply::ok) {
      router.on_success(*pick, h.samples, false, w.now() - sent, answer->served_s);
      return std::make_pair(*pick, liar);
    }
  }
  return std::nullopt;
}

/// `name` banned on verification's charges (the last one trainer t's): out of
/// its stage for every trainer, as swarm's coordinator takes it out.
void ban(world& w, trainer_state& t, int stage, const std::string& name) {
  w.forget(stage, name);
  peer* p = find_peer(w, name);
  if (!p || p->banned)
    return;
  p->banned = true;
  p->banned_at = w.now();
  ++(p->liar ? w.total.liar_bans : w.total.false_bans);
  w.emit("verify_ban", {{"stage", int64_t{stage}}, {"trainer", t.name}, {"server", name}, {"liar", p->liar}},
         "trainer");
}

/// Verifies trainer `ti`'s forward of `stage` that `first` answered (whether
/// it lies: `first_lies`), beside the pipeline as swarm's load balancer does:
/// a second server, a third on a disagreement, the minority charged.
void verify(int ti, int stage, std::string first, bool first_lies) {
  auto& w = the_world();
  auto& t = w.trainers[static_cast<size_t>(ti)];
  int slot = t.verify_boxes;
  if (t.free_verify_boxes.empty()) {
    ++t.verify_boxes;
  } else {
    slot = t.free_verify_boxes.back();
    t.free_verify_boxes.pop_back();
  }
  auto* box = s4u::Mailbox::by_name(t.name + "/verify" + std::to_string(slot));
  box->set_receiver(s4u::Actor::self());
  std::vector<std::string> asked{first};
  std::vector<bool> lies{first_lies};
  // Honest answers agree; a liar's agrees with nothing (its noise is its own).
  const auto settle = [&] {
    ++t.verify_requests;
    auto got = opinion(w, t, box, stage, asked);
    if (!got)
      return false;
    asked.push_back(got->first);
    lies.push_back(got->second);
    return true;
  };
  if (settle() && !lies[0] && !lies[1]) {
    ++t.agreed[asked[0]];
    ++t.agreed[asked[1]];
  } else if (asked.size() == 2) {
    ++t.verify_disagreed;
    if (settle()) {
      std::vector<std::vector<double>> d(3, std::vector<double>(3, 0.0));
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 3; ++j)
          d[i][j] = i != j && (lies[i] || lies[j]) ? 1.0 : 0.0;
      const auto wrong = policy::charged(d, 0.5);
      for (size_t i = 0; i < 3 && !wrong.empty(); ++i)
        if (std::find(wrong.begin(), wrong.end(), i) == wrong.end())
          ++t.agreed[asked[i]];
      for (size_t i : wrong) {
        ++t.verify_strikes;
        if (w.strikes.charge(asked[i]))  // counted over every trainer, as swarm's coordinator does
          ban(w, t, stage, asked[i]);
      }
    } else {
      ++t.verify_inconclusive;
    }
  } else if (asked.size() < 2) {
    ++t.verify_inconclusive;
  }
  t.free_verify_boxes.push_back(slot);
}

outcome run_microbatch(world& w, trainer_state& t, work_books& books, s4u::Mailbox* box) {
  const int stages = w.cfg.stages;
  std::vector<std::string> used(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    used[static_cast<size_t>(s)] = call(w, t, books, box, s, false, {});
    if (used[static_cast<size_t>(s)].empty())
      return outcome::dropped;
    ++t.forwards;
    // As swarm's load balancer: a server on probation has every answer verified.
    const auto passed = t.agreed.find(used[static_cast<size_t>(s)]);
    const bool probation =
        policy::on_probation(passed == t.agreed.end() ? 0 : passed->second, w.cfg.trainer.verify_probation);
    const double p = w.cfg.trainer.verify_fraction > 0 && probation ? 1.0 : w.cfg.trainer.verify_fraction;
    if (p > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(t.rng) < p) {
      const peer* first = find_peer(w, used[static_cast<size_t>(s)]);
      s4u::Actor::create("verify", t.host, verify, t.index, s, used[static_cast<size_t>(s)], first && first->liar);
    }
  }
  for (int s = stages - 2; s >= 0; --s)
    if (call(w, t, books, box, s, true, used[static_cast<size_t>(s)]).empty())
      return outcome::dropped;
  return outcome::done;
}

void count_step(world& w, trainer_state& t) {
  const int64_t batch = w.cfg.server.batch_size;  // one --batch-size for servers and trainers, as in swarm
  while (t.samples >= t.next_step_samples + batch) {
    t.next_step_samples += batch;
    ++t.steps;
    const double took = std::max(w.now() - t.step_started, 1e-9);
    t.step_started = w.now();
    w.emit("step",
           {{"trainer", t.name},
            {"step", t.steps},
            {"samples", t.samples},
            {"tokens", t.samples * w.cfg.model.seq_len},
            {"tokens_per_s", static_cast<double>(batch * w.cfg.model.seq_len) / took},
            {"elapsed_s", w.now()},
            {"issued", t.issued},
            {"completed", t.completed},
            {"dropped", t.dropped},
            {"retries", t.retries}},
           "trainer");
  }
}

}  // namespace

void trainer_worker(int trainer, int slot) {
  auto& w = the_world();
  auto& t = w.trainers[static_cast<size_t>(trainer)];
  auto* box = s4u::Mailbox::by_name(t.name + "/" + std::to_string(slot));
  box->set_receiver(s4u::Actor::self());
  if (w.cfg.ramp_s > 0)
    s4u::this_actor::sleep_for(std::uniform_real_distribution<double>(0, w.cfg.ramp_s)(t.rng));
  auto& books = t.workers[static_cast<size_t>(slot)];
  for (;;) {
    ++t.issued;
    const bool done = run_microbatch(w, t, books, box) == outcome::done;
    w.books.microbatch_over(books, done, w.now());
    if (done) {
      ++t.completed;
      t.samples += w.cfg.model.microbatch;
      count_step(w, t);
    } else {
      ++t.dropped;
    }
  }
}

}  // namespace swarm::sim
