// The word keys' text and the help built from code (config/key_words.hpp).
#include "config/key_words.hpp"

#include <limits>
#include <sstream>

#include "config/family.hpp"
#include "config/keys.hpp"
#include "policy/averaging.hpp"

namespace swarm::key_words {

namespace {

/// Every role, in --help order; to_string() names them.
constexpr role roles[] = {role::coordinator, role::server,         role::trainer,   role::local,
                          role::cluster,     role::status,         role::calibrate, role::tokenizer,
                          role::prepare,     role::export_weights, role::generate};

/// -1 for "auto", else one index in [0, limit); the complaint, else empty.
std::string set_auto_index(int& out, const std::string& text, int limit, const char* complaint) {
  if (text == "auto") {
    out = -1;
    return {};
  }
  const auto index = int_list(text);
  if (!index || index->size() != 1 || index->front() < 0 || index->front() >= limit)
    return complaint;
  out = index->front();
  return {};
}

std::string auto_index_text(int index) { return index < 0 ? "auto" : std::to_string(index); }

using fault_kind = server_config::fault_kind;
/// --fault's words, in the order of fault_kind.
const std::vector<std::pair<fault_kind, std::string>> fault_words = {{fault_kind::none, "none"},
                                                                     {fault_kind::hang_forward, "hang-forward"},
                                                                     {fault_kind::hang_backward, "hang-backward"},
                                                                     {fault_kind::hang_round, "hang-round"},
                                                                     {fault_kind::fail_round, "fail-round"},
                                                                     {fault_kind::hang_state, "hang-state"},
                                                                     {fault_kind::noise, "noise"},
                                                                     {fault_kind::flip, "flip"},
                                                                     {fault_kind::stale, "stale"},
                                                                     {fault_kind::drop_half, "drop-half"}};

}  // namespace

std::vector<std::string> role_names() {
  std::vector<std::string> out;
  for (role r : roles)
    out.emplace_back(to_string(r));
  return out;
}

std::string model_help() {
  std::string out = "model family:";
  for (const auto* f : model_families())
    out += std::string(f == model_families().front() ? " " : " | ") + f->name + " (" + f->summary + ")";
  return out;
}

keys::row with_help(keys::row r, std::string help) {
  r.help = std::move(help);
  return r;
}

keys::row family_key(keys::row r) {
  r.help = families_reading(r.flag) + ": " + r.help;
  return r;
}

std::string role_text(const app_config& c) { return to_string(c.which); }

std::string set_role(app_config& c, const std::string& text) {
  for (role r : roles)
    if (text == to_string(r)) {
      c.which = r;
      return {};
    }
  return "no such role";  // CLI11's word list refuses it first
}

std::string vocab_text(const model_config& m) { return m.vocab_fixed ? std::to_string(m.vocab) : "auto"; }

std::string set_vocab(model_config& m, const std::string& text) {
  if (text == "auto") {
    m.vocab_fixed = false;
    return {};
  }
  const auto n = int_list(text);
  if (!n || n->size() != 1 || n->front() < 2)
    return "must be auto (the tokenizer's) or a vocabulary size >= 2";
  m.vocab = n->front();
  m.vocab_fixed = true;
  return {};
}

std::string stage_text(const server_config& s) { return auto_index_text(s.stage); }

std::string set_stage(server_config& s, const std::string& text) {
  // The upper bound is --stages, checked with the whole config.
  return set_auto_index(s.stage, text, std::numeric_limits<int>::max(), "must be auto or a stage index (0-based)");
}

std::string slot_text(const trainer_config& t) { return auto_index_text(t.slot); }

std::string set_slot(trainer_config& t, const std::string& text) {
  return set_auto_index(t.slot, text, 4096, "must be auto or a trainer slot in [0, 4095]");
}

std::string routing_text(const trainer_config& t) { return t.attempts.pinned ? "static" : "swarm"; }

std::string set_routing(trainer_config& t, const std::string& text) {
  t.attempts.pinned = text == "static";
  return text == "static" || text == "swarm" ? "" : "must be swarm or static";
}

std::vector<std::string> fault_names() {
  std::vector<std::string> out;
  for (const auto& [kind, word] : fault_words)
    out.push_back(word);
  return out;
}

std::string fault_text(const server_config& s) {
  for (const auto& [kind, word] : fault_words)
    if (kind == s.fault)
      return word;
  return "none";
}

std::string set_fault(server_config& s, const std::string& text) {
  for (const auto& [kind, word] : fault_words)
    if (word == text) {
      s.fault = kind;
      return {};
    }
  return "no such fault";  // CLI11's word list refuses it first
}

/// policy::round_clock holds the multiples; this only says them.
std::string averaging_timeout_help() {
  const auto times = [](double x) {
    std::ostringstream out;
    out << x << "x";
    return out.str();
  };
  return "coordinator: an averaging round ends by this, whatever happened; members not done at " +
         times(policy::round_clock::report) + " say whom they wait for, and those that do not say are excluded at " +
         times(policy::round_clock::exclude);
}

}  // namespace swarm::key_words
