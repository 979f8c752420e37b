#pragma once
// A small mutation fuzzer for the input readers, run as ordinary GoogleTest
// cases with fixed seeds (so a failure repeats exactly). Each case mutates a
// valid input (numbers swapped for ones that overflow or for huge counts,
// values nested 100,000 levels deep, bytes flipped, lines dropped or
// repeated, the text cut short) and hands it to a reader, which
// must either accept it or throw pd::UserError: any other exception, a
// crash, or a call that takes seconds is a failure.
#include <cctype>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"

namespace pd::fuzz {

// Numbers that wrap, truncate, overflow or are not numbers at all.
inline const std::vector<std::string>& interesting_tokens() {
  static const std::vector<std::string> tokens = {
      "0", "-1", "1", "2", "5.7", "-0.0", "1e-320", "2147483647", "2147483648", "4294967296", "4294967300",
      "9007199254740993", "4611686018427387904", "9223372036854775807", "9223372036854775808",
      "18446744073709551615", "18446744073709551620", "1180591620717411303424", "1e308", "-1e308", "1e999",
      "NaN", "nan", "inf", "-inf", "\"4\"", "\"\"", "null", "true", "[]", "{}", "[1, 2]", "\"node1\""};
  return tokens;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // 1 to 3 mutations of `input`.
  std::string mutate(std::string input) {
    const int n = 1 + static_cast<int>(below(3));
    for (int i = 0; i < n; ++i) input = mutate_once(std::move(input));
    return input;
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  std::string mutate_once(std::string s) {
    if (s.empty()) return interesting_tokens()[below(interesting_tokens().size())];
    switch (below(10)) {
      case 0:
      case 1:
      case 2: return replace_number(std::move(s));
      case 3: return replace_span(std::move(s));
      case 4: return flip_bytes(std::move(s));
      case 5: return s.substr(0, below(s.size()));  // cut short
      case 6: return edit_line(std::move(s));
      case 7: return nest_deeply(std::move(s));
      case 8: return huge_count(std::move(s));
      default: return insert_bytes(std::move(s));
    }
  }

  // A value (one of the input's numbers, or any position) wrapped in
  // arrays or objects far deeper than any real file, up to where an
  // unguarded recursive parser runs out of stack.
  std::string nest_deeply(std::string s) {
    static const size_t depths[] = {63, 64, 65, 1000, 100000};
    const size_t depth = depths[below(std::size(depths))];
    const bool objects = below(2) == 0;
    std::string open, close;
    open.reserve(depth * 6);
    for (size_t k = 0; k < depth; ++k) {
      open += objects ? "{\"a\":" : "[";
      close += objects ? "}" : "]";
    }
    const auto number = find_number(s);
    if (number) {
      s.insert(number->first + number->second, close);
      s.insert(number->first, open);
    } else {
      s.insert(below(s.size() + 1), open + "1" + close);
    }
    return s;
  }

  // One number replaced by a count that fits the field's integer type but
  // would ask for gigabytes or hours (a microbatch count, a dimension, a pad).
  std::string huge_count(std::string s) {
    static const char* counts[] = {"65537", "16777217", "1000000000", "2147483647", "4294967295",
                                   "1099511627776", "9223372036854775807"};
    const auto number = find_number(s);
    const std::string count = counts[below(std::size(counts))];
    if (!number) return replace_span(std::move(s));
    s.replace(number->first, number->second, count);
    return s;
  }

  // A random unsigned digit run (start, length) of `s`, if any.
  std::optional<std::pair<size_t, size_t>> find_number(const std::string& s) {
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t i = 0; i < s.size();) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      runs.emplace_back(i, j - i);
      i = j;
    }
    if (runs.empty()) return std::nullopt;
    return runs[below(runs.size())];
  }

  // One number of the input (digits with an optional sign, point and
  // exponent) replaced by an interesting token.
  std::string replace_number(std::string s) {
    std::vector<std::pair<size_t, size_t>> numbers;
    for (size_t i = 0; i < s.size();) {
      if (std::isdigit(static_cast<unsigned char>(s[i]))) {
        size_t j = i;
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == 'e' ||
                                s[j] == 'E' || ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E'))))
          ++j;
        const size_t start = i > 0 && s[i - 1] == '-' ? i - 1 : i;
        numbers.emplace_back(start, j - start);
        i = j;
      } else {
        ++i;
      }
    }
    if (numbers.empty()) return replace_span(std::move(s));
    auto [at, len] = numbers[below(numbers.size())];
    s.replace(at, len, interesting_tokens()[below(interesting_tokens().size())]);
    return s;
  }

  // A short span replaced by an interesting token (types, structure).
  std::string replace_span(std::string s) {
    const size_t at = below(s.size());
    s.replace(at, below(8), interesting_tokens()[below(interesting_tokens().size())]);
    return s;
  }

  std::string flip_bytes(std::string s) {
    for (uint64_t k = 0, n = 1 + below(4); k < n; ++k) s[below(s.size())] ^= static_cast<char>(1u << below(8));
    return s;
  }

  std::string insert_bytes(std::string s) {
    static const std::string pieces[] = {"\"", ",", "[", "]", "{", "}", ":", "\n", "\t", " -- ", "=",
                                         std::string(1, '\0'), "\xff"};
    s.insert(below(s.size() + 1), pieces[below(std::size(pieces))]);
    return s;
  }

  // A line deleted or repeated.
  std::string edit_line(std::string s) {
    std::vector<std::string> lines;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    if (lines.empty()) return s;
    const size_t i = below(lines.size());
    if (below(2) == 0) lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
    else lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), lines[i]);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }

  std::mt19937_64 rng_;
};

struct FuzzResult {
  int accepted = 0, refused = 0;
  std::vector<std::string> failures;  // "case N: what happened (input saved to PATH)"
};

// Runs `cases` mutations of the seeds through `read` (which gets the
// mutated bytes). Failing inputs are saved under PD_BINARY_DIR/fuzz-failures
// so that they can be replayed.
inline FuzzResult run_fuzz(const std::string& name, const std::vector<std::string>& seeds, int cases, uint64_t seed,
                           const std::function<void(const std::string&)>& read) {
  namespace fs = std::filesystem;
  Mutator m(seed);
  FuzzResult r;
  for (int i = 0; i < cases; ++i) {
    const std::string input = m.mutate(seeds[static_cast<size_t>(i) % seeds.size()]);
    std::string problem;
    const auto start = std::chrono::steady_clock::now();
    try {
      read(input);
      ++r.accepted;
    } catch (const UserError&) {
      ++r.refused;
    } catch (const std::exception& e) {
      problem = std::string("threw ") + typeid(e).name() + ": " + e.what();
    } catch (...) {
      problem = "threw a non-std exception";
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Generous (sanitizer builds, a shared machine); valid inputs take milliseconds.
    if (problem.empty() && seconds > 5.0) problem = "took " + std::to_string(seconds) + " s";
    if (problem.empty()) continue;
    const fs::path dir = fs::path(PD_BINARY_DIR) / "fuzz-failures";
    fs::create_directories(dir);
    std::string file = name + "-" + std::to_string(i);
    for (char& c : file) c = c == '/' ? '_' : c;
    const fs::path saved = dir / file;
    std::ofstream(saved, std::ios::binary) << input;
    r.failures.push_back("case " + std::to_string(i) + ": " + problem.substr(0, 300) + " (input: " + saved.string() +
                         ")");
  }
  return r;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace pd::fuzz
