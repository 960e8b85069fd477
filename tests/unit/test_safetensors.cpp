// models/safetensors: round trips, and every malformed file refused with the reason.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "models/safetensors.hpp"

using namespace swarm;

namespace {

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}

/// A file of `header` (JSON text) and `data`, with the size prefix.
std::string raw(const std::string& header, const std::string& data, uint64_t claimed = UINT64_MAX) {
  const uint64_t n = claimed == UINT64_MAX ? header.size() : claimed;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string refusal(const std::string& file) {
  auto r = parse_safetensors(file);
  REQUIRE_FALSE(r);
  CHECK(r.error().code() == errc::BAD_REQUEST);
  return r.error().what();
}

}  // namespace

TEST_CASE("safetensors: written, read back and written again gives the same bytes", "[safetensors]") {
  const std::string a = floats({1, 2, 3, 4, 5, 6}), b = floats({-1}), c;
  const std::vector<safetensor> tensors{{"model.embed_tokens.weight", "F32", {2, 3}, a},
                                        {"model.norm.weight", "F32", {1}, b},
                                        {"empty", "F32", {0, 4}, c}};
  auto file = write_safetensors(tensors, {{"format", "pt"}});
  REQUIRE(file);
  CHECK((file->size() - a.size() - b.size()) % 8 == 0);  // size prefix and padded header: the data starts aligned
  auto back = parse_safetensors(*file);
  REQUIRE(back);
  REQUIRE(back->tensors.size() == 3);
  CHECK(back->metadata.at("format") == "pt");
  const auto* e = back->find("model.embed_tokens.weight");
  REQUIRE(e);
  CHECK(e->dtype == "F32");
  CHECK(e->shape == std::vector<int64_t>{2, 3});
  CHECK(e->data == a);
  CHECK(back->find("model.norm.weight")->data == b);
  CHECK(back->find("empty")->data.empty());
  CHECK_FALSE(back->find("nothing"));
  auto again = write_safetensors(back->tensors, back->metadata);
  REQUIRE(again);
  CHECK(*again == *file);
  // What the writer refuses.
  CHECK_FALSE(write_safetensors({{"x", "F32", {2}, b}}, {}));  // 4 bytes for 2 floats
  CHECK_FALSE(write_safetensors({{"x", "F32", {1}, b}, {"x", "F32", {1}, b}}, {}));
  CHECK_FALSE(write_safetensors({{"__metadata__", "F32", {1}, b}}, {}));
  CHECK_FALSE(write_safetensors({{"x", "Q4", {1}, b}}, {}));
}

TEST_CASE("safetensors: hostile files are refused before any data is read", "[safetensors]") {
  const std::string data = floats({1, 2, 3, 4});
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  REQUIRE(parse_safetensors(raw(ok, data)));
  // Truncated anywhere: in the size, the header or the data.
  const auto whole = raw(ok, data);
  for (size_t cut : {size_t{0}, size_t{7}, size_t{8}, size_t{20}, whole.size() - 16, whole.size() - 1})
    CHECK_FALSE(parse_safetensors(whole.substr(0, cut)));
  CHECK_THAT(refusal(whole.substr(0, 40)), Catch::Contains("truncated"));
  // A huge header size, and one past the file.
  CHECK_THAT(refusal(raw(ok, data, uint64_t{1} << 40)), Catch::Contains("100 MB"));
  CHECK_THAT(refusal(raw(ok, data, UINT64_MAX - 1)), Catch::Contains("100 MB"));
  CHECK_THAT(refusal(raw(ok, data, ok.size() + data.size() + 1)), Catch::Contains("truncated"));
  // Overlapping, gapped, out of range, trailing bytes.
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         data.substr(0, 12))),
             Catch::Contains("tensor 'b'") && Catch::Contains("inside the tensor before"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data.substr(0, 8))),
             Catch::Contains("after a gap"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data.substr(0, 8))),
             Catch::Contains("outside the 8 bytes"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data)),
             Catch::Contains("8 bytes of data after"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data)),
             Catch::Contains("outside"));
  // Shapes that do not fill their bytes, or overflow.
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data)),
             Catch::Contains("does not fill"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", data)),
             Catch::Contains("does not fill"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data)),
             Catch::Contains("not a dimension"));
  // Not what an entry must be.
  CHECK_THAT(refusal(raw("not json", data)), Catch::Contains("not a JSON object"));
  CHECK_THAT(refusal(raw("[1,2]", data)), Catch::Contains("not a JSON object"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", data)),
             Catch::Contains("dtype \"Q4\""));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[4]}})", data)), Catch::Contains("needs dtype"));
  CHECK_THAT(refusal(raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", data)),
             Catch::Contains("is not [begin, end]"));
  CHECK_THAT(refusal(raw(R"({"a":7})", data)), Catch::Contains("not an object"));
  CHECK_THAT(refusal(raw(R"({"__metadata__":{"k":1}})", "")), Catch::Contains("not a string"));
  // A name given twice: JSON keeps one, so the other's bytes are a gap or trailing.
  CHECK_FALSE(parse_safetensors(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                    data)));
}

TEST_CASE("safetensors: a deeply nested or huge header value is refused in a short message, never a crash",
          "[safetensors]") {
  // 200,000 nested brackets (400 KB) where a dtype or a shape goes: printing
  // such a value for the error recursed once per level and overflowed the stack.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const auto& header : {R"({"a":{"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]}})",
                             R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})",
                             R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":)" + deep + "}", deep}) {
    const auto why = refusal(raw(header, std::string(4, '\0')));
    CHECK_THAT(why, Catch::Contains("nests deeper than 8 levels"));
    CHECK(why.size() < 200);
  }
  // A wide value is described by its size, not printed whole.
  std::string wide = "[";
  for (int i = 0; i < 100000; ++i)
    wide += (i ? ",\"x\"" : "\"x\"");
  wide += "]";
  const auto why = refusal(raw(R"({"a":{"dtype":"F32","shape":)" + wide + R"(,"data_offsets":[0,4]}})", "abcd"));
  CHECK_THAT(why, Catch::Contains("shape an array of 100000 values"));
  CHECK(why.size() < 200);
  // Real headers, three levels deep, still parse.
  CHECK(parse_safetensors(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd")));
}
