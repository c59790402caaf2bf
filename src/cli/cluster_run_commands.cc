// Trace-driven workloads run on a real cluster: `gpumux submit` (create the manifests of
// `gpumux jobgen --format k8s` at their arrival times, record what happens) and `gpumux report
// --from-cluster` (the simulator's JCT report for what was recorded).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "gpumux/core/plural.h"
#include "gpumux/core/time.h"
#include "gpumux/io/read_file.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/objects.h"
#include "gpumux/runs/manifests.h"
#include "gpumux/runs/run_record.h"
#include "gpumux/runs/submitter.h"
#include "gpumux/sim/dl_measured.h"
#include "gpumux/sim/dl_report.h"
#include "src/cli/commands.h"
#include "src/cli/daemon_support.h"
#include "src/cli/options.h"

namespace gpumux::cli {
namespace {

using nlohmann::json;

}  // namespace

// --------------------------------------------------------------------------------- submit

namespace {

// A create's resources, for the dry run: "gpumux.io/gpu-mem=5,cpu=4000m".
std::string Asks(const json& object) {
  const json* spec = kube::JsonChild(object, "spec");
  if (spec != nullptr && kube::JsonString(object, "kind") == "Job") {
    const json* tmpl = kube::JsonChild(*spec, "template");
    spec = tmpl == nullptr ? nullptr : kube::JsonChild(*tmpl, "spec");
  }
  const json* containers = spec == nullptr ? nullptr : kube::JsonChild(*spec, "containers");
  std::string out;
  if (containers == nullptr || !containers->is_array()) return "-";
  for (const json& c : *containers) {
    const json* resources = kube::JsonChild(c, "resources");
    const json* limits = resources == nullptr ? nullptr : kube::JsonChild(*resources, "limits");
    const json* requests = resources == nullptr ? nullptr : kube::JsonChild(*resources, "requests");
    for (const json* list : {limits, requests}) {
      if (list == nullptr || !list->is_object()) continue;
      for (const auto& [name, value] : list->items()) {
        // A request that a limit names too says nothing new.
        if (list == requests && limits != nullptr && kube::JsonChild(*limits, name.c_str())) {
          continue;
        }
        if (!out.empty()) out += ',';
        out += name + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
  }
  return out.empty() ? "-" : out;
}

std::string UtcRunName() { return core::FormatUtc(std::time(nullptr), "run-%Y%m%d-%H%M%S"); }

// Progress on stderr: a bar redrawn in place on a terminal, else a line every `every` seconds.
class ProgressPrinter {
 public:
  enum class Mode : std::uint8_t { kBar, kLines, kNone };
  ProgressPrinter(std::ostream& err, Mode mode, double every_s)
      : err_(err), mode_(mode), every_s_(every_s) {}

  // A line for humans (an error, a note), keeping the bar below it.
  void Log(std::string_view line) {
    std::lock_guard lock(mu_);
    if (mode_ == Mode::kBar && drawn_) err_ << "\r\033[K";
    err_ << "gpumux submit: " << line << "\n";
    if (mode_ == Mode::kBar && last_) Draw(*last_);
    err_ << std::flush;
  }

  void Update(const runs::SubmitProgress& p, bool final_update) {
    std::lock_guard lock(mu_);
    last_ = p;
    if (mode_ == Mode::kNone) return;
    if (mode_ == Mode::kBar) {
      Draw(p);
      if (final_update) {
        err_ << "\n";
        drawn_ = false;
      }
      err_ << std::flush;
      return;
    }
    if (!final_update && p.elapsed_s < next_line_s_) return;
    next_line_s_ = p.elapsed_s + every_s_;
    err_ << "gpumux submit: " << Summary(p) << "\n" << std::flush;
  }

  static std::string Summary(const runs::SubmitProgress& p) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "%zu/%zu submitted, %zu running, %zu succeeded, %zu failed, %zu %s (%.0f s)",
                  p.submitted, p.total, p.running, p.succeeded, p.failed, p.errors,
                  p.errors == 1 ? "create error" : "create errors", p.elapsed_s);
    std::string out = text;
    if (p.submitting && p.next_due_s >= 0) {
      std::snprintf(text, sizeof text, "; next in %.1f s", p.next_due_s);
      out += text;
    }
    return out;
  }

 private:
  void Draw(const runs::SubmitProgress& p) {
    constexpr int kWidth = 24;
    const double done =
        p.total == 0 ? 1.0
                     : static_cast<double>(p.submitted + p.errors) / static_cast<double>(p.total);
    const int filled = static_cast<int>(std::lround(done * kWidth));
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.append(static_cast<std::size_t>(kWidth - filled), '.');
    err_ << "\r\033[K[" << bar << "] " << Summary(p);
    drawn_ = true;
  }

  std::mutex mu_;
  std::ostream& err_;
  Mode mode_;
  double every_s_;
  double next_line_s_ = 0;
  bool drawn_ = false;
  std::optional<runs::SubmitProgress> last_;
};

}  // namespace

CLI::App* AddSubmitCommand(CLI::App& app, SubmitCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "submit",
      "Create a workload's pods or jobs on a cluster at their arrival times and record them\n"
      "Reads Pod and batch/v1 Job manifests (multi-document YAML, a JSON object or List, e.g. "
      "from 'gpumux jobgen --format k8s'), creates each when its gpumux.io/submit-at-s "
      "arrives (times --time-scale), watches their pods (label gpumux.io/run=RUN) and appends "
      "every job's submit, scheduling (node and GPUs from the grant), start and finish (phase "
      "and reason) to the record file as it happens, fsync'd line by line. 'gpumux report "
      "--from-cluster RECORD' turns the record into the simulator's JCT report. API errors are "
      "reported per object and the run goes on (--fail-fast stops it). Ctrl-C stops "
      "submitting; with --wait the pods already created are still recorded until they finish "
      "(Ctrl-C again ends at once).");
  cmd->add_option("file", o.file, "Manifests to create; - for stdin")->capture_default_str();
  cmd->add_option("--kubeconfig", o.kubeconfig,
                  "Kubeconfig [default: as kubectl: $KUBECONFIG (one file), ~/.kube/config, "
                  "else the in-cluster service account]");
  cmd->add_option("--context", o.context, "Context of the kubeconfig [default: its current one]");
  cmd->add_option("-n,--namespace", o.ns,
                  "Namespace of objects that name none [default: the context's, else default]");
  cmd->add_option("--time-scale", o.time_scale,
                  "Multiplies every arrival time (0.01: 100 times faster) and the sleep of trace "
                  "pods (gpumux.io/duration-s)")
      ->capture_default_str()
      ->check(NumberIn(runs::kMinTimeScale, runs::kMaxTimeScale, LowerBound::kClosed));
  cmd->add_option("--record", o.record,
                  "The record file, JSON lines; must not exist [default: gpumux-run-RUN.jsonl]");
  cmd->add_option("--run", o.run,
                  "The run's name: the gpumux.io/run label put on every object [default: the "
                  "manifests' own label when they all carry one, else run-<UTC date-time>]");
  cmd->add_option("--label", o.label,
                  "What the report calls this run, e.g. the extender's policy [default: the "
                  "run's name]");
  cmd->add_flag("--wait", o.wait, "After the last create, record until every job has finished");
  cmd->add_option("--wait-timeout", o.wait_timeout_s,
                  "With --wait: give up this many seconds after the last create (0: never)")
      ->capture_default_str()
      ->check(NumberIn(0, 1e9));
  cmd->add_flag("--fail-fast", o.fail_fast, "Stop at the first object the API server refuses");
  cmd->add_flag("--dry-run", o.dry_run,
                "Print when each object would be created, and create nothing (no cluster "
                "needed)");
  cmd->add_option("--progress", o.progress,
                  "auto (a bar on a terminal, else lines), bar, lines or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  cmd->add_option("--progress-every", o.progress_every_s, "Seconds between progress lines")
      ->capture_default_str()
      ->check(NumberIn(0, 86400, LowerBound::kOpen));
  RecordGivenOptions(*cmd, o.given);
  // Every command line below is run by tests/cli/help_examples.py (with --dry-run added).
  cmd->footer(
      "\nExamples:\n"
      "  gpumux submit jobs.yaml --time-scale 0.01 --wait --record run1.jsonl\n"
      "      100 times faster than the arrivals; record until every job has finished\n"
      "  gpumux jobgen --format k8s --count 20 --work-scale 0.01 | gpumux submit - --wait\n"
      "  gpumux jobgen --format k8s --pods default --count 50 | gpumux submit - \\\n"
      "      --time-scale 0.001 --label fgd --wait --wait-timeout 3600 -n gpumux-trace\n"
      "      50 pods of the FGD study's trace, 1000 times faster\n"
      "\nExit status: 0 when every object was created (and with --wait every job finished, "
      "whether it succeeded or not); 1 when a create failed, --fail-fast stopped, the wait "
      "timed out or the record could not be written; 130 after Ctrl-C; 2 for bad usage or "
      "input.\n");
  return cmd;
}

int RunSubmit(const SubmitCliOptions& o, std::istream& in, std::ostream& out, std::ostream& err) {
  auto usage = [&](const std::string& message) {
    err << "gpumux submit: " << message << "\n";
    return 2;
  };
  if (Given(o.given, "wait-timeout") && !o.wait) return usage("--wait-timeout needs --wait");
  // The manifests.
  std::string text;
  const std::string source = o.file == "-" ? std::string("<stdin>") : o.file;
  if (o.file == "-") {
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  } else {
    auto read = io::ReadInputFile(o.file);
    if (!read) return usage(read.error().message);
    text = std::move(*read);
  }
  auto objects = runs::ParseManifests(text, source);
  if (!objects) return usage(objects.error().message);
  if (objects->empty()) return usage(source + ": no objects to submit");

  // The cluster, as kubectl finds it (the dry run only for the namespace, when there is one).
  const char* env_kubeconfig = std::getenv("KUBECONFIG");
  const char* env_home = std::getenv("HOME");
  const char* env_service = std::getenv("KUBERNETES_SERVICE_HOST");
  auto where = kube::FindKubeconfig(o.kubeconfig, env_kubeconfig ? env_kubeconfig : "",
                                    env_home ? env_home : "", env_service ? env_service : "");
  std::optional<kube::ClientConfig> config;
  if (where) {
    auto loaded = where->in_cluster ? kube::LoadInClusterConfig()
                                    : kube::LoadKubeconfig(where->path, o.context);
    if (!loaded && !(o.dry_run && !Given(o.given, "kubeconfig"))) {
      return usage((where->in_cluster ? std::string("in-cluster: ")
                                      : where->how + " " + where->path + ": ") +
                   loaded.error().message);
    }
    if (loaded) config = std::move(*loaded);
  } else if (!o.dry_run) {
    return usage(where.error().message);
  }
  if (!o.context.empty() && (!where || where->in_cluster)) {
    return usage("--context needs a kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config)");
  }

  // The run's name: given, else the manifests' common label, else the time.
  std::string run = o.run;
  if (run.empty()) {
    std::set<std::string> labels;
    for (const json& object : *objects) {
      const json* metadata = kube::JsonChild(object, "metadata");
      const json* l = metadata == nullptr ? nullptr : kube::JsonChild(*metadata, "labels");
      labels.insert(l == nullptr ? std::string() : kube::JsonString(*l, "gpumux.io/run"));
    }
    run = labels.size() == 1 && !labels.begin()->empty() ? *labels.begin() : UtcRunName();
  }
  runs::PrepareOptions prepare;
  prepare.run = run;
  prepare.ns = o.ns;
  prepare.default_ns = config ? config->default_namespace : "default";
  prepare.time_scale = o.time_scale;
  auto prepared = runs::PrepareSubmission(std::move(*objects), prepare, source);
  if (!prepared) return usage(prepared.error().message);

  if (o.dry_run) {
    out << "gpumux submit: " << core::Plural(prepared->size(), "object") << " from " << source
        << ", run " << run << ", time scale " << SecondsText(o.time_scale)
        << " (dry run: nothing is created)\n";
    char line[512];
    std::snprintf(line, sizeof line, "%12s  %-4s %-36s %-16s %-12s %s\n", "at (s)", "kind",
                  "namespace/name", "job", "class", "asks");
    out << line;
    for (const runs::SubmitObject& s : *prepared) {
      const double at = static_cast<double>(s.at_us) / 1e6 * o.time_scale;
      std::snprintf(line, sizeof line, "%12.3f  %-4s %-36s %-16s %-12s %s\n", at, s.kind.c_str(),
                    (s.ns + "/" + s.name).c_str(), s.job.c_str(),
                    s.cls.empty() ? "-" : s.cls.c_str(), Asks(s.object).c_str());
      out << line;
    }
    return 0;
  }

  const std::string record_path = o.record.empty() ? "gpumux-run-" + run + ".jsonl" : o.record;
  auto record = runs::RecordWriter::Create(record_path);
  if (!record) return usage("--record: " + record.error().message);

  ProgressPrinter::Mode mode = ProgressPrinter::Mode::kLines;
  if (o.progress == "none") mode = ProgressPrinter::Mode::kNone;
  if (o.progress == "bar" ||
      (o.progress == "auto" && &err == &std::cerr && ::isatty(STDERR_FILENO) == 1)) {
    mode = ProgressPrinter::Mode::kBar;
  }
  ProgressPrinter printer(err, mode, o.progress_every_s);

  // SIGINT/SIGTERM reach only the watcher below (the mask is inherited by every thread).
  SignalBlock signals;
  std::stop_source stop_submitting, stop_all;
  std::atomic<bool> done{false};
  std::atomic<int> signals_seen{0};
  std::jthread signal_watcher([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    const timespec tick{0, 200'000'000};
    while (!done.load()) {
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig != SIGINT && sig != SIGTERM) continue;
      const int n = ++signals_seen;
      if (n == 1 && o.wait) {
        printer.Log(
            "stopping: no more creates; recording the jobs already created until they "
            "finish (again to stop now)");
        stop_submitting.request_stop();
      } else {
        printer.Log("stopping now");
        stop_submitting.request_stop();
        stop_all.request_stop();
      }
    }
  });

  auto api = kube::MakeCurlClient(*config);
  runs::SubmitOptions so;
  so.run = run;
  so.label = o.label.empty() ? run : o.label;
  so.source = source;
  so.time_scale = o.time_scale;
  so.wait = o.wait ? runs::WaitMode::kWaitForPods : runs::WaitMode::kNoWait;
  so.wait_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.wait_timeout_s * 1000));
  so.fail = o.fail_fast ? runs::FailMode::kFailFast : runs::FailMode::kContinue;
  so.gpumux_version = GPUMUX_VERSION;
  const std::size_t total = prepared->size();
  runs::Submitter submitter(*api, std::move(*prepared), so, **record,
                            [&](std::string_view line) { printer.Log(line); });
  printer.Log("run " + run + ": " + core::Plural(total, "object") + " from " + source +
              ", time scale " + SecondsText(o.time_scale) + ", recording to " + record_path);
  std::atomic<bool> finished{false};
  std::jthread ticker([&] {
    const auto tick = mode == ProgressPrinter::Mode::kBar ? std::chrono::milliseconds(200)
                                                          : std::chrono::milliseconds(100);
    while (!finished.load()) {
      printer.Update(submitter.Progress(), false);
      std::this_thread::sleep_for(tick);
    }
  });
  auto summary = submitter.Run(stop_submitting.get_token(), stop_all.get_token());
  finished = true;
  ticker.join();
  printer.Update(submitter.Progress(), true);
  done = true;
  signal_watcher.join();
  if (!summary) {
    err << "gpumux submit: " << summary.error().message << "\n";
    return 1;
  }
  std::string end = "gpumux submit: " + summary->end_reason + ": " +
                    core::Plural(summary->submitted, "job") + " created";
  if (summary->errors > 0) end += ", " + core::Plural(summary->errors, "create") + " refused";
  end += "; " + std::to_string(summary->succeeded) + " succeeded, " +
         std::to_string(summary->failed) + " failed, " + std::to_string(summary->unfinished) +
         " unfinished; record: " + record_path + "\n";
  err << end;
  if (!summary->unfinished_jobs.empty() && o.wait) {
    std::string list;
    for (std::size_t i = 0; i < summary->unfinished_jobs.size() && i < 10; ++i) {
      list += (i ? ", " : "") + summary->unfinished_jobs[i];
    }
    if (summary->unfinished_jobs.size() > 10) list += ", ...";
    err << "gpumux submit: not finished: " << list << "\n";
  }
  if (summary->end_reason == "interrupted") return 130;
  if (summary->errors > 0 || summary->end_reason == "fail-fast" ||
      summary->end_reason == "timeout") {
    return 1;
  }
  return 0;
}

// --------------------------------------------------------------------------------- report

CLI::App* AddReportCommand(CLI::App& app, ReportCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write the JCT tables and HTML report of 'simulate --workload dl' for recorded runs\n"
      "Reads records of 'gpumux submit' (--from-cluster, repeatable: runs of the same jobs "
      "under different schedulers or policies side by side, each named by its --label) and "
      "prints, per load (1 / the run's time scale), average, median and p95 JCT, makespan, "
      "queueing and GPU busy time of the jobs that succeeded, and writes index.html (JCT CDF, "
      "per-GPU timeline named node/index from the grants), results.json and jobs.csv. Jobs "
      "that failed, never started or were never created are listed, not counted.");
  cmd->add_option("--from-cluster", o.records, "A record written by 'gpumux submit --record'")
      ->required();
  cmd->add_option("--out", o.out_dir,
                  "Report folder [default: " + std::string(kClusterReportDir) + "]");
  cmd->add_flag("--no-report", o.no_report, "Print the table only");
  cmd->add_option("--format", o.format, "table or json (what is printed)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--baseline", o.baseline,
                  "The run the page's margin line compares the run labelled gpumux with")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o.quiet, "No notes on stderr");
  RecordGivenOptions(*cmd, o.given);
  cmd->footer(
      "\nExamples:\n"
      "  gpumux report --from-cluster run1.jsonl\n"
      "  gpumux report --from-cluster gpumux.jsonl --from-cluster iadeep.jsonl --out compare\n"
      "      two runs of the same jobs, labelled gpumux and iadeep by 'submit --label'\n");
  return cmd;
}

int RunReport(const ReportCliOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "gpumux report: " << message << "\n";
    return 2;
  };
  if (o.no_report && Given(o.given, "out")) return fail("--out and --no-report contradict");
  std::vector<sim::DlResult> results;
  sim::DlReportContext ctx;
  ctx.measured = true;
  ctx.baseline = o.baseline;
  std::size_t total_jobs = 0;
  std::string names;
  std::map<std::pair<std::string, double>, int> seen;  // (label, load) -> runs so far
  for (const std::string& path : o.records) {
    auto text = io::ReadInputFile(path, runs::kMaxRunRecordBytes);
    if (!text) return fail("--from-cluster: " + text.error().message);
    auto record = runs::ParseRunRecord(*text, path);
    if (!record) return fail("--from-cluster: " + record.error().message);
    if (!o.quiet) {
      for (const std::string& w : record->warnings) err << "gpumux report: " << w << "\n";
    }
    const double scale = record->run.time_scale;
    double load = 1.0 / scale;
    if (std::fabs(load - std::round(load)) < 1e-9 * std::max(1.0, load)) load = std::round(load);
    std::string label = record->run.label.empty() ? record->run.run : record->run.label;
    if (label.empty()) label = path;
    if (const int n = ++seen[{label, load}]; n > 1) label += " #" + std::to_string(n);

    std::vector<sim::MeasuredJob> jobs;
    std::size_t succeeded = 0, failed = 0, unfinished = 0, refused = 0;
    std::vector<std::string> problems;
    for (const runs::RecordedJob& j : record->jobs) {
      if (!j.submitted) {
        ++refused;
        problems.push_back(j.job + ": not created (" + j.error + ")");
        continue;
      }
      sim::MeasuredJob m;
      m.id = j.job;
      m.cls = j.cls;
      auto us = [](double s) { return static_cast<core::Micros>(std::llround(s * 1e6)); };
      m.submit_us = us(*j.submitted);
      if (j.started) m.start_us = us(*j.started);
      if (j.finished) m.finish_us = us(*j.finished);
      m.succeeded = j.succeeded();
      m.gpus = j.gpus;
      if (m.gpus.empty() && !j.node.empty() && (j.started || j.finished)) m.gpus = {j.node + "/?"};
      jobs.push_back(std::move(m));
      if (j.succeeded()) {
        ++succeeded;
      } else if (j.finished) {
        ++failed;
        std::string why = j.reason.empty() ? std::string("no reason given") : j.reason;
        if (!j.message.empty()) why += ": " + j.message;
        problems.push_back(j.job + ": failed (" + why + ")");
      } else {
        ++unfinished;
        std::string why = j.deleted   ? std::string("its pod was deleted")
                          : j.started ? std::string("still running when the record ends")
                                      : std::string("never started");
        if (!j.started && !j.reason.empty()) why += ": " + j.reason + ": " + j.message;
        problems.push_back(j.job + ": unfinished (" + why + ")");
      }
    }
    total_jobs += record->jobs.size();
    results.push_back(sim::MeasuredRun(label, load, jobs));
    if (std::find(ctx.policies.begin(), ctx.policies.end(), label) == ctx.policies.end()) {
      ctx.policies.push_back(label);
    }
    if (std::find(ctx.loads.begin(), ctx.loads.end(), load) == ctx.loads.end()) {
      ctx.loads.push_back(load);
    }
    names += (names.empty() ? "" : ", ") + path;
    std::string note = label + ": " + path + ", run " + record->run.run + " in " +
                       (record->run.ns.empty() ? std::string("?") : record->run.ns) + ", started " +
                       record->run.started_at + ", time scale " + SecondsText(scale) + "; " +
                       core::Plural(record->jobs.size(), "job") + ": " + std::to_string(succeeded) +
                       " succeeded, " + std::to_string(failed) + " failed, " +
                       std::to_string(unfinished) + " unfinished, " + std::to_string(refused) +
                       " not created; " +
                       (record->end_reason ? "ended: " + *record->end_reason
                                           : std::string("cut off (no end line)"));
    ctx.notes.push_back(note);
    for (std::size_t i = 0; i < problems.size() && i < 10; ++i) {
      ctx.notes.push_back("  " + problems[i]);
    }
    if (problems.size() > 10) {
      ctx.notes.push_back("  ... and " + std::to_string(problems.size() - 10) + " more");
    }
  }
  ctx.workload = core::Plural(o.records.size(), "record") + " (" + names + "), " +
                 core::Plural(total_jobs, "job");
  if (o.format == "json") {
    sim::WriteDlJson(out, results, ctx);
  } else {
    sim::WriteDlTable(out, results, ctx);
  }
  if (!o.no_report) {
    const std::string dir = o.out_dir.empty() ? std::string(kClusterReportDir) : o.out_dir;
    if (auto w = sim::WriteDlReportDir(dir, results, ctx); !w) return fail(w.error().message);
    if (!o.quiet) err << "gpumux report: report written to " << dir << "/index.html\n";
  }
  return 0;
}

}  // namespace gpumux::cli
