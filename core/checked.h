#pragma once
// Checked conversions of input values: every number read from a JSON file,
// a text file or the command line goes through one of these, so that 2^32+4
// is never read as 4, 5.7 never as 5, 2^70 never as 0 and NaN never slips
// through. A value that does not fit is a UserError naming the file, the
// field and the value. Header-only (like error.h): the profile and plan
// readers use it without linking the compute core.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pd::checked {

// Where a value comes from, for messages: "<where>: <name> must be <rule>,
// got <value>". `where` is the file (and line or object) or empty for a
// command-line flag; `name` is the field ("step", "nodes[3].parameter_bytes").
struct Field {
  std::string where;
  std::string name;

  UserError error(std::string_view rule, std::string_view got) const {
    std::string shown(got.substr(0, 80));
    if (got.size() > 80) shown += "...";
    return UserError(cat(where.empty() ? "" : where + ": ", name, name.empty() ? "" : " ", "must be ", rule,
                         ", got ", shown));
  }
};

// Largest byte count or element count accepted from a file: 2^53, the
// largest integer a double (the planner's cost type) holds exactly.
constexpr int64_t kMaxCount = int64_t{1} << 53;

// Upper bounds this large are "no bound" in messages ("a finite number >= 0").
inline std::string number_rule(double lo, double hi) {
  if (hi >= 1e30) return cat("a finite number >= ", lo);
  return cat("a finite number in [", lo, ", ", hi, "]");
}

inline std::string range_text(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max()) return cat("an integer >= ", lo);
  return cat("an integer in [", lo, ", ", hi, "]");
}

// A JSON integer in [lo, hi]. A JSON float counts only when it is a whole
// number of at most 2^53 (exact in a double): 4.0 is 4, 5.7 and 1e308 are
// errors. nlohmann reads integers beyond 2^64 as floats, so they fail here.
inline int64_t integer(const nlohmann::json& v, const Field& f, int64_t lo, int64_t hi) {
  const std::string rule = range_text(lo, hi);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) throw f.error(rule, v.dump());
    return static_cast<int64_t>(u);
  }
  int64_t x = 0;
  if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::fabs(d) <= static_cast<double>(kMaxCount)) || d != std::floor(d)) throw f.error(rule, v.dump());
    x = static_cast<int64_t>(d);
  } else {
    throw f.error(rule, v.dump());
  }
  if (x < lo || x > hi) throw f.error(rule, v.dump());
  return x;
}

// integer() narrowed to Int (int, uint64_t, ...): the range is clipped to Int's.
template <class Int>
Int integer_as(const nlohmann::json& v, const Field& f, int64_t lo = std::numeric_limits<Int>::min(),
               int64_t hi = static_cast<int64_t>(std::min<uint64_t>(std::numeric_limits<Int>::max(),
                                                                    std::numeric_limits<int64_t>::max()))) {
  return static_cast<Int>(integer(v, f, lo, hi));
}

// A finite JSON number in [lo, hi].
inline double number(const nlohmann::json& v, const Field& f, double lo, double hi) {
  const std::string rule = number_rule(lo, hi);
  if (!v.is_number()) throw f.error(rule, v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) throw f.error(rule, v.dump());
  return d;
}

inline std::string string(const nlohmann::json& v, const Field& f) {
  if (!v.is_string()) throw f.error("a string", v.dump());
  return v.get<std::string>();
}

// The member `key` of `object` when present, else `fallback`; the value's
// type is checked (nlohmann's value() throws type_error.302 instead).
inline std::string string_or(const nlohmann::json& object, const std::string& key, const std::string& fallback,
                             const Field& f) {
  auto it = object.find(key);
  return it == object.end() ? fallback : string(*it, f);
}

// Text holding exactly one integer in [lo, hi] (no sign tricks, no trailing
// junk, no silent overflow).
inline int64_t parse_integer(std::string_view text, const Field& f, int64_t lo, int64_t hi) {
  const std::string rule = range_text(lo, hi);
  int64_t x = 0;
  const char* end = text.data() + text.size();
  auto [at, ec] = std::from_chars(text.data(), end, x);
  if (text.empty() || ec != std::errc() || at != end || x < lo || x > hi) throw f.error(rule, text);
  return x;
}

// Text holding exactly one finite number in [lo, hi] ("nan", "inf", "1e999"
// and "3x" are errors).
inline double parse_number(std::string_view text, const Field& f, double lo, double hi) {
  const std::string rule = number_rule(lo, hi);
  const std::string s(text);
  if (s.empty() || s.find_first_of(" \t\n") != std::string::npos) throw f.error(rule, text);
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(d) || d < lo || d > hi)
    throw f.error(rule, text);
  return d;
}

// A double (already parsed, e.g. from graph.txt) rounded to the nearest
// integer, which must lie in [lo, hi]; a cast would wrap or be undefined.
inline int64_t rounded(double d, const Field& f, int64_t lo, int64_t hi) {
  if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(kMaxCount)) throw f.error(range_text(lo, hi), cat(d));
  const int64_t x = std::llround(d);
  if (x < lo || x > hi) throw f.error(range_text(lo, hi), cat(d));
  return x;
}

// a * b, or a UserError naming `f` when the product of these counts (a
// shape's elements, a layer's parameters) passes `limit`.
inline int64_t product(int64_t a, int64_t b, const Field& f, int64_t limit) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > limit)
    throw f.error(cat("at most ", limit, " elements"), cat(a, " x ", b));
  return r;
}

// Edit distance (insertions, deletions, substitutions) of two short names.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
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

// Refuses a key of a JSON object whose fields are ours that is not among
// `known` (a typo such as "schedul" would otherwise be ignored), naming it
// and the nearest known key. Not an object: nothing to check here.
inline void known_keys(const nlohmann::json& object, std::initializer_list<std::string_view> known,
                       const std::string& where) {
  if (!object.is_object()) return;
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string_view nearest;
    size_t best = SIZE_MAX;
    for (std::string_view k : known)
      if (const size_t d = edit_distance(key, k); d < best) best = d, nearest = k;
    std::string shown = key.substr(0, 80);
    if (key.size() > 80) shown += "...";
    throw UserError(cat(where, ": unknown key \"", shown, "\"",
                        nearest.empty() ? std::string() : cat(" (did you mean \"", nearest, "\"?)"),
                        "; a misspelt key would be ignored"));
  }
}

}  // namespace pd::checked
