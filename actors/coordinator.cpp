#include "actors/coordinator.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "base/log.hpp"
#include "messages/local.hpp"
#include "messages/wire.hpp"
#include "net/peer_roles.hpp"
#include "net/tls.hpp"

namespace swarm::coordinator_local {
struct summary_due {};  ///< its own timer: a summary line of the status board, every 30 s
}  // namespace swarm::coordinator_local

SWARM_LOCAL_MESSAGE(swarm::coordinator_local::summary_due)

namespace swarm {

namespace {

using self_ptr = coordinator_actor::stateful_pointer<coordinator_state>;

void notify(self_ptr self, const proto::register_server& reg, proto::membership_update::change kind) {
  const auto update = wrap(membership_of(reg, kind));
  for (const auto& [addr, sub] : self->state.subscribers)
    if (sub.second == reg.stage())
      caf::unsafe_send_as(self, sub.first, membership_atom::value, update);
}

/// Admits a server whose registration passed every check: the stage's peers,
/// the averager and the rebalancer hear of it.
encoded<proto::register_reply> admit(self_ptr self, const proto::register_server& reg,
                                     const encoded<proto::register_server>& bytes, const stage_actor& server,
                                     const caf::actor& round_peer) {
  self->monitor(server);
  self->state.servers[server.address()] = reg;
  self->send(self->state.averaging, join_atom::value, bytes, caf::actor_cast<caf::actor>(server), round_peer);
  self->send(self->state.rebalancing, join_atom::value, bytes, caf::actor_cast<caf::actor>(server));
  get_logger("coordinator")
      ->debug("stage {}: server {} joined at {}:{}", reg.stage(), reg.server_id(), reg.host(), reg.port());
  self->state.metrics->emit("server_join", {{"stage", int64_t{reg.stage()}},
                                            {"server", reg.server_id()},
                                            {"host", reg.host()},
                                            {"port", int64_t{reg.port()}}});
  notify(self, reg, proto::membership_update::JOIN);
  proto::register_reply rep;
  rep.set_num_stages(static_cast<uint32_t>(self->state.cfg.num_stages));
  rep.set_term(term_of(self->state.cfg.leader));
  return wrap(rep);
}

/// The refusal of a server whose advertised address does not lead back to it.
caf::error unreachable(const proto::register_server& reg, const std::string& why) {
  return make_error(errc::BAD_CONFIG,
                    "the coordinator cannot reach server " + reg.server_id() + " at " + reg.host() + ":" +
                        std::to_string(reg.port()) + ", the address it registered (" + why +
                        "): trainers and its stage's peers could not either. Start it with --host set to an "
                        "address the other machines reach (not a loopback one across machines) and its port open");
}

caf::result<encoded<proto::register_reply>> on_register(self_ptr self, const encoded<proto::register_server>& bytes,
                                                        const stage_actor& server, const caf::actor& round_peer) {
  auto log = get_logger("coordinator");
  auto reg = decode(bytes);
  if (!reg) {
    log->warn("rejected registration: {}", describe(reg.error()));
    return reg.error();
  }
  if (auto err = check_registration(*reg, self->state.cfg.num_stages, self->state.cfg.config_hash,
                                    self->state.cfg.tokenizer)) {
    log->warn("rejected registration of {}: {}", reg->server_id(), describe(err));
    return err;
  }
  if (!server)
    return make_error(errc::BAD_REQUEST, "register_server without a server handle");
  if (self->state.evicted.count(server.address()) > 0)
    return make_error(errc::BAD_REQUEST, "server " + reg->server_id() +
                                             " was evicted: its round results disagreed with its stage's majority");
  if (auto b = self->state.banned.find(reg->server_id());
      b != self->state.banned.end() && b->second.until > unix_seconds())
    return make_error(errc::BAD_REQUEST, "server " + reg->server_id() + " is banned for another " +
                                             std::to_string(static_cast<int64_t>(b->second.until - unix_seconds())) +
                                             " s: " + b->second.why);
  if (server.node() == self->node())
    return admit(self, *reg, bytes, server, round_peer);  // in this process: no address to check
  // Dial the address it gave, as a trainer would: it must lead to the very
  // process that registered (a loopback --host from another machine leads
  // nowhere, or to someone else), else nobody could use it and its stage's
  // rounds would wait on it. Refused only on a definite answer: another
  // process there, or nothing listening. A dial that times out proves nothing
  // (a loaded machine took over 5 s for a TLS handshake on loopback): admitted,
  // said loudly, with the trainers' stage-lag warning as the backstop.
  auto rp = self->make_response_promise<encoded<proto::register_reply>>();
  self->request(dialer(self->system()), std::chrono::seconds(8), caf::connect_atom::value, reg->host(),
                static_cast<uint16_t>(reg->port()))
      .then(
          [self, rp, reg = *reg, bytes, server, round_peer](const caf::node_id& node, caf::strong_actor_ptr&,
                                                            const std::set<std::string>&) mutable {
            if (node == server.node()) {
              rp.deliver(admit(self, reg, bytes, server, round_peer));
              return;
            }
            auto err = unreachable(reg, "another process answers there");
            get_logger("coordinator")->warn("rejected registration: {}", describe(err));
            rp.deliver(std::move(err));
          },
          [self, rp, reg = *reg, bytes, server, round_peer](caf::error& failed) mutable {
            const bool refused = failed.category() == caf::atom("system") &&
                                 failed.code() == static_cast<uint8_t>(caf::sec::cannot_connect_to_node);
            if (!refused) {
              get_logger("coordinator")
                  ->warn(
                      "stage {}: could not confirm that server {} is reachable at {}:{} ({}); admitted. If "
                      "trainers cannot reach it either, check its --host and firewall",
                      reg.stage(), reg.server_id(), reg.host(), reg.port(), self->system().render(failed));
              rp.deliver(admit(self, reg, bytes, server, round_peer));
              return;
            }
            auto err = unreachable(reg, self->system().render(failed));
            get_logger("coordinator")->warn("rejected registration: {}", describe(err));
            rp.deliver(std::move(err));
          });
  return rp;
}

caf::result<std::string> on_subscribe(self_ptr self, const encoded<proto::subscribe>& bytes) {
  auto sub = decode(bytes);
  if (!sub)
    return sub.error();
  if (static_cast<int>(sub->stage()) >= self->state.cfg.num_stages)
    return make_error(errc::UNKNOWN_STAGE, "subscribe to stage " + std::to_string(sub->stage()) + " of " +
                                               std::to_string(self->state.cfg.num_stages));
  if (sub->config_hash() != self->state.cfg.config_hash)
    return model_mismatch("trainer", sub->tokenizer(), self->state.cfg.tokenizer);
  auto who = caf::actor_cast<caf::actor>(self->current_sender());
  self->monitor(who);
  self->state.subscribers[who.address()] = {who, sub->stage()};
  for (const auto& [addr, reg] : self->state.servers)
    if (reg.stage() == sub->stage())
      caf::unsafe_send_as(self, who, membership_atom::value, wrap(membership_of(reg, proto::membership_update::JOIN)));
  return std::string{};
}

void on_down(self_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
  st.subscribers.erase(msg.source);
  for (auto t = st.trainers.begin(); t != st.trainers.end();)
    t = t->second == msg.source ? st.trainers.erase(t) : std::next(t);
  auto it = st.servers.find(msg.source);
  if (it == st.servers.end())
    return;
  const auto reg = it->second;
  st.servers.erase(it);
  if (stopped_on_purpose(msg.reason)) {
    get_logger("coordinator")->info("stage {}: server {} stopped", reg.stage(), reg.server_id());
    st.metrics->emit("server_stop", {{"stage", int64_t{reg.stage()}}, {"server", reg.server_id()}});
  } else {
    get_logger("coordinator")
        ->warn("stage {}: server {} down ({})", reg.stage(), reg.server_id(), caf::to_string(msg.reason));
    st.metrics->emit(
        "server_down",
        {{"stage", int64_t{reg.stage()}}, {"server", reg.server_id()}, {"reason", caf::to_string(msg.reason)}});
  }
  notify(self, reg, proto::membership_update::DOWN);
}

/// The averager evicted `server`: trainers stop sending it work, and it is not admitted again.
void on_evict(self_ptr self, const caf::actor& server) {
  if (!server || !sent_from(self, self->node(), "coordinator", "averager", "eviction"))
    return;
  auto& st = self->state;
  st.evicted.insert(server.address());
  auto it = st.servers.find(server.address());
  if (it == st.servers.end())
    return;
  const auto reg = it->second;
  st.servers.erase(it);
  notify(self, reg, proto::membership_update::LEAVE);
}

/// A trainer's verification charged a server (issue #47): counted; at
/// verify_strikes out of its stage and refused for the cool-down, unless the
/// reporting process banned its share already.
void on_evidence(self_ptr self, const encoded<proto::verification_evidence>& bytes) {
  auto& st = self->state;
  auto ev = decode(bytes);
  const auto sender = self->current_sender();
  if (!ev || !sender)
    return;
  // The share is counted per process (its node), whatever trainer id it claims.
  const auto reporter = caf::to_string(sender->node());
  auto log = get_logger("coordinator");
  auto it = std::find_if(st.servers.begin(), st.servers.end(), [&](const auto& s) {
    return s.second.server_id() == ev->server_id() && s.second.stage() == ev->stage();
  });
  if (it == st.servers.end()) {
    log->info("trainer {} reported server {} of stage {}, which is not serving it (gone already)", ev->trainer_id(),
              ev->server_id(), ev->stage());
    return;
  }
  const int strikes = ++st.strikes[ev->server_id()];
  if (st.strikes.size() > 4096)  // ids made up by a hostile trainer cannot grow it without bound
    st.strikes.erase(st.strikes.begin());
  if (strikes < st.cfg.verify_strikes) {
    log->info("trainer {} charged server {} of stage {} (strike {} of {}, all trainers)", ev->trainer_id(),
              ev->server_id(), ev->stage(), strikes, st.cfg.verify_strikes);
    return;
  }
  const double now = unix_seconds();
  int64_t serving = 0;
  for (const auto& [addr, reg] : st.servers)
    serving += reg.stage() == ev->stage();
  int64_t by_trainer = 0;
  for (const auto& [id, b] : st.banned)
    by_trainer += b.reporter == reporter && b.stage == ev->stage() && b.until > now;
  const int64_t share = std::max<int64_t>(1, (serving + by_trainer) / 3);
  if (by_trainer >= share) {
    log->warn(
        "trainer {} reported server {} of stage {}; not banned: that trainer's reports banned {} of its "
        "servers already (at most a third at a time)",
        ev->trainer_id(), ev->server_id(), ev->stage(), by_trainer);
    return;
  }
  const auto reg = it->second;
  const auto handle = caf::actor_cast<caf::actor>(it->first);
  const auto why = fmt::format(
      "trainer {}'s verification: microbatch {} at step {} answered {:.3g} away from {} (tolerance {:g}), {} "
      "strikes from all trainers",
      ev->trainer_id(), ev->microbatch_id(), ev->step(), ev->distance(), fmt::join(ev->agreeing(), ", "),
      ev->tolerance(), strikes);
  st.strikes.erase(ev->server_id());
  const double cooldown = st.cfg.averaging.coordinator.ban_cooldown_s;
  st.banned[reg.server_id()] = {now + cooldown, reg.stage(), reporter, why};
  st.servers.erase(it);
  const bool last = serving == 1;
  if (last)
    log->error("stage {} has NO server left: server {} banned ({}); the stage stalls until a server joins", reg.stage(),
               reg.server_id(), why);
  else
    log->error("stage {}: server {} banned for {:.0f} s: {}", reg.stage(), reg.server_id(), cooldown, why);
  st.metrics->emit("server_banned", {{"stage", int64_t{reg.stage()}},
                                     {"server", reg.server_id()},
                                     {"trainer", ev->trainer_id()},
                                     {"step", static_cast<int64_t>(ev->step())},
                                     {"microbatch", static_cast<int64_t>(ev->microbatch_id())},
                                     {"distance", ev->distance()},
                                     {"tolerance", ev->tolerance()},
                                     {"strikes", int64_t{strikes}},
                                     {"output_hash", fmt::format("{:016x}", ev->output_hash())},
                                     {"agreed_hash", fmt::format("{:016x}", ev->agreed_hash())},
                                     {"compared", ev->what()},
                                     {"cooldown_s", cooldown},
                                     {"last_of_stage", last},
                                     {"why", why}});
  notify(self, reg, proto::membership_update::LEAVE);
  if (handle)
    self->send(st.averaging, leave_atom::value, handle);
}

/// A server leaves its stage for another: no new work for it there.
void on_leave(self_ptr self, const encoded<proto::leave_notice>& bytes) {
  auto& st = self->state;
  auto note = decode(bytes);
  auto it = st.servers.find(caf::actor_cast<caf::actor_addr>(self->current_sender()));
  if (!note || it == st.servers.end() || it->second.stage() != note->stage())
    return;
  const auto reg = it->second;
  st.servers.erase(it);
  get_logger("coordinator")
      ->info("stage {}: server {} leaves for stage {}", reg.stage(), reg.server_id(), note->to_stage());
  notify(self, reg, proto::membership_update::LEAVE);
  self->send(st.averaging, leave_atom::value, caf::actor_cast<caf::actor>(self->current_sender()));
}

caf::result<encoded<proto::placement>> on_place(self_ptr self, const encoded<proto::placement_request>& bytes) {
  auto req = decode(bytes);
  if (!req)
    return req.error();
  if (req->config_hash() != self->state.cfg.config_hash)
    return model_mismatch("server " + req->server_id(), req->tokenizer(), self->state.cfg.tokenizer);
  // Delegated: the rebalancer sees which process asks (one hold each).
  return self->delegate(self->state.rebalancing, place_atom::value, bytes);
}

/// Whether the sender may report as trainer `id`: the id is its own (its first
/// report claimed it, and it has not gone down since) and the board has room.
bool claim_trainer(self_ptr self, const std::string& id) {
  auto& trainers = self->state.trainers;
  const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto it = trainers.find(id);
  if (it != trainers.end())
    return it->second == sender;
  const bool holds_other =
      std::any_of(trainers.begin(), trainers.end(), [&](const auto& t) { return t.second == sender; });
  if (!sender || holds_other || trainers.size() >= coordinator_state::max_trainers) {
    static std::atomic<uint64_t> refused{0};
    if (const uint64_t n = worth_logging(refused))
      get_logger("coordinator")
          ->warn("refused a trainer report as '{}' from {}: {} [{} refused]", id, caf::to_string(sender),
                 holds_other ? "it reports under another id" : "too many trainers on the board", n);
    return false;
  }
  self->monitor(sender);
  trainers.emplace(id, sender);
  return true;
}

/// A trainer's report: for the status board only (it is the board's observer).
void on_report(self_ptr self, const encoded<proto::trainer_report>& bytes) {
  auto rep = decode(bytes);
  if (!rep || rep->trainer_id().empty() || !claim_trainer(self, rep->trainer_id()))
    return;
  self->state.metrics->note("trainer_report", {{"trainer", rep->trainer_id()},
                                               {"step", rep->step()},
                                               {"max_steps", rep->max_steps()},
                                               {"loss", rep->loss()},
                                               {"tokens_per_s", rep->tokens_per_s()},
                                               {"samples", rep->samples()},
                                               {"tokens", rep->tokens()},
                                               {"dropped", rep->dropped()},
                                               {"retries", rep->retries()},
                                               {"reroutes", rep->reroutes()},
                                               {"busy", rep->busy()},
                                               {"bans", rep->bans()},
                                               {"wire_bytes", rep->wire_bytes()},
                                               {"elapsed_s", rep->elapsed_s()},
                                               {"has_eval", rep->has_eval()},
                                               {"eval_step", rep->eval_step()},
                                               {"eval_loss", rep->eval_loss()},
                                               {"verify_requests", rep->verify_requests()},
                                               {"verify_samples", rep->verify_samples()},
                                               {"forward_samples", rep->forward_samples()},
                                               {"verify_disagreed", rep->verify_disagreed()},
                                               {"verify_strikes", rep->verify_strikes()},
                                               {"verify_bans", rep->verify_bans()}});
}

}  // namespace

proto::membership_update membership_of(const proto::register_server& reg, proto::membership_update::change kind) {
  proto::membership_update up;
  up.set_kind(kind);
  up.set_stage(reg.stage());
  up.set_server_id(reg.server_id());
  up.set_host(reg.host());
  up.set_port(reg.port());
  return up;
}

coordinator_actor::behavior_type coordinator(self_ptr self, coordinator_settings cfg,
                                             std::shared_ptr<metrics_sink> metrics) {
  self->state.cfg = cfg;
  self->state.metrics = std::move(metrics);
  cfg.averaging.num_stages = cfg.num_stages;
  cfg.rebalancing.num_stages = cfg.num_stages;
  cfg.averaging.leader = cfg.leader;
  cfg.rebalancing.leader = cfg.leader;
  self->state.rebalancing = self->spawn<caf::linked>(rebalancer, cfg.rebalancing, self->state.metrics);
  self->state.averaging =
      self->spawn<caf::linked>(averager, cfg.averaging, self->state.metrics, self->state.rebalancing);
  self->set_down_handler([self](caf::down_msg& msg) { on_down(self, msg); });
  handle_local(self, [self](coordinator_local::summary_due) {
    get_logger("coordinator")->info("{}", self->state.cfg.board->summary_line());
    send_later(self, std::chrono::seconds(30), coordinator_local::summary_due{});
  });
  if (cfg.board)
    send_later(self, std::chrono::seconds(30), coordinator_local::summary_due{});
  return {
      // Who may ask (net/peer_roles.hpp, with TLS): servers register, ask
      // where to serve and for their stage's peers; trainers subscribe and
      // report; the status role reads the board; anyone may ask for the
      // averager (how every node tells that the coordinator answers).
      [self](register_atom, const encoded<proto::register_server>& bytes, const stage_actor& server,
             const caf::actor& round_peer) -> caf::result<encoded<proto::register_reply>> {
        if (!sent_as(self, role_server, "coordinator", "server registration"))
          return refused_for_role("a server registration");
        return on_register(self, bytes, server, round_peer);
      },
      [self](subscribe_atom, const encoded<proto::subscribe>& bytes) -> caf::result<std::string> {
        if (!sent_as(self, role_trainer, "coordinator", "subscription"))
          return refused_for_role("a subscription");
        return on_subscribe(self, bytes);
      },
      [self](averager_atom) { return self->state.averaging; },
      [self](peers_atom, const encoded<proto::subscribe>& bytes) -> caf::result<encoded<proto::server_list>> {
        if (!sent_as(self, role_server, "coordinator", "peer list request"))
          return refused_for_role("a peer list request");
        auto sub = decode(bytes);
        if (!sub)
          return sub.error();
        proto::server_list list;
        for (const auto& [addr, reg] : self->state.servers)
          if (reg.stage() == sub->stage())
            *list.add_servers() = membership_of(reg, proto::membership_update::JOIN);
        return wrap(list);
      },
      [self](leave_atom, const encoded<proto::leave_notice>& bytes) { on_leave(self, bytes); },
      [self](place_atom, const encoded<proto::placement_request>& bytes) -> caf::result<encoded<proto::placement>> {
        if (!sent_as(self, role_server, "coordinator", "placement request"))
          return refused_for_role("a placement request");
        return on_place(self, bytes);
      },
      [self](report_atom, const encoded<proto::trainer_report>& bytes) {
        if (sent_as(self, role_trainer, "coordinator", "trainer report"))
          on_report(self, bytes);
      },
      [self](evict_atom, const caf::actor& server) { on_evict(self, server); },
      [self](evict_atom, const encoded<proto::verification_evidence>& bytes) {
        if (sent_as(self, role_trainer, "coordinator", "verification evidence"))
          on_evidence(self, bytes);
      },
      [self](status_atom, const std::string& format) -> caf::result<std::string> {
        if (!sent_as(self, role_status, "coordinator", "status request"))
          return refused_for_role("a status request");
        const auto& board = self->state.cfg.board;
        const double now = unix_seconds();
        if (!board)
          return "";
        return format == "text" ? board->text(now) : format == "prometheus" ? board->prometheus(now) : board->json(now);
      },
  };
}

}  // namespace swarm
