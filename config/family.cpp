#include "config/family.hpp"

#include <algorithm>
#include <stdexcept>

#include "config/families/families.hpp"

namespace swarm {

const std::vector<const model_family*>& model_families() {
  // The one table of model families: a new family is one row here (and its
  // descriptor in config/families/). Built on first use, so no static
  // initialisation order between translation units matters.
  static const std::vector<const model_family*> table = {&families::gpt(), &families::llama(), &families::qwen2()};
  return table;
}

const model_family* find_family(const std::string& name) {
  for (const auto* f : model_families())
    if (f->name == name)
      return f;
  return nullptr;
}

const model_family& family_of(const model_config& m) {
  if (const auto* f = find_family(m.arch))
    return *f;
  std::string names;
  for (const auto& n : family_names())
    names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("--model " + m.arch + ": no such model family (one of: " + names + ")");
}

std::vector<std::string> family_names() {
  std::vector<std::string> out;
  for (const auto* f : model_families())
    out.push_back(f->name);
  return out;
}

std::string families_reading(const std::string& key) {
  std::string out;
  for (const auto* f : model_families())
    if (std::find(f->keys.begin(), f->keys.end(), key) != f->keys.end())
      out += (out.empty() ? "" : ", ") + f->name;
  return out;
}

}  // namespace swarm
