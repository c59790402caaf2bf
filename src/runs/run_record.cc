#include "gpumux/runs/run_record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

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

core::Result<RunRecord> ParseRunRecord(std::string_view text, const std::string& source) {
  RunRecord record;
  std::map<std::string, std::size_t> index;  // job -> position in record.jobs
  bool have_run = false;
  bool have_end = false;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  auto job_of = [&](const std::string& id) -> RecordedJob& {
    auto [it, fresh] = index.emplace(id, record.jobs.size());
    if (fresh) {
      record.jobs.emplace_back();
      record.jobs.back().job = id;
    }
    return record.jobs[it->second];
  };
  while (pos < text.size()) {
    ++line_no;
    std::size_t newline = text.find('\n', pos);
    const bool last_unterminated = newline == std::string_view::npos;
    if (last_unterminated) newline = text.size();
    const std::string_view raw = text.substr(pos, newline - pos);
    pos = newline + 1;
    if (raw.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    json object = json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) {
      if (last_unterminated) {
        record.warnings.push_back(where +
                                  "an incomplete last line (the run was cut off while writing "
                                  "it): ignored");
        break;
      }
      // Find the parser's own message for the error text.
      std::string why;
      try {
        const json again = json::parse(raw);
        why = again.dump();  // not reached: the first parse failed
      } catch (const json::exception& e) {
        why = e.what();
      }
      return MakeError(ErrorCode::kInvalidArgument, where + "not JSON (" + why + ")");
    }
    if (!object.is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, where + "not a JSON object");
    }
    LineReader r(source, line_no, object);
    auto event = r.Str("event", true);
    if (!event) return tl::unexpected(event.error());
    if (KnownEvents().count(*event) == 0) {
      return MakeError(ErrorCode::kInvalidArgument, where + "unknown event '" + *event + "'");
    }
    auto t = r.Num("t", true);
    if (!t) return tl::unexpected(t.error());
    if (!have_run && *event != "run") {
      return MakeError(ErrorCode::kInvalidArgument,
                       where + "the first line must be the run line, not '" + *event + "'");
    }
    if (have_end) {
      return MakeError(ErrorCode::kInvalidArgument, where + "'" + *event + "' after the end line");
    }
    if (*event == "run") {
      if (have_run) {
        return MakeError(ErrorCode::kInvalidArgument,
                         where + "a second run line (a record holds one run)");
      }
      have_run = true;
      auto version = object.find("version");
      if (version == object.end() || !version->is_number_integer() ||
          version->get<std::int64_t>() != kRunRecordVersion) {
        return MakeError(ErrorCode::kInvalidArgument, where + "\"version\" must be " +
                                                          std::to_string(kRunRecordVersion) +
                                                          " (a record of another gpumux version?)");
      }
      RecordedRun& run = record.run;
      for (auto [key, target] :
           {std::pair{"run", &run.run}, std::pair{"label", &run.label},
            std::pair{"namespace", &run.ns}, std::pair{"started_at", &run.started_at},
            std::pair{"source", &run.source}}) {
        auto v = r.Str(key, false);
        if (!v) return tl::unexpected(v.error());
        *target = *v;
      }
      auto scale = r.Num("time_scale", true);
      if (!scale) return tl::unexpected(scale.error());
      if (!(**scale > 0)) {
        return MakeError(ErrorCode::kInvalidArgument, where + "\"time_scale\" must be > 0");
      }
      run.time_scale = **scale;
      auto objects = r.Num("objects", false);
      if (!objects) return tl::unexpected(objects.error());
      run.objects = static_cast<std::int64_t>(objects->value_or(0));
      continue;
    }
    if (*event == "end") {
      auto reason = r.Str("reason", true);
      if (!reason) return tl::unexpected(reason.error());
      record.end_reason = *reason;
      have_end = true;
      continue;
    }
    auto id = r.Str("job", true);
    if (!id) return tl::unexpected(id.error());
    if (id->empty()) return MakeError(ErrorCode::kInvalidArgument, where + "\"job\" is empty");
    RecordedJob& job = job_of(*id);
    auto pod = r.Str("pod", false);
    if (!pod) return tl::unexpected(pod.error());
    auto node = r.Str("node", false);
    if (!node) return tl::unexpected(node.error());
    auto gpus = [&]() -> core::Result<void> {
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
    };
    if (*event == "submit" || *event == "error") {
      if (job.submitted.has_value() || !job.error.empty()) {
        return MakeError(ErrorCode::kInvalidArgument, where + "job '" + *id + "' submitted twice");
      }
      for (auto [key, target] : {std::pair{"kind", &job.kind}, std::pair{"name", &job.name},
                                 std::pair{"namespace", &job.ns}}) {
        auto v = r.Str(key, false);
        if (!v) return tl::unexpected(v.error());
        *target = *v;
      }
      if (*event == "submit") {
        auto cls = r.Str("class", false);
        if (!cls) return tl::unexpected(cls.error());
        job.cls = *cls;
        auto at = r.Num("submit_at_s", false);
        if (!at) return tl::unexpected(at.error());
        job.submit_at_s = at->value_or(0);
        job.submitted = **t;
      } else {
        auto reason = r.Str("reason", false);
        auto message = r.Str("message", false);
        if (!reason) return tl::unexpected(reason.error());
        if (!message) return tl::unexpected(message.error());
        auto status = object.find("http_status");
        const std::string code =
            status != object.end() && status->is_number_integer() && status->get<std::int64_t>() > 0
                ? "HTTP " + std::to_string(status->get<std::int64_t>()) + " "
                : std::string();
        job.error = code + *reason + (message->empty() ? "" : ": " + *message);
        if (job.error.empty()) job.error = "the create failed";
      }
      continue;
    }
    if (!pod->empty()) job.pod = *pod;
    if (!node->empty()) job.node = *node;
    if (auto ok = gpus(); !ok) return tl::unexpected(ok.error());
    if (*event == "scheduled") {
      if (!job.scheduled) job.scheduled = **t;
    } else if (*event == "unschedulable") {
      auto reason = r.Str("reason", false);
      auto message = r.Str("message", false);
      if (!reason) return tl::unexpected(reason.error());
      if (!message) return tl::unexpected(message.error());
      if (!job.finished) {
        job.reason = *reason;
        job.message = *message;
      }
    } else if (*event == "start") {
      if (!job.started) job.started = **t;
    } else if (*event == "finish") {
      auto phase = r.Str("phase", true);
      if (!phase) return tl::unexpected(phase.error());
      if (*phase != "Succeeded" && *phase != "Failed") {
        return MakeError(ErrorCode::kInvalidArgument,
                         where + "\"phase\" must be Succeeded or Failed, not '" + *phase + "'");
      }
      auto reason = r.Str("reason", false);
      auto message = r.Str("message", false);
      if (!reason) return tl::unexpected(reason.error());
      if (!message) return tl::unexpected(message.error());
      // The first success stands; a failure stands until a success (a Job's retry) replaces it.
      if (!job.succeeded()) {
        job.finished = **t;
        job.phase = *phase;
        job.reason = *reason;
        job.message = *message;
        job.deleted = false;
      }
    } else if (*event == "deleted") {
      if (!job.finished) job.deleted = true;
    }
  }
  if (!have_run) return MakeError(ErrorCode::kInvalidArgument, source + ": no run line (empty?)");
  // Jobs with pod events but no submit line: pods of this run label created by someone else.
  std::vector<RecordedJob> jobs;
  for (RecordedJob& job : record.jobs) {
    if (!job.submitted && job.error.empty()) {
      record.warnings.push_back(source + ": job '" + job.job +
                                "' has pod events but no submit line: ignored");
      continue;
    }
    jobs.push_back(std::move(job));
  }
  record.jobs = std::move(jobs);
  return record;
}

}  // namespace gpumux::runs
