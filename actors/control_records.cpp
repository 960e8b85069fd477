#include "actors/control_records.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace swarm {

using json = nlohmann::json;

std::string stage_key(uint32_t stage) { return "state/stage/" + std::to_string(stage); }

// The hash as a decimal string: JSON readers (etcdctl, jq) lose 64-bit integers.
std::string encode_record(const stage_record& r) {
  return json{{"step", r.step}, {"hash", std::to_string(r.hash)}, {"members", r.members}}.dump();
}

std::string encode_record(const rebalancer_record& r) {
  return json{{"last_load_move", r.last_load_move}, {"movers", r.movers}}.dump();
}

std::optional<stage_record> decode_stage_record(const std::string& text, std::string& why) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    why = "not a JSON object";
    return std::nullopt;
  }
  const auto step = j.find("step"), hash = j.find("hash"), members = j.find("members");
  if (step == j.end() || !step->is_number_unsigned()) {
    why = "\"step\" is not a whole number";
    return std::nullopt;
  }
  stage_record r;
  r.step = step->get<uint64_t>();
  const std::string digits = hash != j.end() && hash->is_string() ? hash->get<std::string>() : std::string{};
  if (digits.empty() || digits.size() > 20 || digits.find_first_not_of("0123456789") != std::string::npos) {
    why = "\"hash\" is not a decimal string";
    return std::nullopt;
  }
  errno = 0;
  r.hash = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) {
    why = "\"hash\" is out of range";
    return std::nullopt;
  }
  if (members == j.end() || !members->is_array()) {
    why = "\"members\" is not a list";
    return std::nullopt;
  }
  for (const auto& m : *members) {
    if (!m.is_string()) {
      why = "\"members\" holds a non-string";
      return std::nullopt;
    }
    r.members.push_back(m.get<std::string>());
  }
  return r;
}

std::optional<rebalancer_record> decode_rebalancer_record(const std::string& text, std::string& why) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    why = "not a JSON object";
    return std::nullopt;
  }
  const auto last = j.find("last_load_move"), movers = j.find("movers");
  if (last == j.end() || !last->is_number() || !std::isfinite(last->get<double>())) {
    why = "\"last_load_move\" is not a number";
    return std::nullopt;
  }
  if (movers == j.end() || !movers->is_object()) {
    why = "\"movers\" is not an object";
    return std::nullopt;
  }
  rebalancer_record r;
  r.last_load_move = last->get<double>();
  for (const auto& [id, at] : movers->items()) {
    if (!at.is_number() || !std::isfinite(at.get<double>())) {
      why = "\"movers\"." + id + " is not a number";
      return std::nullopt;
    }
    r.movers[id] = at.get<double>();
  }
  return r;
}

}  // namespace swarm
