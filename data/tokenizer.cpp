#include "data/tokenizer.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "base/hash.hpp"
#include "data/sentencepiece_api.hpp"

namespace swarm {

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SWARM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SWARM_SANITIZED 1
#endif
#endif

/// The shim, loaded once: beside this executable, else where the build put it.
const sentencepiece_api* shim(std::string* why) {
  static std::once_flag once;
  static const sentencepiece_api* api = nullptr;
  static std::string error;
  std::call_once(once, [] {
  // The sanitizers refuse RTLD_DEEPBIND; their builds load it plainly (fine
  // in a process without libprotobuf: test_data and the fuzz targets).
#ifdef SWARM_SANITIZED
    const int flags = RTLD_NOW | RTLD_LOCAL;
#else
    const int flags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif
    std::vector<std::string> tried;
    if (const char* env = std::getenv("SWARM_SENTENCEPIECE_SHIM"))
      tried.emplace_back(env);
    char exe[4096];
    if (const auto n = ::readlink("/proc/self/exe", exe, sizeof exe - 1); n > 0) {
      std::string dir(exe, static_cast<size_t>(n));
      tried.push_back(dir.substr(0, dir.rfind('/') + 1) + "libswarm_sentencepiece.so");
    }
#ifdef SWARM_SENTENCEPIECE_SHIM
    tried.emplace_back(SWARM_SENTENCEPIECE_SHIM);
#endif
    for (const auto& path : tried) {
      void* lib = ::dlopen(path.c_str(), flags);
      if (!lib) {
        error += std::string{error.empty() ? "" : "; "} + ::dlerror();
        continue;
      }
      using get_t = const sentencepiece_api* (*)();
      auto get = reinterpret_cast<get_t>(::dlsym(lib, "swarm_sentencepiece_api"));
      if (get && get()->version == sentencepiece_api_version) {
        api = get();
        return;
      }
      error += "; " + path + " is another version of the shim";
    }
  });
  if (!api && why)
    *why = "cannot load SentencePiece (libswarm_sentencepiece.so, built beside swarm): " + error;
  return api;
}

}  // namespace

tokenizer::~tokenizer() {
  if (sp_)
    shim(nullptr)->release(sp_);
}

result<std::shared_ptr<const tokenizer>> tokenizer::open(const std::string& spec) {
  std::shared_ptr<tokenizer> t(new tokenizer());
  if (spec == "bytes")
    return std::shared_ptr<const tokenizer>(std::move(t));
  std::ifstream in(spec, std::ios::binary);
  if (!in)
    return error{errc::BAD_CONFIG, "tokenizer '" + spec +
                                       "' cannot be read (a SentencePiece .model file, "
                                       "made by --role tokenizer, or 'bytes')"};
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const auto file = bytes.str();
  std::string why;
  const auto* api = shim(&why);
  if (!api)
    return error{errc::INTERNAL, why};
  t->sp_ = api->load(file, &why);
  if (!t->sp_)
    return error{errc::BAD_CONFIG, "tokenizer '" + spec + "' is not a SentencePiece model: " + why};
  int vocab = 0;
  api->info(t->sp_, &vocab, &t->bos_, &t->eos_);
  t->name_ = spec;
  t->vocab_ = static_cast<uint32_t>(vocab);
  t->hash_ = fnv1a64(file.data(), file.size());
  if (t->eos_ < 0)
    return error{errc::BAD_CONFIG, "tokenizer '" + spec + "' has no end-of-sequence piece (documents need one)"};
  return std::shared_ptr<const tokenizer>(std::move(t));
}

result<std::vector<int>> tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  if (!sp_) {
    ids.reserve(text.size());
    for (const unsigned char c : text)
      ids.push_back(c);
    return ids;
  }
  std::string why;
  if (!shim(nullptr)->encode(sp_, text, &ids, &why))
    return error{errc::BAD_REQUEST, "cannot encode: " + why};
  return ids;
}

result<std::string> tokenizer::decode(const std::vector<int>& ids) const {
  for (const int id : ids)
    if (id < 0 || static_cast<uint32_t>(id) >= vocab_)
      return error{errc::BAD_REQUEST,
                   "cannot decode id " + std::to_string(id) + ": the vocabulary has " + std::to_string(vocab_)};
  std::string text;
  if (!sp_) {
    text.reserve(ids.size());
    for (const int id : ids)
      text.push_back(static_cast<char>(id));
    return text;
  }
  std::string why;
  if (!shim(nullptr)->decode(sp_, ids, &text, &why))
    return error{errc::BAD_REQUEST, "cannot decode: " + why};
  return text;
}

error train_tokenizer(const tokenizer_training& t, const std::function<void(const std::string&)>& say) {
  // Text as it is: identity normalisation, spaces kept, newlines left to byte fallback.
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(t.vocab)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"num_threads", std::to_string(std::max(1, t.threads))},
      {"input_sentence_size", std::to_string(t.max_lines)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      {"minloglevel", "3"},  // see sentencepiece_shim.cpp
  };
  std::string why, model;
  const auto* api = shim(&why);
  if (!api)
    return {errc::INTERNAL, why};
  if (!api->train(spec, t.files, say, &model, &why))
    return {errc::BAD_CONFIG, "training the tokenizer failed: " + why};
  const auto tmp = t.out + ".part";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << model;
    if (!out.flush())
      return {errc::INTERNAL, "cannot write '" + tmp + "'"};
  }
  if (std::rename(tmp.c_str(), t.out.c_str()) != 0)
    return {errc::INTERNAL, "cannot rename '" + tmp + "' to '" + t.out + "'"};
  return {};
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned char c = p[i];
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (p[i + k] & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

}  // namespace swarm
