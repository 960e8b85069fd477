#pragma once
// Token shards: what `--role prepare` writes and trainers read with `--data`.
// A shard is one file: a 64-byte header, then the tokens, little-endian, each
// `width` bytes (2 while the vocabulary fits in 16 bits, else 4). Documents
// follow each other, each ended by the tokenizer's EOS id. docs/data.md has
// the table; tests/unit/test_data.cpp breaks every field of it.
//
//   offset size  field
//        0    8  magic "SWRMTOKS"
//        8    4  version (1)
//       12    4  token width, bytes: 2 or 4
//       16    8  tokens
//       24    8  documents
//       32    8  tokenizer hash (FNV-1a 64 of the tokenizer file)
//       40    4  vocabulary size (every token is below it)
//       44    4  CRC-32 (zlib) of the token bytes
//       48   12  reserved, zero
//       60    4  CRC-32 (zlib) of bytes 0..59
//
// Checksums are checked once when a shard is opened (streamed through a small
// buffer, so the check does not map the whole file into the process); each
// window is then read with pread, which the page cache backs: a trainer's own
// memory does not grow with the corpus. Not mmap: a file truncated in place
// after its checks would kill the trainer with SIGBUS on the next read, and
// one rewritten in place would hand it tokens nothing checked; a read checks
// the file again instead (a stat and a pread, about a microsecond a window).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace swarm {

constexpr size_t shard_header_bytes = 64;
constexpr uint32_t shard_version = 1;

struct shard_header {
  uint32_t width = 2;
  uint64_t tokens = 0;
  uint64_t documents = 0;
  uint64_t tokenizer_hash = 0;
  uint32_t vocab = 0;
  uint32_t tokens_crc = 0;
};

/// The header's 64 bytes (both checksums filled in: tokens_crc as given).
[[nodiscard]] std::string encode_shard_header(const shard_header& h);

/// Reads a header from `bytes` (at least shard_header_bytes): magic, version,
/// width and the header's own checksum. Errors say which field is wrong.
[[nodiscard]] result<shard_header> decode_shard_header(const void* bytes, size_t n);

/// The token width for a vocabulary: 2 bytes up to 65,536 ids, else 4.
[[nodiscard]] uint32_t token_width(uint32_t vocab);

/// Writes tokens as one shard at `path` (through a temporary file renamed into
/// place, so a crash leaves no half shard under the final name).
[[nodiscard]] error write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t documents,
                                uint64_t tokenizer_hash, uint32_t vocab);

/// One shard, checked and mapped read-only.
class shard {
public:
  /// Opens and checks `path`: header, file size, both checksums, every token
  /// below the vocabulary. A shard of another tokenizer than
  /// `expected_tokenizer` (its hash; 0: bytes) is refused, naming both.
  [[nodiscard]] static result<std::shared_ptr<const shard>> open(const std::string& path, uint64_t expected_tokenizer);
  ~shard();
  shard(const shard&) = delete;
  shard& operator=(const shard&) = delete;

  [[nodiscard]] const shard_header& header() const { return header_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] int64_t size() const { return static_cast<int64_t>(header_.tokens); }
  /// Copies tokens [from, from + n) to `out` (0 <= from, from + n <= size()).
  /// Each read checks that the file is still the one checked at open (same
  /// inode, size and modification time), that it gave every byte, and that
  /// every token is below the vocabulary: a shard rewritten in place after
  /// its checks is an error naming it, never a SIGBUS or a token the model
  /// cannot embed.
  [[nodiscard]] error read(int64_t from, int64_t n, int64_t* out) const;

private:
  shard() = default;
  std::string path_;
  shard_header header_;
  int fd_ = -1;  ///< kept open: the file as it was checked, read with pread
  uint64_t inode_ = 0, bytes_ = 0;
  int64_t mtime_ns_ = 0;
};

}  // namespace swarm
