#pragma once
// The tokenizer every role of a swarm shares: `bytes` (each byte one token,
// vocabulary 256: the --corpus path) or a SentencePiece model file (BPE with
// BOS/EOS and byte fallback, so no text is ever unknown), trained by
// train_tokenizer() through the library.
//
// The model file's FNV-1a hash is folded into the model config's hash
// (model_config::tokenizer_hash), so a peer with another tokenizer is refused
// like a peer with another model.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace swarm {

class tokenizer {
public:
  /// "bytes", or the path of a SentencePiece model. Errors name the file.
  [[nodiscard]] static result<std::shared_ptr<const tokenizer>> open(const std::string& spec);
  ~tokenizer();

  [[nodiscard]] bool is_bytes() const { return sp_ == nullptr; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] uint32_t vocab() const { return vocab_; }
  /// FNV-1a 64 of the model file; 0 for bytes.
  [[nodiscard]] uint64_t hash() const { return hash_; }
  /// End-of-document id; -1 for bytes (which have none).
  [[nodiscard]] int eos() const { return eos_; }
  [[nodiscard]] int bos() const { return bos_; }
  /// Token ids of `text` (UTF-8 for a model; any bytes for bytes). Safe from
  /// several threads at once.
  [[nodiscard]] result<std::vector<int>> encode(std::string_view text) const;
  /// The text of `ids`; BAD_REQUEST for an id outside the vocabulary.
  [[nodiscard]] result<std::string> decode(const std::vector<int>& ids) const;

private:
  tokenizer() = default;
  tokenizer(const tokenizer&) = delete;
  tokenizer& operator=(const tokenizer&) = delete;
  std::string name_ = "bytes";
  void* sp_ = nullptr;  ///< a SentencePieceProcessor inside the shim (data/sentencepiece_api.hpp)
  uint32_t vocab_ = 256;
  uint64_t hash_ = 0;
  int eos_ = -1, bos_ = -1;
};

struct tokenizer_training {
  std::vector<std::string> files;  ///< text files (UTF-8), one sentence per line
  int vocab = 8000;
  std::string out;  ///< the model file to write
  int threads = 2;
  int64_t max_lines = 2'000'000;  ///< lines sampled for training (SentencePiece's input_sentence_size)
};

/// Trains a BPE model: unk 0, BOS 1, EOS 2, no PAD, byte fallback, digits
/// split, text kept as it is (no normalisation, so what goes in comes back).
/// Writes `out` through a temporary file. `say` gets progress lines.
[[nodiscard]] error train_tokenizer(const tokenizer_training& t, const std::function<void(const std::string&)>& say);

/// Whether `bytes` is valid UTF-8 (the prepare and tokenizer roles' test of a text file).
[[nodiscard]] bool valid_utf8(std::string_view bytes);

}  // namespace swarm
