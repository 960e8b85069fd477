#include "apps/data_roles.hpp"

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "data/prepare.hpp"
#include "data/shard_set.hpp"

namespace swarm {

namespace {

int threads_of(const app_config& cfg) {
  return cfg.threads > 0 ? cfg.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// A line every `period` while a long call that reports nothing of its own
/// runs (SentencePiece's trainer: its log stream cannot be used from the
/// shim), so a person sees it working; say() prints between those lines.
class heartbeat {
public:
  heartbeat(std::string what, std::chrono::seconds period) : what_(std::move(what)) {
    thread_ = std::thread([this, period] {
      std::unique_lock<std::mutex> lock(m_);
      for (auto beats = 1; !cv_.wait_for(lock, period, [this] { return done_; }); ++beats)
        std::cout << what_ << " (" << beats * period.count() << " s)" << std::endl;
    });
  }
  ~heartbeat() {
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  heartbeat(const heartbeat&) = delete;
  heartbeat& operator=(const heartbeat&) = delete;
  void say(const std::string& line) {
    std::lock_guard<std::mutex> lock(m_);
    std::cout << line << std::endl;
  }

private:
  std::string what_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

result<std::shared_ptr<const token_source>> shards_of(const app_config& cfg, const std::string& split) {
  auto set = shard_set::open(cfg.trainer.data, split, cfg.model.tokenizer_hash, cfg.model.seq_len + 1);
  if (!set)
    return set.error();
  for (const auto& s : (*set)->shards())
    if (s->header().vocab != cfg.model.vocab)
      return error{errc::BAD_CONFIG, "shard '" + s->path() + "' has a vocabulary of " +
                                         std::to_string(s->header().vocab) + ", the model " +
                                         std::to_string(cfg.model.vocab)};
  return std::shared_ptr<const token_source>(*set);
}

}  // namespace

result<std::shared_ptr<const tokenizer>> use_tokenizer(app_config& cfg) {
  auto tok = tokenizer::open(cfg.model.tokenizer);
  if (!tok)
    return tok;
  if (cfg.model.vocab_fixed && cfg.model.vocab != (*tok)->vocab())
    return error{errc::BAD_CONFIG, "--vocab " + std::to_string(cfg.model.vocab) + ", but tokenizer '" + (*tok)->name() +
                                       "' has " + std::to_string((*tok)->vocab()) + " ids (leave --vocab at auto)"};
  cfg.model.vocab = (*tok)->vocab();
  cfg.model.tokenizer_hash = (*tok)->hash();
  return tok;
}

result<std::shared_ptr<const token_source>> training_text(const app_config& cfg) {
  if (!cfg.trainer.data.empty())
    return shards_of(cfg, "train");
  if (!cfg.model.tokenizer.empty() && cfg.model.tokenizer != "bytes")
    return error{errc::BAD_CONFIG, "--tokenizer " + cfg.model.tokenizer +
                                       " needs --data (token shards made with it by --role prepare); --corpus is "
                                       "raw bytes"};
  try {
    return std::shared_ptr<const token_source>(
        std::make_shared<const corpus>(corpus::load(cfg.trainer.corpus, cfg.model.seq_len + 1)));
  } catch (const std::exception& e) {
    return error{errc::BAD_CONFIG, e.what()};
  }
}

result<std::shared_ptr<const token_source>> validation_text(const app_config& cfg) { return shards_of(cfg, "val"); }

int run_tokenizer(const app_config& cfg, const tokenizer& tok) {
  if (cfg.data.encode) {
    // One line of ids per line of text, for scripts and checks.
    std::string line, out;
    while (std::getline(std::cin, line)) {
      auto ids = tok.encode(line);
      if (!ids) {
        std::cerr << "swarm: tokenizer: " << ids.error().what() << "\n";
        return 2;
      }
      out.clear();
      for (size_t i = 0; i < ids->size(); ++i)
        out += (i ? " " : "") + std::to_string((*ids)[i]);
      std::cout << out << '\n';
    }
    return 0;
  }
  auto files = list_inputs(cfg.data.inputs());
  if (!files) {
    std::cerr << "swarm: tokenizer: " << files.error().what() << "\n";
    return 2;
  }
  tokenizer_training t;
  int64_t bytes = 0;
  for (const auto& f : *files) {
    std::ifstream in(f.path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!valid_utf8(text.str())) {
      if (f.named) {
        std::cerr << "swarm: tokenizer: '" << f.path << "' is not UTF-8 text\n";
        return 2;
      }
      std::cerr << "swarm: tokenizer: skipped " << f.path << ": not UTF-8 text\n";
      continue;
    }
    bytes += static_cast<int64_t>(text.str().size());
    t.files.push_back(f.path);
  }
  if (t.files.empty()) {
    std::cerr << "swarm: tokenizer: no text files in the inputs\n";
    return 2;
  }
  t.vocab = cfg.data.vocab_size;
  t.out = cfg.out;
  t.threads = threads_of(cfg);
  std::cout << "tokenizer: training a BPE model of " << t.vocab << " ids on " << t.files.size() << " files ("
            << fixed(static_cast<double>(bytes) / 1e6, 1) << " MB), " << t.threads << " threads" << std::endl;
  const auto started = std::chrono::steady_clock::now();
  {
    heartbeat beat("tokenizer: training", std::chrono::seconds(10));
    if (auto e = train_tokenizer(t, [&beat](const std::string& line) { beat.say("tokenizer: " + line); })) {
      std::cerr << "swarm: tokenizer: " << e.what() << "\n";
      return e.code() == errc::BAD_CONFIG ? 2 : 1;
    }
  }
  auto made = tokenizer::open(t.out);
  if (!made) {
    std::cerr << "swarm: tokenizer: " << made.error().what() << "\n";
    return 1;
  }
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>((*made)->hash()));
  std::cout << "tokenizer: wrote " << t.out << " (" << (*made)->vocab() << " ids, hash " << hash << ") in "
            << fixed(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 1) << " s"
            << std::endl;
  return 0;
}

int run_prepare(const app_config& cfg, const tokenizer& tok) {
  prepare_settings s;
  s.inputs = cfg.data.inputs();
  s.out_dir = cfg.out;
  s.val_fraction = cfg.data.val_fraction;
  s.threads = threads_of(cfg);
  s.shard_tokens = cfg.data.shard_tokens;
  std::cout << "prepare: " << s.inputs.size() << " inputs -> " << s.out_dir << " with " << tok.name() << " ("
            << tok.vocab() << " ids), " << s.threads << " threads" << std::endl;
  auto sum = prepare_shards(s, tok, [](const std::string& line) { std::cout << line << std::endl; });
  if (!sum) {
    std::cerr << "swarm: prepare: " << sum.error().what() << "\n";
    return sum.error().code() == errc::BAD_CONFIG ? 2 : 1;
  }
  const auto& r = *sum;
  const auto per_token = [](int64_t bytes, int64_t tokens) { return fixed(tokens ? double(bytes) / tokens : 0, 2); };
  std::ostringstream report;
  report << "prepare: done in " << fixed(r.seconds, 1) << " s ("
         << fixed((r.bytes + r.val_bytes) / 1e6 / std::max(r.seconds, 1e-9), 1) << " MB/s): " << r.files << " files ("
         << r.skipped_files << " skipped)\n"
         << "  train: " << r.documents << " documents, " << r.tokens << " tokens, " << fixed(r.bytes / 1e6, 1)
         << " MB, " << per_token(r.bytes, r.tokens) << " bytes per token, " << r.shards << " shards\n"
         << "  validation: " << r.val_documents << " documents, " << r.val_tokens << " tokens, "
         << per_token(r.val_bytes, r.val_tokens) << " bytes per token, " << r.val_shards << " shards\n";
  if (r.val_documents == 0 && cfg.data.val_fraction > 0)
    report << "  warning: no document was held out (" << r.documents << " documents at --val-fraction "
           << cfg.data.val_fraction << "): --eval-every needs more documents or a larger fraction\n";
  std::cout << report.str();
  std::ofstream(std::filesystem::path(s.out_dir) / "prepared.txt") << report.str();
  return 0;
}

}  // namespace swarm
