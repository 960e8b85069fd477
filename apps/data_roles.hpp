#pragma once
// The data side of the roles: the tokenizer every role opens, the text a
// trainer samples from, and --role tokenizer / --role prepare.

#include <memory>

#include "base/error.hpp"
#include "config/config.hpp"
#include "data/corpus.hpp"
#include "data/tokenizer.hpp"

namespace swarm {

/// Opens --tokenizer and fills in the model's vocabulary and tokenizer hash
/// (refused: an unreadable or foreign file; a --vocab it does not have).
[[nodiscard]] result<std::shared_ptr<const tokenizer>> use_tokenizer(app_config& cfg);

/// What a trainer samples from: --data's training shards, else --corpus.
/// Refused, naming the file: see shard_set::open and corpus::load.
[[nodiscard]] result<std::shared_ptr<const token_source>> training_text(const app_config& cfg);

/// --data's held-out shards (for --eval-every).
[[nodiscard]] result<std::shared_ptr<const token_source>> validation_text(const app_config& cfg);

int run_tokenizer(const app_config& cfg, const tokenizer& tok);
int run_prepare(const app_config& cfg, const tokenizer& tok);

}  // namespace swarm
