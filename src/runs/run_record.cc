#include "gpumux/runs/run_record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "gpumux/core/json.h"
#include "gpumux/core/json_text.h"
#include "gpumux/runs/manifests.h"

namespace gpumux::runs {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

const std::set<std::string, std::less<>>& KnownEvents() {
  static const std::set<std::string, std::less<>> events = {
      "run", "submit", "error", "scheduled", "unschedulable", "start", "finish", "deleted", "end"};
  return events;
}

// A number as JSON writes it, for messages: 1e+300, 1000000000.0.
std::string JsonNumber(double v) { return json(v).dump(); }

}  // namespace

nlohmann::ordered_json RecordLine(std::string_view event, double t) {
  // Microseconds, so that the text does not carry float noise (0.30000000000000004).
  const double rounded = std::round(t * 1e6) / 1e6;
  nlohmann::ordered_json line;
  line["event"] = std::string(event);
  line["t"] = rounded;
  return line;
}

// --- writing ---------------------------------------------------------------------------------

core::Result<std::unique_ptr<RecordWriter>> RecordWriter::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    if (e == EEXIST) {
      return MakeError(ErrorCode::kAlreadyExists,
                       path + ": exists (a record holds one run: give a new file, or remove it)");
    }
    return MakeError(ErrorCode::kIo, path + ": " + std::strerror(e));
  }
  // The new file's name is durable only once its folder is synced.
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".")
                          : slash == 0               ? std::string("/")
                                                     : path.substr(0, slash);
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return std::unique_ptr<RecordWriter>(new RecordWriter(path, fd));
}

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) ::close(fd_);
}

core::Result<void> RecordWriter::Write(const nlohmann::ordered_json& line) {
  std::string text = line.dump();
  text += '\n';
  std::lock_guard lock(mu_);
  if (!error_.empty()) return MakeError(ErrorCode::kIo, error_);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = path_ + ": " + std::strerror(errno);
      return MakeError(ErrorCode::kIo, error_);
    }
    done += static_cast<std::size_t>(n);
  }
  while (::fdatasync(fd_) != 0) {
    if (errno == EINTR) continue;
    error_ = path_ + ": fdatasync: " + std::strerror(errno);
    return MakeError(ErrorCode::kIo, error_);
  }
  return {};
}

// --- reading ---------------------------------------------------------------------------------

namespace {

class LineReader {
 public:
  LineReader(const std::string& source, std::size_t line, const json& object)
      : where_(source + ":" + std::to_string(line) + ": "), object_(object) {}

  core::Error Bad(const std::string& what) const {
    return core::Error{ErrorCode::kInvalidArgument, where_ + what};
  }
  // A string member; `required` false: "" when absent.
  core::Result<std::string> Str(const char* key, bool required) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      if (required) return tl::unexpected(Bad(std::string("no \"") + key + "\""));
      return std::string();
    }
    if (!it->is_string())
      return tl::unexpected(Bad(std::string("\"") + key + "\" is not a string"));
    return it->get<std::string>();
  }
  // A finite number >= 0; nullopt when absent and not required.
  core::Result<std::optional<double>> Num(const char* key, bool required) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      if (required) return tl::unexpected(Bad(std::string("no \"") + key + "\""));
      return std::optional<double>();
    }
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
      return tl::unexpected(Bad(std::string("\"") + key + "\" is not a number >= 0"));
    }
    return std::optional<double>(it->get<double>());
  }

 private:
  std::string where_;
  const json& object_;
};

}  // namespace

namespace {

using StrTarget = std::pair<const char*, std::string*>;

// Reads the optional string members `targets` name into their places.
core::Result<void> ReadStrings(const LineReader& r, std::initializer_list<StrTarget> targets) {
  for (auto [key, target] : targets) {
    auto v = r.Str(key, false);
    if (!v) return tl::unexpected(v.error());
    *target = *v;
  }
  return {};
}

// "reason: message", or an error naming the member that is not a string.
core::Result<std::pair<std::string, std::string>> ReasonAndMessage(const LineReader& r) {
  std::pair<std::string, std::string> out;
  if (auto ok = ReadStrings(r, {{"reason", &out.first}, {"message", &out.second}}); !ok) {
    return tl::unexpected(ok.error());
  }
  return out;
}

// Reads a record line by line: the run line first, then job events, at most one end line.
class RecordParser {
 public:
  explicit RecordParser(std::string source) : source_(std::move(source)) {}

  core::Result<RunRecord> Parse(std::string_view text) {
    std::size_t pos = 0;
    while (pos < text.size()) {
      ++line_no_;
      std::size_t newline = text.find('\n', pos);
      const bool last_unterminated = newline == std::string_view::npos;
      if (last_unterminated) newline = text.size();
      const std::string_view raw = text.substr(pos, newline - pos);
      pos = newline + 1;
      if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      auto done = Line(raw, last_unterminated);
      if (!done) return tl::unexpected(done.error());
      if (*done) break;
    }
    return Finish();
  }

 private:
  std::string Where() const { return source_ + ":" + std::to_string(line_no_) + ": "; }
  core::Error Bad(const std::string& what) const {
    return core::Error{ErrorCode::kInvalidArgument, Where() + what};
  }

  // One non-blank line; true when reading stops here (a cut-off last line).
  core::Result<bool> Line(std::string_view raw, bool last_unterminated) {
    auto parsed = core::ParseJson(raw, "");
    if (!parsed) {
      if (!last_unterminated) return tl::unexpected(Bad(parsed.error().message));
      record_.warnings.push_back(Where() +
                                 "an incomplete last line (the run was cut off while writing "
                                 "it): ignored");
      return true;
    }
    const json& object = *parsed;
    if (!object.is_object()) return tl::unexpected(Bad("not a JSON object"));
    LineReader r(source_, line_no_, object);
    auto event = r.Str("event", true);
    if (!event) return tl::unexpected(event.error());
    if (KnownEvents().count(*event) == 0)
      return tl::unexpected(Bad("unknown event '" + *event + "'"));
    auto t = r.Num("t", true);
    if (!t) return tl::unexpected(t.error());
    if (**t > kMaxRecordSeconds) {
      return tl::unexpected(Bad("\"t\" is " + JsonNumber(**t) + " s, more than " +
                                JsonNumber(kMaxRecordSeconds) + " s after the run's start"));
    }
    if (!have_run_ && *event != "run") {
      return tl::unexpected(Bad("the first line must be the run line, not '" + *event + "'"));
    }
    if (have_end_) return tl::unexpected(Bad("'" + *event + "' after the end line"));
    core::Result<void> ok;
    if (*event == "run") {
      ok = RunLine(object, r);
    } else if (*event == "end") {
      auto reason = r.Str("reason", true);
      if (!reason) return tl::unexpected(reason.error());
      record_.end_reason = *reason;
      have_end_ = true;
    } else {
      ok = JobLine(*event, **t, object, r);
    }
    if (!ok) return tl::unexpected(ok.error());
    return false;
  }

  core::Result<void> RunLine(const json& object, const LineReader& r) {
    if (have_run_) return tl::unexpected(Bad("a second run line (a record holds one run)"));
    have_run_ = true;
    auto version = object.find("version");
    if (version == object.end() || !version->is_number_integer() ||
        version->get<std::int64_t>() != kRunRecordVersion) {
      return tl::unexpected(Bad("\"version\" must be " + std::to_string(kRunRecordVersion) +
                                " (a record of another gpumux version?)"));
    }
    RecordedRun& run = record_.run;
    if (auto ok = ReadStrings(r, {{"run", &run.run},
                                  {"label", &run.label},
                                  {"namespace", &run.ns},
                                  {"started_at", &run.started_at},
                                  {"source", &run.source}});
        !ok) {
      return ok;
    }
    auto scale = r.Num("time_scale", true);
    if (!scale) return tl::unexpected(scale.error());
    if (!(**scale >= kMinTimeScale && **scale <= kMaxTimeScale)) {
      return tl::unexpected(Bad("\"time_scale\" must be from " + JsonNumber(kMinTimeScale) +
                                " to " + JsonNumber(kMaxTimeScale) + ", not " +
                                JsonNumber(**scale)));
    }
    run.time_scale = **scale;
    auto objects = r.Num("objects", false);
    if (!objects) return tl::unexpected(objects.error());
    const double count = objects->value_or(0);
    // A count the submitter wrote: whole and no more than a manifest may hold (a cast of a larger
    // double is undefined behaviour, found by fuzz/run_record).
    if (count != std::floor(count) || count > static_cast<double>(kMaxManifestObjects)) {
      return tl::unexpected(Bad("\"objects\" must be a whole number up to " +
                                std::to_string(kMaxManifestObjects) + ", not " +
                                JsonNumber(count)));
    }
    run.objects = static_cast<std::int64_t>(count);
    return {};
  }

  RecordedJob& JobOf(const std::string& id) {
    auto [it, fresh] = index_.emplace(id, record_.jobs.size());
    if (fresh) {
      record_.jobs.emplace_back();
      record_.jobs.back().job = id;
    }
    return record_.jobs[it->second];
  }

  core::Result<void> JobLine(const std::string& event, double t, const json& object,
                             const LineReader& r) {
    auto id = r.Str("job", true);
    if (!id) return tl::unexpected(id.error());
    if (id->empty()) return tl::unexpected(Bad("\"job\" is empty"));
    RecordedJob& job = JobOf(*id);
    std::string pod;
    std::string node;
    if (auto ok = ReadStrings(r, {{"pod", &pod}, {"node", &node}}); !ok) return ok;
    if (event == "submit" || event == "error") return Submission(event, t, object, r, job);
    if (!pod.empty()) job.pod = pod;
    if (!node.empty()) job.node = node;
    if (auto ok = Gpus(object, r, job); !ok) return ok;
    return PodEvent(event, t, r, job);
  }

  static core::Result<void> Gpus(const json& object, const LineReader& r, RecordedJob& job) {
    auto it = object.find("gpus");
    if (it == object.end() || it->is_null()) return {};
    if (!it->is_array()) return tl::unexpected(r.Bad("\"gpus\" is not an array"));
    std::vector<std::string> list;
    for (const json& g : *it) {
      if (!g.is_string()) return tl::unexpected(r.Bad("\"gpus\" holds a non-string"));
      list.push_back(g.get<std::string>());
    }
    if (!list.empty()) job.gpus = std::move(list);
    return {};
  }

  // A submit line, or the error of a create that failed.
  core::Result<void> Submission(const std::string& event, double t, const json& object,
                                const LineReader& r, RecordedJob& job) {
    if (job.submitted.has_value() || !job.error.empty()) {
      return tl::unexpected(Bad("job '" + job.job + "' submitted twice"));
    }
    if (auto ok =
            ReadStrings(r, {{"kind", &job.kind}, {"name", &job.name}, {"namespace", &job.ns}});
        !ok) {
      return ok;
    }
    if (event == "submit") {
      if (auto ok = ReadStrings(r, {{"class", &job.cls}}); !ok) return ok;
      auto at = r.Num("submit_at_s", false);
      if (!at) return tl::unexpected(at.error());
      job.submit_at_s = at->value_or(0);
      job.submitted = t;
      return {};
    }
    auto why = ReasonAndMessage(r);
    if (!why) return tl::unexpected(why.error());
    auto status = object.find("http_status");
    const std::string code =
        status != object.end() && status->is_number_integer() && status->get<std::int64_t>() > 0
            ? "HTTP " + std::to_string(status->get<std::int64_t>()) + " "
            : std::string();
    job.error = code + why->first + (why->second.empty() ? "" : ": " + why->second);
    if (job.error.empty()) job.error = "the create failed";
    return {};
  }

  core::Result<void> PodEvent(const std::string& event, double t, const LineReader& r,
                              RecordedJob& job) {
    if (event == "scheduled") {
      if (!job.scheduled) job.scheduled = t;
    } else if (event == "unschedulable") {
      auto why = ReasonAndMessage(r);
      if (!why) return tl::unexpected(why.error());
      if (!job.finished) std::tie(job.reason, job.message) = *why;
    } else if (event == "start") {
      if (!job.started) job.started = t;
    } else if (event == "finish") {
      auto phase = r.Str("phase", true);
      if (!phase) return tl::unexpected(phase.error());
      if (*phase != "Succeeded" && *phase != "Failed") {
        return tl::unexpected(Bad("\"phase\" must be Succeeded or Failed, not '" + *phase + "'"));
      }
      auto why = ReasonAndMessage(r);
      if (!why) return tl::unexpected(why.error());
      // The first success stands; a failure stands until a success (a Job's retry) replaces it.
      if (!job.succeeded()) {
        job.finished = t;
        job.phase = *phase;
        std::tie(job.reason, job.message) = *why;
        job.deleted = false;
      }
    } else if (event == "deleted") {
      if (!job.finished) job.deleted = true;
    }
    return {};
  }

  core::Result<RunRecord> Finish() {
    if (!have_run_) {
      return MakeError(ErrorCode::kInvalidArgument, source_ + ": no run line (empty?)");
    }
    // Jobs with pod events but no submit line: pods of this run label created by someone else.
    std::vector<RecordedJob> jobs;
    for (RecordedJob& job : record_.jobs) {
      if (!job.submitted && job.error.empty()) {
        record_.warnings.push_back(source_ + ": job '" + job.job +
                                   "' has pod events but no submit line: ignored");
        continue;
      }
      jobs.push_back(std::move(job));
    }
    record_.jobs = std::move(jobs);
    return std::move(record_);
  }

  std::string source_;
  RunRecord record_;
  std::map<std::string, std::size_t> index_;  // job -> position in record_.jobs
  bool have_run_ = false;
  bool have_end_ = false;
  std::size_t line_no_ = 0;
};

}  // namespace

core::Result<RunRecord> ParseRunRecord(std::string_view text, const std::string& source) {
  return RecordParser(source).Parse(text);
}

}  // namespace gpumux::runs
