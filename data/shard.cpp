#include "data/shard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace swarm {

namespace {

constexpr char magic[8] = {'S', 'W', 'R', 'M', 'T', 'O', 'K', 'S'};

template <class T>
void put(std::string& out, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out[at + i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
}

template <class T>
T get(const unsigned char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

uint32_t crc(const void* data, size_t n, uint32_t from = 0) {
  // zlib takes a uInt length: feed large buffers in pieces.
  auto c = static_cast<uLong>(from);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const auto piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, piece);
    p += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(c);
}

error bad(const std::string& path, const std::string& what) {
  return {errc::BAD_CONFIG, "shard '" + path + "': " + what};
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint32_t token_width(uint32_t vocab) { return vocab <= 65536 ? 2 : 4; }

std::string encode_shard_header(const shard_header& h) {
  std::string out(shard_header_bytes, '\0');
  std::memcpy(out.data(), magic, sizeof magic);
  put<uint32_t>(out, 8, shard_version);
  put<uint32_t>(out, 12, h.width);
  put<uint64_t>(out, 16, h.tokens);
  put<uint64_t>(out, 24, h.documents);
  put<uint64_t>(out, 32, h.tokenizer_hash);
  put<uint32_t>(out, 40, h.vocab);
  put<uint32_t>(out, 44, h.tokens_crc);
  put<uint32_t>(out, 60, crc(out.data(), 60));
  return out;
}

result<shard_header> decode_shard_header(const void* bytes, size_t n) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  if (n < shard_header_bytes)
    return error{errc::BAD_CONFIG, "shorter than a shard header (" + std::to_string(n) + " of 64 bytes)"};
  if (std::memcmp(p, magic, sizeof magic) != 0)
    return error{errc::BAD_CONFIG, "not a token shard (no SWRMTOKS magic): made by --role prepare?"};
  if (get<uint32_t>(p + 60) != crc(p, 60))
    return error{errc::BAD_CONFIG, "header checksum does not match: the header is corrupt"};
  if (const auto v = get<uint32_t>(p + 8); v != shard_version)
    return error{errc::BAD_CONFIG,
                 "format version " + std::to_string(v) + ", this build reads version " + std::to_string(shard_version)};
  shard_header h;
  h.width = get<uint32_t>(p + 12);
  h.tokens = get<uint64_t>(p + 16);
  h.documents = get<uint64_t>(p + 24);
  h.tokenizer_hash = get<uint64_t>(p + 32);
  h.vocab = get<uint32_t>(p + 40);
  h.tokens_crc = get<uint32_t>(p + 44);
  if (h.width != 2 && h.width != 4)
    return error{errc::BAD_CONFIG, "token width " + std::to_string(h.width) + " bytes (2 or 4)"};
  if (h.vocab == 0 || h.width != token_width(h.vocab))
    return error{errc::BAD_CONFIG,
                 "vocabulary " + std::to_string(h.vocab) + " does not fit token width " + std::to_string(h.width)};
  if (h.tokens > (uint64_t{1} << 40))
    return error{errc::BAD_CONFIG, "claims " + std::to_string(h.tokens) + " tokens (at most 2^40)"};
  return h;
}

error write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t documents,
                  uint64_t tokenizer_hash, uint32_t vocab) {
  shard_header h;
  h.width = token_width(vocab);
  h.tokens = tokens.size();
  h.documents = documents;
  h.tokenizer_hash = tokenizer_hash;
  h.vocab = vocab;
  std::string body(tokens.size() * h.width, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab)
      return {errc::INTERNAL,
              "token " + std::to_string(tokens[i]) + " is outside the vocabulary of " + std::to_string(vocab)};
    for (uint32_t b = 0; b < h.width; ++b)
      body[i * h.width + b] = static_cast<char>((tokens[i] >> (8 * b)) & 0xff);
  }
  h.tokens_crc = crc(body.data(), body.size());
  const auto tmp = path + ".part";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << encode_shard_header(h) << body;
    out.flush();
    if (!out)
      return {errc::INTERNAL, "cannot write '" + tmp + "': " + std::strerror(errno)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return {errc::INTERNAL, "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno)};
  return {};
}

result<std::shared_ptr<const shard>> shard::open(const std::string& path, uint64_t expected_tokenizer) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return bad(path, std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return bad(path, "not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  unsigned char head[shard_header_bytes];
  const auto got = pread(fd, head, sizeof head, 0);
  auto h = decode_shard_header(head, got < 0 ? 0 : static_cast<size_t>(got));
  if (!h)
    return bad(path, h.error().what());
  if (h->tokenizer_hash != expected_tokenizer)
    return bad(path, "made with tokenizer " + hex(h->tokenizer_hash) + ", this run's tokenizer is " +
                         (expected_tokenizer ? hex(expected_tokenizer) : std::string{"bytes"}) +
                         " (pass the --tokenizer the shards were prepared with: prepare copies it into their folder "
                         "as tokenizer.model)");
  const uint64_t want = shard_header_bytes + h->tokens * h->width;
  if (size != want)
    return bad(path, "is " + std::to_string(size) + " bytes, its header says " + std::to_string(want) +
                         (size < want ? " (truncated)" : " (bytes after the last token)"));
  // Stream the tokens once: checksum and range, without mapping them all.
  std::vector<unsigned char> buf(1 << 20);
  uint32_t c = 0;
  uint64_t at = shard_header_bytes;
  while (at < size) {
    const auto n = pread(fd, buf.data(), std::min<uint64_t>(buf.size(), size - at), static_cast<off_t>(at));
    if (n <= 0)
      return bad(path, n < 0 ? std::strerror(errno) : "ends early while being read");
    c = crc(buf.data(), static_cast<size_t>(n), c);
    for (ssize_t i = 0; i + h->width <= n; i += h->width) {  // buffer size is a multiple of both widths
      const uint32_t token = h->width == 2 ? get<uint16_t>(&buf[i]) : get<uint32_t>(&buf[i]);
      if (token >= h->vocab)
        return bad(path, "token " + std::to_string(token) + " at " +
                             std::to_string((at + i - shard_header_bytes) / h->width) +
                             " is outside its vocabulary of " + std::to_string(h->vocab));
    }
    at += static_cast<uint64_t>(n);
  }
  if (c != h->tokens_crc)
    return bad(path, "token checksum does not match: the file is corrupt");
  std::shared_ptr<shard> s(new shard());
  s->path_ = path;
  s->header_ = *h;
  s->fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (s->fd_ < 0)
    return bad(path, std::string{"fcntl: "} + std::strerror(errno));
  s->inode_ = static_cast<uint64_t>(st.st_ino);
  s->bytes_ = size;
  s->mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return std::shared_ptr<const shard>(std::move(s));
}

error shard::read(int64_t from, int64_t n, int64_t* out) const {
  struct stat st {};
  const int64_t mtime_ns =
      fstat(fd_, &st) != 0 ? -1 : static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (mtime_ns != mtime_ns_ || static_cast<uint64_t>(st.st_size) != bytes_ ||
      static_cast<uint64_t>(st.st_ino) != inode_)
    return bad(path_,
               "changed since it was checked (rewritten in place while this process reads it?): restart to "
               "check it again; prepare writes new shards aside and renames them in, which is safe");
  const size_t w = header_.width, bytes = static_cast<size_t>(n) * w;
  std::vector<unsigned char> buf(bytes);
  const auto got =
      pread(fd_, buf.data(), bytes, static_cast<off_t>(shard_header_bytes + static_cast<size_t>(from) * w));
  if (got != static_cast<ssize_t>(bytes))
    return bad(path_, got < 0 ? std::strerror(errno) : "ends early: changed since it was checked?");
  for (int64_t t = 0; t < n; ++t) {
    const auto* p = &buf[static_cast<size_t>(t) * w];
    const uint32_t token = w == 2 ? get<uint16_t>(p) : get<uint32_t>(p);
    if (token >= header_.vocab)
      return bad(path_, "token " + std::to_string(token) + " at " + std::to_string(from + t) +
                            " is outside its vocabulary of " + std::to_string(header_.vocab) +
                            ": changed since it was checked?");
    out[t] = token;
  }
  return {};
}

shard::~shard() {
  if (fd_ >= 0)
    ::close(fd_);
}

}  // namespace swarm
