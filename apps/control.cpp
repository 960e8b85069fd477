#include "apps/control.hpp"

#include <algorithm>

#include "base/log.hpp"
#include "messages/errors.hpp"

namespace swarm::control {

endpoints endpoints_of(const app_config& cfg) {
  std::string why;
  endpoints out{{}, {cfg.net.control_ca, cfg.net.control_cert, cfg.net.control_key}};
  if (auto parsed = parse_control(cfg.net.control, why))
    for (const auto& [host, port] : *parsed)
      out.members.push_back({host, port});
  return out;
}

std::unique_ptr<etcd_client> client_of(const app_config& cfg, std::chrono::milliseconds timeout) {
  auto where = endpoints_of(cfg);
  return std::make_unique<etcd_client>(std::move(where.members), timeout, std::move(where.tls));
}

caf::expected<std::optional<leader_info>> find_leader(etcd_client& client) {
  auto kv = client.leader(election);
  if (!kv)
    return kv.error();
  if (!*kv)
    return std::optional<leader_info>{};
  return std::optional<leader_info>{leader_info{(*kv)->value, (*kv)->create_revision}};
}

caf::expected<std::vector<std::string>> candidates(etcd_client& client) {
  auto kvs = client.get_prefix(election + "/");
  if (!kvs)
    return kvs.error();
  std::sort(kvs->begin(), kvs->end(),
            [](const etcd_kv& a, const etcd_kv& b) { return a.create_revision < b.create_revision; });
  std::vector<std::string> out;
  for (const auto& kv : *kvs)
    out.push_back(kv.value);
  return out;
}

caf::expected<resume_state> load_resume(etcd_client& client, int stages) {
  auto log = get_logger("coordinator");
  resume_state out;
  out.stages.resize(static_cast<size_t>(stages));
  auto kvs = client.get_prefix(state_prefix + "state/");
  if (!kvs)
    return kvs.error();
  for (const auto& kv : *kvs) {
    const std::string key = kv.key.substr(state_prefix.size());
    std::string why;
    if (key == rebalancer_key) {
      out.rebalancer = decode_rebalancer_record(kv.value, why);
    } else {
      bool known = false;
      for (int s = 0; s < stages && !known; ++s)
        if (key == stage_key(static_cast<uint32_t>(s))) {
          known = true;
          out.stages[static_cast<size_t>(s)] = decode_stage_record(kv.value, why);
        }
      if (!known) {
        log->warn("etcd key {}: not a stage of this swarm's {}; ignored", kv.key, stages);
        continue;
      }
    }
    if (!why.empty())
      log->warn("etcd key {}: {}; ignored (that part starts from nothing)", kv.key, why);
  }
  return out;
}

std::shared_ptr<const std::atomic<int64_t>> start_leader_watch(endpoints where) {
  auto newest = std::make_shared<std::atomic<int64_t>>(0);
  std::thread([where = std::move(where), newest] {
    etcd_client client(where.members, std::chrono::milliseconds(500), where.tls);
    // The leader's term as etcd names it now, not the highest seen: after etcd
    // was restored from an older snapshot its leaders have lower terms, and a
    // node must follow them (apps/node.cpp).
    const auto look = [&] {
      if (auto found = find_leader(client); found && *found)
        *newest = (*found)->term;
      return true;
    };
    for (;;) {
      // `look` runs once the watch is in place too: nothing between two watches is missed.
      const auto err = client.watch(election + "/", look, std::chrono::seconds(5));
      look();
      if (err && code_of(err) != errc::TIMEOUT)
        std::this_thread::sleep_for(std::chrono::milliseconds(250));  // no member took it: not in a tight loop
    }
  }).detach();
  return newest;
}

void start_watch(endpoints where, std::shared_ptr<metrics_sink> metrics,
                 std::shared_ptr<std::atomic<int64_t>> leading_term) {
  std::thread([where = std::move(where), metrics = std::move(metrics), leading_term = std::move(leading_term)] {
    etcd_client client(where.members, std::chrono::milliseconds(500), where.tls);
    for (;;) {
      auto found = find_leader(client);
      auto cands = candidates(client);
      std::string listed, health;
      for (const auto& c : cands ? *cands : std::vector<std::string>{})
        listed += (listed.empty() ? "" : ",") + c;
      int64_t healthy = 0;
      for (const auto& m : where.members) {
        etcd_client one({m}, std::chrono::milliseconds(300), where.tls);
        const bool ok = !one.status();
        healthy += ok;
        health += (health.empty() ? "" : ",") + m.host + ":" + std::to_string(m.port) + (ok ? "=ok" : "=down");
      }
      const bool leads = leading_term->load() > 0;
      metrics->note("control", {{"role", std::string{leads ? "leader" : "standby"}},
                                {"leader", found && *found ? (*found)->address : std::string{}},
                                {"term", found && *found ? (*found)->term : int64_t{0}},
                                {"candidates", listed},
                                {"members", health},
                                {"healthy", healthy}});
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
  }).detach();
}

lease_keeper::lease_keeper(endpoints where, int64_t lease, int64_t ttl_s, std::shared_ptr<leadership> leader)
    : lease_(lease), ttl_s_(ttl_s), leader_(std::move(leader)) {
  leader_->valid_until_ns = 0;  // not before the first renewal's answer
  thread_ = std::thread([this, w = std::move(where)]() mutable { run(std::move(w)); });
}

lease_keeper::~lease_keeper() {
  stop_ = true;
  if (thread_.joinable())
    thread_.join();
}

bool lease_keeper::wait_renewed(std::chrono::milliseconds wait) const {
  const auto until = leadership::clock::now() + wait;
  while (!gone_ && !leader_->valid_at(leadership::clock::now()) && leadership::clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return !lost();
}

void lease_keeper::watch(const etcd_leadership& won) {
  std::lock_guard<std::mutex> lock(m_);
  watched_ = won;
}

bool lease_keeper::lost() const { return gone_ || !leader_->valid_at(leadership::clock::now()); }

std::chrono::milliseconds lease_keeper::margin(int64_t ttl_s) {
  // A tenth of the TTL, at least 100 ms: etcd's lease clock and ours may run
  // at slightly different rates, and a renewal's answer takes a moment.
  return std::chrono::milliseconds(std::max<int64_t>(100, ttl_s * 100));
}

void lease_keeper::run(endpoints where) {
  // Often: an etcd leader election (a member lost) stalls renewals for a
  // few hundred ms, and the deadline runs from the last one that came back.
  const auto every = std::chrono::milliseconds(std::max<int64_t>(100, ttl_s_ * 1000 / 8));
  // Each call is bounded well inside the lease: a renewal that comes back
  // later than that is worth nothing anyway.
  etcd_client client(std::move(where.members), std::chrono::milliseconds(ttl_s_ * 1000 / 3), std::move(where.tls));
  auto log = get_logger("coordinator");
  while (!stop_ && !gone_) {
    const auto sent = leadership::clock::now();
    auto ttl = client.keep_alive(lease_);
    if (ttl && *ttl <= 0) {
      leader_->valid_until_ns = 0;
      gone_ = true;
      log->warn("etcd says lease {:x} has expired", lease_);
      break;
    }
    std::optional<etcd_leadership> watched;
    {
      std::lock_guard<std::mutex> lock(m_);
      watched = watched_;
    }
    if (ttl && watched) {
      auto kv = client.get(watched->key);
      if (kv && (!*kv || (**kv).create_revision != watched->term)) {
        leader_->valid_until_ns = 0;
        gone_ = true;
        log->warn("the election key of term {} is gone from etcd: no longer leading", watched->term);
        break;
      }
      if (!kv)  // not confirmed: this renewal does not count
        ttl = kv.error();
    }
    if (ttl) {
      const auto until = sent + std::chrono::seconds(*ttl) - margin(*ttl);
      leader_->valid_until_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch()).count();
    }
    const auto next = sent + every;
    while (!stop_ && leadership::clock::now() < next)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

recorder::recorder(endpoints where, etcd_leadership won) : won_(std::move(won)) {
  thread_ = std::thread([this, w = std::move(where)]() mutable { run(std::move(w)); });
}

recorder::~recorder() {
  (void)flush(flush_wait);
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable())
    thread_.join();
}

bool recorder::flush(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(m_);
  // A write failed (etcd unreachable) waits 200 ms and is tried again: within `wait`.
  drained_.wait_for(lock, wait, [&] { return gone_ || (pending_.empty() && !writing_); });
  return !gone_ && pending_.empty() && !writing_;
}

void recorder::put(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(m_);
    pending_[key] = value;  // a newer value of a key not written yet replaces it
  }
  cv_.notify_one();
}

void recorder::run(endpoints where) {
  etcd_client client(std::move(where.members), std::chrono::seconds(2), std::move(where.tls));
  auto log = get_logger("coordinator");
  for (;;) {
    std::map<std::string, std::string> batch;
    {
      std::unique_lock<std::mutex> lock(m_);
      writing_ = false;
      drained_.notify_all();
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_)
        return;
      batch.swap(pending_);
      writing_ = true;
    }
    for (const auto& [key, value] : batch) {
      auto ok = client.put_if_leader(won_, state_prefix + key, value);
      if (ok && !*ok) {
        log->warn("etcd: not recording {}: this coordinator no longer leads (term {})", key, won_.term);
        std::lock_guard<std::mutex> lock(m_);
        gone_ = true;
        drained_.notify_all();
        return;
      }
      if (!ok) {  // kept for the next round of writes: the newest value wins
        log->warn("etcd: recording {} failed: {}; trying again", key, describe(ok.error()));
        std::lock_guard<std::mutex> lock(m_);
        pending_.try_emplace(key, value);
      }
    }
    if (!batch.empty()) {
      std::unique_lock<std::mutex> lock(m_);
      if (!pending_.empty())  // failed writes: not in a tight loop
        cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_; });
    }
  }
}

}  // namespace swarm::control
