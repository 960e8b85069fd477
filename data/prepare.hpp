#pragma once
// --role prepare: text files in, token shards out (data/shard.hpp).
//
// Documents: a file is one document, except that fortune files (a line
// holding only "%" between entries) give one document per entry, and a file
// over 64 KiB is cut at the first blank line after every 64 KiB. Each
// document is encoded on its own and ended by EOS.
//
// The validation split is by document and deterministic: a document is held
// out when the FNV-1a hash of its file's path (relative to the input it was
// found under) and its index in the file falls below `val_fraction` of the
// range. Same inputs, same split, whatever the thread count; adding files
// moves no other document.
//
// Text files only: a file named directly that is not UTF-8 is refused; one
// found inside a folder is skipped and named in the report (a folder of
// documentation often holds a stray binary).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "data/tokenizer.hpp"

namespace swarm {

struct prepare_settings {
  std::vector<std::string> inputs;  ///< files and folders
  std::string out_dir;
  double val_fraction = 0.005;
  int threads = 2;
  int64_t shard_tokens = int64_t{1} << 26;  ///< tokens per shard file (the last one holds the rest)
};

struct prepare_summary {
  int64_t files = 0, skipped_files = 0;
  std::vector<std::string> skipped;  ///< "path: why"
  int64_t documents = 0, val_documents = 0;
  int64_t bytes = 0, val_bytes = 0;
  int64_t tokens = 0, val_tokens = 0;  ///< EOS included
  int64_t shards = 0, val_shards = 0;
  double seconds = 0;
};

/// One document of a file: [begin, end) of its bytes.
struct document_span {
  size_t begin = 0, end = 0;
};

/// Where the documents of a file's text begin and end (rules above).
[[nodiscard]] std::vector<document_span> split_documents(const std::string& text);

/// Whether the document `index` of file `name` is held out.
[[nodiscard]] bool held_out(const std::string& name, int64_t index, double val_fraction);

/// Prepares the shards. `say` gets progress lines (every ~2 s) and the
/// report's lines. Errors name the file.
[[nodiscard]] result<prepare_summary> prepare_shards(const prepare_settings& s, const tokenizer& tok,
                                                     const std::function<void(const std::string&)>& say);

/// The text files under the inputs (folders recursively, name order), each
/// with the name it is known by for the split; bad inputs as errors.
struct input_file {
  std::string path, name;
  bool named = false;  ///< given directly, not found in a folder
};
[[nodiscard]] result<std::vector<input_file>> list_inputs(const std::vector<std::string>& inputs);

}  // namespace swarm
