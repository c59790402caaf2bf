// Who may register and act for a job, and whether a registration is well formed and fits the
// limits: the Coordinator's admission checks (coordinator.h, caller.h).
#include <algorithm>
#include <cmath>

#include "gpumux/coordinator/coordinator.h"
#include "src/coordinator/coordinator_state.h"

namespace gpumux::coordinator {

namespace {

constexpr std::size_t kMaxIdBytes = 253;

core::Error Invalid(std::string message) {
  return core::Error{core::ErrorCode::kInvalidArgument, std::move(message)};
}

core::Error Denied(std::string message) {
  return core::Error{core::ErrorCode::kPermissionDenied, std::move(message)};
}

// 1..kMaxIdBytes bytes without control characters (a newline in an id would forge log lines).
bool IsPrintableId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxIdBytes && std::none_of(id.begin(), id.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

}  // namespace

std::optional<core::Error> Coordinator::CheckIds(const Registration& r) const {
  if (!IsPrintableId(r.job))
    return Invalid("job: must be 1 to 253 bytes without control characters");
  if (!IsPrintableId(r.cls)) {
    return Invalid("class: must be 1 to 253 bytes without control characters");
  }
  return std::nullopt;
}

bool Coordinator::OnThisNode(const std::string& gpu) const {
  const auto& known = options_.node_gpus;
  return known.empty() || std::find(known.begin(), known.end(), gpu) != known.end();
}

std::optional<core::Error> Coordinator::CheckFields(const Registration& r) const {
  if (r.batch_size < 1 || r.batch_size > policy::kMaxProfileBatch) {
    return Invalid("batch_size: must be 1 to " + std::to_string(policy::kMaxProfileBatch));
  }
  // Bounded like batch_size: a target is clamped into them and stored, and a restart reads a
  // stored target only within 1..kMaxProfileBatch.
  if (r.min_batch < 0 || r.max_batch < 0 || r.min_batch > policy::kMaxProfileBatch ||
      r.max_batch > policy::kMaxProfileBatch || (r.max_batch > 0 && r.min_batch > r.max_batch)) {
    return Invalid("min_batch/max_batch: need 0 <= min_batch <= max_batch <= " +
                   std::to_string(policy::kMaxProfileBatch));
  }
  if (r.memory_mib < 0) return Invalid("memory_mib: must be >= 0");
  if (!(r.noise_scale >= 0) || !std::isfinite(r.noise_scale)) {
    return Invalid("noise_scale: must be a finite number >= 0");
  }
  for (const auto& g : r.gpus) {
    if (!IsPrintableId(g)) {
      return Invalid("gpus: every entry must be 1 to 253 printable bytes");
    }
    if (!OnThisNode(g)) {
      std::string list;
      for (const auto& k : options_.node_gpus) list += (list.empty() ? "" : ", ") + k;
      return Invalid("gpus: " + g + " is not a GPU of node " + options_.node +
                     " (its GPUs: " + list + ")");
    }
  }
  return std::nullopt;
}

std::optional<core::Error> Coordinator::CheckCaller(const Registration& r,
                                                    const Caller& caller) const {
  using Identity = CoordinatorOptions::Identity;
  if (caller.trusted() || options_.identity == Identity::kOwner) return std::nullopt;
  if (caller.kind == Caller::Kind::kTcp) {
    return Denied(
        "callers over TCP cannot be identified: jobs register over the coordinator's "
        "unix socket");
  }
  if (options_.identity == Identity::kContainers) {
    if (caller.cgroup.in_container()) return std::nullopt;
    return Denied(caller.Describe() + " is not in a container: jobs register from the " +
                  "container that reserves their GPUs");
  }
  if (caller.cgroup.pod_uid.empty()) {
    return Denied(caller.Describe() + " is not in a pod: jobs register from their pod");
  }
  const auto pod = options_.pod_of_uid ? options_.pod_of_uid(caller.cgroup.pod_uid)
                                       : std::optional<std::string>();
  if (!pod) {
    return core::Error{core::ErrorCode::kUnavailable, "pod " + caller.cgroup.pod_uid +
                                                          " is not (yet) known bound to node " +
                                                          options_.node + "; retry"};
  }
  const std::string prefix = *pod + "/";
  const std::string_view container =
      std::string_view(r.job).substr(std::min(r.job.size(), prefix.size()));
  if (r.job.rfind(prefix, 0) != 0 || container.empty() ||
      container.find('/') != std::string_view::npos) {
    return Denied("job: a job of pod " + *pod + " is named '" + prefix + "<container>', not '" +
                  r.job + "'");
  }
  const auto granted = options_.resolve_gpus ? options_.resolve_gpus(r.job)
                                             : std::optional<std::vector<std::string>>();
  if (!granted || granted->empty()) {
    return Denied("pod " + *pod + " holds no gpumux grant for container '" +
                  std::string(container) + "' on node " + options_.node);
  }
  return std::nullopt;
}

std::optional<core::Error> Coordinator::CheckLimits(const Registration& r, const std::string& gpu,
                                                    const Caller& caller) const {
  const auto existing = jobs_.find(r.job);
  if (existing == jobs_.end() && jobs_.size() >= static_cast<std::size_t>(options_.max_jobs)) {
    return core::Error{core::ErrorCode::kUnavailable, "node " + options_.node + " already has " +
                                                          std::to_string(jobs_.size()) +
                                                          " jobs (the limit, --max-jobs)"};
  }
  if (existing == jobs_.end() && !caller.trusted()) {
    const std::string principal = caller.Principal();
    const auto held = std::count_if(jobs_.begin(), jobs_.end(),
                                    [&](const auto& e) { return e.second->owner == principal; });
    if (held >= options_.max_jobs_per_caller) {
      return core::Error{core::ErrorCode::kUnavailable,
                         caller.Describe() + " already holds " + std::to_string(held) +
                             " jobs (the limit, --max-jobs-per-caller)"};
    }
  }
  if (gpu.empty()) return std::nullopt;
  const auto g = groups_.find(gpu);
  if (g == groups_.end()) return std::nullopt;
  const auto& members = g->second->members;
  const bool there = std::find(members.begin(), members.end(), r.job) != members.end();
  if (!there && members.size() >= static_cast<std::size_t>(options_.max_jobs_per_gpu)) {
    return core::Error{core::ErrorCode::kUnavailable, "GPU " + gpu + " already has " +
                                                          std::to_string(members.size()) +
                                                          " jobs (the limit, --max-jobs-per-gpu)"};
  }
  return std::nullopt;
}

core::Result<Coordinator::Job*> Coordinator::JobFor(std::string_view id, const Caller& caller) {
  Job* j = FindJob(id);
  if (j == nullptr) {
    return tl::unexpected(
        core::Error{core::ErrorCode::kNotFound, "job '" + std::string(id) + "' is not registered"});
  }
  if (auto denied = CheckOwner(*j, caller)) return tl::unexpected(*denied);
  return j;
}

std::optional<core::Error> Coordinator::CheckOwner(const Job& j, const Caller& caller) const {
  if (caller.trusted() || j.owner.empty() || j.owner == caller.Principal()) return std::nullopt;
  return Denied("job '" + j.reg.job + "' is registered by another caller (" + j.owner + "); " +
                caller.Describe() + " may act only for the jobs it registered");
}

}  // namespace gpumux::coordinator
