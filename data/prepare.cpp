#include "data/prepare.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/hash.hpp"
#include "data/shard.hpp"

namespace swarm {

namespace fs = std::filesystem;

namespace {

constexpr size_t cut_after = 64 << 10;    // a long file is cut at a blank line after this many bytes
constexpr size_t batch_bytes = 16 << 20;  // text encoded in parallel at once

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

std::string read_all(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  ok = static_cast<bool>(in) || in.eof();
  return out.str();
}

/// One document waiting to be encoded.
struct pending {
  std::string_view text;
  bool val = false;
  std::vector<int> ids;
  error failed;
};

class shard_writer {
public:
  shard_writer(std::string dir, std::string split, const tokenizer& tok, int64_t per_shard)
      : dir_(std::move(dir)), split_(std::move(split)), tok_(tok), per_shard_(per_shard) {}

  error add(const std::vector<int>& ids) {
    for (const int id : ids)
      tokens_.push_back(static_cast<uint32_t>(id));
    tokens_.push_back(static_cast<uint32_t>(tok_.eos()));
    ++documents_;
    return static_cast<int64_t>(tokens_.size()) >= per_shard_ ? flush() : error{};
  }

  error flush() {
    if (tokens_.empty())
      return {};
    char name[32];
    std::snprintf(name, sizeof name, "-%05lld.bin", static_cast<long long>(written_));
    if (auto e =
            write_shard((fs::path(dir_) / (split_ + name)).string(), tokens_, documents_, tok_.hash(), tok_.vocab()))
      return e;
    ++written_;
    tokens_.clear();
    documents_ = 0;
    return {};
  }

  [[nodiscard]] int64_t written() const { return written_; }

private:
  std::string dir_, split_;
  const tokenizer& tok_;
  int64_t per_shard_;
  std::vector<uint32_t> tokens_;
  uint64_t documents_ = 0;
  int64_t written_ = 0;
};

void encode_all(std::vector<pending>& docs, const tokenizer& tok, int threads) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < docs.size(); i = next++) {
      auto ids = tok.encode(docs[i].text);
      if (ids)
        docs[i].ids = std::move(*ids);
      else
        docs[i].failed = ids.error();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (auto& t : pool)
    t.join();
}

}  // namespace

std::vector<document_span> split_documents(const std::string& text) {
  std::vector<document_span> out;
  size_t begin = 0, pos = 0;
  auto close = [&](size_t end, size_t next) {
    if (end > begin)
      out.push_back({begin, end});
    begin = next;
  };
  while (pos < text.size()) {
    const size_t eol = text.find('\n', pos);
    const size_t line_end = eol == std::string::npos ? text.size() : eol;
    const size_t next = eol == std::string::npos ? text.size() : eol + 1;
    const std::string_view line(text.data() + pos, line_end - pos);
    if (line == "%")  // fortune's separator: one entry ends
      close(pos, next);
    else if (line.empty() && pos - begin >= cut_after)
      close(pos, next);
    pos = next;
  }
  close(text.size(), text.size());
  return out;
}

bool held_out(const std::string& name, int64_t index, double val_fraction) {
  const auto key = name + "#" + std::to_string(index);
  const uint64_t h = fnv1a64(key.data(), key.size());
  return static_cast<double>(h % 1'000'000) < val_fraction * 1'000'000;
}

result<std::vector<input_file>> list_inputs(const std::vector<std::string>& inputs) {
  std::vector<input_file> out;
  if (inputs.empty())
    return error{errc::BAD_CONFIG, "no --input: name the text files or folders to read"};
  for (const auto& in : inputs) {
    std::error_code ec;
    if (!fs::exists(in, ec))
      return error{errc::BAD_CONFIG, "input '" + in + "' does not exist"};
    if (!fs::is_directory(in, ec)) {
      out.push_back({in, fs::path(in).filename().string(), true});
      continue;
    }
    std::vector<input_file> found;
    for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      const auto name = it->path().filename().string();
      // fortune keeps a binary index (*.dat) and a symlinked copy (*.u8) per file.
      if (it->is_symlink() || !it->is_regular_file() || (name.size() > 4 && name.substr(name.size() - 4) == ".dat"))
        continue;
      found.push_back({it->path().string(), fs::relative(it->path(), in).string(), false});
    }
    if (ec)
      return error{errc::BAD_CONFIG, "input folder '" + in + "': " + ec.message()};
    if (found.empty())
      return error{errc::BAD_CONFIG, "input folder '" + in + "' holds no files"};
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

namespace {

/// The bytes of all inputs, for the progress lines.
int64_t total_size(const std::vector<input_file>& files) {
  int64_t total_bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    total_bytes += static_cast<int64_t>(fs::file_size(f.path, ec));
  }
  return total_bytes;
}

/// Makes the output folder and removes the shards of an earlier run from it.
error clear_out_dir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec)
    return error{errc::BAD_CONFIG, "cannot make the output folder '" + out_dir + "': " + ec.message()};
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {  // old shards would mix with the new
    const auto name = entry.path().filename().string();
    if (entry.path().extension() == ".bin" && (name.rfind("train-", 0) == 0 || name.rfind("val-", 0) == 0))
      fs::remove(entry.path(), ec);
  }
  return {};
}

/// Encodes `batch` and adds its documents to the train or val shards.
error write_batch(std::vector<pending>& batch, const tokenizer& tok, int threads, prepare_summary& sum,
                  shard_writer& train, shard_writer& val) {
  encode_all(batch, tok, threads);
  for (auto& d : batch) {
    if (d.failed)
      return d.failed;
    auto& counts_tokens = d.val ? sum.val_tokens : sum.tokens;
    counts_tokens += static_cast<int64_t>(d.ids.size()) + 1;
    if (auto e = (d.val ? val : train).add(d.ids))
      return e;
  }
  return {};
}

/// Queues the documents of `text` (the file `name`), each held out for
/// validation or not, and counts them.
void add_documents(std::vector<pending>& batch, prepare_summary& sum, const std::string& text, const std::string& name,
                   double val_fraction) {
  const auto spans = split_documents(text);
  for (size_t d = 0; d < spans.size(); ++d) {
    const bool is_val = held_out(name, static_cast<int64_t>(d), val_fraction);
    const auto bytes = static_cast<int64_t>(spans[d].end - spans[d].begin);
    (is_val ? sum.val_documents : sum.documents)++;
    (is_val ? sum.val_bytes : sum.bytes) += bytes;
    batch.push_back({std::string_view(text).substr(spans[d].begin, spans[d].end - spans[d].begin), is_val, {}, {}});
  }
}

/// A progress line: `done` of `files` files read, `read_bytes` of `total_bytes` in `secs`.
std::string progress(size_t done, size_t files, int64_t read_bytes, int64_t total_bytes, double secs) {
  const double rate = static_cast<double>(read_bytes) / std::max(secs, 1e-9);
  return "prepare: " + std::to_string(done) + "/" + std::to_string(files) + " files, " + mb(read_bytes) + " of " +
         mb(total_bytes) + ", " + mb(static_cast<int64_t>(rate)) + "/s, ETA " +
         std::to_string(static_cast<int64_t>(static_cast<double>(total_bytes - read_bytes) / std::max(rate, 1.0))) +
         " s";
}

/// Writes the last shards and counts them; an error when none holds training text.
error finish_shards(shard_writer& train, shard_writer& val, prepare_summary& sum,
                    const std::function<void(const std::string&)>& say) {
  if (auto e = train.flush())
    return e;
  if (auto e = val.flush())
    return e;
  sum.shards = train.written();
  sum.val_shards = val.written();
  for (const auto& skipped : sum.skipped)
    say("prepare: skipped " + skipped);
  if (sum.shards == 0)
    return error{errc::BAD_CONFIG, "no training text in the inputs (" + std::to_string(sum.files) + " text files, " +
                                       std::to_string(sum.skipped_files) + " skipped)"};
  return {};
}

}  // namespace

result<prepare_summary> prepare_shards(const prepare_settings& s, const tokenizer& tok,
                                       const std::function<void(const std::string&)>& say) {
  using clock = std::chrono::steady_clock;
  const auto started = clock::now();
  if (tok.is_bytes())
    return error{errc::BAD_CONFIG,
                 "prepare needs a SentencePiece --tokenizer (bytes have no end-of-document "
                 "token; --corpus trains on raw bytes without preparing)"};
  auto files = list_inputs(s.inputs);
  if (!files)
    return files.error();
  const int64_t total_bytes = total_size(*files);
  if (auto e = clear_out_dir(s.out_dir))
    return e;

  prepare_summary sum;
  shard_writer train(s.out_dir, "train", tok, s.shard_tokens), val(s.out_dir, "val", tok, s.shard_tokens);
  std::vector<std::string> texts;  // the batch's files, kept while their documents are encoded
  std::vector<pending> batch;
  size_t batch_size = 0;
  int64_t read_bytes = 0;
  auto last_said = started;

  auto drain = [&]() -> error {
    if (auto e = write_batch(batch, tok, s.threads, sum, train, val))
      return e;
    batch.clear();
    texts.clear();
    batch_size = 0;
    return {};
  };

  texts.reserve(files->size());
  for (size_t i = 0; i < files->size(); ++i) {
    const auto& f = (*files)[i];
    bool ok = false;
    auto text = read_all(f.path, ok);
    read_bytes += static_cast<int64_t>(text.size());
    if (!ok)
      return error{errc::BAD_CONFIG, "cannot read '" + f.path + "'"};
    if (!valid_utf8(text)) {
      if (f.named)
        return error{errc::BAD_CONFIG, "'" + f.path + "' is not UTF-8 text (prepare reads plain text files)"};
      sum.skipped.push_back(f.path + ": not UTF-8 text");
      ++sum.skipped_files;
      continue;
    }
    ++sum.files;
    texts.push_back(std::move(text));
    const auto& kept = texts.back();
    add_documents(batch, sum, kept, f.name, s.val_fraction);
    batch_size += kept.size();
    // texts must not reallocate while views into it are pending: reserved above.
    if (batch_size >= batch_bytes || i + 1 == files->size())
      if (auto e = drain())
        return e;
    const auto now = clock::now();
    if (now - last_said >= std::chrono::seconds(2)) {
      last_said = now;
      say(progress(i + 1, files->size(), read_bytes, total_bytes,
                   std::chrono::duration<double>(now - started).count()));
    }
  }
  if (auto e = drain())
    return e;
  if (auto e = finish_shards(train, val, sum, say))
    return e;
  std::error_code ec;
  fs::copy_file(tok.name(), fs::path(s.out_dir) / "tokenizer.model", fs::copy_options::overwrite_existing, ec);
  if (ec)
    return error{errc::INTERNAL, "cannot copy the tokenizer into '" + s.out_dir + "': " + ec.message()};
  sum.seconds = std::chrono::duration<double>(clock::now() - started).count();
  return sum;
}

}  // namespace swarm
