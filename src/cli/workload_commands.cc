// Trace-driven workloads as Kubernetes objects: `gpumux jobgen --format k8s` (and k8s-json)
// writes training jobs or trace pods as manifests for `gpumux submit` (cluster_run_commands.cc).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "gpumux/io/atomic_file.h"
#include "gpumux/kube/objects.h"
#include "gpumux/runs/manifests.h"
#include "gpumux/runs/workload.h"
#include "gpumux/sim/dl_workload.h"
#include "gpumux/sim/trace.h"
#include "src/cli/commands.h"
#include "src/cli/options.h"

namespace gpumux::cli {
namespace {

using nlohmann::json;

// The image of training jobs: deploy/Dockerfile.train (PyTorch and python/ at /opt/gpumux).
constexpr std::string_view kTrainImage = "gpumux-train:latest";
// The image of trace pods, which only sleep.
constexpr std::string_view kSleepImage = "busybox:1.36";

// "resnet" for the classes the shipped examples stand in for; "" when none does.
std::string ExampleFor(const std::string& cls, const std::map<std::string, std::string>& given) {
  if (auto it = given.find(cls); it != given.end()) return it->second;
  static const std::map<std::string, std::string> kStandIns = {
      // the examples themselves
      {"resnet", "resnet"},
      {"lstm", "lstm"},
      {"neumf", "neumf"},
      // convolutional networks: the small ResNet
      {"vgg16", "resnet"},
      {"vgg19", "resnet"},
      {"resnet50", "resnet"},
      {"resnet152", "resnet"},
      {"alexnet", "resnet"},
      {"squeezenet", "resnet"},
      {"googlenet", "resnet"},
      // light embedding models: NeuMF (adgcl, a small graph network, has no closer one)
      {"adgcl", "neumf"}};
  auto it = kStandIns.find(cls);
  return it == kStandIns.end() ? std::string() : it->second;
}

core::Result<std::map<std::string, std::string>> ParseExamples(
    const std::vector<std::string>& given) {
  std::map<std::string, std::string> out;
  for (const std::string& e : given) {
    const std::size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == e.size()) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "--example '" + e + "' is not CLASS=SCRIPT (e.g. bert=lstm)");
    }
    std::string script = e.substr(eq + 1);
    if (script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0) {
      script.resize(script.size() - 3);
    }
    out[e.substr(0, eq)] = script;
  }
  return out;
}

runs::ManifestOptions ManifestOptionsOf(const JobGenCliOptions& o, std::string_view image) {
  runs::ManifestOptions m;
  m.kind = o.kind == "job" ? runs::ManifestKind::kJob : runs::ManifestKind::kPod;
  m.scheduler_name = o.scheduler_name;
  m.image = o.image.empty() ? std::string(image) : o.image;
  m.name_prefix = o.name_prefix;
  m.run = o.run;
  m.gpu_mem_unit_mib = o.gpu_mem_unit_mib;
  return m;
}

int WriteObjects(const JobGenCliOptions& o, const std::vector<json>& objects, std::ostream& out,
                 std::ostream& err) {
  std::ostringstream text;
  if (o.format == "k8s-json") {
    runs::WriteJsonList(text, objects);
  } else {
    runs::WriteYaml(text, objects);
  }
  if (o.out.empty()) {
    out << text.str();
    return 0;
  }
  if (auto w = io::WriteFileAtomically(o.out, text.str()); !w) {
    err << "gpumux jobgen: " << w.error().message << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

// --------------------------------------------------------------------------------- jobgen

void AddTrainingJobOptions(CLI::App& cmd, JobGenCliOptions& o, const std::string& group);

void AddJobGenK8sOptions(CLI::App& cmd, JobGenCliOptions& o) {
  const std::string group = "Kubernetes manifests (--format k8s)";
  cmd.add_option("--format", o.format,
                 "csv: a job list for 'simulate --workload dl'; k8s: Kubernetes objects as "
                 "multi-document YAML for 'gpumux submit' (or kubectl); k8s-json: the same as a "
                 "JSON List")
      ->capture_default_str()
      ->check(CLI::IsMember({"csv", "k8s", "k8s-json"}));
  cmd.add_option("--kind", o.kind, "pod, or job (a batch/v1 Job per job: backoffLimit 0)")
      ->capture_default_str()
      ->check(CLI::IsMember({"pod", "job"}))
      ->group(group);
  cmd.add_option("--jobs", o.jobs,
                 "Write this job list (job,class,submit_s,gpu_mib, e.g. what a simulation ran) "
                 "as manifests instead of generating jobs")
      ->group(group);
  cmd.add_option("--pods", o.pods,
                 "Alibaba openb pod list (the FGD study's; 'default' = the embedded one): each "
                 "pod at its creation_time, asking for its gpu-milli or whole GPUs and its CPU "
                 "and memory, sleeping as long as it ran in the trace")
      ->group(group);
  cmd.add_option("--start-s", o.start_s,
                 "With --pods: start at the first pod created at or after this trace time "
                 "(arrivals count from that pod); --count pods from there")
      ->capture_default_str()
      ->check(NumberIn(0, 1e12))
      ->group(group);
  cmd.add_option("--host-resources", o.host_resources,
                 "With --pods: trace (request the pod's CPU and memory) or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "none"}))
      ->group(group);
  cmd.add_option("--image", o.image,
                 "Container image [default: " + std::string(kTrainImage) +
                     " for training jobs (deploy/Dockerfile.train: PyTorch and python/), " +
                     std::string(kSleepImage) + " for --pods]")
      ->group(group);
  cmd.add_option("--scheduler-name", o.scheduler_name, "spec.schedulerName of every pod")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--name-prefix", o.name_prefix, "Put before every object's name (the job id)")
      ->group(group);
  cmd.add_option("--run", o.run,
                 "The gpumux.io/run label of every object ('gpumux submit' uses it as the run's "
                 "name) [default: none: submit names the run]")
      ->group(group);
  cmd.add_option("--gpu-mem-unit-mib", o.gpu_mem_unit_mib,
                 "MiB per unit of gpumux.io/gpu-mem: the extender's and the device plugin's "
                 "--gpu-mem-unit-mib (memory is rounded up to whole units)")
      ->capture_default_str()
      ->check(IntegerIn(std::int64_t{1}, kube::kMaxGpuMemUnitMib))
      ->group(group);
  AddTrainingJobOptions(cmd, o, group);
}

// The options of training jobs' manifests (not of --pods).
void AddTrainingJobOptions(CLI::App& cmd, JobGenCliOptions& o, const std::string& group) {
  cmd.add_option("--work-scale", o.work_scale,
                 "Training steps = this x the class's samples to the target / its default batch "
                 "(e.g. 0.01 for a quick run)")
      ->capture_default_str()
      ->check(NumberIn(0, 1000, LowerBound::kOpen))
      ->group(group);
  cmd.add_option("--examples-dir", o.examples_dir,
                 "Where the image holds python/examples (the training commands)")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--example", o.examples,
                 "CLASS=SCRIPT: the example a class runs (default: resnet for the convolutional "
                 "classes, neumf for neumf and adgcl, lstm for lstm); repeatable")
      ->group(group);
  cmd.add_option("--coordinator-dir", o.coordinator_dir,
                 "Host folder of the node coordinator's socket to mount into training pods as a "
                 "hostPath. Not needed with gpumux's device plugin, which mounts it into every "
                 "granted container (its --coordinator-dir); a hostPath fails Pod Security "
                 "\"baseline\" ('none': no mount)")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--job-cpu-milli", o.job_cpu_milli,
                 "Each training pod's CPU request in milli-CPU (its data loader; 0: none)")
      ->capture_default_str()
      ->check(IntegerIn(std::int64_t{0}, std::int64_t{1} << 30))
      ->group(group);
  cmd.add_option("--job-memory-mib", o.job_memory_mib,
                 "Each training pod's memory request in MiB (0: none; without requests a pod "
                 "is BestEffort, the first evicted)")
      ->capture_default_str()
      ->check(IntegerIn(std::int64_t{0}, std::int64_t{1} << 30))
      ->group(group);
}

std::optional<std::string> CheckJobGenCombination(const JobGenCliOptions& o) {
  const bool k8s = o.format != "csv";
  static const char* kK8sOnly[] = {"kind",
                                   "jobs",
                                   "pods",
                                   "start-s",
                                   "image",
                                   "scheduler-name",
                                   "name-prefix",
                                   "run",
                                   "gpu-mem-unit-mib",
                                   "work-scale",
                                   "examples-dir",
                                   "example",
                                   "coordinator-dir",
                                   "job-cpu-milli",
                                   "job-memory-mib",
                                   "host-resources"};
  if (!k8s) {
    for (const char* name : kK8sOnly) {
      if (Given(o.given, name)) {
        return std::string("--") + name + " belongs to --format k8s (or k8s-json)";
      }
    }
    return std::nullopt;
  }
  static const char* kGenerating[] = {"mix",     "arrival", "rate", "load",
                                      "min-gib", "max-gib", "seed"};
  if (!o.jobs.empty() || !o.pods.empty()) {
    for (const char* name : kGenerating) {
      if (Given(o.given, name)) {
        return std::string("--") + name + " generates jobs: it does not apply with " +
               (o.pods.empty() ? "--jobs" : "--pods");
      }
    }
  }
  if (!o.jobs.empty() && !o.pods.empty()) return std::string("give --jobs or --pods, not both");
  if (!o.jobs.empty() && Given(o.given, "count")) {
    return std::string("--count does not apply with --jobs (every job of the list is written)");
  }
  if (o.pods.empty()) {
    for (const char* name : {"start-s", "host-resources"}) {
      if (Given(o.given, name)) return std::string("--") + name + " belongs to --pods";
    }
  } else {
    for (const char* name : {"profile", "work-scale", "examples-dir", "example", "coordinator-dir",
                             "job-cpu-milli", "job-memory-mib"}) {
      if (Given(o.given, name)) {
        return std::string("--") + name + " is for training jobs, not the trace pods of --pods";
      }
    }
  }
  return std::nullopt;
}

int WriteJobManifests(const JobGenCliOptions& o, const std::vector<sim::JobSpec>& jobs,
                      const policy::WorkloadProfile& profile, std::ostream& out,
                      std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "gpumux jobgen: " << message << "\n";
    return 2;
  };
  auto examples = ParseExamples(o.examples);
  if (!examples) return fail(examples.error().message);
  std::vector<runs::WorkloadItem> items;
  for (const sim::JobSpec& j : jobs) {
    const policy::ClassProfile* c = profile.Find(j.cls);
    if (c == nullptr) {
      return fail("job '" + j.id + "': the profile '" + profile.name + "' has no class '" + j.cls +
                  "'");
    }
    const std::string script = ExampleFor(j.cls, *examples);
    if (script.empty()) {
      return fail("class '" + j.cls + "' has no training example: name one with --example " +
                  j.cls + "=SCRIPT (resnet, lstm or neumf, or your own script in --examples-dir)");
    }
    const double steps =
        std::ceil(o.work_scale * c->WorkSamples() / static_cast<double>(c->default_batch));
    runs::WorkloadItem item;
    item.job = j.id;
    item.submit_us = j.submit_us;
    item.request.gpu_count = 1;
    item.request.gpu_mib = j.gpu_mib;
    item.request.sharing = core::GpuSharing::kShared;
    item.request.workload_class = j.cls;
    item.request.cpu_milli = o.job_cpu_milli;
    item.request.memory_mib = o.job_memory_mib;
    item.command = {
        "python3",      o.examples_dir + "/" + script + ".py",
        "--class",      j.cls,
        "--batch-size", std::to_string(c->default_batch),
        "--steps",      std::to_string(static_cast<std::int64_t>(std::max(1.0, steps)))};
    if (o.coordinator_dir != "none" && !o.coordinator_dir.empty()) {
      item.host_dir = o.coordinator_dir;
    }
    items.push_back(std::move(item));
  }
  auto objects = runs::MakeManifests(items, ManifestOptionsOf(o, kTrainImage));
  if (!objects) return fail(objects.error().message);
  return WriteObjects(o, *objects, out, err);
}

int RunJobGenPods(const JobGenCliOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& message) {
    err << "gpumux jobgen: " << message << "\n";
    return 2;
  };
  auto pods = sim::TimedPodListOrEmbedded(o.pods == "default" ? std::string() : o.pods);
  if (!pods) return fail("--pods: " + pods.error().message);
  std::vector<const sim::TracePod*> order;
  for (const sim::TracePod& p : *pods) {
    if (static_cast<double>(p.creation_s) >= o.start_s) order.push_back(&p);
  }
  std::stable_sort(order.begin(), order.end(), [](const sim::TracePod* a, const sim::TracePod* b) {
    return a->creation_s < b->creation_s;
  });
  if (order.empty()) {
    return fail("--pods: no pod is created at or after --start-s " + SecondsText(o.start_s) +
                " (the last at " + std::to_string(pods->back().creation_s) + " s)");
  }
  if (Given(o.given, "count") && static_cast<std::size_t>(o.count) < order.size()) {
    order.resize(static_cast<std::size_t>(o.count));
  }
  const std::int64_t first = order.front()->creation_s;
  std::vector<runs::WorkloadItem> items;
  for (const sim::TracePod* p : order) {
    runs::WorkloadItem item;
    item.job = p->request.name;
    item.submit_us = (p->creation_s - first) * 1'000'000;
    item.request = p->request;
    if (o.host_resources == "none") item.request.cpu_milli = item.request.memory_mib = 0;
    const std::int64_t run_s = p->RunSeconds();
    if (run_s >= 0) {
      item.annotations[std::string(runs::kAnnotationDuration)] = std::to_string(run_s);
      item.env_from_annotations = {{"GPUMUX_DURATION_S", std::string(runs::kAnnotationDuration)}};
      item.command = {"sh", "-c", "exec sleep \"$GPUMUX_DURATION_S\""};
    } else {
      item.command = {"sh", "-c", "exec sleep infinity"};  // still running at the trace's end
    }
    items.push_back(std::move(item));
  }
  auto objects = runs::MakeManifests(items, ManifestOptionsOf(o, kSleepImage));
  if (!objects) return fail(objects.error().message);
  return WriteObjects(o, *objects, out, err);
}

}  // namespace gpumux::cli
