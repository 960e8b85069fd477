// A tokenizer model file (data/tokenizer.hpp: any bytes given as --tokenizer):
// refused with an error or opened; an opened one encodes text into ids below
// its vocabulary, with an EOS id inside it.
#include <unistd.h>

#include <fstream>

#include "data/tokenizer.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/swarm-fuzz-tokenizer-" + std::to_string(::getpid()) + ".model";
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (auto tok = swarm::tokenizer::open(path)) {
    SWARM_FUZZ_EXPECT((*tok)->eos() >= 0 && static_cast<uint32_t>((*tok)->eos()) < (*tok)->vocab());
    if (auto ids = (*tok)->encode("The swarm trains. caf\xc3\xa9 42\n"))
      for (const int id : *ids)
        SWARM_FUZZ_EXPECT(id >= 0 && static_cast<uint32_t>(id) < (*tok)->vocab());
  }
  return 0;
}
