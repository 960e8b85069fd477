// Boundary validation of the wire schema and chunked payloads, with malformed input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "base/hash.hpp"
#include "messages/codebook.hpp"
#include "messages/wire.hpp"
#include "models/shape/cost_model.hpp"
#include "net/basp_guard.hpp"
#include "net/chunks.hpp"

using namespace swarm;

namespace {

proto::tensor float_tensor(std::vector<int64_t> shape) {
  proto::tensor t;
  int64_t n = 1;
  for (auto d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.set_dtype(proto::FLOAT32);
  t.set_data(std::string(static_cast<size_t>(n) * 4, '\0'));
  return t;
}

errc code(const caf::error& e) { return code_of(e); }

}  // namespace

TEST_CASE("the project's error codes are proto::status's, name for name", "[wire]") {
  for (int i = 0; i < errc_count; ++i) {
    INFO(i);
    REQUIRE(proto::status_IsValid(i));
    CHECK(proto::status_Name(static_cast<proto::status>(i)) == to_string(static_cast<errc>(i)));
  }
  CHECK_FALSE(proto::status_IsValid(errc_count));
  // A CAF error carries the code as its number and comes back as the same code.
  const auto back = to_caf(error{errc::LEAVING, "moving"});
  CHECK(code_of(back) == errc::LEAVING);
  CHECK(describe(back) == "LEAVING: moving");
  CHECK_FALSE(to_caf(error{}));
}

TEST_CASE("seconds(): a peer's NaN, negative or huge timeout is a defined delay", "[wire]") {
  // A round's timeout_s comes from the averager's message: NaN or 1e300 cast to
  // a duration was undefined (x86 gave the most negative count: a timer that fired at once).
  using std::chrono::milliseconds;
  CHECK(seconds(1.5) == milliseconds(1500));
  CHECK(seconds(0) == caf::timespan{0});
  CHECK(seconds(-3) == caf::timespan{0});
  CHECK(seconds(std::numeric_limits<double>::quiet_NaN()) == caf::timespan{0});
  CHECK(seconds(-std::numeric_limits<double>::infinity()) == caf::timespan{0});
  CHECK(seconds(1e300) == seconds(longest_delay_s));
  CHECK(seconds(std::numeric_limits<double>::infinity()) == seconds(longest_delay_s));
  CHECK(seconds(longest_delay_s) > std::chrono::hours(24 * 365 * 30));
}

TEST_CASE("the cost model's blockwise8 block is the codec's", "[wire]") {
  CHECK(blockwise8_block_values == blockwise8_block);
}

TEST_CASE("check_tensor accepts consistent tensors of every size", "[wire]") {
  CHECK_FALSE(check_tensor(float_tensor({}), "scalar"));
  CHECK_FALSE(check_tensor(float_tensor({0}), "empty"));
  CHECK_FALSE(check_tensor(float_tensor({2, 0, 3}), "empty"));
  CHECK_FALSE(check_tensor(float_tensor({8, 64, 32}), "x"));
  auto ids = make_int64_tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_FALSE(check_tensor(ids, "ids"));
  CHECK(numel(ids) == 6);
  CHECK(shape_string(ids) == "[2, 3]");
}

TEST_CASE("check_tensor rejects inconsistent tensors with BAD_REQUEST", "[wire]") {
  auto t = float_tensor({2, 3});
  t.mutable_data()->pop_back();
  CHECK(code(check_tensor(t, "x")) == errc::BAD_REQUEST);
  CHECK(describe(check_tensor(t, "x")).find("23 data bytes") != std::string::npos);

  auto neg = float_tensor({2});
  neg.set_shape(0, -2);
  CHECK(code(check_tensor(neg, "x")) == errc::BAD_REQUEST);

  auto huge = float_tensor({});
  for (int i = 0; i < 8; ++i)
    huge.add_shape(int64_t{1} << 40);
  CHECK(code(check_tensor(huge, "x")) == errc::BAD_REQUEST);

  auto no_dtype = float_tensor({1});
  no_dtype.set_dtype(proto::DTYPE_INVALID);
  CHECK(code(check_tensor(no_dtype, "x")) == errc::BAD_REQUEST);

  auto bad_codec = float_tensor({1});
  bad_codec.set_codec(static_cast<proto::codec>(17));
  CHECK(code(check_tensor(bad_codec, "x")) == errc::BAD_REQUEST);
}

TEST_CASE("decode reports malformed payloads instead of crashing", "[wire]") {
  for (std::string garbage :
       {std::string("\xff\xff\xff\xff\x0f", 5), std::string("\x0a\x64garbage"), std::string(1, '\x1a')}) {
    auto r = decode<proto::forward_request>(garbage, "forward_request");
    REQUIRE_FALSE(r);
    CHECK(code(r.error()) == errc::BAD_REQUEST);
    CHECK(describe(r.error()).find("malformed forward_request") != std::string::npos);
  }
  proto::forward_request ok;
  ok.set_stage(1);
  auto back = decode<proto::forward_request>(encode(ok), "forward_request");
  REQUIRE(back);
  CHECK(back->stage() == 1);
}

TEST_CASE("requests are checked for stage range and required tensors", "[wire]") {
  proto::forward_request f;
  f.set_stage(0);
  CHECK(code(check_request(f, 2)) == errc::BAD_REQUEST);  // no inputs
  *f.mutable_inputs() = make_int64_tensor({1, 2}, {1, 2});
  CHECK_FALSE(check_request(f, 2));
  f.set_stage(2);
  CHECK(code(check_request(f, 2)) == errc::UNKNOWN_STAGE);
  f.set_stage(1);
  CHECK(code(check_request(f, 2)) == errc::BAD_REQUEST);  // last stage needs targets
  *f.mutable_targets() = make_int64_tensor({1, 2}, {1, 2});
  CHECK_FALSE(check_request(f, 2));
  f.set_stage(0);
  CHECK(code(check_request(f, 2)) == errc::BAD_REQUEST);  // targets on a middle stage

  proto::forward_request g;  // generation: the last stage's logits, no targets
  *g.mutable_inputs() = make_int64_tensor({1, 2}, {1, 2});
  g.set_logits(true);
  g.set_stage(1);
  CHECK_FALSE(check_request(g, 2));
  g.set_stage(0);
  CHECK(code(check_request(g, 2)) == errc::BAD_REQUEST);  // logits of a middle stage
  g.set_stage(1);
  *g.mutable_targets() = make_int64_tensor({1, 2}, {1, 2});
  CHECK(code(check_request(g, 2)) == errc::BAD_REQUEST);  // logits with targets

  proto::backward_request b;
  b.set_stage(0);
  *b.mutable_inputs() = make_int64_tensor({1, 2}, {1, 2});
  CHECK(code(check_request(b, 2)) == errc::BAD_REQUEST);  // no output_grad
  *b.mutable_output_grad() = float_tensor({1, 2, 4});
  CHECK_FALSE(check_request(b, 2));
  b.set_stage(1);
  CHECK(code(check_request(b, 2)) == errc::BAD_REQUEST);  // last stage has no separate backward
  b.set_stage(7);
  CHECK(code(check_request(b, 2)) == errc::UNKNOWN_STAGE);
}

TEST_CASE("registrations must match the swarm's model and stages", "[wire]") {
  proto::register_server r;
  r.set_stage(1);
  r.set_server_id("s1");
  r.set_host("127.0.0.1");
  r.set_port(4242);
  r.set_num_stages(2);
  r.set_config_hash(99);
  CHECK_FALSE(check_registration(r, 2, 99));
  CHECK(code(check_registration(r, 2, 98)) == errc::BAD_CONFIG);
  CHECK(code(check_registration(r, 3, 99)) == errc::BAD_CONFIG);
  // Another tokenizer: both are named, and the fix.
  r.set_tokenizer("a.model (hash 00000000000000aa)");
  const auto other = describe(check_registration(r, 2, 98, "b.model (hash 00000000000000bb)"));
  CHECK_THAT(other, Catch::Contains("server s1's model hash differs") && Catch::Contains("its tokenizer is a.model") &&
                        Catch::Contains("the swarm's b.model") && Catch::Contains("same --tokenizer file"));
  // The same tokenizer: the model keys differ.
  CHECK_THAT(describe(check_registration(r, 2, 98, "a.model (hash 00000000000000aa)")),
             Catch::Contains("the model keys and the --tokenizer file") && !Catch::Contains("its tokenizer"));
  r.set_stage(2);
  CHECK(code(check_registration(r, 2, 99)) == errc::UNKNOWN_STAGE);
  r.set_stage(0);
  r.set_port(0);
  CHECK(code(check_registration(r, 2, 99)) == errc::BAD_REQUEST);
}

TEST_CASE("errors separate retryable from fatal", "[wire]") {
  CHECK(is_retryable(make_error(errc::TIMEOUT, "")));
  CHECK(is_retryable(make_error(errc::PEER_GONE, "")));
  CHECK(is_retryable(make_error(errc::NO_SERVER, "")));
  CHECK(is_retryable(caf::make_error(caf::sec::request_timeout)));
  CHECK(is_retryable(caf::make_error(caf::sec::request_receiver_down)));
  CHECK_FALSE(is_retryable(make_error(errc::BAD_REQUEST, "")));
  CHECK_FALSE(is_retryable(make_error(errc::WRONG_SHAPE, "")));
  CHECK_FALSE(is_retryable(make_error(errc::NON_FINITE, "")));
  CHECK(describe(make_error(errc::WRONG_SHAPE, "inputs [1]")) == "WRONG_SHAPE: inputs [1]");
}

TEST_CASE("payloads are cut into chunks and reassembled in order", "[chunks]") {
  uint64_t next = 0;
  for (size_t size : {size_t{0}, size_t{1}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{10000}}) {
    std::string payload(size, '\0');
    for (size_t i = 0; i < size; ++i)
      payload[i] = static_cast<char>(i * 7);
    auto p = cut(payload, 1024, next);
    CHECK(p.lead.size() == (size == 0 ? 0 : (size - 1) / 1024));
    CHECK((p.transfer_id == 0) == p.lead.empty());
    chunk_assembler a;
    caf::actor_addr from;
    for (auto& piece : p.lead) {
      CHECK(piece.size() <= 1024);
      CHECK(piece.size() + 1 >= p.tail.size());  // equal pieces, no runt at the end
      CHECK_FALSE(a.add(from, p.transfer_id, piece, chunk_assembler::clock::time_point{}));
    }
    auto whole = a.finish(from, p.transfer_id, p.tail);
    REQUIRE(whole);
    CHECK(*whole == payload);
    CHECK(a.pending() == 0);
  }
}

TEST_CASE("a transfer finished without its chunks is an error", "[chunks]") {
  chunk_assembler a;
  auto r = a.finish(caf::actor_addr{}, 5, "tail");
  REQUIRE_FALSE(r);
  CHECK(code_of(r.error()) == errc::BAD_REQUEST);
  CHECK_FALSE(a.add(caf::actor_addr{}, 6, "x", chunk_assembler::clock::time_point{}));
  CHECK(a.pending() == 1);
  a.forget(caf::actor_addr{});
  CHECK(a.pending() == 0);
}

TEST_CASE("the 8-bit codebook is bitsandbytes' to the bit", "[wire]") {
  const auto& built = dynamic_codebook();
  const auto& wire = wire_codebook();
  // Check values from the notes (torch 1.13.1 AVX2 create_dynamic_map, and with code[0] = -1).
  CHECK(fnv1a64(built.data(), 1024) == 0x52084853a0e35a1cULL);
  CHECK(fnv1a64(wire.data(), 1024) == 0xf02be9abae46842cULL);
  CHECK(built[127] == 0.0f);
  CHECK(built[255] == 1.0f);
  CHECK(built[0] == -0.99296874f);
  CHECK(wire[0] == -1.0f);
  CHECK(built[128] == Approx(5.5e-7).epsilon(1e-6));  // the smallest positive code
  for (size_t k = 1; k < 127; ++k)
    CHECK(built[k] == -built[254 - k]);
  CHECK(std::is_sorted(built.begin(), built.end()));
}

TEST_CASE("compressed sizes are checked before anything is decoded", "[wire]") {
  CHECK(encoded_bytes(proto::BLOCKWISE8, 2048 * 4096, 4) == 8397840);  // the notes' 2048 x 4096 activation
  CHECK(encoded_bytes(proto::BLOCKWISE8, 0, 4) == 1040);
  CHECK(encoded_bytes(proto::FP16, 10, 4) == 20);
  CHECK(codec_of("blockwise8") == proto::BLOCKWISE8);
  CHECK(codec_of("fp16") == proto::FP16);
  CHECK(codec_of("none") == proto::RAW);
  // An int tensor may not claim a lossy codec; a float one must match its size.
  auto ints = make_int64_tensor({1, 2}, {2});
  ints.set_codec(proto::FP16);
  ints.set_data(std::string(4, '\0'));
  CHECK(code(check_tensor(ints, "x")) == errc::BAD_REQUEST);
  proto::tensor f;
  f.add_shape(5000);
  f.set_dtype(proto::FLOAT32);
  f.set_codec(proto::BLOCKWISE8);
  f.set_data(std::string(encoded_bytes(proto::BLOCKWISE8, 5000, 4), '\0'));
  CHECK(code(check_tensor(f, "x")) == errc::BAD_REQUEST);  // header says 0 blocks, 0 codes
  int64_t header[2] = {2, 256};
  std::memcpy(f.mutable_data()->data(), header, sizeof header);
  CHECK(!check_tensor(f, "x"));  // zero maxima and a zero codebook are well-formed (all zeros)
  f.mutable_data()->push_back('\0');
  CHECK(code(check_tensor(f, "x")) == errc::BAD_REQUEST);
}

TEST_CASE("a message's tensor bytes travel beside it and come back whole", "[wire]") {
  proto::backward_request req;
  req.set_stage(1);
  req.set_microbatch_id(7);
  *req.mutable_inputs() = make_int64_tensor({1, 2, 3, 4}, {2, 2});
  auto& grad = *req.mutable_output_grad();
  grad.set_dtype(proto::FLOAT32);
  grad.add_shape(3);
  grad.set_data(std::string(12, '\x01'));
  const auto whole = encode(req);

  auto copy = req;
  auto parts = encode_parts(copy);
  REQUIRE(parts.size() == 3);  // head, inputs' bytes, output_grad's bytes (field order)
  CHECK(parts[1] == req.inputs().data());
  CHECK(parts[2] == req.output_grad().data());
  CHECK(parts[0].size() < whole.size() - 40);  // the head carries no tensor bytes
  CHECK(parts_size(parts) == static_cast<int64_t>(parts[0].size() + 32 + 12));
  auto back = decode_parts<proto::backward_request>(parts, "backward_request");
  REQUIRE(back);
  CHECK(encode(*back) == whole);
  // One part is a whole encoding (the CAF path).
  auto inline_ = decode_parts<proto::backward_request>({whole}, "backward_request");
  REQUIRE(inline_);
  CHECK(encode(*inline_) == whole);
  // An absent tensor takes no part: a forward request without targets has two.
  proto::forward_request fwd;
  *fwd.mutable_inputs() = req.inputs();
  CHECK(encode_parts(fwd).size() == 2);
  CHECK_FALSE(fwd.has_targets());

  // Parts that do not match the tensors are refused, never half-used.
  auto fewer = parts;
  fewer.pop_back();
  auto r = decode_parts<proto::backward_request>(fewer, "backward_request");
  REQUIRE_FALSE(r);
  CHECK(code_of(r.error()) == errc::BAD_REQUEST);
  CHECK(describe(r.error()).find("1 tensor payloads for 2 tensors") != std::string::npos);  // names the counts
  auto more = parts;
  more.push_back("extra");
  CHECK_FALSE(decode_parts<proto::backward_request>(more, "backward_request"));
  auto doubled = parts;
  doubled[0] = whole;  // tensors carry data already, and more comes beside them
  CHECK_FALSE(decode_parts<proto::backward_request>(doubled, "backward_request"));
  CHECK_FALSE(decode_parts<proto::backward_request>({"\xff\xff\xff"}, "backward_request"));
  CHECK_FALSE(decode_parts<proto::backward_request>({}, "backward_request"));
}

TEST_CASE("the CAF port's guard passes BASP frames and refuses what crashes or stalls CAF", "[wire][guard]") {
  const basp_limits limits;
  auto header = [](unsigned op, uint32_t size) {
    std::array<unsigned char, basp_header_size> h{};
    h[0] = static_cast<unsigned char>(op);
    h[4] = static_cast<unsigned char>(size >> 24);
    h[5] = static_cast<unsigned char>(size >> 16);
    h[6] = static_cast<unsigned char>(size >> 8);
    h[7] = static_cast<unsigned char>(size);
    return h;
  };
  auto judge = [&](unsigned op, uint32_t size, bool first) {
    return judge_basp_header(header(op, size).data(), first, limits);
  };
  CHECK(basp_payload_size(header(2, 0x01020304).data()) == 0x01020304u);
  // First frame: a client handshake of sane size, nothing else.
  CHECK(judge(1, 32, true).empty());
  CHECK(judge(1, 0, true) == "a client handshake of 0 bytes");  // 01 + 31 zero bytes: SIGSEGV in CAF
  CHECK_FALSE(judge(1, 1025, true).empty());
  CHECK_FALSE(judge(0, 0, true).empty());  // a server handshake from a connecting peer: SIGSEGV in CAF
  CHECK_FALSE(judge(2, 100, true).empty());
  CHECK_FALSE(judge(0x47, 0x45542f20, true).empty());  // "GET /"
  // Later frames: messages up to the limit, empty heartbeats.
  for (unsigned op : {1u, 2u, 3u, 4u, 5u}) {
    CHECK(judge(op, 100, false).empty());
    CHECK(judge(op, static_cast<uint32_t>(limits.max_payload), false).empty());
    CHECK_FALSE(judge(op, static_cast<uint32_t>(limits.max_payload) + 1, false).empty());  // CAF would zero-fill it
    CHECK_FALSE(judge(op, 0, false).empty());
  }
  CHECK_FALSE(judge(2, 0xffffffffu, false).empty());
  CHECK(judge(6, 0, false).empty());
  CHECK_FALSE(judge(6, 8, false).empty());
  CHECK_FALSE(judge(0, 100, false).empty());
  for (unsigned op = 7; op < 256; ++op)
    CHECK_FALSE(judge(op, 32, false).empty());
}

TEST_CASE("the guard refuses a routed message that names another node as its sender", "[wire][guard]") {
  // CAF 0.17 delivers a routed message as its claimed source node's, and as
  // one of this node's own actors when it names this node: every sender check forged.
  const std::string node = "\x01peer-node-id-as-serialized";  // a client handshake's payload
  unsigned char routed[basp_header_size] = {3}, direct[basp_header_size] = {2};
  const std::string own = node + "\x01dest", other = "\x01this-node-id-as-serialized" + std::string("\x01dest");
  CHECK(judge_routed_source(routed, own.data(), own.size(), node).empty());
  CHECK_FALSE(judge_routed_source(routed, other.data(), other.size(), node).empty());
  CHECK_FALSE(judge_routed_source(routed, own.data(), node.size() - 1, node).empty());  // cut short
  CHECK_FALSE(judge_routed_source(routed, own.data(), own.size(), "").empty());         // before any handshake
  CHECK(judge_routed_source(direct, other.data(), other.size(), node).empty());  // its sender is the connection's
}

TEST_CASE("the guard of a TLS port passes TLS records and nothing else", "[wire][guard]") {
  auto judge = [](unsigned type, unsigned major, uint32_t size, bool first) {
    const unsigned char h[tls_header_size] = {static_cast<unsigned char>(type), static_cast<unsigned char>(major), 3,
                                              static_cast<unsigned char>(size >> 8), static_cast<unsigned char>(size)};
    CHECK(tls_record_size(h) == (size & 0xffff));
    return judge_tls_header(h, first);
  };
  CHECK(judge(22, 3, 512, true).empty());        // a ClientHello
  CHECK_FALSE(judge(23, 3, 512, true).empty());  // data before any handshake
  CHECK_FALSE(judge(1, 0, 0, true).empty());     // a BASP client handshake: plain CAF
  CHECK_FALSE(judge('G', 'E', 'T', true).empty());
  for (unsigned type : {20u, 21u, 22u, 23u}) {
    CHECK(judge(type, 3, 1, false).empty());
    CHECK(judge(type, 3, max_tls_record, false).empty());
    CHECK_FALSE(judge(type, 3, max_tls_record + 1, false).empty());
    CHECK_FALSE(judge(type, 3, 0, false).empty());
    CHECK_FALSE(judge(type, 2, 100, false).empty());  // SSL 2 and garbage
  }
  for (unsigned type : {0u, 19u, 24u, 255u})
    CHECK_FALSE(judge(type, 3, 100, false).empty());
}
