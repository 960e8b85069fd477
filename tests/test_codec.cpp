// Tier (a): torch::Tensor <-> proto::tensor, every dtype and the degenerate shapes.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "models/tensor_codec.hpp"

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

} // namespace

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
