#pragma once
// A table of config keys. Each row declares one key once: its flag name, where
// its value lives, its unit, its help text and what a valid value is. Its
// default is the struct member's initializer, never typed again. From the rows
// come the CLI11 options (which are also the config-file keys), the per-key part
// of validation, the flags that render a config back (for child processes) and
// the docs' markdown table.
//
// A row locates its value inside one struct, its section (model_config,
// trainer_config, ...), so a program that embeds the same struct registers the
// same row against its own copy: swarm-sim embeds model_config and the roles'
// structs and takes swarm's rows for them (sim/scenario.cpp).
//
// Non-goals: cross-field rules (n-heads divides d-model, ...) stay hand-written
// next to the table that needs them; a row checks its own value only.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <variant>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace swarm::keys {

/// A key's value; bool keys are flags without a value (--quiet).
using value = std::variant<bool, int, int64_t, uint64_t, double, std::string>;
/// Where a key's value lives.
using value_ptr = std::variant<bool*, int*, int64_t*, uint64_t*, double*, std::string*>;

/// Whether swarm's cluster launcher passes a key on to the processes it starts.
enum class reach {
  swarm,    ///< every process of a swarm gets it: to_flags() renders it for the children
  process,  ///< this process only: ports, addresses, test hooks, the launcher's own keys
};

/// What a key's value must be. The message is what follows "--flag value: ".
class check {
public:
  check() = default;  ///< anything goes
  /// A numeric range as it reads: "> 0", ">= 1", "[0, 65535]", "(0, 1]"; doubles must also be finite.
  /// Message: "must be > 0", "must be in [0, 65535]". A malformed spec throws std::invalid_argument.
  [[nodiscard]] static check range(const std::string& spec);
  /// One of these words (also CLI11's IsMember, so --help lists them). Message: "must be one of a, b".
  [[nodiscard]] static check one_of(std::vector<std::string> allowed);
  /// `test` on the value as text, with its own message ("must be cpu, cuda or cuda:N").
  [[nodiscard]] static check custom(bool (*test)(const std::string& text), std::string message);
  /// The same test with another message.
  [[nodiscard]] check says(std::string message) const;

  /// Empty when `v` passes, else the message.
  [[nodiscard]] std::string operator()(const value& v) const;
  [[nodiscard]] bool checks_anything() const { return kind_ != kind::none; }
  [[nodiscard]] bool is_range() const { return kind_ == kind::range; }
  [[nodiscard]] const std::string& message() const { return message_; }
  [[nodiscard]] const std::vector<std::string>& allowed() const { return allowed_; }
  /// range: the bounds and whether each is open (infinite when absent).
  [[nodiscard]] double lo() const { return lo_; }
  [[nodiscard]] double hi() const { return hi_; }
  [[nodiscard]] bool lo_open() const { return lo_open_; }
  [[nodiscard]] bool hi_open() const { return hi_open_; }

private:
  enum class kind { none, range, one_of, custom };
  kind kind_ = kind::none;
  double lo_ = -std::numeric_limits<double>::infinity(), hi_ = std::numeric_limits<double>::infinity();
  bool lo_open_ = false, hi_open_ = false;
  std::vector<std::string> allowed_;
  bool (*test_)(const std::string&) = nullptr;
  std::string message_;
};

/// One key. Build rows with key() and text_key() below, never by hand.
struct row {
  std::string flag;  ///< without dashes: the flag is --flag, the config-file key is flag
  std::string unit;  ///< of the value ("seconds", "bytes"); empty for counts, names and choices
  std::string help;  ///< what it does; --help and the docs show help_text()
  check rule;
  reach scope = reach::swarm;
  bool required = false;                   ///< no default: every run must give it (--role)
  const std::type_info* section{};         ///< the struct the value lives in
  value fallback;                          ///< the default: the value in a default-constructed section
  std::function<value_ptr(void*)> locate;  ///< member rows: the value inside a section
  /// Text rows (a member of another type, spelled as text): read it, and set it
  /// from text returning what is wrong ("must be auto or ...") or empty.
  std::function<std::string(const void*)> get_text;
  std::function<std::string(void*, const std::string&)> set_text;

  /// The help text followed by the unit: "deadline of one forward request, seconds".
  [[nodiscard]] std::string help_text() const { return unit.empty() ? help : help + ", " + unit; }
  [[nodiscard]] row& must_be_given() {
    required = true;
    return *this;
  }
};

template <class T>
inline constexpr bool is_value_type =
    std::is_same_v<T, bool> || std::is_same_v<T, int> || std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t> ||
    std::is_same_v<T, double> || std::is_same_v<T, std::string>;

/// Throws std::logic_error when `rule` cannot check a value of the row's type.
void check_rule_fits(const row& r);

/// A key whose value is `member` of section S.
template <class S, class T>
[[nodiscard]] row key(const char* flag, T S::*member, const char* unit, check rule, const std::string& help,
                      reach scope = reach::swarm) {
  static_assert(is_value_type<T>, "a key holds bool, int, int64_t, uint64_t, double or std::string");
  row r{flag, unit, help, std::move(rule), scope};
  r.section = &typeid(S);
  r.fallback = S{}.*member;
  r.locate = [member](void* s) -> value_ptr { return &(static_cast<S*>(s)->*member); };
  check_rule_fits(r);
  return r;
}

/// A key whose value is `inner` of the struct `outer` of section S (swarm-sim's
/// --stage-servers lives in its cluster_config).
template <class S, class M, class T>
[[nodiscard]] row key(const char* flag, M S::*outer, T M::*inner, const char* unit, check rule, const std::string& help,
                      reach scope = reach::swarm) {
  static_assert(is_value_type<T>, "a key holds bool, int, int64_t, uint64_t, double or std::string");
  row r{flag, unit, help, std::move(rule), scope};
  r.section = &typeid(S);
  r.fallback = (S{}.*outer).*inner;
  r.locate = [outer, inner](void* s) -> value_ptr { return &((static_cast<S*>(s)->*outer).*inner); };
  check_rule_fits(r);
  return r;
}

/// A key spelled as text whose member has another type (--role, --stage "auto").
template <class S>
[[nodiscard]] row text_key(const char* flag, std::string (*get)(const S&),
                           std::string (*set)(S& section, const std::string& text), check rule, const char* help,
                           reach scope = reach::swarm) {
  row r{flag, "", help, std::move(rule), scope};
  r.section = &typeid(S);
  r.fallback = get(S{});
  r.get_text = [get](const void* s) { return get(*static_cast<const S*>(s)); };
  r.set_text = [set](void* s, const std::string& text) { return set(*static_cast<S*>(s), text); };
  check_rule_fits(r);
  return r;
}

/// The row of `flag`; throws std::logic_error when the table has none.
[[nodiscard]] const row& find(const std::vector<row>& table, const std::string& flag);

/// One row bound to the place its value lives in one config object.
struct binding {
  const row* key{};
  value_ptr where{};                  ///< member rows
  void* section{};                    ///< text rows: the section object
  std::shared_ptr<std::string> text;  ///< text rows: what the command line said, until apply_text()
};

/// `r` bound inside whichever of `sections` has the row's section type; throws
/// std::logic_error when none has.
template <class... S>
[[nodiscard]] binding bind(const row& r, S&... sections) {
  binding b{&r};
  const auto try_one = [&](auto& s) {
    if (b.section || *r.section != typeid(s))
      return;
    b.section = &s;
    if (r.locate)
      b.where = r.locate(&s);
    else  // a required key shows no default
      b.text = std::make_shared<std::string>(r.required ? "" : r.get_text(&s));
  };
  (try_one(sections), ...);
  if (!b.section)
    throw std::logic_error("--" + r.flag + ": its section " + r.section->name() + " is not among those bound");
  return b;
}

/// `r` bound to a variable outside its section (swarm-sim's own `stages`); its
/// type must be the row's. Throws std::logic_error when it is not.
template <class T>
[[nodiscard]] binding bind_value(const row& r, T& where) {
  static_assert(is_value_type<T>);
  if (!r.locate || !std::holds_alternative<T>(r.fallback))
    throw std::logic_error("--" + r.flag + " does not hold this type");
  return binding{&r, &where};
}

/// Every row of `table` bound into `sections` (each row's own section must be among them).
template <class... S>
[[nodiscard]] std::vector<binding> bind_all(const std::vector<row>& table, S&... sections) {
  std::vector<binding> out;
  for (const auto& r : table)
    out.push_back(bind(r, sections...));
  return out;
}

/// The bound value now.
[[nodiscard]] value current(const binding& b);
/// A value as a message shows it ("0.1", "cpu"), and as a flag gives it (doubles to the last bit).
[[nodiscard]] std::string show(const value& v);
[[nodiscard]] std::string flag_text(const value& v);

/// Declares each binding as an option of `app`: --flag, help_text(), the
/// current value as the default, the allowed words, required. Call after
/// setting app.option_defaults().
void add_options(CLI::App& app, const std::vector<binding>& bound);

/// After app.parse(): sets each text row's member from its text; the first
/// error as "--stage one: must be auto ...", or empty.
[[nodiscard]] std::string apply_text(const std::vector<binding>& bound);

/// The first bound value its row refuses, as "--lr -1: must be in (0, 1)"; empty when all pass.
[[nodiscard]] std::string check_all(const std::vector<binding>& bound);

/// "--flag", "value" pairs: the rows that reach the whole swarm, or every row.
/// An empty string whose default is empty too is left out (it means: not set),
/// and so is a false bool flag.
[[nodiscard]] std::vector<std::string> to_flags(const std::vector<binding>& bound, bool every_row = false);

/// The docs' table of these keys, one row each, the current values as defaults.
[[nodiscard]] std::string markdown_table(const std::vector<binding>& bound);

/// Every line of a config file must be blank, a comment or `key = value` with a
/// key that is a flag of `app`: else what is wrong, naming the file, the line
/// and the nearest flag. Empty when fine or unreadable (CLI11 says so then).
/// `program` names the binary whose --help lists the keys.
[[nodiscard]] std::string check_config_file(const CLI::App& app, const std::string& path, const std::string& program);

/// The file after --config or --config=, if the command line has one.
[[nodiscard]] std::optional<std::string> config_file_arg(int argc, const char* const* argv);

/// Whether the command line holds `flag` (e.g. --help-markdown) as a word of its own.
[[nodiscard]] bool has_arg(int argc, const char* const* argv, const std::string& flag);

}  // namespace swarm::keys
