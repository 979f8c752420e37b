#include "runtime/simulator/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace pd {
namespace {

// Layout, in pixels.
constexpr double kMinLeft = 118;   // row labels (wider when a label needs it)
constexpr double kLabelCharWidth = 7;  // px per character at font-size 11, rounded up
constexpr double kRight = 24;
constexpr double kTitle = 28;
constexpr double kRowHeight = 26, kRowGap = 4;
constexpr double kAxis = 34, kLegend = 30;
constexpr double kMinWidth = 900, kMaxWidth = 2400;  // of the time span
constexpr double kMinBox = 16;     // the shortest computation, when kMaxWidth allows
constexpr double kAllReduceShare = 0.3;  // of the row height, at its bottom

const char* kForwardColour = "#4e79a7";
const char* kBackwardColour = "#59a14f";
const char* kWeightColour = "#b07aa1";
// interleaved-1f1b's second and later chunks.
const char* kForwardChunkColour = "#2a4a6e";
const char* kBackwardChunkColour = "#356330";
const char* kAllReduceColour = "#f28e2b";
const char* kIdleColour = "#e8e8e8";

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// 1, 2 or 5 times a power of ten, giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / p;
  return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}

struct Layout {
  double scale = 1;  // pixels per second
  double top = 0, width = 0, height = 0;
  double left = kMinLeft;  // where the time axis starts: right of the longest row label
  int workers = 0;
  double x(double t) const { return left + t * scale; }
  double row_y(int rank) const { return top + rank * (kRowHeight + kRowGap); }
  double rows_bottom() const { return row_y(workers) - kRowGap; }
};

// F, B and W get boxes of their own; an all-reduce a strip along its
// group's rows; an optimizer step (a compute where it waits for the
// all-reduce) none: it is short, and its item is a round, not a minibatch.
bool is_computation_box(ActionKind kind) {
  return kind == ActionKind::Forward || kind == ActionKind::Backward || kind == ActionKind::BackwardWeight;
}

// The end of the first `minibatches` items' last computation.
double window_end(const std::vector<TraceEvent>& events, int64_t minibatches) {
  double end = 0;
  for (const TraceEvent& e : events)
    if (is_computation_box(e.kind) && (minibatches <= 0 || e.minibatch < minibatches)) end = std::max(end, e.end_s);
  return end;
}

// One row per worker, each named by its worker and the stages it runs.
struct RowLabel {
  int row = 0;
  std::string text;  // "worker 1 · stages 1,5"
};

std::vector<RowLabel> row_labels(const Plan& plan, const std::vector<std::vector<int>>& worker_stages) {
  std::vector<RowLabel> rows;
  if (!worker_stages.empty()) {  // one row per worker, naming its stages
    for (size_t w = 0; w < worker_stages.size(); ++w) {
      std::string stages = "stages";
      for (size_t c = 0; c < worker_stages[w].size(); ++c) stages += cat(c ? "," : " ", worker_stages[w][c]);
      rows.push_back({static_cast<int>(w), cat("worker ", w, " \xC2\xB7 ", stages)});
    }
    return rows;
  }
  for (const PlanStage& st : plan.stages)
    for (int rank : st.ranks) rows.push_back({rank, cat("worker ", rank, " \xC2\xB7 stage ", st.index)});
  return rows;
}

// Wide enough for every label (the middle dot is two bytes, one character).
double left_margin(const std::vector<RowLabel>& rows) {
  size_t longest = 0;
  for (const RowLabel& r : rows) longest = std::max(longest, r.text.size() - 1);
  return std::max(kMinLeft, 16 + kLabelCharWidth * static_cast<double>(longest));
}

Layout make_layout(const std::vector<TraceEvent>& events, double end, int workers, bool titled, double left) {
  double shortest = end;
  for (const TraceEvent& e : events)
    if (is_computation_box(e.kind) && e.start_s < end && e.end_s > e.start_s)
      shortest = std::min(shortest, e.end_s - e.start_s);
  Layout l;
  l.workers = workers;
  l.left = left;
  l.scale = std::min(std::max(kMinWidth / end, kMinBox / shortest), kMaxWidth / end);
  l.top = titled ? kTitle : 8;
  l.width = left + end * l.scale + kRight;
  l.height = l.rows_bottom() + kAxis + kLegend;
  return l;
}

void draw_rows(std::ostream& os, const std::vector<RowLabel>& rows, const Layout& l, double end) {
  for (const RowLabel& r : rows) {
    const double y = l.row_y(r.row);
    os << "<text class=\"worker\" x=\"" << num(l.left - 8) << "\" y=\"" << num(y + kRowHeight / 2 + 4)
       << "\" text-anchor=\"end\">" << r.text << "</text>\n";
    os << "<rect class=\"row\" x=\"" << num(l.left) << "\" y=\"" << num(y) << "\" width=\"" << num(end * l.scale)
       << "\" height=\"" << kRowHeight << "\" fill=\"" << kIdleColour << "\"/>\n";
  }
}

void draw_box(std::ostream& os, const Layout& l, const char* cls, const char* colour, double start, double stop,
              double y, double height, const std::string& label, const std::string& tooltip) {
  const double x = l.x(start), w = std::max(0.5, (stop - start) * l.scale);
  os << "<g class=\"" << cls << "\"><title>" << escape(tooltip) << "</title><rect x=\"" << num(x) << "\" y=\""
     << num(y) << "\" width=\"" << num(w) << "\" height=\"" << num(height) << "\" fill=\"" << colour
     << "\" stroke=\"#ffffff\" stroke-width=\"0.6\"/>";
  // A label needs about 7 px per digit; narrower boxes keep the tooltip only.
  if (!label.empty() && w >= 7.0 * static_cast<double>(label.size()) + 2)
    os << "<text class=\"label\" x=\"" << num(x + w / 2) << "\" y=\"" << num(y + height / 2 + 4)
       << "\" text-anchor=\"middle\" fill=\"#ffffff\">" << label << "</text>";
  os << "</g>\n";
}

void draw_events(std::ostream& os, const Plan& plan, const std::vector<TraceEvent>& events, const Layout& l,
                 double end, bool flush) {
  for (const TraceEvent& e : events) {
    if (e.start_s >= end) continue;
    const double stop = std::min(e.end_s, end);
    if (e.kind == ActionKind::AllReduce) {
      // Recorded on the stage's first replica; every replica takes part.
      for (const PlanStage& st : plan.stages) {
        if (std::find(st.ranks.begin(), st.ranks.end(), e.rank) == st.ranks.end()) continue;
        for (int rank : st.ranks)
          draw_box(os, l, "allreduce", kAllReduceColour, e.start_s, stop,
                   l.row_y(rank) + kRowHeight * (1 - kAllReduceShare), kRowHeight * kAllReduceShare, "",
                   cat("all-reduce round ", e.minibatch, " (stage ", st.index, "): ", num(e.start_s), "-",
                       num(e.end_s), " s"));
      }
      continue;
    }
    if (!is_computation_box(e.kind)) continue;
    const bool forward = e.kind == ActionKind::Forward, weight = e.kind == ActionKind::BackwardWeight;
    const std::string item =
        (flush ? cat("batch ", e.minibatch, " microbatch ", e.microbatch) : cat("minibatch ", e.minibatch)) +
        (e.chunk > 0 ? cat(" chunk ", e.chunk) : std::string());
    const char* colour = weight    ? kWeightColour
                         : forward ? (e.chunk > 0 ? kForwardChunkColour : kForwardColour)
                                   : (e.chunk > 0 ? kBackwardChunkColour : kBackwardColour);
    draw_box(os, l, forward ? "F" : weight ? "W" : "B", colour, e.start_s, stop, l.row_y(e.rank),
             kRowHeight * (1 - kAllReduceShare / 2), std::to_string(flush ? int64_t{e.microbatch} : e.minibatch),
             cat(forward ? "forward " : weight ? "weight gradient " : "backward ", item, " on worker ", e.rank,
                 ": ", num(e.start_s), "-", num(e.end_s), " s"));
  }
}

void draw_axis(std::ostream& os, const Layout& l, double end) {
  const double y = l.rows_bottom() + 4;
  const bool ms = end < 1.0;
  const double step = tick_step(end, 8);
  os << "<g class=\"axis\"><line x1=\"" << num(l.left) << "\" y1=\"" << num(y) << "\" x2=\"" << num(l.x(end))
     << "\" y2=\"" << num(y) << "\" stroke=\"#333333\"/>\n";
  for (double t = 0; t <= end * (1 + 1e-9); t += step) {
    os << "<line x1=\"" << num(l.x(t)) << "\" y1=\"" << num(y) << "\" x2=\"" << num(l.x(t)) << "\" y2=\""
       << num(y + 4) << "\" stroke=\"#333333\"/><text x=\"" << num(l.x(t)) << "\" y=\"" << num(y + 16)
       << "\" text-anchor=\"middle\">" << num(ms ? t * 1e3 : t) << "</text>\n";
  }
  os << "<text x=\"" << num(l.x(end)) << "\" y=\"" << num(y + 28) << "\" text-anchor=\"end\">time ("
     << (ms ? "ms" : "s") << ")</text></g>\n";
}

void draw_legend(std::ostream& os, const Layout& l, bool weights, bool chunks) {
  const double y = l.rows_bottom() + kAxis + 6;
  std::vector<std::pair<const char*, const char*>> entries = {{"forward", kForwardColour},
                                                              {"backward", kBackwardColour}};
  if (weights) {
    entries.back().first = "backward (B)";
    entries.push_back({"weight grad (W)", kWeightColour});
  }
  if (chunks) {
    entries.push_back({"forward, chunk 1+", kForwardChunkColour});
    entries.push_back({"backward, chunk 1+", kBackwardChunkColour});
  }
  entries.push_back({"all-reduce", kAllReduceColour});
  entries.push_back({"idle", kIdleColour});
  double x = l.left;
  os << "<g class=\"legend\">";
  for (const auto& [name, colour] : entries) {
    os << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"14\" height=\"14\" fill=\"" << colour
       << "\" stroke=\"#999999\" stroke-width=\"0.5\"/><text x=\"" << num(x + 20) << "\" y=\"" << num(y + 11)
       << "\">" << name << "</text>";
    x += 30 + 7 * std::string_view(name).size();
  }
  os << "</g>\n";
}

}  // namespace

void write_timeline_svg(std::ostream& os, const Plan& plan, const std::vector<TraceEvent>& events,
                        const TimelineSvgOptions& options) {
  int workers = static_cast<int>(options.worker_stages.size());
  if (workers == 0)
    for (const PlanStage& st : plan.stages) workers += static_cast<int>(st.ranks.size());
  const double end = window_end(events, options.minibatches);
  if (workers == 0 || !(end > 0)) throw UserError("nothing to draw: the trace has no computation");
  const std::vector<RowLabel> rows = row_labels(plan, options.worker_stages);
  const Layout l = make_layout(events, end, workers, !options.title.empty(), left_margin(rows));
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(std::ceil(l.width)) << "\" height=\""
     << num(std::ceil(l.height)) << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  if (!options.title.empty())
    os << "<text x=\"" << num(l.left) << "\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" << escape(options.title)
       << "</text>\n";
  bool weights = false, chunks = false;
  for (const TraceEvent& e : events) {
    weights = weights || e.kind == ActionKind::BackwardWeight;
    chunks = chunks || e.chunk > 0;
  }
  draw_rows(os, rows, l, end);
  draw_events(os, plan, events, l, end, options.flush);
  draw_axis(os, l, end);
  draw_legend(os, l, weights, chunks);
  os << "</svg>\n";
}

}  // namespace pd
