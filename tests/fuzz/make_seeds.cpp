// Writes the seed corpus of every fuzz target (tests/fuzz/corpus/NAME/): a few
// valid inputs each, made by the encoders the decoders face, so that a fuzzer
// starts past the first checks. Run again when an encoding changes:
//   build/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus .
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config/config.hpp"
#include "data/shard.hpp"
#include "data/tokenizer.hpp"
#include "messages/float_codec.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"
#include "models/checkpoint.hpp"
#include "models/safetensors.hpp"
#include "net/bulk_frame.hpp"

namespace fs = std::filesystem;
using namespace swarm;

namespace {

fs::path root;
int written = 0;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary) << bytes;
  ++written;
}

template <class T>
std::string raw(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

std::string framed(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts)
    out += raw(static_cast<uint16_t>(p.size())) + p;
  return out;
}

void bulk_frame() {
  bulk_frame_header h;
  h.parts = 3;
  h.part_size[0] = 100, h.part_size[1] = 4096, h.part_size[2] = 0;
  h.size = 4196;
  const std::string limit = raw(uint64_t{1} << 30) + raw(uint8_t{0});
  seed("bulk_frame", "three_parts", limit + std::string(reinterpret_cast<const char*>(&h), header_bytes(h)));
  h.size = 5000;
  seed("bulk_frame", "parts_short", limit + std::string(reinterpret_cast<const char*>(&h), header_bytes(h)));
  h.size = 4196;
  bulk_hello hello;
  hello.token = {0x0123456789abcdef, 0xfedcba9876543210};
  seed("bulk_frame", "then_hello",
       limit + std::string(reinterpret_cast<const char*>(&h), header_bytes(h)) + raw(hello.token) + raw(hello));
}

void basp_guard() {
  unsigned char hs[32] = {1, 0, 0, 0, 0, 0, 0, 40};  // client handshake, 40 bytes
  unsigned char msg[32] = {2, 0, 0, 0, 0, 0, 1, 0};  // direct message, 256 bytes
  unsigned char beat[32] = {6};                      // heartbeat
  std::string s = std::string(1, '\0') + std::string(reinterpret_cast<char*>(hs), 32) + std::string(40, 'h') +
                  std::string(reinterpret_cast<char*>(msg), 32) + std::string(256, 'm') +
                  std::string(reinterpret_cast<char*>(beat), 32);
  seed("basp_guard", "basp_session", s);
  const unsigned char record[] = {1, 22, 3, 1, 0, 4, 'h', 'e', 'l', 'o', 23, 3, 3, 0, 2, 'x', 'y'};
  seed("basp_guard", "tls_records", std::string(reinterpret_cast<const char*>(record), sizeof record));
}

void codecs() {
  auto x = torch::randn({3, 5000});
  for (auto c : {proto::RAW, proto::FP16, proto::BLOCKWISE8}) {
    const auto name = proto::codec_Name(c);
    const auto values = encode_floats(x.data_ptr<float>(), 5000, c);
    seed("float_codec", name, raw(static_cast<uint8_t>(c)) + raw(int32_t{5000}) + values);
    seed("tensor_codec", name, encode_tensor(x, c).SerializeAsString());
  }
  seed("tensor_codec", "INT64", make_int64_tensor({1, 2, 3, 4, 5, 6}, {2, 3}).SerializeAsString());
}

void wire_message() {
  proto::forward_request f;
  f.set_stage(0);
  f.set_microbatch_id(7);
  f.set_trainer_id("t1");
  *f.mutable_inputs() = make_int64_tensor({1, 2, 3, 4}, {2, 2});
  seed("wire_message", "forward_stage0", raw(uint8_t{0}) + framed(encode_parts(f)));
  proto::backward_request b;
  b.set_stage(1);
  *b.mutable_inputs() = encode_tensor(torch::randn({2, 2, 8}), proto::BLOCKWISE8);
  *b.mutable_output_grad() = encode_tensor(torch::randn({2, 2, 8}), proto::FP16);
  seed("wire_message", "backward_stage1", raw(uint8_t{1}) + framed(encode_parts(b)));
  proto::forward_reply r;
  *r.mutable_outputs() = encode_tensor(torch::randn({2, 2, 8}), proto::RAW);
  seed("wire_message", "forward_reply", raw(uint8_t{2}) + framed(encode_parts(r)));
  proto::register_server reg;
  reg.set_stage(1);
  reg.set_server_id("s1.0-4711");
  reg.set_host("10.0.0.2");
  reg.set_port(7000);
  reg.set_num_stages(4);
  reg.set_config_hash(42);
  seed("wire_message", "register_server", raw(uint8_t{3}) + reg.SerializeAsString());
}

void checkpoint() {
  const auto dir = fs::temp_directory_path() / ("swarm-seeds-" + std::to_string(::getpid()));
  checkpoint_store store{dir.string(), 1};
  auto path = store.write({checkpoint_header::kind::stage, 1, 4, 42, 120}, std::string(300, 'p'));
  if (!path)
    throw std::runtime_error("cannot write a checkpoint under " + dir.string());
  std::ifstream in(*path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  seed("checkpoint", "stage_step120", raw(int64_t{120}) + bytes);
  seed("checkpoint", "position", raw(int64_t{0}) + encode_position({12, 768, "rng"}));
  fs::remove_all(dir);
}

void data() {
  const auto dir = fs::temp_directory_path() / ("swarm-seeds-data-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto file = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 200; ++i)
    tokens.push_back((i * 37) % 500);
  if (write_shard((dir / "s2.bin").string(), tokens, 3, 42, 500) ||
      write_shard((dir / "s4.bin").string(), tokens, 3, 42, 70000))
    throw std::runtime_error("cannot write a shard under " + dir.string());
  seed("shard", "width2", file(dir / "s2.bin"));
  seed("shard", "width4", file(dir / "s4.bin"));
  seed("shard", "header_only", file(dir / "s2.bin").substr(0, shard_header_bytes));
  // A small real model: text of a few hundred distinct words of letters.
  std::ofstream text(dir / "text.txt");
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz";
  for (int line = 0; line < 3000; ++line) {
    for (int w = 0; w < 12; ++w) {
      const int word = (line * 7 + w * 13) % 400;
      for (int c = 0; c < 2 + word % 5; ++c)
        text << letters[static_cast<size_t>((word * 31 + c * 7) % 26)];
      text << (w % 5 == 4 ? ". " : " ");
    }
    text << "\n";
  }
  text.close();
  tokenizer_training t;
  t.files = {(dir / "text.txt").string()};
  t.vocab = 320;
  t.out = (dir / "seed.model").string();
  if (auto e = train_tokenizer(t, [](const std::string&) {}))
    throw std::runtime_error("cannot train the seed tokenizer: " + e.what());
  seed("tokenizer_file", "bpe320", file(dir / "seed.model"));
  fs::remove_all(dir);
}

void safetensors() {
  // Hugging Face names and dtypes, a metadata block, an empty tensor.
  const std::string w(4 * 6, '\x3f'), g(2 * 3, '\x01'), ids(8 * 2, '\0');
  auto file = write_safetensors({{"model.layers.0.self_attn.q_proj.weight", "F32", {2, 3}, w},
                                 {"model.norm.weight", "BF16", {3}, g},
                                 {"position_ids", "I64", {2}, ids},
                                 {"empty", "F16", {0}, ""}},
                                {{"format", "pt"}});
  if (!file)
    throw std::runtime_error(file.error().what());
  seed("safetensors", "small", *file);
}

void config(const fs::path& source) {
  std::ifstream in(source / "config" / "tiny");
  const std::string tiny((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  seed("config", "tiny_file", std::string(1, '\1') + tiny);
  const std::string flags[] = {"--max-steps", "5", "--compression", "blockwise8", "--checkpoint-every", "30s"};
  std::string argv(1, '\0');
  for (const auto& f : flags)
    argv += f + std::string(1, '\0');
  argv.pop_back();
  seed("config", "flags", argv);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR SOURCE_DIR\n");
    return 2;
  }
  root = argv[1];
  bulk_frame();
  basp_guard();
  codecs();
  wire_message();
  checkpoint();
  data();
  safetensors();
  config(argv[2]);
  std::printf("%d seeds written under %s\n", written, root.c_str());
  return 0;
}
