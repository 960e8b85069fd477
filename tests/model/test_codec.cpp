// Tier (a): torch::Tensor <-> proto::tensor: every dtype, the degenerate shapes, and the lossy codecs.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "messages/codebook.hpp"
#include "base/hash.hpp"
#include "messages/float_codec.hpp"
#include "messages/tensor_codec.hpp"
#include "base/buffer_pool.hpp"

#include <catch2/catch.hpp>

using namespace swarm;

namespace {

/// Encodes and decodes `t`; requires success and an identical result.
void require_round_trip(const torch::Tensor& t) {
  const auto wire = encode_tensor(t);
  REQUIRE(!check_tensor(wire, "t"));
  auto back = decode_tensor(wire, "t");
  REQUIRE(back);
  REQUIRE(back->scalar_type() == t.scalar_type());
  REQUIRE(back->sizes() == t.sizes());
  REQUIRE(back->is_contiguous());
  // equal() is exact, including NaN-free bit patterns of every dtype used here.
  REQUIRE(torch::equal(*back, t));
}

proto::tensor float_tensor(std::vector<int64_t> shape, size_t data_bytes) {
  proto::tensor t;
  for (auto d : shape)
    t.add_shape(d);
  t.set_dtype(proto::FLOAT32);
  t.set_codec(proto::RAW);
  t.set_data(std::string(data_bytes, '\0'));
  return t;
}

}  // namespace

TEST_CASE("every dtype round-trips", "[codec]") {
  torch::manual_seed(7);
  const auto r = torch::randn({3, 5});
  const std::vector<torch::Tensor> cases = {
      r,
      r.to(torch::kFloat16),
      r.to(torch::kBFloat16),
      r.to(torch::kFloat64),
      torch::randint(-1000000000000LL, 1000000000000LL, {4, 2}, torch::kInt64),
      torch::randint(-100000, 100000, {7}, torch::kInt32),
      torch::randint(-30000, 30000, {2, 2, 2}, torch::kInt16),
      torch::randint(-128, 128, {9}, torch::kInt8),
      torch::randint(0, 256, {9}, torch::kUInt8),
      r > 0,
  };
  for (const auto& t : cases) {
    INFO("dtype " << t.scalar_type());
    require_round_trip(t);
  }
}

TEST_CASE("empty, scalar, large and non-contiguous tensors round-trip", "[codec]") {
  SECTION("empty [0, 3]") {
    auto t = torch::empty({0, 3});
    REQUIRE(encode_tensor(t).data().empty());
    require_round_trip(t);
  }
  SECTION("scalar") {
    auto t = torch::tensor(3.25f);
    REQUIRE(encode_tensor(t).shape_size() == 0);
    require_round_trip(t);
  }
  SECTION("4M floats") {
    auto t = torch::arange(4 << 20, torch::kFloat32);
    REQUIRE(encode_tensor(t).data().size() == (4u << 20) * 4);
    require_round_trip(t);
  }
  SECTION("transposed") {
    auto t = torch::arange(12, torch::kFloat32).view({3, 4}).t();
    REQUIRE(!t.is_contiguous());
    auto back = decode_tensor(encode_tensor(t), "t");
    REQUIRE(back);
    REQUIRE(torch::equal(*back, t));
  }
}

TEST_CASE("the decoded tensor owns its memory", "[codec]") {
  auto wire = std::make_unique<proto::tensor>(encode_tensor(torch::ones({4})));
  auto back = decode_tensor(*wire, "t");
  REQUIRE(back);
  wire.reset();  // the message's bytes are gone; the tensor must not care
  REQUIRE(back->sum().item<float>() == 4.0f);
}

TEST_CASE("a taking decode builds a raw tensor on the message's bytes and gives them back", "[codec][pool]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kInt64}) {
    const auto t = torch::arange(1 << 16, torch::TensorOptions().dtype(torch::kFloat32)).view({256, 256}).to(dtype);
    auto wire = encode_tensor(t);
    const char* bytes = wire.data().data();
    auto back = decode_tensor(std::move(wire), "t");
    REQUIRE(back);
    REQUIRE(back->data_ptr() == static_cast<const void*>(bytes));  // no copy
    REQUIRE(wire.data().empty());
    REQUIRE(back->scalar_type() == dtype);
    REQUIRE(torch::equal(*back, t));
  }
  // 32 MiB, as large as the transfer pool keeps: back to it when the tensor dies.
  const auto big = torch::full({8 << 20}, 0.5f);
  auto wire = encode_tensor(big);
  const char* bytes = wire.data().data();
  auto back = decode_tensor(std::move(wire), "big");
  REQUIRE(back);
  const auto held = transfer_buffers().stats().held;
  back->reset();
  REQUIRE(transfer_buffers().stats().held == held + 1);
  REQUIRE(transfer_buffers().take(32 << 20).data() == bytes);

  SECTION("compressed, empty or refused: decoded as before, large bytes given back at once") {
    const auto x = torch::randn({16 << 20});
    auto fp16 = encode_tensor(x, proto::FP16);
    const auto before = transfer_buffers().stats().held;
    auto decoded = decode_tensor(std::move(fp16), "x");
    REQUIRE(decoded);
    REQUIRE(torch::allclose(*decoded, x, 1e-3, 1e-3));
    REQUIRE(transfer_buffers().stats().held == before + 1);
    auto empty = decode_tensor(encode_tensor(torch::empty({0, 3})), "t");
    REQUIRE(empty);
    REQUIRE(empty->sizes() == torch::IntArrayRef{0, 3});
    auto bad = encode_tensor(torch::ones({1 << 16}));
    bad.mutable_data()->pop_back();
    auto refused = decode_tensor(std::move(bad), "inputs");
    REQUIRE(!refused);
    REQUIRE(code_of(refused.error()) == errc::BAD_REQUEST);
  }
}

TEST_CASE("decode rejects inconsistent payloads", "[codec]") {
  SECTION("data length mismatch") {
    auto err = decode_tensor(float_tensor({2, 3}, 23), "inputs");
    REQUIRE(!err);
    REQUIRE(code_of(err.error()) == errc::BAD_REQUEST);
    REQUIRE(describe(err.error()).find("inputs") != std::string::npos);
  }
  SECTION("unknown dtype") {
    auto t = float_tensor({2}, 8);
    t.set_dtype(static_cast<proto::dtype>(42));
    auto err = decode_tensor(t, "inputs");
    REQUIRE(!err);
    REQUIRE(code_of(err.error()) == errc::BAD_REQUEST);
  }
  SECTION("DTYPE_INVALID") {
    auto t = float_tensor({2}, 8);
    t.set_dtype(proto::DTYPE_INVALID);
    REQUIRE(!decode_tensor(t, "inputs"));
  }
  SECTION("negative dimension") {
    auto err = decode_tensor(float_tensor({-1, 2}, 0), "inputs");
    REQUIRE(!err);
    REQUIRE(code_of(err.error()) == errc::BAD_REQUEST);
  }
  SECTION("overflowing shape") {
    REQUIRE(!decode_tensor(float_tensor({int64_t{1} << 40, int64_t{1} << 40}, 0), "inputs"));
  }
}

// --- compression: fp16 and bitsandbytes' blockwise 8-bit

namespace {

/// Relative L2 error of `t` after a trip through `c`.
double relative_error(const torch::Tensor& t, proto::codec c) {
  auto back = decode_tensor(encode_tensor(t, c), "t");
  REQUIRE(back);
  REQUIRE(back->sizes() == t.sizes());
  REQUIRE(back->scalar_type() == t.scalar_type());
  const auto exact = t.to(torch::kFloat64);  // float64: the norms of huge values overflow float32
  return ((back->to(torch::kFloat64) - exact).norm() / exact.norm()).item<double>();
}

/// The reference quantizer, one value at a time, as the notes spell it out.
uint8_t nearest_code(float v) {
  const auto& code = wire_codebook();
  int i = 0;
  while (i < 255 && code[i + 1] <= v)
    ++i;
  if (i < 255 && code[i + 1] - v < v - code[i])
    ++i;
  return static_cast<uint8_t>(i);
}

}  // namespace

TEST_CASE("blockwise8 picks the nearest code, ties to the lower one, and says so on the wire", "[codec]") {
  torch::manual_seed(3);
  // Values inside one block with absmax 1: v = x exactly, so the codes are checkable.
  auto x = torch::rand({4096}) * 2 - 1;
  x[0] = 1.0f;
  const auto& code = wire_codebook();
  x[1] = (code[200] + code[201]) / 2;  // a midpoint in float32: the lower index wins
  x[2] = -1.0f;
  const auto wire = encode_tensor(x, proto::BLOCKWISE8);
  REQUIRE(wire.codec() == proto::BLOCKWISE8);
  REQUIRE(wire.dtype() == proto::FLOAT32);
  REQUIRE(wire.data().size() == 16 + 4 + 1024 + 4096);
  const auto* q = reinterpret_cast<const uint8_t*>(wire.data().data()) + 16 + 4 + 1024;
  const auto* xs = x.data_ptr<float>();
  int mismatches = 0;
  for (int i = 0; i < 4096; ++i)
    mismatches += q[i] != nearest_code(xs[i]);
  INFO("x[1] = " << xs[1] << " coded " << int{q[1]});
  REQUIRE(mismatches == 0);
  REQUIRE(q[0] == 255);
  REQUIRE(q[2] == 0);
  // The codebook on the wire is the one with code[0] = -1.
  REQUIRE(fnv1a64(wire.data().data() + 16 + 4, 1024) == 0xf02be9abae46842cULL);
}

TEST_CASE("values on codes decode exactly; zero blocks decode to zeros", "[codec]") {
  const auto& code = wire_codebook();
  const float absmax = 3.5f;
  auto x = torch::empty({256 * 3 + 1});
  for (int64_t i = 0; i < x.numel(); ++i)
    x[i] = code[static_cast<size_t>(i % 256)] * absmax;
  // code * absmax / absmax must land back on the code: true for absmax 3.5 (checked by the test itself).
  auto back = decode_tensor(encode_tensor(x, proto::BLOCKWISE8), "x");
  REQUIRE(back);
  REQUIRE(torch::equal(*back, x));

  auto zeros = torch::zeros({2, 5000});
  zeros[1][4999] = 0.25f;  // block 0 all zero, block 1 (elements 4096..9999) not
  auto z = decode_tensor(encode_tensor(zeros, proto::BLOCKWISE8), "z");
  REQUIRE(z);
  REQUIRE(torch::equal(*z, zeros));
}

TEST_CASE("blockwise8 and fp16 errors on normal data; degenerate shapes", "[codec]") {
  torch::manual_seed(11);
  const auto normal = torch::randn({1 << 20});
  const double b8 = relative_error(normal, proto::BLOCKWISE8), f16 = relative_error(normal, proto::FP16);
  std::printf("relative L2 error on 1M N(0,1) values: blockwise8 %.4f%%, fp16 %.5f%%\n", 100 * b8, 100 * f16);
  CHECK(b8 > 0.0120);
  CHECK(b8 < 0.0140);  // the notes measured 1.30% at block 4096
  CHECK(f16 < 0.0005);
  CHECK(relative_error(torch::randn({3, 7, 11}), proto::BLOCKWISE8) < 0.02);  // odd size, one short block
  CHECK(relative_error(torch::randn({4097}), proto::BLOCKWISE8) < 0.02);      // one value in the second block
  CHECK(relative_error(torch::randn({4096}), proto::BLOCKWISE8) < 0.02);      // exactly one block
  CHECK(relative_error(torch::randn({1}), proto::BLOCKWISE8) == 0);           // one value is its own absmax
  // Near float32's limit: scaled per block, so nothing overflows.
  const auto huge = torch::randn({5000}) * 5e37;  // up to ~2.5e38, near FLT_MAX
  CHECK(relative_error(huge, proto::BLOCKWISE8) < 0.02);
  CHECK(relative_error(huge, proto::FP16) > 0.5);  // fp16 saturates at 65504: why blockwise8 is the default
  // Empty tensors and other dtypes.
  for (auto c : {proto::FP16, proto::BLOCKWISE8}) {
    auto empty = decode_tensor(encode_tensor(torch::empty({0, 4}), c), "e");
    REQUIRE(empty);
    REQUIRE(empty->sizes() == torch::IntArrayRef{0, 4});
    const auto ids = torch::arange(10, torch::kLong);
    const auto w = encode_tensor(ids, c);
    REQUIRE(w.codec() == proto::RAW);  // only floats are compressed
    REQUIRE(torch::equal(*decode_tensor(w, "ids"), ids));
    const auto doubles = torch::randn({300}, torch::kFloat64);
    auto d = decode_tensor(encode_tensor(doubles, c), "d");
    REQUIRE(d);
    REQUIRE(d->scalar_type() == torch::kFloat64);
  }
  CHECK(encode_tensor(normal, proto::BLOCKWISE8).data().size() == (1u << 20) + 4 * 256 + 1024 + 16);
  CHECK(encode_tensor(normal, proto::FP16).data().size() == (1u << 20) * 2);
}

TEST_CASE("malformed compressed tensors are refused before decoding", "[codec]") {
  const auto good = encode_tensor(torch::randn({2, 5000}), proto::BLOCKWISE8);
  auto refused = [](proto::tensor t, const char* what) {
    auto r = decode_tensor(t, "inputs");
    INFO(what);
    REQUIRE(!r);
    REQUIRE(code_of(r.error()) == errc::BAD_REQUEST);
    std::printf("%s: %s\n", what, describe(r.error()).c_str());
  };
  auto t = good;
  t.mutable_data()->pop_back();
  refused(t, "one byte short");
  t = good;
  int64_t blocks = 7;
  std::memcpy(t.mutable_data()->data(), &blocks, 8);
  refused(t, "wrong block count");
  t = good;
  int64_t codes = 255;
  std::memcpy(t.mutable_data()->data() + 8, &codes, 8);
  refused(t, "wrong code count");
  t = good;
  const float nan = std::nanf(""), two = 2.0f, negative = -1.0f;
  std::memcpy(t.mutable_data()->data() + 16, &nan, 4);
  refused(t, "NaN block maximum");
  t = good;
  std::memcpy(t.mutable_data()->data() + 16 + 4, &negative, 4);
  refused(t, "negative block maximum");
  t = good;
  std::memcpy(t.mutable_data()->data() + 16 + 3 * 4 + 7 * 4, &two, 4);
  refused(t, "code outside [-1, 1]");
  t = encode_tensor(torch::randn({10}), proto::FP16);
  t.mutable_data()->append("xy");
  refused(t, "fp16 one element too long");
  t = encode_tensor(torch::arange(4, torch::kLong));
  t.set_codec(proto::FP16);
  t.set_data(std::string(8, '\0'));
  refused(t, "fp16 on int64");
}

TEST_CASE("a float vector's round trip is what its receiver decodes", "[codec]") {
  torch::manual_seed(5);
  const auto x = torch::randn({10000});
  for (auto c : {proto::RAW, proto::FP16, proto::BLOCKWISE8}) {
    std::vector<float> mine(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
    const auto bytes = encode_floats(mine.data(), x.numel(), c);
    const auto theirs = decode_floats(bytes, c, x.numel(), "v");
    REQUIRE(theirs);
    round_trip_floats(mine.data(), x.numel(), c);
    REQUIRE(mine == *theirs);
  }
  REQUIRE(!decode_floats(std::string(7, '\0'), proto::RAW, 2, "v"));
}
