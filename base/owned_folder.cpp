#include "base/owned_folder.hpp"

#include <filesystem>
#include <fstream>

namespace swarm {

namespace fs = std::filesystem;

error reset_owned_folder(const std::string& dir, const std::string& marker) {
  std::error_code ec;
  const auto st = fs::symlink_status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      return {errc::BAD_CONFIG, dir + " exists and is not a folder (a file or a link): move it away"};
    const bool empty = fs::is_empty(dir, ec);
    if (!empty && !fs::exists(fs::path(dir) / marker, ec))
      return {errc::BAD_CONFIG, dir + " holds files this program did not put there (no " + marker +
                                    " in it): move it away, or write the run elsewhere; only a folder it made "
                                    "itself is emptied"};
    fs::remove_all(dir, ec);
    if (ec)
      return {errc::BAD_CONFIG, "cannot empty " + dir + ": " + ec.message()};
  }
  fs::create_directories(dir, ec);
  if (ec)
    return {errc::BAD_CONFIG, "cannot make " + dir + ": " + ec.message()};
  std::ofstream(fs::path(dir) / marker) << "made by swarm, which empties this folder at each start\n";
  if (!fs::exists(fs::path(dir) / marker, ec))
    return {errc::BAD_CONFIG, "cannot write " + dir + "/" + marker};
  return {};
}

}  // namespace swarm
