#include "apps/node.hpp"

#include <algorithm>
#include <csignal>
#include <iostream>
#include <random>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "actors/coordinator_client.hpp"
#include "apps/control.hpp"
#include "policy/backoff.hpp"
#include "policy/following.hpp"
#include "messages/errors.hpp"
#include "models/shape/cost_model.hpp"
#include "messages/types.hpp"
#include "net/tls.hpp"

namespace swarm {

std::atomic<bool> stop_requested{false};

void install_signal_handlers() {
  auto on_signal = [](int) { stop_requested = true; };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

namespace {

/// What the process is doing, for the stop watchdog's message.
std::atomic<const char*> phase_now{"starting"};

/// Stop watchdog: once a signal asked this process to stop, it has
/// `stop_grace` to end on its own (exit events written, actors done); a step
/// that blocks longer (a state download from a stalled peer, a connect, a
/// move) must not hold the process, so then it ends anyway.
constexpr auto stop_grace = std::chrono::seconds(5);
void start_stop_watchdog(const char* who) {
  std::thread([who] {
    while (!stop_requested)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(stop_grace);
    get_logger(who)->warn("asked to stop {} s ago while {}; exiting now", stop_grace.count(), phase_now.load());
    end_process(0);
  }).detach();
}

/// CAF settings every node shares. Heartbeats and the connection timeout are what
/// detect a hung (SIGSTOPped) peer; without them its connection never drops.
void configure(caf::actor_system_config& sys_cfg, const app_config& cfg) {
  sys_cfg.load<caf::io::middleman>();
  if (!cfg.net.tls_ca.empty()) {
    // Every link of the process goes through the openssl module: its
    // middleman dials (tls.hpp: dialer) and publishes; nothing is published
    // in plain, which would share the same BASP broker.
    sys_cfg.load<caf::openssl::manager>();
    sys_cfg.openssl_cafile = cfg.net.tls_ca;
    sys_cfg.openssl_certificate = cfg.net.tls_cert;
    sys_cfg.openssl_key = cfg.net.tls_key;
  }
  register_types(sys_cfg);
  sys_cfg.set("middleman.heartbeat-interval", seconds(cfg.net.heartbeat_s));
  sys_cfg.set("middleman.connection-timeout", seconds(cfg.net.connection_timeout_s));
  // Compute runs on detached actors; the scheduler only shuffles messages.
  // Its default work stealing polls an empty queue ~600 times (500 of them
  // 50 us sleeps) before it waits on a condition variable: with 4-6 processes
  // on 2 cores that polling took half the CPU (52% system time) and halved
  // the tiny cluster's tokens/s. A shared queue sleeps at once.
  sys_cfg.set("scheduler.max-threads", size_t{2});
  sys_cfg.set("scheduler.policy", caf::atom("sharing"));
  sys_cfg.set("logger.console", caf::atom("none"));
}

/// The soft limit on open descriptors raised to the hard one: the usual soft
/// 1,024 would be spent by a crowd of idle HTTP or bulk clients before any of
/// the process's own limits (--bulk-budget, the HTTP server's 2,048) apply.
void raise_descriptor_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

/// What to check when a dial failed in its handshake: in this project that
/// is almost always the two ends disagreeing on TLS, which CAF reports only as
/// disconnect_during_handshake. Empty for other errors.
std::string tls_hint(const std::string& error, bool tls) {
  if (error.find("handshake") == std::string::npos)
    return {};
  return tls ? " (if the coordinator uses TLS, its certificate must come from the same --tls-ca; if it does not, "
               "no node may)"
             : " (does the coordinator use TLS? then this node needs --tls-ca, --tls-cert and --tls-key too)";
}

}  // namespace

/// Nothing is left to do by then: metrics lines are written as they happen,
/// checkpoints are fsynced, and the kernel closes the sockets, which peers see
/// as this process going down. (CAF 0.17.6's destructor waited forever for a
/// detached actor in 3 of 7 clusters stopped with SIGTERM.)
void end_process(int code) {
  checkpoint_store::abandon_partial_write();
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

int exit_code_of(const caf::error& reason) { return !reason || stopped_on_purpose(reason) ? 0 : 1; }

std::optional<checkpoint_settings> checkpoints_of(const app_config& cfg, const char* who) {
  checkpoint_settings out;
  if (cfg.checkpoint.dir.empty())
    return out;
  auto store = std::make_shared<checkpoint_store>(cfg.checkpoint.dir, cfg.checkpoint.keep);
  if (auto err = store->check_all(static_cast<uint32_t>(cfg.stages), cfg.model.hash())) {
    std::cerr << "swarm: " << who << ": " << describe(err) << "\n";
    return std::nullopt;
  }
  out.store = std::move(store);
  out.every_steps = cfg.checkpoint.every_steps;
  out.every_s = cfg.checkpoint.every_s;
  return out;
}

node::node(const app_config& cfg, const std::string& tag, const char* who, const char* metrics_role)
    : cfg_(cfg), who_(who) {
  setup_logging(tag, cfg.log_level);
  metrics_ = open_metrics(metrics_role ? cfg.metrics : std::string{}, metrics_role ? metrics_role : "");
}

caf::actor_system& node::start() {
  raise_descriptor_limit();
  configure(sys_cfg_, cfg_);
  sys_ = std::make_unique<caf::actor_system>(sys_cfg_);
  start_stop_watchdog(who_);
  if (!cfg_.net.control.empty()) {
    etcd_ = control::client_of(cfg_, std::chrono::milliseconds(500));
    newest_term_ = control::start_leader_watch(control::endpoints_of(cfg_));
  }
  return *sys_;
}

void node::phase(const char* what) { phase_now = what; }

/// Each attempt is bounded: CAF's own remote_actor waits forever on a
/// connection whose handshake never completes. `lost`: a coordinator that
/// went down. The same address can come back for two reasons: CAF's middleman
/// still hands out the dead one right after the connection dropped, or only
/// the link dropped (this process or the coordinator was stopped longer than
/// the connection timeout) and the coordinator lives on. A timed request tells
/// them apart.
caf::expected<std::string> node::leader_address() {
  auto found = control::find_leader(*etcd_);
  if (!found)
    return make_error(errc::PEER_GONE, "etcd at " + cfg_.net.control + ": " + describe(found.error()));
  if (!*found)
    return make_error(errc::PEER_GONE, "no coordinator leads now (etcd at " + cfg_.net.control + ")");
  found_term_ = (*found)->term;
  return (*found)->address;
}

caf::expected<coordinator_actor> node::dial_coordinator(const std::string& fixed, const caf::actor_addr& lost) {
  const int64_t lost_term = lost ? term_ : 0;
  const double wait_s = cfg_.net.coordinator_wait_s;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(wait_s));
  const bool tls = sys_->has_openssl_manager();
  bool told = false;  // a person should not wait the whole time to learn that it is trying
  for (;;) {
    caf::expected<coordinator_actor> handle{caf::error{}};
    auto address = etcd_ ? leader_address() : caf::expected<std::string>{fixed};
    const auto hp = address ? split_host_port(*address) : std::nullopt;  // --coordinator: validated by parse_config
    // etcd still naming the lost leader: it may live on (only the link
    // dropped), or be dead until its lease expires, its machine maybe gone:
    // a short try each time, so that its successor is not kept waiting.
    const bool lost_one = etcd_ && lost && found_term_ == lost_term;
    if (!address)
      handle = std::move(address.error());
    else if (!hp)
      handle = make_error(errc::BAD_REQUEST, "etcd names the leader at '" + *address + "', not HOST:PORT");
    else if (auto found =
                 dial(*sys_, hp->first, hp->second, lost_one ? std::chrono::seconds(1) : std::chrono::seconds(5)))
      handle = caf::actor_cast<coordinator_actor>(std::move(*found));
    else
      handle = std::move(found.error());
    if (handle && lost && handle->address() == lost &&
        !answers(*sys_, *handle,
                 lost_one ? caf::timespan{std::chrono::milliseconds(500)} : caf::timespan{std::chrono::seconds(3)}))
      handle = make_error(errc::PEER_GONE, "the lost coordinator is still cached and does not answer");
    if (handle && etcd_)
      term_ = found_term_;
    const std::string address_text = etcd_ ? "(the leader through etcd at " + cfg_.net.control + ")" : fixed;
    const bool out_of_time = std::chrono::steady_clock::now() > deadline || stop_requested;
    // A stop while dialing is no failure to report; nor is a lost coordinator
    // not back yet (run_with_coordinator says so, at most every few seconds).
    if (!handle && out_of_time && !stop_requested && !lost)
      std::cerr << "swarm: " << who_ << " cannot reach coordinator " << address_text << ": " << describe(handle.error())
                << tls_hint(describe(handle.error()), tls) << "\n";
    else if (!handle && !lost && !told) {
      told = true;
      get_logger(who_)->warn(
          "cannot reach the coordinator at {} yet: {}{}; trying again for up to {:g} s (--coordinator-wait)",
          address_text, describe(handle.error()), tls_hint(describe(handle.error()), tls), wait_s);
    }
    if (handle || out_of_time)
      return handle;
    // Following etcd: a successor is elected the moment the lost leader's lease ends.
    std::this_thread::sleep_for(std::chrono::milliseconds(etcd_ ? 50 : 200));
  }
}

coordinator_actor node::connect(const std::string& address) {
  phase("connecting to the coordinator");
  auto coord = dial_coordinator(address, {});
  if (!coord)
    end(1);
  return *coord;
}

std::shared_ptr<bulk_endpoint> node::bulk() {
  if (bulk_)
    return bulk_;
  bulk_options opts;
  opts.host = cfg_.server.host;
  opts.port = static_cast<uint16_t>(cfg_.server.bulk_port);
  opts.max_frame = largest_payload_bytes({cfg_.model, cfg_.stages, cfg_.trainer.compression});
  // Never below one largest frame: a smaller budget would refuse peers' own frames.
  opts.max_pending =
      std::max(opts.max_frame, cfg_.net.bulk_budget_mib > 0 ? static_cast<uint64_t>(cfg_.net.bulk_budget_mib) << 20
                                                            : std::max(uint64_t{256} << 20, 4 * opts.max_frame));
  if (!cfg_.net.tls_ca.empty()) {
    auto tls = tls_context::load({cfg_.net.tls_ca, cfg_.net.tls_cert, cfg_.net.tls_key});
    if (!tls) {  // checked at start-up already (main.cpp); a file changed since
      std::cerr << "swarm: " << who_ << ": " << describe(tls.error()) << "\n";
      end(1);
    }
    opts.tls = *tls;
  }
  auto started = bulk_endpoint::start(*sys_, opts);
  if (!started) {
    std::cerr << "swarm: " << who_ << ": " << describe(started.error()) << "\n";
    end(1);
  }
  bulk_ = *started;
  get_logger(who_)->info("bulk connections on {}:{} (frames up to {} MiB, {} MiB being received at once)", opts.host,
                         bulk_->port(), opts.max_frame >> 20, opts.max_pending >> 20);
  if (!opts.tls)
    warn_if_open("its bulk port", opts.host, bulk_->port());
  return bulk_;
}

void node::warn_if_open(const char* what, const std::string& host, uint16_t port) const {
  if (is_loopback_host(host))
    return;
  get_logger(who_)->warn(
      "{} listens on {}:{} without TLS: anyone who reaches that address can send it every message of the swarm's "
      "protocol (docs/deploy.md, \"Threat model\"). Across machines you do not all control, start every process "
      "with --tls-ca, --tls-cert and --tls-key",
      what, host, port);
}

std::unique_ptr<basp_guard> node::guard(const caf::expected<uint16_t>& local, int port, bool tls) {
  if (!local) {
    std::cerr << "swarm: " << who_ << " cannot listen on loopback: " << sys_->render(local.error()) << "\n";
    return nullptr;
  }
  guard_options opts;
  // Plain means local: without TLS anyone who reaches the port speaks the
  // swarm's protocol, so it listens on --host (127.0.0.1 unless given) only.
  // With TLS only certificate holders get through: every interface.
  opts.host = tls ? std::string{} : cfg_.server.host;
  opts.port = static_cast<uint16_t>(port);
  opts.backend_port = *local;
  opts.tls = tls;
  opts.limits.max_payload = static_cast<uint64_t>(cfg_.net.chunk_bytes) + (uint64_t{1} << 20);
  auto guard = basp_guard::start(opts);
  if (!guard) {
    std::cerr << "swarm: " << who_ << " cannot listen on port " << port << ": " << describe(guard.error()) << "\n";
    return nullptr;
  }
  if (!tls)
    warn_if_open("its actors' port", opts.host, (*guard)->port());
  return std::move(*guard);
}

node::wait_result node::wait_for(const caf::actor& whom, const caf::actor& watched) {
  caf::scoped_actor self{*sys_};
  self->monitor(whom);
  if (watched)
    self->monitor(watched);
  bool asked = false;
  for (;;) {
    // --control: a newer leader can be elected while the old one's link still
    // looks alive (it was stopped, or cut off from etcd): follow etcd's word.
    if (watched && leader_changed())
      return {true, {}};
    if (stop_requested && !asked) {
      self->send_exit(whom, caf::exit_reason::user_shutdown);
      asked = true;
    }
    caf::optional<caf::down_msg> down;
    self->receive([&](caf::down_msg& msg) { down = std::move(msg); },
                  caf::after(std::chrono::milliseconds(100)) >> [] {});
    if (down && down->source == whom.address())
      return {false, down->reason};
    if (down && watched && down->source == watched.address())
      return {true, {}};
  }
}

caf::error node::wait_for(const caf::actor& whom) { return wait_for(whom, caf::actor{}).reason; }

bool node::leader_changed() {
  if (!newest_term_)
    return false;
  const auto next = policy::follow_leader(newest_term_->load(), term_);
  if (next != policy::follow::confirm)
    return next == policy::follow::rejoin;
  // Asked at most once a second: a watch that lags behind catches up within milliseconds.
  const auto now = std::chrono::steady_clock::now();
  if (now - lower_checked_ < std::chrono::seconds(1))
    return false;
  lower_checked_ = now;
  auto found = control::find_leader(*etcd_);
  return found && *found && (*found)->term != term_;
}

void node::sleep_before_retry(int failures, const caf::error& why) {
  const auto now = std::chrono::steady_clock::now();
  if (failures == 1 || now - retry_logged_ >= retry_log_every) {
    retry_logged_ = now;
    get_logger(who_)->warn("cannot join the coordinator {}yet ({} tries failed in a row): {}; trying again",
                           etcd_ ? "etcd names " : "", failures, describe(why));
  }
  const auto wait = policy::backoff_delay(policy::backoff_settings{}, failures,
                                          std::uniform_real_distribution<double>(0.0, 1.0)(rng_));
  const auto until = now + wait;
  while (!stop_requested && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

caf::error node::run_with_coordinator(const caf::actor& whom, coordinator_actor coord, const std::string& address,
                                      const std::function<caf::error(const coordinator_actor&)>& rejoin,
                                      std::atomic<bool>* coordinator_up) {
  for (;;) {
    auto waited = wait_for(whom, caf::actor_cast<caf::actor>(coord));
    if (!waited.watched_down)
      return waited.reason;
    if (coordinator_up)
      *coordinator_up = false;
    get_logger(who_)->warn(etcd_ ? "lost the coordinator (term {}); joining the next leader etcd names"
                                 : "lost the coordinator; joining it again when it is back",
                           term_);
    const auto lost = coord.address();
    for (int failures = 1;; ++failures) {
      auto fresh = dial_coordinator(address, lost);
      if (stop_requested)
        return wait_for(whom);
      auto refused = fresh ? rejoin(*fresh) : fresh.error();
      if (!refused) {
        coord = *fresh;
        break;
      }
      sleep_before_retry(failures, refused);
    }
    if (coordinator_up)
      *coordinator_up = true;
    if (etcd_)
      get_logger(who_)->info("joined the coordinator of term {}", term_);
    else
      get_logger(who_)->info("joined the coordinator again");
  }
}

void node::emit_bulk(const std::string& process) {
  if (!bulk_)
    return;
  const auto s = bulk_->stats();
  metrics_->emit("bulk", {{"process", process},
                          {"frames_sent", static_cast<int64_t>(s.frames_sent)},
                          {"bytes_sent", static_cast<int64_t>(s.bytes_sent)},
                          {"frames_received", static_cast<int64_t>(s.frames_received)},
                          {"bytes_received", static_cast<int64_t>(s.bytes_received)},
                          {"send_failures", static_cast<int64_t>(s.send_failures)},
                          {"bad_frames", static_cast<int64_t>(s.bad_frames)},
                          {"strangers", static_cast<int64_t>(s.strangers)},
                          {"undeliverable", static_cast<int64_t>(s.undeliverable)},
                          {"frames_waited", static_cast<int64_t>(s.frames_waited)},
                          {"stalled", static_cast<int64_t>(s.stalled)},
                          {"peak_pending", static_cast<int64_t>(s.peak_pending)}});
}

}  // namespace swarm
