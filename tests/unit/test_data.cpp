// data/: token shards (round trip and every corruption), shard sets, the
// samplers, the tokenizer and --role prepare's pipeline. No torch, no CAF.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "data/corpus.hpp"
#include "data/prepare.hpp"
#include "data/shard.hpp"
#include "data/shard_set.hpp"
#include "data/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace swarm;

namespace {

struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& tag)
      : path(fs::temp_directory_path() / ("swarm-test-data-" + tag + "-" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
  [[nodiscard]] std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// Rewrites header bytes [at, at + n) and fixes the header checksum, so the
/// field itself is what the reader must catch.
void patch_header(const std::string& path, size_t at, const std::string& bytes) {
  auto file = slurp(path);
  file.replace(at, bytes.size(), bytes);
  const auto c = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(file.data()), 60));
  for (int i = 0; i < 4; ++i)
    file[60 + i] = static_cast<char>((c >> (8 * i)) & 0xff);
  spit(path, file);
}

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i)
    s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::vector<uint32_t> ramp(size_t n, uint32_t vocab) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = static_cast<uint32_t>((i * 7919) % vocab);
  return t;
}

/// Real English text for the tokenizer: the fortunes package's files.
std::string fortunes_text(size_t at_most) {
  std::string text;
  for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    const auto name = e.path().filename().string();
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat" || e.path().extension() == ".u8")
      continue;
    auto bytes = slurp(e.path().string());
    if (valid_utf8(bytes))
      text += bytes;
    if (text.size() >= at_most)
      break;
  }
  return text.substr(0, std::min(text.size(), at_most));
}

/// One small BPE model for the whole test binary (training takes seconds).
const std::string& small_model() {
  static const std::string path = [] {
    const auto dir = fs::temp_directory_path() / ("swarm-test-data-model-" + std::to_string(getpid()));
    fs::create_directories(dir);
    const auto text = (dir / "text.txt").string();
    spit(text, fortunes_text(1 << 20));
    tokenizer_training t;
    t.files = {text};
    t.vocab = 600;
    t.out = (dir / "small.model").string();
    t.threads = 2;
    REQUIRE_FALSE(train_tokenizer(t, [](const std::string&) {}));
    return t.out;
  }();
  return path;
}

}  // namespace

TEST_CASE("a shard reads back what was written, in either token width", "[data][shard]") {
  temp_dir dir("roundtrip");
  for (const uint32_t vocab : {600u, 65536u, 70000u}) {
    const auto tokens = ramp(10'000, vocab);
    const auto path = dir / ("s" + std::to_string(vocab) + ".bin");
    REQUIRE_FALSE(write_shard(path, tokens, 17, 0xabcdef, vocab));
    CHECK(fs::file_size(path) == shard_header_bytes + tokens.size() * token_width(vocab));
    auto s = shard::open(path, 0xabcdef);
    REQUIRE(s);
    const auto& h = (*s)->header();
    CHECK(h.width == (vocab <= 65536 ? 2u : 4u));
    CHECK(h.tokens == tokens.size());
    CHECK(h.documents == 17);
    CHECK(h.vocab == vocab);
    std::vector<int64_t> back(tokens.size());
    REQUIRE_FALSE((*s)->read(0, static_cast<int64_t>(tokens.size()), back.data()));
    CHECK(std::equal(back.begin(), back.end(), tokens.begin()));
    REQUIRE_FALSE((*s)->read(7, 3, back.data()));
    CHECK(back[0] == tokens[7]);
  }
  CHECK(write_shard(dir / "bad.bin", {5, 600}, 1, 1, 600).code() == errc::INTERNAL);  // 600 is outside [0, 600)
}

TEST_CASE("every corruption of a shard is refused, naming the file and what is wrong", "[data][shard]") {
  temp_dir dir("corrupt");
  const auto good = dir / "good.bin";
  REQUIRE_FALSE(write_shard(good, ramp(5000, 1000), 3, 42, 1000));
  const auto original = slurp(good);
  const auto path = dir / "train-00000.bin";
  auto refused = [&](const std::string& why) {
    auto s = shard::open(path, 42);
    REQUIRE_FALSE(s);
    CHECK(s.error().code() == errc::BAD_CONFIG);
    CHECK_THAT(s.error().what(), Catch::Contains(path) && Catch::Contains(why));
  };
  spit(path, original);
  REQUIRE(shard::open(path, 42));

  spit(path, original.substr(0, original.size() - 1));
  refused("truncated");
  spit(path, original + "x");
  refused("bytes after the last token");
  spit(path, original.substr(0, 30));
  refused("shorter than a shard header");
  spit(path, "");
  refused("shorter than a shard header");
  spit(path, "PK\x03\x04" + original.substr(4));
  refused("not a token shard");
  for (size_t at = 8; at < 60; ++at) {  // any header byte changed without fixing the checksum
    auto bad = original;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    spit(path, bad);
    refused("header checksum");
  }
  for (const size_t at : {size_t{64}, original.size() / 2, original.size() - 1}) {
    auto bad = original;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    spit(path, bad);
    refused("token checksum");
  }
  spit(path, original);
  patch_header(path, 8, le32(2));
  refused("format version 2");
  spit(path, original);
  patch_header(path, 12, le32(3));
  refused("token width 3");
  spit(path, original);
  patch_header(path, 40, le32(500));  // tokens up to 999 in a vocabulary of 500
  refused("outside its vocabulary of 500");
  spit(path, original);
  patch_header(path, 40, le32(70000));  // 4-byte vocabulary in a 2-byte shard
  refused("does not fit token width");
  spit(path, original);
  auto other = shard::open(path, 7);
  REQUIRE_FALSE(other);
  CHECK_THAT(other.error().what(), Catch::Contains("000000000000002a") && Catch::Contains("0000000000000007") &&
                                       Catch::Contains("--tokenizer"));
  CHECK_THAT(shard::open(dir / "missing.bin", 42).error().what(), Catch::Contains("missing.bin"));
}

TEST_CASE("a shard set reads its split only, never across a shard's end, and refuses what cannot train",
          "[data][shard]") {
  temp_dir dir("set");
  REQUIRE_FALSE(write_shard(dir / "train-00000.bin", std::vector<uint32_t>(100, 1), 1, 9, 600));
  REQUIRE_FALSE(write_shard(dir / "train-00001.bin", std::vector<uint32_t>(50, 2), 1, 9, 600));
  REQUIRE_FALSE(write_shard(dir / "train-00002.bin", std::vector<uint32_t>(5, 3), 1, 9, 600));  // shorter than a window
  REQUIRE_FALSE(write_shard(dir / "val-00000.bin", std::vector<uint32_t>(80, 4), 1, 9, 600));
  auto train = shard_set::open(dir.path.string(), "train", 9, 11);
  REQUIRE(train);
  CHECK((*train)->tokens() == 155);
  CHECK((*train)->windows(11) == (100 - 10) + (50 - 10));
  std::vector<int64_t> window(11);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < (*train)->windows(11); ++i) {
    REQUIRE_FALSE((*train)->copy(i, 11, window.data()));
    CHECK(std::set<int64_t>(window.begin(), window.end()).size() == 1);  // one shard's tokens only
    seen.insert(window[0]);
  }
  CHECK(seen == std::set<int64_t>{1, 2});  // never the validation shard's 4
  auto val = shard_set::open(dir.path.string(), "val", 9, 11);
  REQUIRE(val);
  CHECK((*val)->tokens() == 80);

  CHECK_THAT(shard_set::open(dir.path.string(), "train", 9, 101).error().what(),
             Catch::Contains("fewer than one window of 101"));
  CHECK_THAT(shard_set::open(dir.path.string(), "test", 9, 11).error().what(), Catch::Contains("holds no test-*.bin"));
  CHECK_THAT(shard_set::open(dir / "nowhere", "train", 9, 11).error().what(), Catch::Contains("does not exist"));
  CHECK_THAT(shard_set::open(dir.path.string(), "train", 8, 11).error().what(), Catch::Contains("train-00000.bin"));
  spit(dir / "train-00001.bin", slurp(dir / "train-00001.bin").substr(0, 70));
  CHECK_THAT(shard_set::open(dir.path.string(), "train", 9, 11).error().what(),
             Catch::Contains("train-00001.bin") && Catch::Contains("truncated"));
}

TEST_CASE("a shard rewritten in place after its checks is an error on read, never a crash", "[data][shard]") {
  temp_dir dir("rewritten");
  const auto path = dir / "train-00000.bin";
  // 20 KB: pages past the end of a truncated file are what a mapping turned into SIGBUS.
  const auto write = [&] { REQUIRE_FALSE(write_shard(path, std::vector<uint32_t>(10'000, 1), 1, 9, 600)); };
  std::vector<int64_t> window(11);
  // Truncated in place: through a mapping the next read was SIGBUS.
  write();
  auto set = shard_set::open(dir.path.string(), "train", 9, 11);
  REQUIRE(set);
  REQUIRE_FALSE((*set)->copy(9000, 11, window.data()));
  fs::resize_file(path, shard_header_bytes + 20);
  CHECK_THAT((*set)->copy(9000, 11, window.data()).what(),
             Catch::Contains("train-00000.bin") && Catch::Contains("changed since it was checked"));
  std::mt19937_64 rng(1);
  auto batch = sample_microbatch(**set, 2, 10, rng);
  REQUIRE_FALSE(batch);
  CHECK_THAT(batch.error().what(), Catch::Contains("changed since it was checked"));
  // Overwritten in place with tokens outside the vocabulary, even with its
  // modification time put back: refused, never handed to the model.
  fs::remove(path);
  write();
  set = shard_set::open(dir.path.string(), "train", 9, 11);
  REQUIRE(set);
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(shard_header_bytes + 2 * 50));
    f.write("\xff\xff", 2);
  }
  CHECK_THAT((*set)->copy(45, 11, window.data()).what(), Catch::Contains("changed since it was checked"));
  const timespec times[2] = {before.st_atim, before.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  CHECK_THAT((*set)->copy(45, 11, window.data()).what(), Catch::Contains("token 65535 at 50 is outside"));
  REQUIRE_FALSE((*set)->copy(0, 11, window.data()));  // the windows that did not change still read
}

TEST_CASE("the sampler is deterministic by seed, differs between seeds, and draws bytes as it always did",
          "[data][sampler]") {
  std::string bytes;
  for (int i = 0; i < 5000; ++i)
    bytes += static_cast<char>('a' + (i * 31) % 26);
  const corpus text(bytes);
  std::mt19937_64 a(7), b(7), c(8);
  const auto ma = *sample_microbatch(text, 4, 16, a);
  CHECK(ma.inputs == sample_microbatch(text, 4, 16, b)->inputs);
  CHECK(ma.inputs != sample_microbatch(text, 4, 16, c)->inputs);
  // The draws of the byte sampler before token sources existed: one uniform
  // start in [0, size - seq_len - 1] per sample. Checkpointed generators rely on it.
  std::mt19937_64 old(7);
  std::uniform_int_distribution<int64_t> start(0, text.size() - 16 - 1);
  for (int64_t s = 0; s < 4; ++s) {
    const int64_t i = start(old);
    for (int64_t t = 0; t < 16; ++t) {
      REQUIRE(ma.inputs[s * 16 + t] == static_cast<unsigned char>(bytes[i + t]));
      REQUIRE(ma.targets[s * 16 + t] == static_cast<unsigned char>(bytes[i + t + 1]));
    }
  }
  // The evaluation windows are fixed, laid end to end.
  CHECK(eval_windows(text, 16, 3) == std::vector<int64_t>{0, 17, 34});
  CHECK(eval_windows(corpus(std::string(40, 'x')), 16, 10).size() == 10);  // overlapping when short
  CHECK(eval_windows(corpus(std::string(10, 'x')), 16, 10).empty());
}

TEST_CASE("trainer slots seed their samplers: the same slot repeats its windows, slots and seeds draw apart",
          "[data][sampler]") {
  std::string bytes;
  for (int i = 0; i < 100000; ++i)
    bytes += static_cast<char>(i * 7919 % 251);
  const corpus text(bytes);
  const auto draw = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    return sample_microbatch(text, 8, 16, rng)->inputs;
  };
  CHECK(sampler_seed(1, 0) == sampler_seed(1, 0));
  CHECK(draw(sampler_seed(1, 0)) == draw(sampler_seed(1, 0)));
  std::set<uint64_t> seeds;
  std::set<std::vector<int64_t>> draws;
  for (uint64_t seed : {1, 2})
    for (uint64_t slot = 0; slot < 16; ++slot) {
      seeds.insert(sampler_seed(seed, slot));
      draws.insert(draw(sampler_seed(seed, slot)));
    }
  CHECK(seeds.size() == 32);
  CHECK(draws.size() == 32);
  // Mixed, not offset: neighbouring slots differ in about half their bits.
  const auto bits = __builtin_popcountll(sampler_seed(1, 0) ^ sampler_seed(1, 1));
  CHECK(bits > 16);
  CHECK(bits < 48);
}

TEST_CASE("valid_utf8 accepts UTF-8 and refuses what is not", "[data][tokenizer]") {
  CHECK(valid_utf8(""));
  CHECK(valid_utf8("plain ASCII\n"));
  CHECK(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  CHECK_FALSE(valid_utf8("\xff"));
  CHECK_FALSE(valid_utf8("caf\xc3"));                                        // cut short
  CHECK_FALSE(valid_utf8("\xc0\xaf"));                                       // overlong
  CHECK_FALSE(valid_utf8("\xed\xa0\x80"));                                   // a surrogate
  CHECK_FALSE(valid_utf8("\xf4\x90\x80\x80"));                               // past U+10FFFF
  CHECK_FALSE(valid_utf8(std::string("\x1f\x8b\x08\x00", 4) + "\x9c\xff"));  // gzip
}

TEST_CASE("a trained tokenizer has BOS, EOS, byte fallback and a stable hash", "[data][tokenizer]") {
  auto tok = tokenizer::open(small_model());
  REQUIRE(tok);
  CHECK((*tok)->vocab() == 600);
  CHECK((*tok)->bos() == 1);
  CHECK((*tok)->eos() == 2);
  CHECK((*tok)->hash() != 0);
  CHECK((*tok)->hash() == (*tokenizer::open(small_model()))->hash());
  auto ids = (*tok)->encode("The quick brown fox jumps over the lazy dog.\n\xe2\x82\xac\xf0\x9f\x98\x80");
  REQUIRE(ids);
  CHECK(ids->size() < 45);  // merges happened
  for (const int id : *ids) {
    CHECK(id >= 3);  // no unknown, no BOS/EOS inside text
    CHECK(id < 600);
  }
  auto bytes = tokenizer::open("bytes");
  REQUIRE(bytes);
  CHECK((*bytes)->vocab() == 256);
  CHECK((*bytes)->hash() == 0);
  CHECK(*(*bytes)->encode("a\xff") == std::vector<int>{'a', 0xff});
  temp_dir dir("tok");
  spit(dir / "not.model", "this is not a model");
  CHECK_THAT(tokenizer::open(dir / "not.model").error().what(),
             Catch::Contains("not.model") && Catch::Contains("not a SentencePiece model"));
  CHECK_THAT(tokenizer::open(dir / "none.model").error().what(), Catch::Contains("cannot be read"));
  // A model SentencePiece throws on while it loads (a piece with a NUL byte;
  // found by fuzzing): refused, not std::terminate.
  const std::string nul_piece("\x0a\x0e\x0a\x05<unk>\x15\0\0\0\0\x18\x02\x0a\x0c\x0a\x03\0%>\x15\0\0\0\0\x18\x0a", 30);
  spit(dir / "nul.model", nul_piece);
  CHECK_THAT(tokenizer::open(dir / "nul.model").error().what(),
             Catch::Contains("nul.model") && Catch::Contains("SentencePiece failed"));
}

TEST_CASE("documents: fortune entries, long files cut at blank lines; the split is a pure function of names",
          "[data][prepare]") {
  const std::string fortunes = "one\n%\ntwo\nlines\n%\n%\nthree\n";
  const auto spans = split_documents(fortunes);
  REQUIRE(spans.size() == 3);
  CHECK(fortunes.substr(spans[1].begin, spans[1].end - spans[1].begin) == "two\nlines\n");
  std::string long_text;
  for (int p = 0; p < 300; ++p)
    long_text += std::string(999, 'a' + p % 26) + "\n\n";  // 300 paragraphs of 1 KB
  const auto cut = split_documents(long_text);
  CHECK(cut.size() == 5);  // a cut at the first blank line after each 64 KiB
  CHECK(cut.front().begin == 0);
  CHECK(cut.back().end == long_text.size());
  CHECK(split_documents("").empty());
  int held = 0;
  for (int d = 0; d < 100'000; ++d)
    held += held_out("some/file.txt", d, 0.01);
  CHECK(held > 850);
  CHECK(held < 1150);
  CHECK(held_out("a.txt", 3, 0.5) == held_out("a.txt", 3, 0.5));
}

TEST_CASE(
    "prepare writes checked shards, skips binaries found in folders, refuses named ones, and does not "
    "depend on the thread count",
    "[data][prepare]") {
  auto tok = tokenizer::open(small_model());
  REQUIRE(tok);
  temp_dir dir("prepare");
  fs::create_directories(dir / "in/sub");
  const auto text = fortunes_text(600'000);
  spit(dir / "in/a.txt", text.substr(0, 300'000));
  spit(dir / "in/sub/b.txt", text.substr(300'000));
  spit(dir / "in/picture.png", std::string("\x89PNG\r\n\x1a\n\xff\xfe", 10));
  prepare_settings s;
  s.inputs = {dir / "in"};
  s.val_fraction = 0.05;
  s.shard_tokens = 20'000;
  std::vector<std::string> said;
  auto run = [&](int threads, const std::string& out) {
    s.threads = threads;
    s.out_dir = out;
    said.clear();
    return prepare_shards(s, **tok, [&](const std::string& l) { said.push_back(l); });
  };
  auto one = run(1, dir / "out1");
  REQUIRE(one);
  CHECK(one->files == 2);
  CHECK(one->skipped_files == 1);
  CHECK_THAT(said.back(), Catch::Contains("picture.png") && Catch::Contains("not UTF-8"));
  CHECK(one->documents > 1000);
  CHECK(one->val_documents > 0);
  CHECK(one->shards > 1);
  CHECK(one->val_shards >= 1);
  CHECK(fs::exists(dir / "out1/tokenizer.model"));
  auto two = run(2, dir / "out2");
  REQUIRE(two);
  for (const auto& e : fs::directory_iterator(dir / "out1"))
    if (e.path().extension() == ".bin")
      CHECK(slurp(e.path().string()) == slurp(dir / ("out2/" + e.path().filename().string())));
  // The shards hold the documents' tokens, each ended by EOS.
  auto train = shard_set::open(dir / "out1", "train", (*tok)->hash(), 65);
  REQUIRE(train);
  int64_t eos = 0, tokens = 0;
  for (const auto& sh : (*train)->shards()) {
    tokens += sh->size();
    std::vector<int64_t> ids(static_cast<size_t>(sh->size()));
    REQUIRE_FALSE(sh->read(0, sh->size(), ids.data()));
    eos += std::count(ids.begin(), ids.end(), 2);
    CHECK(ids.back() == 2);
  }
  CHECK(tokens == one->tokens);
  CHECK(eos == one->documents);
  // Bad input.
  s.inputs = {dir / "in/picture.png"};
  CHECK_THAT(run(1, dir / "out3").error().what(), Catch::Contains("picture.png") && Catch::Contains("not UTF-8"));
  fs::create_directories(dir / "empty");
  s.inputs = {dir / "empty"};
  CHECK_THAT(run(1, dir / "out3").error().what(), Catch::Contains("holds no files"));
  s.inputs = {dir / "nothing-here"};
  CHECK_THAT(run(1, dir / "out3").error().what(), Catch::Contains("does not exist"));
  s.inputs = {dir / "in"};
  CHECK_THAT(prepare_shards(s, **tokenizer::open("bytes"), [](const std::string&) {}).error().what(),
             Catch::Contains("SentencePiece"));
}
