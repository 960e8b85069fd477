#pragma once
// Damaging files on purpose, for tests of what must detect it.

#include <fstream>
#include <string>

namespace swarm::test {

/// Flips bit 6 of the byte at offset `at` of `path`, in place.
inline void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(at);
  f.write(&c, 1);
}

}  // namespace swarm::test
