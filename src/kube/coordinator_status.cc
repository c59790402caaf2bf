#include "gpumux/kube/coordinator_status.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "gpumux/core/json.h"
#include "gpumux/core/time.h"
#include "gpumux/kube/objects.h"

namespace gpumux::kube {

namespace {

using Json = nlohmann::json;

core::Error Bad(const std::string& what) {
  return core::Error{core::ErrorCode::kInvalidArgument,
                     std::string(kAnnotationCoordinator) + ": " + what};
}

// Reads a number member into `out`; error text when present and not a number.
std::optional<std::string> Number(const Json& object, const char* key, const std::string& where,
                                  double* out) {
  const Json* v = JsonChild(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return where + "." + key + " is not a number";
  *out = v->get<double>();
  return std::nullopt;
}

// A count read with Number: a whole number from 0 to `max`, else why not.
std::optional<std::string> Count(double value, double max, const std::string& where,
                                 const char* key) {
  if (!(value >= 0 && value <= max) || value != std::floor(value)) {
    return where + "." + key + " is not a whole number from 0 to " +
           std::to_string(static_cast<std::int64_t>(max));
  }
  return std::nullopt;
}

// Above 2^53 a double no longer holds every whole number: counts stop there.
constexpr double kMaxCount = 9007199254740992.0;

}  // namespace

Json StateJson(std::string_view node, std::string_view tuner, std::span<const GpuView> gpus) {
  Json list = Json::array();
  for (const GpuView& g : gpus) {
    Json jobs = Json::array();
    for (const JobView& j : g.jobs) {
      jobs.push_back({{"job", j.job},
                      {"class", j.cls},
                      {"batch_size", j.batch_size},
                      {"target_batch", j.target_batch},
                      {"step_s", j.step_s},
                      {"samples_per_s", j.samples_per_s},
                      {"slowdown", j.slowdown},
                      {"solo_step_s", j.solo_step_s},
                      {"steps", j.steps}});
    }
    list.push_back({{"uuid", g.uuid},
                    {"state", g.state},
                    {"tuning_sessions", g.sessions},
                    {"measurement_windows", g.windows},
                    {"jobs", std::move(jobs)}});
  }
  return Json{{"node", node}, {"tuner", tuner}, {"gpus", std::move(list)}};
}

core::Result<NodeStatus> DecodeNodeStatus(std::string_view text) {
  const auto parsed = core::ParseJson(text, "the status");
  if (!parsed) return tl::unexpected(Bad(parsed.error().message));
  const Json& v = *parsed;
  if (!v.is_object()) return tl::unexpected(Bad("not a JSON object"));
  NodeStatus status;
  status.node = JsonString(v, "node");
  status.tuner = JsonString(v, "tuner");
  if (const std::string updated = JsonString(v, "updated"); !updated.empty()) {
    auto t = core::ParseRfc3339(updated);
    if (!t) return tl::unexpected(Bad("updated: " + t.error().message));
    status.updated = *t;
  }
  const Json* gpus = JsonChild(v, "gpus");
  if (gpus == nullptr || !gpus->is_array()) return tl::unexpected(Bad("gpus is not a list"));
  for (std::size_t g = 0; g < gpus->size(); ++g) {
    const Json& gj = (*gpus)[g];
    const std::string where = "gpus[" + std::to_string(g) + "]";
    if (!gj.is_object()) return tl::unexpected(Bad(where + " is not an object"));
    GpuView view;
    view.uuid = JsonString(gj, "uuid");  // "" for the jobs on no single GPU (untuned)
    view.state = JsonString(gj, "state");
    double sessions = 0, windows = 0;
    if (auto bad = Number(gj, "tuning_sessions", where, &sessions))
      return tl::unexpected(Bad(*bad));
    if (auto bad = Number(gj, "measurement_windows", where, &windows)) {
      return tl::unexpected(Bad(*bad));
    }
    for (auto [key, value] :
         {std::pair{"tuning_sessions", sessions}, std::pair{"measurement_windows", windows}}) {
      if (auto bad = Count(value, kMaxCount, where, key)) return tl::unexpected(Bad(*bad));
    }
    view.sessions = static_cast<std::int64_t>(sessions);
    view.windows = static_cast<std::int64_t>(windows);
    const Json* jobs = JsonChild(gj, "jobs");
    if (jobs != nullptr && !jobs->is_array())
      return tl::unexpected(Bad(where + ".jobs is not a list"));
    for (std::size_t k = 0; jobs != nullptr && k < jobs->size(); ++k) {
      const Json& jj = (*jobs)[k];
      const std::string at = where + ".jobs[" + std::to_string(k) + "]";
      if (!jj.is_object()) return tl::unexpected(Bad(at + " is not an object"));
      JobView job;
      job.job = JsonString(jj, "job");
      if (job.job.empty()) return tl::unexpected(Bad(at + ".job is missing"));
      job.cls = JsonString(jj, "class");
      job.gpu = view.uuid;
      double batch = 0, target = 0, steps = 0;
      for (auto [key, out] :
           {std::pair{"batch_size", &batch}, std::pair{"target_batch", &target},
            std::pair{"step_s", &job.step_s}, std::pair{"samples_per_s", &job.samples_per_s},
            std::pair{"slowdown", &job.slowdown}, std::pair{"solo_step_s", &job.solo_step_s},
            std::pair{"steps", &steps}}) {
        if (auto bad = Number(jj, key, at, out)) return tl::unexpected(Bad(*bad));
      }
      for (auto [key, value, max] : {std::tuple{"batch_size", batch, double{INT_MAX}},
                                     std::tuple{"target_batch", target, double{INT_MAX}},
                                     std::tuple{"steps", steps, kMaxCount}}) {
        if (auto bad = Count(value, max, at, key)) return tl::unexpected(Bad(*bad));
      }
      job.batch_size = static_cast<int>(batch);
      job.target_batch = static_cast<int>(target);
      job.steps = static_cast<std::int64_t>(steps);
      view.jobs.push_back(std::move(job));
    }
    status.gpus.push_back(std::move(view));
  }
  return status;
}

}  // namespace gpumux::kube
