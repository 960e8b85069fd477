#pragma once
// What config/keys.cpp's table needs beyond the members: the text of its
// word keys (--role, --vocab, --stage, --slot, --routing, --fault: a word that
// sets a member of another type) and help built from code (--model from the
// registered families, --averaging-timeout from policy::round_clock).

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/key_table.hpp"

namespace swarm::key_words {

[[nodiscard]] std::vector<std::string> role_names();
[[nodiscard]] std::string role_text(const app_config& c);
[[nodiscard]] std::string set_role(app_config& c, const std::string& text);

/// --vocab: auto (the tokenizer's) or a size.
[[nodiscard]] std::string vocab_text(const model_config& m);
[[nodiscard]] std::string set_vocab(model_config& m, const std::string& text);

/// --stage and --slot: auto (-1) or an index.
[[nodiscard]] std::string stage_text(const server_config& s);
[[nodiscard]] std::string set_stage(server_config& s, const std::string& text);
[[nodiscard]] std::string slot_text(const trainer_config& t);
[[nodiscard]] std::string set_slot(trainer_config& t, const std::string& text);

/// --routing: swarm | static, onto trainer_config::attempts.pinned.
[[nodiscard]] std::string routing_text(const trainer_config& t);
[[nodiscard]] std::string set_routing(trainer_config& t, const std::string& text);

/// --fault: the test hook's words, onto server_config::fault.
[[nodiscard]] std::vector<std::string> fault_names();
[[nodiscard]] std::string fault_text(const server_config& s);
[[nodiscard]] std::string set_fault(server_config& s, const std::string& text);

/// --model's help: "model family: gpt (GPT-2 blocks) | llama (...)".
[[nodiscard]] std::string model_help();
/// `r` with `help`.
[[nodiscard]] keys::row with_help(keys::row r, std::string help);
/// A key only some families read: its help starts with their names ("llama, qwen2: ...").
[[nodiscard]] keys::row family_key(keys::row r);
/// --averaging-timeout's help: the round clock's multiples.
[[nodiscard]] std::string averaging_timeout_help();

}  // namespace swarm::key_words
