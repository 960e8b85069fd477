// The docs and the config: README.md and docs/*.md document every flag of swarm and
// swarm-sim and every metrics event; their tables are the ones generated from the keys.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "base/metrics_events.hpp"
#include "config/config.hpp"
#include "config/keys.hpp"
#include "sim/scenario.hpp"
#include "config_helpers.hpp"

using namespace swarm;
using namespace swarm::testing::config_helpers;

namespace {

/// README.md and every docs/*.md, one after the other.
std::string docs_text() {
  std::vector<std::filesystem::path> files{SWARM_SOURCE_DIR "/README.md"};
  for (const auto& entry : std::filesystem::directory_iterator(SWARM_SOURCE_DIR "/docs"))
    if (entry.path().extension() == ".md")
      files.push_back(entry.path());
  std::string all;
  for (const auto& f : files) {
    std::ifstream in(f);
    all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return all;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Checks that `docs` names every --flag that `help` lists; how many it checked.
int check_documented(const std::string& help, const std::string& docs) {
  int flags = 0;
  for (size_t pos = help.find("--"); pos != std::string::npos; pos = help.find("--", pos + 2)) {
    const auto end = help.find_first_not_of("abcdefghijklmnopqrstuvwxyz-", pos + 2);
    const auto flag = help.substr(pos, end - pos);
    if (flag.size() <= 2)
      continue;
    INFO(flag);
    CHECK(docs.find(flag) != std::string::npos);
    ++flags;
  }
  return flags;
}

}  // namespace

TEST_CASE("the docs document every flag and every metrics event", "[config][readme]") {
  const std::string readme = docs_text();
  REQUIRE_FALSE(readme.empty());
  const auto help = parse({"--help"}).message;
  CHECK(check_documented(help, readme) > 30);

  // Every event some source file emits has a row in base/metrics_events.cpp (so in docs/metrics.md).
  std::set<std::string> documented;
  for (const auto& e : swarm::metrics_events())
    documented.insert(e.name);
  int events = 0;
  for (const char* dir : {"/actors", "/apps", "/models", "/sim", "/net", "/observe"})
    for (const auto& entry : std::filesystem::directory_iterator(std::string{SWARM_SOURCE_DIR} + dir)) {
      if (!entry.is_regular_file())
        continue;
      std::ifstream src(entry.path());
      const std::string code((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
      for (size_t pos = code.find("emit(\""); pos != std::string::npos; pos = code.find("emit(\"", pos + 1)) {
        const auto name = code.substr(pos + 6, code.find('"', pos + 6) - pos - 6);
        INFO(entry.path().string() << " emits " << name);
        CHECK(documented.count(name) == 1);
        ++events;
      }
    }
  CHECK(events >= 7);
}

TEST_CASE("the docs document every swarm-sim flag", "[config][readme][sim]") {
  const std::string readme = docs_text();
  CHECK(check_documented(parse_sim({"--help"}).message, readme) > 40);
}

TEST_CASE("the markdown tables have one row per key", "[config][keys]") {
  const auto count_rows = [](const std::string& md, const std::string& flag) {
    int n = 0;
    for (size_t pos = md.find("| `--" + flag + "` |"); pos != std::string::npos;
         pos = md.find("| `--" + flag + "` |", pos + 1))
      ++n;
    return n;
  };
  const auto rows_of = [](const std::string& md) {
    int n = 0;
    for (size_t pos = md.find("\n| `--"); pos != std::string::npos; pos = md.find("\n| `--", pos + 1))
      ++n;
    return n;
  };
  /// Every flag --help lists (but --help, --config and --help-markdown) has one row.
  const auto check_help = [&](const std::string& help, const std::string& md) {
    int flags = 0;
    for (size_t pos = help.find("  --"); pos != std::string::npos; pos = help.find("  --", pos + 1)) {
      const auto end = help.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", pos + 4);
      const auto flag = help.substr(pos + 4, end - pos - 4);
      if (flag == "help" || flag == "config")
        continue;
      INFO("--" << flag);
      CHECK(count_rows(md, flag) == 1);
      ++flags;
    }
    return flags;
  };
  const auto md = parse({"--help-markdown"}).message;
  CHECK(rows_of(md) == static_cast<int>(swarm_keys().size()));
  CHECK(check_help(parse({"--help"}).message, md) == static_cast<int>(swarm_keys().size()));

  swarm::sim::scenario s;
  const auto sim_keys = swarm::sim::bind_keys(s).size();
  const auto sim_md = parse_sim({"--help-markdown"}).message;
  CHECK(rows_of(sim_md) == static_cast<int>(sim_keys));
  CHECK(check_help(parse_sim({"--help"}).message, sim_md) == static_cast<int>(sim_keys));
  CHECK(sim_keys > 50);
}

TEST_CASE("the docs' flag and event tables are the generated ones", "[config][keys][readme]") {
  const auto block = [&](const std::string& doc, const std::string& marker) {
    const auto text = file_text(SWARM_SOURCE_DIR "/docs/" + doc);
    const auto begin = "<!-- " + marker + ": begin -->\n";
    const auto b = text.find(begin);
    const auto e = text.find("<!-- " + marker + ": end -->");
    return b == std::string::npos || e == std::string::npos ? std::string{}
                                                            : text.substr(b + begin.size(), e - b - begin.size());
  };
  const std::tuple<std::string, std::string, std::string> tables[] = {
      {"flags.md", "swarm --help-markdown", parse({"--help-markdown"}).message},
      {"simulator.md", "swarm-sim --help-markdown", parse_sim({"--help-markdown"}).message},
      {"metrics.md", "swarm --help-metrics-markdown", parse({"--help-metrics-markdown"}).message}};
  for (const auto& [doc, marker, generated] : tables) {
    const auto fresh = "/tmp/" + doc;
    INFO("docs/" << doc << "'s table is stale: paste " << fresh << " (`" << marker << "`) between its markers");
    const bool same = block(doc, marker) == generated;
    if (!same)
      std::ofstream(fresh) << generated;
    CHECK(same);
  }
}
