#include "models/block.hpp"

#include <stdexcept>

#include "config/family.hpp"
#include "models/gpt_block.hpp"
#include "models/llama_block.hpp"

namespace swarm {

namespace {

template <class Block>
std::shared_ptr<decoder_block> make(const model_config& cfg) {
  return std::make_shared<Block>(cfg);
}

struct block_implementation {
  const char* name;  ///< what a family's descriptor names in `block`
  std::shared_ptr<decoder_block> (*make)(const model_config&);
};

// The decoder block implementations (torch code) a family may build on. A
// family that reuses one (qwen2: llama's) adds no row; a new kind of block
// adds its file pair and one row.
constexpr block_implementation implementations[] = {
    {"gpt", make<gpt_block_impl>},
    {"llama", make<llama_block_impl>},
};

}  // namespace

std::shared_ptr<decoder_block> make_block(const model_config& cfg) {
  const auto& family = family_of(cfg);
  for (const auto& b : implementations)
    if (family.block == b.name)
      return b.make(cfg);
  throw std::logic_error("model family " + family.name + " names block '" + family.block +
                         "', which has no implementation");
}

}  // namespace swarm
