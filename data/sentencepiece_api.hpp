#pragma once
// The one door to SentencePiece. Debian's libsentencepiece carries its own
// copy of protobuf 3.14 and exports its symbols; a process that also loads
// libprotobuf 3.21 (swarm's wire schema, libtorch) crashed as soon as both
// were linked: libprotobuf's start-up called sentencepiece's copy. So the
// library is never linked: data/sentencepiece_shim.cpp is built as its own
// shared object (libswarm_sentencepiece.so, beside the binaries) and
// tokenizer.cpp loads it with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), which keeps
// its protobuf to itself. The shim and its callers share libstdc++, so the
// table below passes standard types.

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace swarm {

struct sentencepiece_api {
  int version;  ///< sentencepiece_api_version
  /// A processor from a serialized model, or null with `err` set.
  void* (*load)(const std::string& model, std::string* err);
  void (*release)(void* processor);
  void (*info)(const void* processor, int* vocab, int* bos, int* eos);
  bool (*encode)(const void* processor, std::string_view text, std::vector<int>* ids, std::string* err);
  /// The text of `ids` (every id below the vocabulary).
  bool (*decode)(const void* processor, const std::vector<int>& ids, std::string* text, std::string* err);
  /// Trains on the non-empty lines of `files`; the model's bytes into `model`.
  bool (*train)(const std::unordered_map<std::string, std::string>& spec, const std::vector<std::string>& files,
                const std::function<void(const std::string&)>& say, std::string* model, std::string* err);
};

constexpr int sentencepiece_api_version = 2;

}  // namespace swarm

/// The shim's one exported symbol.
extern "C" const swarm::sentencepiece_api* swarm_sentencepiece_api();
