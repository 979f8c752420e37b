#pragma once
// Training telemetry shared by `train` and `run`: a JSON-lines metrics file
// and a one-line progress bar (loss, throughput, ETA) drawn on stderr only
// when stderr is a terminal.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace pd {

// One JSON object per line. Lines go to "<path>.partial", flushed per line
// so that a failed or killed run leaves its log there; the file is renamed
// to <path> when the writer is destroyed without an exception in flight
// (the run finished), so an existing <path> is replaced only by a complete
// log. An empty path gives a writer that drops everything. Step and eval
// lines carry "seconds": wall time since training started (here: since the
// writer was opened), so runs can be compared against time (scripts/plot.py).
class MetricsWriter {
 public:
  MetricsWriter() = default;
  // UserError when it cannot be created. `continues_at_step` > 0 (a resumed
  // run): the log starts with the lines of the run it continues (its
  // interrupted F.partial, else F) whose "step" is before that step, so a
  // resumed run's log is the whole run's; its "seconds" continue from the
  // last kept line's (the clock of the run it continues).
  explicit MetricsWriter(const std::string& path, int64_t continues_at_step = 0);
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();
  bool enabled() const { return file_ != nullptr; }
  // RuntimeFailure naming the file when the line cannot be written (a full
  // disk); <path> is then never replaced.
  void write(const nlohmann::json& line);
  // {"event":"step","step","epoch","loss","samples_per_s","seconds"[,"data_wait_ms"][,"lr"]}:
  // data_wait_ms (this step's wait for its minibatch) and lr (the LR
  // schedule's rate at the step) when not negative.
  void step(int64_t step, int64_t epoch, double loss, double samples_per_s, double data_wait_ms = -1,
            double lr = -1);
  // {"event":"grad_norm","step","grad_norm","clip_factor","seconds"} with
  // --clip-grad-norm: the step's gradient norm before clipping (null when
  // not finite) and the factor it was scaled by (1: not clipped).
  void grad_norm(int64_t step, double norm, double factor);
  // {"event":"eval","epoch","test_loss","test_accuracy","seconds"}
  void eval(int64_t epoch, double test_loss, double test_accuracy);

 private:
  void append(const std::string& text);
  struct Closer {
    void operator()(std::FILE* f) const { if (f) std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
  std::string path_, partial_path_;
  int exceptions_at_open_ = 0;  // std::uncaught_exceptions() when opened
  double clock_offset_s_ = 0;    // a resumed run: the seconds of the run it continues
  double seconds() const;
  bool failed_ = false;         // a write failed: the log is incomplete
  std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
};

// "[#####.....] 312/1874 epoch 1 loss 0.4123 2310 samples/s ETA 0:41"
class ProgressBar {
 public:
  // enabled defaults to "stderr is a terminal".
  explicit ProgressBar(int64_t total_steps, bool enabled = stderr_is_terminal());
  static bool stderr_is_terminal();
  bool enabled() const { return enabled_; }
  // Redraws at most ~10 times a second (and always at the last step).
  void update(int64_t done_steps, int64_t epoch, double loss, double samples_per_s);
  // Prints a line above the bar (e.g. an evaluation result); always shown.
  void message(const std::string& line);
  void finish();  // ends the bar's line

 private:
  void draw();
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  int64_t done_ = 0, epoch_ = 0;
  double loss_ = 0, rate_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1:02:03" / "4:05"
std::string format_duration(double seconds);

}  // namespace pd
