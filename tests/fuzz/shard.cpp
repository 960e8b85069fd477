// A token shard as read from disk (data/shard.hpp): the header alone, then
// the whole file through shard::open. Whatever is accepted keeps its promises:
// the file is exactly header plus tokens, and every token is below the vocabulary.
#include <unistd.h>

#include <fstream>
#include <vector>

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
    std::vector<int64_t> ids(static_cast<size_t>((*s)->size()));
    SWARM_FUZZ_EXPECT(!(*s)->read(0, (*s)->size(), ids.data()));
    for (const int64_t id : ids)
      SWARM_FUZZ_EXPECT(id < h.vocab);
  }
  return 0;
}
