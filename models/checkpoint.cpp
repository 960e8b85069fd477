#include "models/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/log.hpp"
#include "base/hash.hpp"

namespace swarm {

namespace fs = std::filesystem;

namespace {

constexpr char magic[8] = {'S', 'W', 'R', 'M', 'C', 'K', 'P', 'T'};
constexpr uint32_t format_version = 1;

/// On disk, little-endian as this machine writes it (x86-64 and aarch64 alike).
struct raw_header {
  char magic[8];
  uint32_t version;
  uint32_t kind;
  int32_t index;
  uint32_t num_stages;
  uint64_t config_hash;
  int64_t step;
  uint64_t payload_bytes;
  uint64_t payload_fnv;
  uint64_t header_fnv;  ///< over every field above
};
static_assert(sizeof(raw_header) == 64, "the header is 64 bytes on disk");

uint64_t header_checksum(const raw_header& h) { return fnv1a64(&h, offsetof(raw_header, header_fnv)); }

std::string prefix(checkpoint_header::kind what) {
  return what == checkpoint_header::kind::stage ? "stage-" : "trainer-";
}

std::string file_name(int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%012lld.ckpt", static_cast<long long>(step));
  return name;
}

/// The step a file's name says, or nullopt for anything else in the folder.
std::optional<int64_t> step_of(const std::string& name) {
  if (name.size() != 22 || name.rfind("step-", 0) != 0 || name.substr(17) != ".ckpt")
    return std::nullopt;
  const auto digits = name.substr(5, 12);
  if (digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(digits);
}

/// Checkpoint files of a folder, newest (highest step) first.
std::vector<std::pair<int64_t, fs::path>> list_steps(const fs::path& folder) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    if (auto step = step_of(entry.path().filename().string()))
      out.emplace_back(*step, entry.path());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

/// Temporary files of writers that no longer run: left by a SIGKILL mid-write.
void remove_dead_partials(const fs::path& folder) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const auto name = entry.path().filename().string();
    const auto at = name.rfind(".tmp.");
    if (name.empty() || name[0] != '.' || at == std::string::npos)
      continue;
    const long pid = std::atol(name.c_str() + at + 5);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      fs::remove(entry.path(), ec);
  }
}

error io_error(const std::string& what, const std::string& path) {
  return error(errc::INTERNAL, what + " " + path + ": " + std::strerror(errno));
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool fsync_dir(const fs::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

result<checkpoint_data> parse_checkpoint(const std::string& bytes, int64_t named_step) {
  raw_header h;
  if (bytes.size() < sizeof h)
    return error(errc::BAD_REQUEST, "torn: " + std::to_string(bytes.size()) + " bytes, shorter than a header");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, magic, sizeof magic) != 0)
    return error(errc::BAD_REQUEST, "not a swarm checkpoint (bad magic)");
  if (h.header_fnv != header_checksum(h))
    return error(errc::BAD_REQUEST, "header checksum does not match (corrupt)");
  if (h.version != format_version)
    return error(errc::BAD_REQUEST, "format version " + std::to_string(h.version) + ", this build reads " +
                                        std::to_string(format_version));
  if (bytes.size() - sizeof h != h.payload_bytes)
    return error(errc::BAD_REQUEST, "torn: " + std::to_string(bytes.size() - sizeof h) + " payload bytes of " +
                                        std::to_string(h.payload_bytes));
  if (fnv1a64(bytes.data() + sizeof h, h.payload_bytes) != h.payload_fnv)
    return error(errc::BAD_REQUEST, "payload checksum does not match (corrupt)");
  if (h.step != named_step)
    return error(errc::BAD_REQUEST,
                 "holds step " + std::to_string(h.step) + ", its name says " + std::to_string(named_step));
  checkpoint_data out;
  out.header = {static_cast<checkpoint_header::kind>(h.kind), h.index, h.num_stages, h.config_hash, h.step};
  out.payload = bytes.substr(sizeof h);
  return out;
}

namespace {

/// Reads and checks one file; the reason it is unusable otherwise.
result<checkpoint_data> read_checked(const fs::path& path, int64_t named_step) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return error(errc::INTERNAL, "cannot open: " + std::string{std::strerror(errno)});
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto data = parse_checkpoint(bytes, named_step);
  if (data)
    data->path = path.string();
  return data;
}

error misfit(const checkpoint_data& d, uint32_t num_stages, uint64_t config_hash) {
  const auto& h = d.header;
  if (h.config_hash == config_hash && h.num_stages == num_stages)
    return error{};
  return error(errc::BAD_CONFIG,
               "checkpoint " + d.path + " was written by a model of config hash " + std::to_string(h.config_hash) +
                   " cut into " + std::to_string(h.num_stages) + " stages; this process has config hash " +
                   std::to_string(config_hash) + " and " + std::to_string(num_stages) +
                   " stages: run with that model config, or point --checkpoint-dir at another folder");
}

/// The temporary file being written now, for abandon_partial_write(), which
/// may run on another thread at exit: a fixed buffer and a flag, no allocation.
char partial_path[4096];
std::atomic<bool> partial_pending{false};

}  // namespace

checkpoint_store::checkpoint_store(std::string dir, int keep) : dir_(std::move(dir)), keep_(std::max(1, keep)) {}

std::string checkpoint_store::folder(checkpoint_header::kind what, int index) const {
  return (fs::path(dir_) / (prefix(what) + std::to_string(index))).string();
}

result<std::string> checkpoint_store::write(const checkpoint_header& h, const std::string& payload) const {
  const fs::path folder_path = folder(h.what, h.index);
  std::error_code ec;
  fs::create_directories(folder_path, ec);
  if (ec)
    return error(errc::INTERNAL, "cannot create " + folder_path.string() + ": " + ec.message());
  remove_dead_partials(folder_path);
  raw_header raw{};
  std::memcpy(raw.magic, magic, sizeof magic);
  raw.version = format_version;
  raw.kind = static_cast<uint32_t>(h.what);
  raw.index = h.index;
  raw.num_stages = h.num_stages;
  raw.config_hash = h.config_hash;
  raw.step = h.step;
  raw.payload_bytes = payload.size();
  raw.payload_fnv = fnv1a64(payload.data(), payload.size());
  raw.header_fnv = header_checksum(raw);
  const auto final_path = folder_path / file_name(h.step);
  const auto tmp = folder_path / ("." + file_name(h.step) + ".tmp." + std::to_string(::getpid()));
  if (tmp.string().size() < sizeof partial_path) {
    std::strcpy(partial_path, tmp.c_str());
    partial_pending = true;
  }
  auto done = [&](error err) -> result<std::string> {
    partial_pending = false;
    if (err) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return err;
    }
    return final_path.string();
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return done(io_error("cannot create", tmp.string()));
  const bool written = write_all(fd, reinterpret_cast<const char*>(&raw), sizeof raw) &&
                       write_all(fd, payload.data(), payload.size()) && ::fsync(fd) == 0;
  auto err = written ? error{} : io_error("cannot write", tmp.string());
  ::close(fd);
  if (err)
    return done(std::move(err));
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    return done(io_error("cannot rename into", final_path.string()));
  fsync_dir(folder_path);  // the rename itself survives a crash only once the folder is synced
  const auto files = list_steps(folder_path);
  for (size_t i = static_cast<size_t>(keep_); i < files.size(); ++i)
    fs::remove(files[i].second, ec);
  return done(error{});
}

result<std::optional<checkpoint_data>> checkpoint_store::newest(checkpoint_header::kind what, int index,
                                                                uint32_t num_stages, uint64_t config_hash) const {
  const fs::path folder_path = folder(what, index);
  remove_dead_partials(folder_path);
  int skipped = 0;
  for (const auto& [step, path] : list_steps(folder_path)) {
    auto data = read_checked(path, step);
    if (!data) {
      get_logger("checkpoint")->warn("skipping checkpoint {}: {}", path.string(), describe(data.error()));
      ++skipped;
      continue;
    }
    if (auto err = misfit(*data, num_stages, config_hash))
      return err;
    if (data->header.what != what || data->header.index != index)
      return error(errc::BAD_CONFIG, "checkpoint " + data->path + " belongs to another folder (" +
                                         prefix(data->header.what) + std::to_string(data->header.index) +
                                         "): move it back");
    data->skipped = skipped;
    return std::optional<checkpoint_data>{std::move(*data)};
  }
  return std::optional<checkpoint_data>{};
}

std::optional<checkpoint_store::latest> checkpoint_store::latest_written(checkpoint_header::kind what,
                                                                         int index) const {
  const auto files = list_steps(folder(what, index));
  if (files.empty())
    return std::nullopt;
  std::error_code ec;
  const auto written = fs::last_write_time(files.front().second, ec);
  const double age = ec ? 0.0 : std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count();
  return latest{files.front().first, age};
}

std::vector<int> checkpoint_store::indices(checkpoint_header::kind what) const {
  std::vector<int> out;
  std::error_code ec;
  const auto p = prefix(what);
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(p, 0) != 0 || !entry.is_directory() || name.size() == p.size() ||
        name.find_first_not_of("0123456789", p.size()) != std::string::npos || name.size() > p.size() + 6)
      continue;
    out.push_back(std::stoi(name.substr(p.size())));
  }
  std::sort(out.begin(), out.end());
  return out;
}

error checkpoint_store::check_all(uint32_t num_stages, uint64_t config_hash) const {
  for (auto what : {checkpoint_header::kind::stage, checkpoint_header::kind::trainer})
    for (const int index : indices(what))
      if (auto found = newest(what, index, num_stages, config_hash); !found)
        return found.error();
  return error{};
}

void checkpoint_store::abandon_partial_write() {
  if (partial_pending)
    ::unlink(partial_path);
}

std::string encode_position(const trainer_position& p) {
  return "swarm-trainer-position 1\nstep " + std::to_string(p.step) + "\nsamples " + std::to_string(p.samples) +
         "\nrng " + p.rng + "\n";
}

result<trainer_position> decode_position(const std::string& text) {
  std::istringstream in(text);
  std::string magic, version, key_step, key_samples, key_rng;
  trainer_position p;
  in >> magic >> version >> key_step >> p.step >> key_samples >> p.samples >> key_rng >> std::ws;
  std::getline(in, p.rng);
  if (!in || magic != "swarm-trainer-position" || version != "1" || key_step != "step" || key_samples != "samples" ||
      key_rng != "rng" || p.step < 0 || p.samples < 0 || p.rng.empty())
    return error(errc::BAD_REQUEST, "not a trainer position");
  return p;
}

result<int> claim_trainer_slot(const checkpoint_store& store, int wanted) {
  std::error_code ec;
  fs::create_directories(store.dir(), ec);
  if (ec)
    return error(errc::INTERNAL, "cannot create " + store.dir() + ": " + ec.message());
  for (int slot = std::max(wanted, 0); slot < (wanted >= 0 ? wanted + 1 : 4096); ++slot) {
    const auto lock = (fs::path(store.dir()) / ("trainer-" + std::to_string(slot) + ".lock")).string();
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return io_error("cannot open", lock);
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
      return slot;  // fd stays open: the lock lives as long as the process
    ::close(fd);
  }
  if (wanted >= 0)
    return error(errc::BAD_CONFIG, "trainer slot " + std::to_string(wanted) + " of " + store.dir() +
                                       " is held by another running trainer (--trainer-slot)");
  return error(errc::INTERNAL, "every trainer slot of " + store.dir() + " is held");
}

bool checkpoint_due(int64_t step, const std::optional<checkpoint_store::latest>& newest, int64_t every_steps,
                    double every_s, double since_s) {
  if (step <= 0 || (newest && newest->step == step))
    return false;
  if (every_steps > 0)
    return step % every_steps == 0;
  return newest ? newest->age_s >= every_s : since_s >= every_s;
}

}  // namespace swarm
