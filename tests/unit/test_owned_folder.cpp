// base/owned_folder: a folder is emptied only when the program made it (its
// marker inside) or it is empty; a user's folder, a file or a link is refused
// and left as it was (--control-replicas deleted <metrics folder>/etcd whatever it held).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "base/owned_folder.hpp"

namespace fs = std::filesystem;
using swarm::reset_owned_folder;

TEST_CASE("reset_owned_folder empties only a folder it made", "[owned_folder]") {
  char root_template[] = "/tmp/swarm-owned-XXXXXX";
  const fs::path root = ::mkdtemp(root_template);
  const std::string dir = root / "etcd", marker = ".swarm-etcd";
  // Missing: made, with the marker. Made: emptied again, marker kept.
  REQUIRE_FALSE(reset_owned_folder(dir, marker));
  CHECK(fs::exists(fs::path(dir) / marker));
  std::ofstream(fs::path(dir) / "m0.log") << "old run";
  REQUIRE_FALSE(reset_owned_folder(dir, marker));
  CHECK_FALSE(fs::exists(fs::path(dir) / "m0.log"));
  CHECK(fs::exists(fs::path(dir) / marker));
  // An empty folder is taken.
  fs::remove_all(dir);
  fs::create_directory(dir);
  REQUIRE_FALSE(reset_owned_folder(dir, marker));
  // A user's folder without the marker: refused, untouched.
  const fs::path mine = root / "mine";
  fs::create_directory(mine);
  std::ofstream(mine / "thesis.tex") << "years of work";
  auto err = reset_owned_folder(mine.string(), marker);
  REQUIRE(err);
  CHECK(err.code() == swarm::errc::BAD_CONFIG);
  CHECK_THAT(err.what(), Catch::Contains("did not put there") && Catch::Contains(marker));
  CHECK(fs::exists(mine / "thesis.tex"));
  // A link to a folder that holds a marker, and a file: refused too.
  std::ofstream(mine / marker) << "";
  fs::create_directory_symlink(mine, root / "link");
  err = reset_owned_folder((root / "link").string(), marker);
  CHECK_THAT(err.what(), Catch::Contains("not a folder"));
  CHECK(fs::exists(mine / "thesis.tex"));
  std::ofstream(root / "file") << "x";
  CHECK(reset_owned_folder((root / "file").string(), marker));
  CHECK(fs::exists(root / "file"));
  fs::remove_all(root);
}
