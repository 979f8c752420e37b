#include "runtime/schedule/schedule_file.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/error.h"
#include "core/input_file.h"
#include "runtime/schedule/check.h"

namespace pd {
namespace {

constexpr const char* kFormat = "pipedream-schedule/1";
// Largest minibatches x microbatches and worker count a schedule file may declare.
constexpr int64_t kMaxItems = int64_t{1} << 24;
constexpr int64_t kMaxWorkers = int64_t{1} << 16;

// The numeric fields of an action, in column order.
enum Field { kMinibatch, kMicrobatch, kWeightVersion, kPeer, kTag, kRound, kVersionCreated, kGradientCount,
             kLocalGradients, kChunk, kFieldCount };
constexpr std::array<const char*, kFieldCount> kFieldNames = {
    "minibatch", "microbatch", "weight_version", "peer", "tag", "round", "version_created", "gradient_count",
    "local_gradients", "chunk"};
using Fields = std::array<std::optional<int64_t>, kFieldCount>;

constexpr std::array<ActionKind, 9> kKinds = {
    ActionKind::Forward,      ActionKind::Backward,     ActionKind::SendActivation, ActionKind::RecvActivation,
    ActionKind::SendGradient, ActionKind::RecvGradient, ActionKind::AllReduce,      ActionKind::OptimizerStep,
    ActionKind::BackwardWeight};

// The fields a kind uses; the others are left empty when written and
// ignored when read. A tag may be left out (it follows from the item), and
// so may a microbatch (0, as in every 1f1b-rr action).
std::vector<Field> fields_of(ActionKind k) {
  switch (k) {
    case ActionKind::Forward:
    case ActionKind::Backward:
    case ActionKind::BackwardWeight: return {kMinibatch, kMicrobatch, kWeightVersion};
    case ActionKind::AllReduce: return {kRound, kGradientCount, kLocalGradients};
    case ActionKind::OptimizerStep: return {kRound, kVersionCreated, kGradientCount, kLocalGradients};
    default: return {kMinibatch, kMicrobatch, kPeer, kTag};
  }
}

Fields fields_from(const Action& a) {
  const std::array<int64_t, kFieldCount> all = {a.minibatch, a.microbatch,      a.weight_version,
                                                a.peer,      a.tag,             a.round,
                                                a.version_created, a.gradient_count, a.local_gradients, a.chunk};
  Fields f;
  for (Field i : fields_of(a.kind)) f[i] = all[i];
  if (a.chunk != 0) f[kChunk] = a.chunk;  // interleaved-1f1b; empty means 0
  return f;
}

ActionKind parse_kind(const std::string& name, const std::string& where) {
  for (ActionKind k : kKinds)
    if (name == short_name(k)) return k;
  throw UserError(cat(where, "unknown action '", name,
                      "': use F, B, W, SEND_F, RECV_F, SEND_B, RECV_B, ALLREDUCE or STEP"));
}

// schedule.h's tag. Several stages per worker: the chunk of the downstream
// stage of the boundary the message crosses.
int64_t tag_of(const Action& a, const ScheduleOptions& o, int workers, int rank) {
  const bool gradient = a.kind == ActionKind::SendGradient || a.kind == ActionKind::RecvGradient;
  const bool below = a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient;
  const int chunks = o.kind->chunks(o.virtual_stages);
  const int downstream = (chunks > 1 ? o.kind->stage_at(rank, a.chunk, workers) : rank) + (below ? 1 : 0);
  const int64_t chunk = chunks > 1 ? o.kind->chunk_of(downstream, workers) : 0;
  return 2 * ((a.minibatch * o.microbatches + a.microbatch) * chunks + chunk) + (gradient ? 1 : 0);
}

Action action_from(ActionKind kind, const Fields& f, const ScheduleFile& file, int rank, const std::string& where) {
  for (Field i : fields_of(kind))
    if (!f[i] && i != kTag && i != kMicrobatch)
      throw UserError(cat(where, short_name(kind), " needs the field '", kFieldNames[i], "'"));
  // Every field is an int in the runtime (and tags multiply them): larger
  // values are refused before any arithmetic.
  for (int i = 0; i < kFieldCount; ++i)
    if (f[i] && (*f[i] < std::numeric_limits<int32_t>::min() || *f[i] > std::numeric_limits<int32_t>::max()))
      throw UserError(cat(where, "field '", kFieldNames[i], "' must be a 32-bit integer, got ", *f[i]));
  auto get = [&](Field i) { return f[i].value_or(-1); };
  Action a;
  a.kind = kind;
  a.minibatch = get(kMinibatch);
  a.microbatch = static_cast<int>(f[kMicrobatch].value_or(0));
  a.weight_version = get(kWeightVersion);
  a.peer = static_cast<int>(get(kPeer));
  a.round = get(kRound);
  a.version_created = get(kVersionCreated);
  a.gradient_count = static_cast<int>(f[kGradientCount].value_or(0));
  a.local_gradients = static_cast<int>(f[kLocalGradients].value_or(0));
  a.chunk = static_cast<int>(f[kChunk].value_or(0));
  const int chunks = file.options.kind->chunks(file.options.virtual_stages);
  if (a.chunk < 0 || a.chunk >= chunks)
    throw UserError(cat(where, "chunk ", a.chunk, " is outside 0..", chunks - 1, " (", file.options.kind->name(),
                        " with virtual_stages=", file.options.virtual_stages, ")"));
  if (a.is_send() || a.is_recv()) {
    if (a.minibatch < 0 || a.minibatch >= file.options.minibatches || a.microbatch < 0 ||
        a.microbatch >= file.options.microbatches)
      throw UserError(cat(where, "minibatch ", a.minibatch, " microbatch ", a.microbatch, " is outside the run (",
                          file.options.minibatches, " minibatches of ", file.options.microbatches,
                          " microbatches)"));
    // The runtime and the simulator match messages by tag: one that does
    // not follow from the item would pair the wrong messages.
    const int64_t want = tag_of(a, file.options, static_cast<int>(file.lists.size()), rank);
    if (f[kTag] && *f[kTag] != want)
      throw UserError(cat(where, "tag ", *f[kTag], " does not belong to minibatch ", a.minibatch, " microbatch ",
                          a.microbatch, " (expected ", want, "; or leave the tag empty)"));
    a.tag = want;
  }
  return a;
}

// Appends one action to its rank's list, checking the rank and its stage.
void add_action(ScheduleFile& file, int rank, int stage, const Action& a, const std::string& where) {
  const int workers = static_cast<int>(file.lists.size());
  if (rank < 0 || rank >= workers)
    throw UserError(cat(where, "rank ", rank, " is outside 0..", workers - 1, " (the file declares ", workers,
                        " workers)"));
  const ScheduleKind& kind = *file.options.kind;
  if (kind.chunks(file.options.virtual_stages) > 1) {
    // A worker runs several stages: the stage column is the action's chunk's.
    const int want = kind.stage_at(rank, a.chunk, workers);
    if (stage != want)
      throw UserError(cat(where, "rank ", rank, " chunk ", a.chunk, " runs stage ", want, " in ", kind.name(),
                          ", not ", stage));
    stage = kind.stage_at(rank, 0, workers);
  }
  int& known = file.stage_of_rank[static_cast<size_t>(rank)];
  if (known >= 0 && known != stage)
    throw UserError(cat(where, "rank ", rank, " is given stage ", stage, " here and stage ", known, " before"));
  known = stage;
  file.lists[static_cast<size_t>(rank)].push_back(a);
}

void start_file(ScheduleFile& file, const std::string& schedule, const std::string& weights, int64_t microbatches,
                int64_t minibatches, int64_t workers, int64_t virtual_stages, const std::string& where) {
  file.options.kind = parse_schedule_kind(schedule);
  file.options.policy = parse_weight_policy(weights);
  // A schedule file lists every action, so real counts are small; these
  // bounds keep the per-item tables of check_schedule and the simulator
  // (minibatches x microbatches entries) and the rank lists allocatable.
  const auto need = [&](const char* field, int64_t value, int64_t most) {
    if (value < 1 || value > most)
      throw UserError(cat(where, "field '", field, "' must be an integer in [1, ", most, "], got ", value));
  };
  need("microbatches", microbatches, kMaxItems);
  need("minibatches", minibatches, kMaxItems);
  need("workers", workers, kMaxWorkers);
  need("virtual_stages", virtual_stages, 255);
  if (minibatches * microbatches > kMaxItems)
    throw UserError(cat(where, "fields 'minibatches' x 'microbatches' (", minibatches, " x ", microbatches,
                        ") must be at most ", kMaxItems));
  file.options.virtual_stages = static_cast<int>(virtual_stages);
  file.options.microbatches = static_cast<int>(microbatches);
  file.options.minibatches = minibatches;
  file.lists.assign(static_cast<size_t>(workers), {});
  file.stage_of_rank.assign(static_cast<size_t>(workers), -1);
}

// ---- JSON ------------------------------------------------------------------

ScheduleFile parse_json(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw UserError(cat(source, ": not valid JSON"));
  ScheduleFile file;
  try {
    checked::known_keys(j, {"format", "schedule", "weights", "microbatches", "minibatches", "virtual_stages", "workers"},
                        source);
    if (j.value("format", "") != kFormat)
      throw UserError(cat(source, ": field 'format' must be '", kFormat, "'"));
    const auto& workers = j.at("workers");
    const auto count = [&](const char* field, std::optional<int64_t> fallback) -> int64_t {
      if (!j.contains(field)) {
        if (!fallback) throw UserError(cat(source, ": field '", field, "' is required"));
        return *fallback;
      }
      return checked::integer(j[field], {source, cat("field '", field, "'")}, 1, kMaxItems);
    };
    if (!workers.is_array()) throw UserError(cat(source, ": field 'workers' must be an array"));
    start_file(file, j.at("schedule").get<std::string>(), j.value("weights", "stash"), count("microbatches", 1),
               count("minibatches", std::nullopt), static_cast<int64_t>(workers.size()),
               count("virtual_stages", 1), source + ": ");
    for (const auto& w : workers) {
      checked::known_keys(w, {"rank", "stage", "actions"}, cat(source, ": workers[]"));
      const int rank = w.at("rank").get<int>();
      const int stage = w.at("stage").get<int>();
      size_t index = 0;
      for (const auto& act : w.at("actions")) {
        const std::string where = cat(source, ": rank ", rank, " action ", index++, ": ");
        checked::known_keys(act,
                            {"action", kFieldNames[0], kFieldNames[1], kFieldNames[2], kFieldNames[3], kFieldNames[4],
                             kFieldNames[5], kFieldNames[6], kFieldNames[7], kFieldNames[8], kFieldNames[9]},
                            where.substr(0, where.size() - 2));
        Fields f;
        for (int i = 0; i < kFieldCount; ++i)
          if (act.contains(kFieldNames[i]) && !act[kFieldNames[i]].is_null())
            f[i] = act[kFieldNames[i]].get<int64_t>();
        const ActionKind kind = parse_kind(act.at("action").get<std::string>(), where);
        const Action a = action_from(kind, f, file, rank, where);
        // The worker's stage; an interleaved action's is its chunk's.
        add_action(file, rank, file.options.virtual_stages > 1 ? rank + a.chunk * static_cast<int>(workers.size()) : stage,
                   a, where);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw UserError(cat(source, ": ", e.what()));
  }
  return file;
}

// ---- CSV -------------------------------------------------------------------

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, sep)) out.push_back(cell);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

std::string trim(std::string s) {
  const char* space = " \t\r";
  s.erase(0, s.find_first_not_of(space));
  s.erase(s.find_last_not_of(space) + 1);
  return s;
}

int64_t parse_int(const std::string& s, const std::string& what, const std::string& where) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) throw UserError(cat(where, what, " '", s, "' is not an integer"));
  return v;
}

// "# pipedream-schedule/1 schedule=gpipe weights=stash microbatches=4 minibatches=2 workers=4"
void parse_csv_header(ScheduleFile& file, const std::string& line, const std::string& where) {
  std::istringstream in(line.substr(1));
  std::string format, token;
  in >> format;
  if (format != kFormat)
    throw UserError(cat(where, "the first line must be '# ", kFormat,
                        " schedule=... minibatches=... workers=...' (a schedule CSV from `pipedream schedule`)"));
  std::string schedule, weights = "stash";
  int64_t microbatches = 1, minibatches = -1, workers = -1, virtual_stages = 1;
  while (in >> token) {
    const size_t eq = token.find('=');
    const std::string key = token.substr(0, eq), value = eq == std::string::npos ? "" : token.substr(eq + 1);
    if (key == "schedule") schedule = value;
    else if (key == "weights") weights = value;
    else if (key == "microbatches") microbatches = parse_int(value, key, where);
    else if (key == "minibatches") minibatches = parse_int(value, key, where);
    else if (key == "workers") workers = parse_int(value, key, where);
    else if (key == "virtual_stages") virtual_stages = parse_int(value, key, where);
    else throw UserError(cat(where, "unknown header field '", key, "'"));
  }
  if (schedule.empty() || minibatches < 0 || workers < 0)
    throw UserError(cat(where, "the header needs schedule=, minibatches= and workers="));
  start_file(file, schedule, weights, microbatches, minibatches, workers, virtual_stages, where);
}

ScheduleFile parse_csv(const std::string& text, const std::string& source) {
  ScheduleFile file;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  bool header = false;
  std::vector<std::string> columns;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = cat(source, " line ", line_no, ": ");
    line = trim(line);
    if (line.empty()) continue;
    if (!header) {
      if (line[0] != '#') throw UserError(cat(where, "the first line must be '# ", kFormat, " ...'"));
      parse_csv_header(file, line, where);
      header = true;
      continue;
    }
    if (line[0] == '#') continue;
    std::vector<std::string> cells = split(line, ',');
    for (auto& c : cells) c = trim(c);
    if (columns.empty()) {
      columns = cells;
      for (const char* need : {"rank", "stage", "action"})
        if (std::find(columns.begin(), columns.end(), need) == columns.end())
          throw UserError(cat(where, "the column header has no '", need, "' column"));
      continue;
    }
    if (cells.size() > columns.size())
      throw UserError(cat(where, cells.size(), " cells, but the header names ", columns.size(), " columns"));
    int64_t rank = -1, stage = -1;
    std::string kind_name;
    Fields f;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (cells[c].empty()) continue;
      if (columns[c] == "action") {
        kind_name = cells[c];
      } else if (columns[c] == "rank") {
        rank = std::min(parse_int(cells[c], "rank", where), kMaxWorkers);  // beyond: refused by add_action
      } else if (columns[c] == "stage") {
        stage = std::min(parse_int(cells[c], "stage", where), kMaxWorkers * 255);
      } else {
        for (int i = 0; i < kFieldCount; ++i)
          if (columns[c] == kFieldNames[i]) f[i] = parse_int(cells[c], kFieldNames[i], where);
      }
    }
    if (rank < 0 || stage < 0 || kind_name.empty())
      throw UserError(cat(where, "rank, stage and action must be given"));
    const ActionKind kind = parse_kind(kind_name, where);
    add_action(file, static_cast<int>(rank), static_cast<int>(stage),
               action_from(kind, f, file, static_cast<int>(rank), where), where);
  }
  if (!header) throw UserError(cat(source, ": empty schedule file"));
  return file;
}

std::string header_fields(const ScheduleFile& file) {
  return cat("schedule=", to_string(file.options.kind), " weights=", to_string(file.options.policy),
             " microbatches=", file.options.microbatches, " minibatches=", file.options.minibatches,
             " workers=", file.lists.size(),
             file.options.virtual_stages > 1 ? cat(" virtual_stages=", file.options.virtual_stages) : std::string());
}

}  // namespace

const char* short_name(ActionKind k) {
  switch (k) {
    case ActionKind::Forward: return "F";
    case ActionKind::Backward: return "B";
    case ActionKind::SendActivation: return "SEND_F";
    case ActionKind::RecvActivation: return "RECV_F";
    case ActionKind::SendGradient: return "SEND_B";
    case ActionKind::RecvGradient: return "RECV_B";
    case ActionKind::AllReduce: return "ALLREDUCE";
    case ActionKind::OptimizerStep: return "STEP";
    case ActionKind::BackwardWeight: return "W";
  }
  return "?";
}

PackedAction pack(const Action& a) { return pack_action(a); }

ScheduleFile export_schedule(const Schedule& schedule) {
  ScheduleFile file;
  file.options = schedule.options();
  for (int r = 0; r < schedule.workers(); ++r) {
    file.stage_of_rank.push_back(schedule.stage_of(r));
    file.lists.push_back(schedule.actions(r));
  }
  return file;
}

void write_schedule_json(std::ostream& os, const ScheduleFile& file) {
  nlohmann::json workers = nlohmann::json::array();
  for (size_t r = 0; r < file.lists.size(); ++r) {
    nlohmann::json actions = nlohmann::json::array();
    for (const Action& a : file.lists[r]) {
      nlohmann::json act = {{"action", short_name(a.kind)}};
      const Fields f = fields_from(a);
      for (int i = 0; i < kFieldCount; ++i)
        if (f[i]) act[kFieldNames[i]] = *f[i];
      actions.push_back(std::move(act));
    }
    workers.push_back({{"rank", r}, {"stage", file.stage_of_rank[r]}, {"actions", std::move(actions)}});
  }
  nlohmann::json j = {{"format", kFormat},
                      {"schedule", to_string(file.options.kind)},
                      {"weights", to_string(file.options.policy)},
                      {"microbatches", file.options.microbatches},
                      {"minibatches", file.options.minibatches},
                      {"workers", std::move(workers)}};
  const std::string virtual_stages =
      file.options.virtual_stages > 1 ? cat(", \"virtual_stages\": ", file.options.virtual_stages) : std::string();
  // One action per line: readable and editable, still valid JSON.
  os << "{\"format\": " << j["format"] << ", \"schedule\": " << j["schedule"] << ", \"weights\": " << j["weights"]
     << ", \"microbatches\": " << j["microbatches"] << ", \"minibatches\": " << j["minibatches"]
     << virtual_stages << ",\n \"workers\": [";
  for (size_t r = 0; r < j["workers"].size(); ++r) {
    const auto& w = j["workers"][r];
    os << (r ? ",\n  " : "\n  ") << "{\"rank\": " << w["rank"] << ", \"stage\": " << w["stage"] << ", \"actions\": [";
    for (size_t i = 0; i < w["actions"].size(); ++i) os << (i ? ",\n    " : "\n    ") << w["actions"][i].dump();
    os << "]}";
  }
  os << "]}\n";
}

void write_schedule_csv(std::ostream& os, const ScheduleFile& file) {
  os << "# " << kFormat << " " << header_fields(file) << "\n";
  os << "rank,stage,action";
  for (const char* name : kFieldNames) os << "," << name;
  os << "\n";
  for (size_t r = 0; r < file.lists.size(); ++r)
    for (const Action& a : file.lists[r]) {
      os << r << "," << (a.chunk ? file.options.kind->stage_at(static_cast<int>(r), a.chunk, static_cast<int>(file.lists.size())) : file.stage_of_rank[r]) << ","
         << short_name(a.kind);
      for (const auto& v : fields_from(a)) {
        os << ",";
        if (v) os << *v;
      }
      os << "\n";
    }
}

ScheduleFile parse_schedule(const std::string& text, const std::string& source) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return parse_json(text, source);
  return parse_csv(text, source);
}

ScheduleFile read_schedule_file(const std::string& path) {
  return parse_schedule(read_input_file(path, "the schedule file"), path);
}

Schedule checked_schedule(const Plan& plan, const ScheduleFile& file, const std::string& source) {
  Schedule schedule(plan, file.options);
  if (static_cast<int>(file.lists.size()) != schedule.workers())
    throw UserError(cat(source, ": the schedule has ", file.lists.size(), " workers but the plan has ",
                        schedule.workers()));
  for (int r = 0; r < schedule.workers(); ++r)
    if (file.stage_of_rank[static_cast<size_t>(r)] != schedule.stage_of(r))
      throw UserError(cat(source, ": rank ", r, " is in stage ", file.stage_of_rank[static_cast<size_t>(r)],
                          " in the schedule but in stage ", schedule.stage_of(r), " in the plan"));
  const auto violations = check_schedule(schedule, file.lists, 5);
  if (!violations.empty()) {
    std::string msg = cat(source, ": the schedule is rejected: ", violations.front());
    for (size_t i = 1; i < violations.size(); ++i) msg += "\n  also: " + violations[i];
    throw UserError(msg);
  }
  return schedule;
}

}  // namespace pd
