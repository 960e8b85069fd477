// A token shard as read from disk (data/shard.hpp): the header alone, then
// the whole file through shard::open. Whatever is accepted keeps its promises:
// the file is exactly header plus tokens, and every token is below the vocabulary.
#include <unistd.h>

#include <fstream>

#include "data/shard.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t tokenizer = 0;
  if (auto h = swarm::decode_shard_header(data, size)) {
    SWARM_FUZZ_EXPECT(h->width == 2 || h->width == 4);
    SWARM_FUZZ_EXPECT(h->width == swarm::token_width(h->vocab));
    tokenizer = h->tokenizer_hash;
  }
  static const std::string path = "/tmp/swarm-fuzz-shard-" + std::to_string(::getpid()) + ".bin";
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (auto s = swarm::shard::open(path, tokenizer)) {
    const auto& h = (*s)->header();
    SWARM_FUZZ_EXPECT(swarm::shard_header_bytes + h.tokens * h.width == size);
    for (int64_t i = 0; i < (*s)->size(); ++i)
      SWARM_FUZZ_EXPECT((*s)->at(i) < h.vocab);
  }
  return 0;
}
