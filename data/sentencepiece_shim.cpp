// libswarm_sentencepiece.so: SentencePiece behind a table of functions
// (data/sentencepiece_api.hpp says why it is a shared object of its own).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <fstream>
#include <memory>

#include "data/sentencepiece_api.hpp"

namespace sentencepiece::logging {
void SetMinLogLevel(int level);  // exported by libsentencepiece, not in its public headers
}

namespace {

using sentencepiece::SentencePieceProcessor;

/// Feeds SentencePiece's trainer the non-empty lines of the files, in order.
class line_iterator final : public sentencepiece::SentenceIterator {
public:
  line_iterator(const std::vector<std::string>& files, const std::function<void(const std::string&)>& say)
      : files_(files), say_(say) {
    Next();
  }
  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }
  void Next() override {
    while (true) {
      if (in_.is_open() && std::getline(in_, line_)) {
        if (line_.empty())
          continue;
        ++lines_;
        return;
      }
      if (next_file_ == files_.size()) {
        done_ = true;
        say_("read " + std::to_string(lines_) + " lines from " + std::to_string(files_.size()) + " files");
        return;
      }
      in_.close();
      in_.clear();
      in_.open(files_[next_file_++], std::ios::binary);
    }
  }

private:
  const std::vector<std::string>& files_;
  const std::function<void(const std::string&)>& say_;
  size_t next_file_ = 0;
  std::ifstream in_;
  std::string line_;
  int64_t lines_ = 0;
  bool done_ = false;
};

/// SentencePiece throws on some files it cannot use (Darts, building the
/// trie of a piece holding a NUL byte: found by the tokenizer_file fuzz
/// target); an exception must not cross into a caller built without a
/// handler for it, so each entry point turns one into `err`.
template <class F>
auto guarded(std::string* err, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    *err = std::string("SentencePiece failed: ") + e.what();
  } catch (...) {
    *err = "SentencePiece failed with an unknown exception";
  }
  return {};
}

void* load(const std::string& model, std::string* err) {
  return guarded(err, [&]() -> void* {
    auto p = std::make_unique<SentencePieceProcessor>();
    if (const auto st = p->LoadFromSerializedProto(model); !st.ok()) {
      *err = st.ToString();
      return nullptr;
    }
    return p.release();
  });
}

void release(void* p) { delete static_cast<SentencePieceProcessor*>(p); }

void info(const void* p, int* vocab, int* bos, int* eos) {
  const auto* sp = static_cast<const SentencePieceProcessor*>(p);
  *vocab = sp->GetPieceSize();
  *bos = sp->bos_id();
  *eos = sp->eos_id();
}

bool encode(const void* p, std::string_view text, std::vector<int>* ids, std::string* err) {
  return guarded(err, [&] {
    if (const auto st = static_cast<const SentencePieceProcessor*>(p)->Encode(text, ids); !st.ok()) {
      *err = st.ToString();
      return false;
    }
    return true;
  });
}

bool decode(const void* p, const std::vector<int>& ids, std::string* text, std::string* err) {
  return guarded(err, [&] {
    if (const auto st = static_cast<const SentencePieceProcessor*>(p)->Decode(ids, text); !st.ok()) {
      *err = st.ToString();
      return false;
    }
    return true;
  });
}

bool train(const std::unordered_map<std::string, std::string>& spec, const std::vector<std::string>& files,
           const std::function<void(const std::string&)>& say, std::string* model, std::string* err) {
  return guarded(err, [&] {
    line_iterator lines(files, say);
    if (const auto st = sentencepiece::SentencePieceTrainer::Train(spec, &lines, model); !st.ok()) {
      *err = st.ToString();
      return false;
    }
    return true;
  });
}

const swarm::sentencepiece_api api{swarm::sentencepiece_api_version, load, release, info, encode, decode, train};

}  // namespace

extern "C" __attribute__((visibility("default"))) const swarm::sentencepiece_api* swarm_sentencepiece_api() {
  // SentencePiece logs to std::cerr. Loaded with RTLD_DEEPBIND, its std::cerr
  // is libstdc++'s own object, never constructed (the executable's copy is
  // the one in use): a warning while training on 1.8 M lines crashed there.
  // So it logs nothing; the roles print their own progress.
  sentencepiece::logging::SetMinLogLevel(3);
  return &api;
}
