#include "config/key_table.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace swarm::keys {

namespace {

std::string trim(const std::string& t) {
  const auto b = t.find_first_not_of(" \t\r");
  const auto e = t.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string{} : t.substr(b, e - b + 1);
}

/// The whole of `text` as a number; throws std::invalid_argument otherwise.
double number(const std::string& text, const std::string& spec) {
  const auto t = trim(text);
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size())
    throw std::invalid_argument("check::range(\"" + spec + "\"): '" + t + "' is not a number");
  return x;
}

/// A numeric value as a double; nullopt for bool and text.
std::optional<double> numeric(const value& v) {
  return std::visit(
      [](const auto& x) -> std::optional<double> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>)
          return std::nullopt;
        else
          return static_cast<double>(x);
      },
      v);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

/// A markdown table cell: pipes would end it.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

check check::range(const std::string& spec) {
  check c;
  c.kind_ = kind::range;
  const auto t = trim(spec);
  if (t.size() > 2 && (t.front() == '[' || t.front() == '(')) {
    const auto comma = t.find(',');
    if (comma == std::string::npos || (t.back() != ']' && t.back() != ')'))
      throw std::invalid_argument("check::range(\"" + spec + "\"): not an interval like [0, 1)");
    c.lo_open_ = t.front() == '(';
    c.hi_open_ = t.back() == ')';
    c.lo_ = number(t.substr(1, comma - 1), spec);
    c.hi_ = number(t.substr(comma + 1, t.size() - comma - 2), spec);
    c.message_ = "must be in " + t;
  } else if (t.rfind(">=", 0) == 0) {
    c.lo_ = number(t.substr(2), spec);
    c.message_ = "must be " + t;
  } else if (t.rfind('>', 0) == 0) {
    c.lo_ = number(t.substr(1), spec);
    c.lo_open_ = true;
    c.message_ = "must be " + t;
  } else {
    throw std::invalid_argument("check::range(\"" + spec + "\"): write > x, >= x or an interval like [0, 1)");
  }
  if (!(c.lo_ <= c.hi_))
    throw std::invalid_argument("check::range(\"" + spec + "\"): empty");
  return c;
}

check check::one_of(std::vector<std::string> allowed) {
  check c;
  c.kind_ = kind::one_of;
  c.message_ = "must be one of ";
  for (size_t i = 0; i < allowed.size(); ++i)
    c.message_ += (i ? ", " : "") + allowed[i];
  c.allowed_ = std::move(allowed);
  return c;
}

check check::custom(bool (*test)(const std::string& text), std::string message) {
  check c;
  c.kind_ = kind::custom;
  c.test_ = test;
  c.message_ = std::move(message);
  return c;
}

check check::says(std::string message) const {
  check c = *this;
  c.message_ = std::move(message);
  return c;
}

std::string check::operator()(const value& v) const {
  switch (kind_) {
    case kind::none: return {};
    case kind::range: {
      const auto x = numeric(v);
      if (!x)
        return message_;
      const bool finite = !std::holds_alternative<double>(v) || std::isfinite(*x);
      const bool above = lo_open_ ? *x > lo_ : *x >= lo_;
      const bool below = hi_open_ ? *x < hi_ : *x <= hi_;
      return finite && above && below ? std::string{} : message_;
    }
    case kind::one_of: {
      const auto* s = std::get_if<std::string>(&v);
      return s && std::find(allowed_.begin(), allowed_.end(), *s) != allowed_.end() ? std::string{} : message_;
    }
    case kind::custom: return test_(show(v)) ? std::string{} : message_;
  }
  return message_;
}

void check_rule_fits(const row& r) {
  const bool text = !r.locate || std::holds_alternative<std::string>(r.fallback);
  const bool numeric_key = r.locate && !text && !std::holds_alternative<bool>(r.fallback);
  if (r.rule.is_range() && !numeric_key)
    throw std::logic_error("--" + r.flag + ": a range checks numbers only");
  if (r.rule.checks_anything() && !r.rule.is_range() && !text)
    throw std::logic_error("--" + r.flag + ": word lists and custom checks check text only");
}

const row& find(const std::vector<row>& table, const std::string& flag) {
  for (const auto& r : table)
    if (r.flag == flag)
      return r;
  throw std::logic_error("no key --" + flag + " in the table");
}

value current(const binding& b) {
  if (b.text)
    return b.key->get_text(b.section);
  return std::visit([](auto* p) { return value{*p}; }, b.where);
}

std::string show(const value& v) {
  return std::visit(
      [](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return x;
        } else if constexpr (std::is_same_v<T, bool>) {
          return std::string{x ? "true" : "false"};
        } else {
          std::ostringstream s;
          s << x;
          return s.str();
        }
      },
      v);
}

std::string flag_text(const value& v) {
  if (const auto* d = std::get_if<double>(&v)) {
    char buffer[64];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, *d).ptr;  // shortest text that reads back exactly
    return std::string(buffer, end);
  }
  return show(v);
}

void add_options(CLI::App& app, const std::vector<binding>& bound) {
  for (const auto& b : bound) {
    const row& r = *b.key;
    const auto name = "--" + r.flag;
    const auto help = r.help_text();
    CLI::Option* opt = nullptr;
    if (b.text) {
      opt = app.add_option(name, *b.text, help);
    } else {
      opt = std::visit(
          [&](auto* p) {
            if constexpr (std::is_same_v<decltype(p), bool*>)
              return app.add_flag(name, *p, help);
            else
              return app.add_option(name, *p, help);
          },
          b.where);
    }
    if (!r.rule.allowed().empty())
      opt->check(CLI::IsMember(r.rule.allowed()));
    if (r.required)
      opt->required();
  }
}

std::string apply_text(const std::vector<binding>& bound) {
  for (const auto& b : bound) {
    if (!b.text || (b.key->required && b.text->empty()))
      continue;
    if (auto why = b.key->set_text(b.section, *b.text); !why.empty())
      return "--" + b.key->flag + " " + *b.text + ": " + why;
  }
  return {};
}

std::string check_all(const std::vector<binding>& bound) {
  for (const auto& b : bound) {
    const auto v = current(b);
    if (auto why = b.key->rule(v); !why.empty())
      return "--" + b.key->flag + " " + show(v) + ": " + why;
  }
  return {};
}

std::vector<std::string> to_flags(const std::vector<binding>& bound, bool every_row) {
  std::vector<std::string> out;
  for (const auto& b : bound) {
    const row& r = *b.key;
    if (!every_row && r.scope != reach::swarm)
      continue;
    const auto v = current(b);
    if (const auto* on = std::get_if<bool>(&v)) {
      if (*on)
        out.push_back("--" + r.flag);
      continue;
    }
    if (v == value{std::string{}} && r.fallback == value{std::string{}})
      continue;
    out.push_back("--" + r.flag);
    out.push_back(flag_text(v));
  }
  return out;
}

std::string markdown_table(const std::vector<binding>& bound) {
  std::string out =
      "| flag | default | unit | valid values | meaning |\n"
      "|---|---|---|---|---|\n";
  for (const auto& b : bound) {
    const row& r = *b.key;
    const auto v = current(b);
    std::string fallback;
    if (r.required)
      fallback = "required";
    else if (const auto* on = std::get_if<bool>(&v))
      fallback = *on ? "on" : "off";
    else if (v != value{std::string{}})
      fallback = "`" + show(v) + "`";
    auto valid = r.rule.message();
    if (valid.rfind("must be ", 0) == 0)
      valid = valid.substr(8);
    out += "| `--" + r.flag + "` | " + cell(fallback) + " | " + r.unit + " | " + cell(valid) + " | " + cell(r.help) +
           " |\n";
  }
  return out;
}

std::string check_config_file(const CLI::App& app, const std::string& path, const std::string& program) {
  // CLI11 takes any line of a config file it cannot read as a key of its own
  // and ignores keys it does not know, so `d-modle = 64` or even /etc/passwd
  // started training on defaults.
  std::ifstream in(path);
  if (!in)
    return "";  // CLI11 says it cannot read it
  std::vector<std::string> keys;
  for (const CLI::Option* opt : app.get_options())
    for (const auto& name : opt->get_lnames())
      keys.push_back(name);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto text = trim(line);
    if (text.empty() || text[0] == '#' || text[0] == ';')
      continue;
    const auto where = path + ":" + std::to_string(number) + ": ";
    const auto eq = text.find('=');
    const auto key = eq == std::string::npos ? std::string{} : trim(text.substr(0, eq));
    if (key.empty() || trim(text.substr(eq + 1)).empty() || key.find_first_of(" \t\"'[]") != std::string::npos)
      return where + "not `key = value`: " + (text.size() > 60 ? text.substr(0, 60) + "..." : text);
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      continue;
    std::string nearest;
    size_t best = std::string::npos;
    for (const auto& k : keys)
      if (const auto d = edit_distance(key, k); d < best)
        best = d, nearest = k;
    return where + "unknown key '" + key + "'; the nearest flag is '" + nearest + "' (" + program +
           " --help lists them all)";
  }
  return "";
}

std::optional<std::string> config_file_arg(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      return std::string{argv[i + 1]};
    if (a.rfind("--config=", 0) == 0)
      return a.substr(9);
  }
  return std::nullopt;
}

bool has_arg(int argc, const char* const* argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == flag)
      return true;
  return false;
}

}  // namespace swarm::keys
