#include "report/run_metrics.h"

#include "core/error.h"
#include "core/input_file.h"
#include "core/printable.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

namespace ndt {

namespace {

// Where a value came from, for error messages: "runs/x/metrics.jsonl:12".
struct Line {
  const std::filesystem::path& file;
  int number;
  std::string where() const { return fmt::format("{}:{}", file.string(), number); }
};

// A number, or the text the trainer writes for a non-finite one.
double number(const nlohmann::json& value, const Line& line, const std::string& key) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    if (text == "nan" || text == "-nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
  }
  fail("{}: {} = {} is not a number", line.where(), key, value.dump());
}

// The start of a line the reader cannot take, for a message: at most 120 bytes, every
// control character written as \xNN so the terminal shows it instead of obeying it.
std::string excerpt(const std::string& content) { return printable_text(content.substr(0, 120)); }

int64_t step_of(const nlohmann::json& record, const Line& line) {
  const auto it = record.find("step");
  NDT_CHECK(it != record.end() && it->is_number_integer(), "{}: the record has no integer \"step\": {}", line.where(),
            record.dump().substr(0, 200));
  return it->get<int64_t>();
}

// A config value of a "run" record as plain text (strings are stored as TOML writes them).
std::string config_text(const nlohmann::json& run, const std::string& key) {
  const nlohmann::json& config = run.value("config", nlohmann::json::object());
  const auto it = config.find(key);
  if (it == config.end() || !it->is_string()) return "";
  std::string text = it->get<std::string>();
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  return text;
}

// An event's text, and its kind as the trainer wrote it ("kind": spike, skip, rollback,
// clip, overflow, nonfinite; records written before kinds existed: "event").
std::string text_of(const nlohmann::json& record, const char* key, const Line& line) {
  NDT_CHECK(record.is_object() && record.contains(key) && record.at(key).is_string(), "{}: an event's \"{}\" is not "
            "text: {}", line.where(), key, record.dump().substr(0, 120));
  return record.at(key).get<std::string>();
}

std::string event_kind(const nlohmann::json& record, const Line& line) {
  if (!record.contains("kind")) return "event";
  return text_of(record, "kind", line);
}

class Reader {
 public:
  explicit Reader(RunMetrics& m) : m_(m) {}

  void record(const nlohmann::json& r, const Line& line) {
    if (r.contains("run")) return run(r.at("run"), line);
    if (r.contains("summary")) {
      m_.summary = r.at("summary");
      return;
    }
    if (r.contains("layout_check")) {
      NDT_CHECK(r.at("layout_check").is_object(), "{}: \"layout_check\" is not an object", line.where());
      m_.layout_checks.push_back(r.at("layout_check"));
      return;
    }
    if (r.contains("event")) return event(step_of(r, line), event_kind(r, line), text_of(r, "event", line));
    if (r.contains("val_loss")) {
      m_.val_loss[step_of(r, line)] = number(r.at("val_loss"), line, "val_loss");
      return;
    }
    if (r.contains("loss")) return step(r, line);
    m_.skipped.push_back(fmt::format("line {}: not a record this report knows: {}", line.number,
                                     r.dump().substr(0, 120)));
  }

 private:
  void run(const nlohmann::json& run, const Line& line) {
    NDT_CHECK(run.is_object(), "{}: \"run\" = {} is not an object", line.where(), run.dump().substr(0, 200));
    m_.runs.push_back(run);
    previous_comm_.clear();  // a new process: its counters start from zero
    const int64_t start = run.value("start_step", int64_t{0});
    if (run.value("resumed", false)) event(start, "resume", fmt::format("resumed from the checkpoint of step {}", start));
    const std::string clip = config_text(run, "optim.grad_clip");
    grad_clip_ = config_text(run, "optim.clip_mode") == "norm" && !clip.empty() ? std::stod(clip) : 0.0;
  }

  void step(const nlohmann::json& r, const Line& line) {
    const int64_t s = step_of(r, line);
    // Series that every step record has, then the optional ones.
    const std::pair<const char*, Series*> required[] = {
        {"loss", &m_.loss}, {"lr", &m_.lr}, {"grad_norm", &m_.grad_norm}, {"step_s", &m_.step_s},
        {"tokens_per_s", &m_.tokens_per_s}, {"mfu", &m_.mfu}};
    for (const auto& [key, series] : required) {
      NDT_CHECK(r.contains(key), "{}: the step record has no \"{}\"", line.where(), key);
      (*series)[s] = number(r.at(key), line, key);
    }
    const std::pair<const char*, Series*> optional[] = {{"hfu", &m_.hfu}, {"peak_mem_bytes", &m_.peak_mem_bytes}};
    for (const auto& [key, series] : optional) {
      if (r.contains(key)) (*series)[s] = number(r.at(key), line, key);
    }
    if (r.contains("mem")) {
      for (const auto& [tag, bytes] : r.at("mem").items()) {
        NDT_CHECK(bytes.is_object(), "{}: mem.{} = {} is not {{\"current\", \"peak\"}}", line.where(), tag, bytes.dump());
        m_.mem_current[tag][s] = number(bytes.value("current", nlohmann::json()), line, "mem." + tag + ".current");
        m_.mem_peak[tag][s] = number(bytes.value("peak", nlohmann::json()), line, "mem." + tag + ".peak");
      }
    }
    if (r.contains("comm")) comm(r.at("comm"), s, line);
    const double norm = m_.grad_norm[s];
    if (grad_clip_ > 0 && norm > grad_clip_) {
      event(s, "clip", fmt::format("gradient norm {:.4g} clipped to optim.grad_clip = {:g}", norm, grad_clip_));
    }
    if (r.contains("events")) {
      NDT_CHECK(r.at("events").is_array(), "{}: \"events\" = {} is not a list", line.where(),
                r.at("events").dump().substr(0, 120));
      for (const nlohmann::json& e : r.at("events")) event(s, event_kind(e, line), text_of(e, "text", line));
    }
  }

  // Rank 0's cumulative counters {axis: {op: {calls, wire_bytes, wait_s}}} -> this step's share.
  void comm(const nlohmann::json& axes, int64_t s, const Line& line) {
    NDT_CHECK(axes.is_object(), "{}: comm = {} is not an object", line.where(), axes.dump().substr(0, 120));
    for (const auto& [axis, ops] : axes.items()) {
      double bytes = 0, wait = 0;
      NDT_CHECK(ops.is_object(), "{}: comm.{} = {} is not an object", line.where(), axis, ops.dump().substr(0, 120));
      for (const auto& [op, c] : ops.items()) {
        NDT_CHECK(c.is_object(), "{}: comm.{}.{} = {} is not an object", line.where(), axis, op, c.dump());
        bytes += number(c.value("wire_bytes", nlohmann::json(0)), line, "comm." + axis + "." + op + ".wire_bytes");
        wait += number(c.value("wait_s", nlohmann::json(0)), line, "comm." + axis + "." + op + ".wait_s");
      }
      auto& [before_bytes, before_wait] = previous_comm_[axis];
      // Counters that went down belong to a new process whose run record is missing.
      if (bytes < before_bytes) before_bytes = 0, before_wait = 0;
      m_.comm_bytes[axis][s] = bytes - before_bytes;
      m_.comm_wait_s[axis][s] = wait - before_wait;
      before_bytes = bytes, before_wait = wait;
    }
  }

  // The trainer writes an intervention twice (in the step record and as an event record,
  // at the same step): duplicates are looked for among the events of the step at hand.
  // Every event is counted; kMaxEventsPerKind of each kind are kept.
  void event(int64_t step, const std::string& kind, const std::string& text) {
    if (step != seen_step_) seen_.clear(), seen_step_ = step;
    if (!seen_.insert(text).second) return;
    if (++m_.event_counts[kind] <= kMaxEventsPerKind) m_.events.push_back({step, kind, text});
  }

  RunMetrics& m_;
  std::map<std::string, std::pair<double, double>> previous_comm_;  // axis -> (bytes, wait)
  double grad_clip_ = 0;  // the current part's optim.grad_clip under clip_mode norm; 0: none
  int64_t seen_step_ = -1;
  std::set<std::string> seen_;  // the texts of this step's events
};

}  // namespace

RunMetrics read_run_metrics(const std::filesystem::path& file) {
  const std::string problem = input_file_problem(file);
  NDT_CHECK(problem.empty(), "metrics file \"{}\" {}", file.string(), problem);
  NDT_CHECK(std::filesystem::file_size(file) > 0, "metrics file \"{}\" is empty: the run wrote no records",
            file.string());
  // Line by line: memory holds the series, never the file.
  std::ifstream in(file, std::ios::binary);
  RunMetrics m;
  m.path = file;
  Reader reader(m);
  std::string content;
  while (std::getline(in, content)) {
    const bool complete = !in.eof();  // getline stopped at a newline, not at the end of the file
    const Line line{file, ++m.lines};
    if (content.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(content);
    } catch (const nlohmann::json::parse_error& e) {
      // Each record is one write ending in its newline: a last line without one is a
      // record the run was writing when it stopped.
      if (!complete) {
        m.skipped.push_back(fmt::format("line {}: cut short (the run stopped while writing it), skipped", line.number));
        break;
      }
      fail("{}: not a JSON record ({}): {}", line.where(), printable_text(e.what()), excerpt(content));
    }
    NDT_CHECK(record.is_object(), "{}: not a JSON object: {}", line.where(), excerpt(content));
    reader.record(record, line);
  }
  for (Series* s : {&m.loss, &m.val_loss, &m.lr, &m.grad_norm, &m.step_s, &m.tokens_per_s, &m.mfu, &m.hfu,
                    &m.peak_mem_bytes}) {
    s->shrink_to_fit();
  }
  for (auto* by_key : {&m.mem_current, &m.mem_peak, &m.comm_bytes, &m.comm_wait_s}) {
    for (auto& [key, s] : *by_key) s.shrink_to_fit();
  }
  return m;
}

std::vector<RunEvent> events_of_kind(const RunMetrics& metrics, const std::string& kind) {
  std::vector<RunEvent> events;
  for (const RunEvent& e : metrics.events) {
    if (e.kind == kind) events.push_back(e);
  }
  return events;
}

}  // namespace ndt
