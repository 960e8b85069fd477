#pragma once
// What every fuzz target shares. A target is one file defining
// LLVMFuzzerTestOneInput: built with libFuzzer by scripts/fuzz.sh (clang,
// -DSWARM_FUZZ=ON), and in every other build with replay_main.cpp, which runs
// the target once on each file of its seed corpus (corpus/NAME) and of the
// inputs that once broke it (crashes/NAME): ctest's fuzz_NAME.
//
// A target returns 0 and must never crash, hang, leak or trip a sanitizer on
// any input; where the decoder promises something of what it accepts (sizes
// add up, values are finite), the target checks it with `expect`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define SWARM_FUZZ_EXPECT(cond)                                                       \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (false)

namespace swarm::fuzz {

/// Reads an input front to back; past the end every read yields zeros.
class reader {
public:
  reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}

  template <class T>
  T take() {
    T v{};
    const size_t n = std::min(sizeof v, left_);
    std::memcpy(&v, p_, n);
    p_ += n;
    left_ -= n;
    return v;
  }

  /// Up to `n` bytes.
  std::string bytes(size_t n) {
    n = std::min(n, left_);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return s;
  }

  std::string rest() { return bytes(left_); }
  [[nodiscard]] size_t left() const { return left_; }

private:
  const uint8_t* p_;
  size_t left_;
};

}  // namespace swarm::fuzz
