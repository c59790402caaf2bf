// The record of a workload run on a cluster: what `gpumux submit --record FILE` writes as it
// happens, and `gpumux report --from-cluster FILE` reads. JSON lines, one event per line, each
// line written with one write() and fsync'd before the next, so a crash loses at most the
// line being written (a reader reports an incomplete last line and ignores it).
//
// Every line has "event" and "t" (seconds since the run started, on submit's own monotonic
// clock, microseconds). Job events name the job ("job": the gpumux.io/job annotation, else the
// object's name). Events, in the order they happen (pod events may come before their job's
// submit line: the watch can see a pod before its create call returns):
//   run          first line: version (1), run (the gpumux.io/run label), label, namespace,
//                time_scale, started_at (RFC 3339, wall clock), source, objects
//   submit       job, kind (Pod|Job), name, namespace, uid, class, submit_at_s (the manifest's
//                arrival), due_t (when it was due: submit_at_s x time_scale), took_s (the create)
//   error        job, kind, name, namespace, http_status (0: no answer), reason, message
//   scheduled    job, pod, node, gpus (["node/index", ...] from the grant; may be empty)
//   unschedulable job, pod, reason, message (PodScheduled False; once per new message)
//   start        job, pod, node, gpus, started_at (the container's, RFC 3339, when known)
//   finish       job, pod, node, phase (Succeeded|Failed), reason, message, exit_code,
//                finished_at
//   deleted      job, pod (gone before it finished)
//   end          last line: reason (finished, submitted, interrupted, timeout, fail-fast,
//                record-error), submitted, errors, finished, unfinished
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::runs {

inline constexpr int kRunRecordVersion = 1;
// The latest time a record line may carry, in seconds from the run's start (about 31 years; the
// report turns times into integer microseconds, which hold up to ~9.2e12 s).
inline constexpr double kMaxRecordSeconds = 1e9;
// The range of a run's time scale (--time-scale): 1e-9 is a billion times faster than the trace
// (months of the Alibaba trace in seconds); below it, loads and sleeps stop being numbers.
inline constexpr double kMinTimeScale = 1e-9;
inline constexpr double kMaxTimeScale = 1e6;
// The largest record read (a line per event; 10^6 jobs with 6 events of ~300 bytes is 1.8 GB).
inline constexpr std::size_t kMaxRunRecordBytes = std::size_t{4} << 30;

// One event line, "event" and "t" set (first, for a reader's eye); the caller adds the
// event's fields, which keep the order they are added in.
nlohmann::ordered_json RecordLine(std::string_view event, double t);

// Appends lines to a new record file: each Write is one write() of the line and its newline,
// then fdatasync. Thread-safe.
class RecordWriter {
 public:
  // Creates `path` (0644); refuses a file that exists (a record holds one run) or a folder.
  static core::Result<std::unique_ptr<RecordWriter>> Create(const std::string& path);
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Error (kIo, naming the file) when the write or the sync fails; later writes fail too.
  core::Result<void> Write(const nlohmann::ordered_json& line);
  const std::string& path() const { return path_; }

 private:
  RecordWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::mutex mu_;
  std::string path_;
  int fd_ = -1;
  std::string error_;  // the first failure; kept so that later writes report it
};

// What the run line says.
struct RecordedRun {
  std::string run;
  std::string label;
  std::string ns;
  double time_scale = 1;
  std::string started_at;
  std::string source;
  std::int64_t objects = 0;
};

// One job as the record tells it (times in seconds after the run's start; nullopt: not seen).
struct RecordedJob {
  std::string job;
  std::string kind;  // Pod | Job
  std::string name;  // the object's
  std::string ns;
  std::string cls;                  // the workload class ("" when the object had none)
  double submit_at_s = 0;           // the manifest's arrival (before --time-scale)
  std::optional<double> submitted;  // the create was sent
  std::string error;                // the create failed: "HTTP 409 AlreadyExists: ..."
  std::optional<double> scheduled, started, finished;
  std::string pod;  // the pod that decided it (a Job's pods: the last one seen)
  std::string node;
  std::vector<std::string> gpus;  // "node/index"
  std::string phase;              // Succeeded | Failed once finished
  std::string reason, message;    // why it failed, or why it waits (unschedulable)
  bool deleted = false;           // its pod was deleted before it finished

  bool succeeded() const { return finished.has_value() && phase == "Succeeded"; }
};

struct RunRecord {
  RecordedRun run;
  std::vector<RecordedJob> jobs;          // in the order of their first line
  std::optional<std::string> end_reason;  // nullopt: the run was cut off (no end line)
  std::vector<std::string> warnings;      // lines ignored, and why
};

// Parses a record. Errors name `source` and the line: "run.jsonl:7: \"t\" is not a number >= 0",
// ":1: the first line must be the run line", ":12: unknown event 'strat'", ":9: not JSON (...)".
// An incomplete last line (no newline, not JSON: the run was cut off while writing it) is a
// warning, not an error. Per job: the first start and, with several pods (a Job's retries), the
// first Succeeded finish, else the last Failed one.
core::Result<RunRecord> ParseRunRecord(std::string_view text, const std::string& source);

}  // namespace gpumux::runs
