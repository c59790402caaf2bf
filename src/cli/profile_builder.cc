#include "src/cli/profile_builder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "gpumux/core/cluster.h"
#include "gpumux/core/json.h"
#include "gpumux/core/json_text.h"
#include "gpumux/core/plural.h"

namespace gpumux::cli {

namespace {

using Json = nlohmann::json;

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

core::Result<ExampleRun> ParseExampleRun(const std::string& line, const std::string& source) {
  const auto bad = [&](const std::string& why) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": " + why);
  };
  const auto parsed = core::ParseJson(line, "");
  if (!parsed || !parsed->is_object()) return bad("the example printed no JSON summary line");
  const Json& j = *parsed;
  ExampleRun r;
  try {
    r.cls = j.at("class").get<std::string>();
    // An integer, range-checked below (nlohmann casts a double such as 1e300 to int: UB).
    if (!j.at("batch_size").is_number_integer()) return bad("batch_size is not an integer");
    const auto batch = j.at("batch_size").get<std::int64_t>();
    if (batch < 1 || batch > policy::kMaxProfileBatch) {
      return bad("batch_size " + std::to_string(batch) + " is outside 1.." +
                 std::to_string(policy::kMaxProfileBatch));
    }
    r.batch = static_cast<int>(batch);
    r.step_s = j.at("step_s").get<std::vector<double>>();
    r.data_s = j.value("data_s", std::vector<double>{});
    r.t_end = j.value("t_end", std::vector<double>{});
    r.memory_mib = j.value("memory_mib", 0.0);
    r.device_memory_mib = j.value("device_memory_mib", 0.0);
    r.device = j.value("device", std::string());
    r.device_name = j.value("device_name", std::string());
    r.torch = j.value("torch", std::string());
    r.python = j.value("python", std::string());
  } catch (const Json::exception& e) {
    return bad("summary: " + core::JsonErrorText(e.what()));
  }
  for (const auto& [name, mib] : {std::pair{"memory_mib", r.memory_mib},
                                  std::pair{"device_memory_mib", r.device_memory_mib}}) {
    if (!(mib >= 0 && mib <= static_cast<double>(core::kMaxGpuMemoryMib))) {
      return bad(std::string(name) + " is outside 0.." + std::to_string(core::kMaxGpuMemoryMib));
    }
  }
  if (r.step_s.empty()) return bad("the summary has no measured steps (step_s is empty)");
  for (double s : r.step_s) {
    if (!(s > 0) || !std::isfinite(s)) return bad("step_s holds a value that is not > 0");
  }
  if (!r.t_end.empty() && r.t_end.size() != r.step_s.size()) {
    return bad("t_end and step_s differ in length");
  }
  return r;
}

namespace {

// Solo step time (s) by (class, batch).
using SoloSteps = std::map<std::pair<std::string, int>, double>;

// The solo point of a measurement with at least one repeat (profile_builder.h says how).
policy::SoloPoint SoloPointOf(const SoloMeasurement& s) {
  std::vector<double> medians, busy;
  double memory = 1;
  for (const ExampleRun& r : s.repeats) {
    medians.push_back(Median(r.step_s));
    const double step = Mean(r.step_s);
    busy.push_back(step > 0 ? 1 - Mean(r.data_s) / step : 1);
    memory = std::max(memory, r.memory_mib);
  }
  policy::SoloPoint pt;
  pt.batch = s.batch;
  pt.step_s = Median(medians);
  pt.memory_mib = static_cast<core::MiB>(std::ceil(memory));
  pt.gpu_busy = std::clamp(Median(busy), 0.01, 1.0);
  return pt;
}

// The class `name` with the defaults `d` and a solo point per measurement of it in `solo`,
// sorted by batch; their step times are added to `solo_step`. Error when it has none.
core::Result<policy::ClassProfile> BuildClass(const std::string& name, const ClassDefaults& d,
                                              const std::vector<SoloMeasurement>& solo,
                                              SoloSteps& solo_step) {
  policy::ClassProfile cp;
  cp.name = name;
  cp.default_batch = d.default_batch;
  cp.noise_scale = d.noise_scale;
  cp.dataset_samples = d.dataset_samples;
  cp.target_epochs = d.target_epochs;
  for (const SoloMeasurement& s : solo) {
    if (s.cls != cp.name || s.repeats.empty()) continue;
    const policy::SoloPoint pt = SoloPointOf(s);
    cp.solo.push_back(pt);
    solo_step[{cp.name, s.batch}] = pt.step_s;
  }
  if (cp.solo.empty()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "class " + cp.name + ": no solo measurement");
  }
  std::sort(
      cp.solo.begin(), cp.solo.end(),
      [](const policy::SoloPoint& a, const policy::SoloPoint& b) { return a.batch < b.batch; });
  return cp;
}

// Per member of the set (as its first repeat lists them), its slowdown in each repeat that has
// a run per member and in which it kept a step: the median of its steps inside the members'
// overlap over its solo step time. Steps outside the overlap are counted into
// `discarded_steps`. Error when a member has no solo measurement at its batch.
core::Result<std::vector<std::vector<double>>> MemberSlowdowns(const SetMeasurement& set,
                                                               const SoloSteps& solo_step,
                                                               int& discarded_steps) {
  const std::size_t n = set.repeats.front().size();
  std::vector<std::vector<double>> per_member(n);
  for (const auto& runs : set.repeats) {
    if (runs.size() != n) continue;
    // The overlap: from the last member's first step end to the first member's last one.
    double from = -1e300, to = 1e300;
    for (const ExampleRun& r : runs) {
      if (r.t_end.empty()) continue;
      from = std::max(from, r.t_end.front() - r.step_s.front());
      to = std::min(to, r.t_end.back());
    }
    for (std::size_t k = 0; k < n; ++k) {
      const ExampleRun& r = runs[k];
      std::vector<double> kept;
      for (std::size_t i = 0; i < r.step_s.size(); ++i) {
        const bool inside =
            r.t_end.empty() || (r.t_end[i] - r.step_s[i] >= from && r.t_end[i] <= to);
        if (inside) {
          kept.push_back(r.step_s[i]);
        } else {
          ++discarded_steps;
        }
      }
      if (kept.empty()) continue;
      auto solo = solo_step.find({r.cls, r.batch});
      if (solo == solo_step.end()) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               "co-located " + r.cls + " at batch " + std::to_string(r.batch) +
                                   ": no solo measurement at that batch");
      }
      per_member[k].push_back(Median(kept) / solo->second);
    }
  }
  return per_member;
}

// The measured set of `set` from its members' slowdowns (MemberSlowdowns): the median of each,
// at least 1 (those raised to 1 are counted into `clamped_slowdowns`). Empty when a member never
// overlapped the others.
std::optional<policy::MeasuredSet> MeasuredSetOf(const SetMeasurement& set,
                                                 const std::vector<std::vector<double>>& per_member,
                                                 const std::string& device_name,
                                                 int& clamped_slowdowns) {
  policy::MeasuredSet m;
  std::string names;
  for (std::size_t k = 0; k < per_member.size(); ++k) {
    const ExampleRun& r = set.repeats.front()[k];
    m.classes.push_back(r.cls);
    m.batches.push_back(r.batch);
    names += (names.empty() ? "" : "+") + r.cls;
    if (per_member[k].empty()) return std::nullopt;
    double s = Median(per_member[k]);
    if (s < 1) {
      s = 1;
      ++clamped_slowdowns;
    }
    m.slowdown.push_back(s);
  }
  m.source = "gpumux profile: " + names + " run together on " + device_name + ", median of " +
             core::Plural(static_cast<std::int64_t>(set.repeats.size()), "repeat");
  return m;
}

}  // namespace

core::Result<BuiltProfile> BuildProfile(const ProfileInputs& in) {
  BuiltProfile out;
  policy::WorkloadProfile& p = out.profile;
  p.name = in.name;
  p.gpu_model = in.device_name;
  p.gpu_memory_mib = in.device_memory_mib;
  p.companion_overhead = 0.05;
  SoloSteps solo_step;
  for (std::size_t c = 0; c < in.classes.size(); ++c) {
    auto cp = BuildClass(in.classes[c], in.defaults[c], in.solo, solo_step);
    if (!cp) return tl::unexpected(cp.error());
    p.classes.push_back(std::move(*cp));
  }
  for (const SetMeasurement& set : in.sets) {
    if (set.repeats.empty()) continue;
    auto per_member = MemberSlowdowns(set, solo_step, out.discarded_steps);
    if (!per_member) return tl::unexpected(per_member.error());
    auto m = MeasuredSetOf(set, *per_member, in.device_name, out.clamped_slowdowns);
    if (!m) continue;  // the members never overlapped
    p.measured.push_back(std::move(*m));
  }
  if (auto ok = p.Validate(); !ok) return tl::unexpected(ok.error());
  return out;
}

}  // namespace gpumux::cli
