// The load balancer's verified work (issue #47; actors/load_balancer.hpp):
// a sampled share of forwards is sent again, with the same inputs, to a
// second server of the stage, and the answers compared; a disagreement asks
// a third, and the one outside the agreeing majority is charged
// (policy::charged). Every charge goes to the coordinator with its evidence,
// which counts them over all trainers and bans at --verify-strikes; a server
// this trainer charged --verify-strikes times is banned here too.
//
// The trainer uses the first answer at once: verification runs beside the
// pipeline, never in its way, so its cost is the second server's compute and
// the bytes, not latency. A server new to this trainer is on probation: each
// of its answers is verified until it agreed --verify-probation times. Other
// stages than the last are verified with the very request the first server
// got (a liar cannot tell the two apart; the second server keeps the forward
// like any other, and may even serve its backward from it). On the last stage
// a forward adds its gradient, so the second opinion is marked `verify` and
// adds nothing.
//
// Answers are compared only when they claim the same server_step: honest
// servers of a stage step together, but one may answer just before a round's
// step and the other just after. Such a pair is inconclusive, not a charge.
#include "actors/load_balancer_members.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include "base/hash.hpp"
#include "base/log.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"

namespace swarm::balancing {

namespace {

using answer = load_balancer_state::answer;

void count(self_ptr self, std::atomic<int64_t> policy::verify_counters::*field, int64_t n = 1) {
  if (auto& v = self->state.cfg.verified)
    ((*v).*field).fetch_add(n, std::memory_order_relaxed);
}

/// The compared part of a forward reply: outputs, or on the last stage its
/// loss and input gradient. nullopt when it does not decode (then the
/// request's own delivery reports the error, or the verification is void).
std::optional<answer> answer_of(const bulk_parts& whole, const std::string& server, bool last) {
  auto reply = decode_parts<proto::forward_reply>(bulk_parts(whole), "forward_reply");
  if (!reply)
    return std::nullopt;
  const auto& t = last ? reply->input_grad() : reply->outputs();
  answer a;
  a.server = server;
  a.step = reply->server_step();
  a.loss = reply->loss();
  if (!t.data().empty()) {
    auto x = decode_tensor(t, "outputs");
    if (!x)
      return std::nullopt;
    const auto f = x->to(torch::kFloat32).contiguous();
    a.values.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  return a;
}

/// How far apart two answers are (policy::relative_distance of their values,
/// and on the last stage of their losses too): 2 for different shapes.
double distance(const answer& a, const answer& b) {
  if (a.values.size() != b.values.size())
    return 2.0;
  double d = policy::relative_distance(a.values.data(), b.values.data(), a.values.size());
  const double scale = std::max(std::abs(a.loss), std::abs(b.loss));
  if (scale > 0)
    d = std::max(d, std::abs(static_cast<double>(a.loss) - b.loss) / scale);
  return std::isnan(d) ? 2.0 : d;
}

uint64_t hash_of(const answer& a) { return fnv1a64(a.values.data(), a.values.size() * sizeof(float)); }

double tolerance(self_ptr self) {
  // bf16 always: a swarm may mix fp32 and bf16 servers (--precision is each
  // process's), and honest answers of the two differ by 0.0011.
  return policy::verify_tolerance(true, self->state.cfg.trainer.compression);
}

void send_for(self_ptr self, uint64_t id) {
  auto& v = self->state.verifying.at(id);
  request req;
  req.head = v.head;
  req.data = v.data;
  req.bytes = v.bytes;
  req.history.samples = v.samples;
  for (const auto& a : v.answers)
    req.history.tried.push_back(a.server);  // avoided; dispatch never falls back to them
  req.verification = id;
  count(self, &policy::verify_counters::requests);
  count(self, &policy::verify_counters::samples, static_cast<int64_t>(v.samples));
  dispatch(self, std::move(req));
}

void end(self_ptr self, uint64_t id, std::atomic<int64_t> policy::verify_counters::*outcome) {
  if (outcome)
    count(self, outcome);
  self->state.verifying.erase(id);
}

/// The referee answered: charges whoever the majority says is wrong.
void judge(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto& v = st.verifying.at(id);
  const auto& as = v.answers;
  const double tol = tolerance(self);
  std::vector<std::vector<double>> d(as.size(), std::vector<double>(as.size(), 0.0));
  for (size_t i = 0; i < as.size(); ++i)
    for (size_t j = i + 1; j < as.size(); ++j)
      d[i][j] = d[j][i] = distance(as[i], as[j]);  // symmetric: each pair's tensors read once
  const auto wrong = policy::charged(d, tol);
  if (wrong.empty()) {
    get_logger("load_balancer")
        ->warn(
            "stage {}: microbatch {}: servers {}, {} and {} answered at step {} with no majority within {:g} "
            "(distances {:.3g}, {:.3g}, {:.3g}); nobody charged",
            st.cfg.stage, v.microbatch, as[0].server, as[1].server, as[2].server, as[0].step, tol, d[0][1], d[0][2],
            d[1][2]);
    end(self, id, nullptr);
    return;
  }
  std::vector<std::string> agreeing;
  size_t ref = as.size();  // the majority's first answer: the evidence's reference
  for (size_t i = 0; i < as.size(); ++i)
    if (std::find(wrong.begin(), wrong.end(), i) == wrong.end()) {
      ref = std::min(ref, i);
      agreeing.push_back(as[i].server);
      ++st.agreed[as[i].server];
    }
  for (size_t i : wrong) {
    const auto& server = as[i].server;
    const bool banned_now = st.strikes.charge(server);
    count(self, &policy::verify_counters::strikes);
    proto::verification_evidence ev;
    ev.set_trainer_id(st.cfg.trainer_id);
    ev.set_stage(static_cast<uint32_t>(st.cfg.stage));
    ev.set_server_id(server);
    ev.set_step(as[i].step);
    ev.set_microbatch_id(v.microbatch);
    for (const auto& a : agreeing)
      ev.add_agreeing(a);
    ev.set_output_hash(hash_of(as[i]));
    ev.set_agreed_hash(hash_of(as[ref]));
    ev.set_distance(d[i][ref]);
    ev.set_tolerance(tol);
    ev.set_strikes(st.strikes.strikes(server));
    ev.set_what(st.cfg.last_stage ? "loss and input_grad" : "outputs");
    const std::string agreed_list = fmt::format("{}", fmt::join(agreeing, ","));
    // The evidence, in the strike's event and again in the ban's.
    const auto emit = [&](const char* event) {
      st.metrics->emit(event, {{"stage", int64_t{st.cfg.stage}},
                               {"trainer", st.cfg.trainer_id},
                               {"server", server},
                               {"step", static_cast<int64_t>(ev.step())},
                               {"microbatch", static_cast<int64_t>(ev.microbatch_id())},
                               {"agreeing", agreed_list},
                               {"output_hash", fmt::format("{:016x}", ev.output_hash())},
                               {"agreed_hash", fmt::format("{:016x}", ev.agreed_hash())},
                               {"distance", ev.distance()},
                               {"tolerance", tol},
                               {"strikes", int64_t{ev.strikes()}}});
    };
    emit("verify_strike");
    if (st.coordinator_handle)  // counted there over every trainer: at --verify-strikes it bans
      self->send(st.coordinator_handle, evict_atom::value, wrap(ev));
    get_logger("load_balancer")
        ->warn(
            "stage {}: server {} answered microbatch {} at step {} {:.3g} away from {} (tolerance {:g}): strike "
            "{} of {}",
            st.cfg.stage, server, v.microbatch, ev.step(), ev.distance(), agreed_list, tol, ev.strikes(),
            st.cfg.trainer.verify_strikes);
    if (!banned_now)
      continue;
    count(self, &policy::verify_counters::bans);
    st.caught.insert(server);
    leave_server(self, server, "banned: its answers disagreed with its stage's majority");
    emit("verify_ban");
    get_logger("load_balancer")
        ->error("stage {}: server {} banned here after {} strikes", st.cfg.stage, server, ev.strikes());
  }
  end(self, id, nullptr);
}

}  // namespace

void maybe_verify(self_ptr self, const request& req, const bulk_parts& whole) {
  auto& st = self->state;
  // On probation (--verify-probation), every answer; then the sample.
  const auto passed = st.agreed.find(req.server_id);
  const bool probation =
      policy::on_probation(passed == st.agreed.end() ? 0 : passed->second, st.cfg.trainer.verify_probation);
  const double p = st.cfg.trainer.verify_fraction > 0 && probation ? 1.0 : st.cfg.trainer.verify_fraction;
  if (req.verification != 0 || req.history.backward || !(p > 0) ||
      std::uniform_real_distribution<double>(0.0, 1.0)(st.rng) >= p)
    return;
  proto::forward_request head;
  if (!head.ParseFromString(req.head) || head.eval() || head.logits())
    return;  // validation and generation add nothing to the model: not worth a second opinion
  auto first = answer_of(whole, req.server_id, st.cfg.last_stage);
  if (!first)
    return;
  const uint64_t id = ++st.next_verification;
  auto& v = st.verifying[id];
  v.head = req.head;
  if (st.cfg.last_stage) {
    proto::forward_request mark;  // protobuf merges concatenated messages field by field
    mark.set_verify(true);
    v.head += mark.SerializeAsString();
  }
  v.data = req.data;
  v.bytes = req.bytes;
  v.samples = req.history.samples;
  v.microbatch = head.microbatch_id();
  v.answers.push_back(std::move(*first));
  send_for(self, id);
}

bool asked_already(self_ptr self, const request& req, const std::string& server) {
  auto it = self->state.verifying.find(req.verification);
  return it != self->state.verifying.end() && std::any_of(it->second.answers.begin(), it->second.answers.end(),
                                                          [&](const answer& a) { return a.server == server; });
}

void on_verify_answer(self_ptr self, const request& req, caf::expected<bulk_parts> whole) {
  auto& st = self->state;
  const uint64_t id = req.verification;
  auto it = st.verifying.find(id);
  if (it == st.verifying.end())
    return;
  auto& v = it->second;
  if (!whole) {
    get_logger("load_balancer")
        ->debug("stage {}: verification of microbatch {} got no answer: {}", st.cfg.stage, v.microbatch,
                describe(whole.error()));
    end(self, id, &policy::verify_counters::inconclusive);
    return;
  }
  auto a = answer_of(*whole, req.server_id, st.cfg.last_stage);
  if (!a || a->step != v.answers.front().step) {
    end(self, id, &policy::verify_counters::inconclusive);  // another step (a round in between), or unreadable
    return;
  }
  v.answers.push_back(std::move(*a));
  if (v.answers.size() == 2) {
    const double d = distance(v.answers[0], v.answers[1]);
    if (d <= tolerance(self)) {
      for (const auto& a : v.answers)
        ++st.agreed[a.server];
      end(self, id, &policy::verify_counters::agreed);
      return;
    }
    count(self, &policy::verify_counters::disagreed);
    get_logger("load_balancer")
        ->info("stage {}: servers {} and {} answered microbatch {} at step {} {:.3g} apart; asking a third",
               st.cfg.stage, v.answers[0].server, v.answers[1].server, v.microbatch, v.answers[0].step, d);
    send_for(self, id);
    return;
  }
  judge(self, id);
}

}  // namespace swarm::balancing
