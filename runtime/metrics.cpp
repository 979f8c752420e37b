#include "runtime/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "core/error.h"

namespace pd {

namespace {

// The lines of the log a resumed run continues (the interrupted run's
// F.partial, else F) whose "step" is before `step`.
std::vector<std::string> lines_before_step(const std::string& path, int64_t step) {
  std::error_code ec;
  const std::string source = std::filesystem::exists(path + ".partial", ec) ? path + ".partial" : path;
  std::ifstream in(source);
  std::vector<std::string> kept;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() < step)
      kept.push_back(line);
  }
  return kept;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t continues_at_step) {
  if (path.empty()) return;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(cat("cannot create metrics file ", path, ": it is a folder; name a file"));
  path_ = path;
  partial_path_ = path + ".partial";
  exceptions_at_open_ = std::uncaught_exceptions();
  const std::vector<std::string> earlier =
      continues_at_step > 0 ? lines_before_step(path, continues_at_step) : std::vector<std::string>{};
  file_.reset(std::fopen(partial_path_.c_str(), "w"));
  if (!file_) throw UserError(cat("cannot create metrics file ", partial_path_, ": ", std::strerror(errno)));
  for (const std::string& line : earlier) {
    append(line + "\n");
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.contains("seconds") && j["seconds"].is_number()) clock_offset_s_ = std::max(clock_offset_s_, j["seconds"].get<double>());
  }
}

MetricsWriter::~MetricsWriter() {
  if (!file_) return;
  const bool finished = std::uncaught_exceptions() <= exceptions_at_open_;
  const bool written = !failed_ && !std::ferror(file_.get()) && std::fflush(file_.get()) == 0 &&
                       ::fsync(::fileno(file_.get())) == 0;
  file_.reset();
  // A failed run keeps its partial log beside the previous complete one.
  if (finished && !written)
    std::fprintf(stderr, "warning: %s could not be written to the end; %s is left as it was\n", partial_path_.c_str(),
                 path_.c_str());
  else if (finished && std::rename(partial_path_.c_str(), path_.c_str()) != 0)
    std::fprintf(stderr, "warning: could not rename %s to %s: %s\n", partial_path_.c_str(), path_.c_str(),
                 std::strerror(errno));
}

void MetricsWriter::write(const nlohmann::json& line) {
  if (!file_) return;
  append(line.dump() + "\n");
}

void MetricsWriter::append(const std::string& s) {
  // A full disk: the run fails (exit 1) naming the file, and the writer,
  // destroyed with that exception in flight, leaves an existing <path> as
  // it was (an unchecked write used to rename an empty log over it).
  if (std::fwrite(s.data(), 1, s.size(), file_.get()) != s.size() || std::fflush(file_.get()) != 0) {
    const int err = errno;
    failed_ = true;
    throw RuntimeFailure(cat("writing metrics file ", partial_path_, " failed: ", std::strerror(err), " (", path_,
                             " is left as it was)"));
  }
}

double MetricsWriter::seconds() const {
  return clock_offset_s_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_).count();
}

void MetricsWriter::step(int64_t step, int64_t epoch, double loss, double samples_per_s, double data_wait_ms,
                         double lr) {
  nlohmann::json line = {{"event", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss},
                         {"samples_per_s", samples_per_s}, {"seconds", seconds()}};
  if (data_wait_ms >= 0) line["data_wait_ms"] = data_wait_ms;
  if (lr >= 0) line["lr"] = lr;
  write(line);
}

void MetricsWriter::grad_norm(int64_t step, double norm, double factor) {
  // JSON has no NaN or infinity: such a norm is written as null.
  write({{"event", "grad_norm"}, {"step", step}, {"grad_norm", std::isfinite(norm) ? nlohmann::json(norm) : nullptr},
         {"clip_factor", factor}, {"seconds", seconds()}});
}

void MetricsWriter::eval(int64_t epoch, double test_loss, double test_accuracy) {
  write({{"event", "eval"}, {"epoch", epoch}, {"test_loss", test_loss}, {"test_accuracy", test_accuracy},
         {"seconds", seconds()}});
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

bool ProgressBar::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(int64_t total_steps, bool enabled)
    : total_(total_steps), enabled_(enabled), start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t done_steps, int64_t epoch, double loss, double samples_per_s) {
  done_ = done_steps;
  epoch_ = epoch;
  loss_ = loss;
  rate_ = samples_per_s;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done_ < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw();
}

void ProgressBar::draw() {
  constexpr int kWidth = 30;
  const double frac = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 0.0;
  const int filled = static_cast<int>(frac * kWidth);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = done_ > 0 ? elapsed * static_cast<double>(total_ - done_) / static_cast<double>(done_) : NAN;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  char line[256];
  std::snprintf(line, sizeof line, "\r[%s] %lld/%lld epoch %lld loss %.4f %.0f samples/s ETA %s\x1b[K", bar.c_str(),
                static_cast<long long>(done_), static_cast<long long>(total_), static_cast<long long>(epoch_), loss_,
                rate_, format_duration(eta).c_str());
  std::cerr << line << std::flush;
  drawn_ = true;
}

void ProgressBar::message(const std::string& line) {
  if (enabled_ && drawn_) std::cerr << "\r\x1b[K";
  std::cerr << line << "\n";
  if (enabled_ && drawn_) draw();
  std::cerr << std::flush;
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) std::cerr << "\n" << std::flush;
  drawn_ = false;
}

}  // namespace pd
