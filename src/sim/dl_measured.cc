#include "gpumux/sim/dl_measured.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <numeric>
#include <set>

namespace gpumux::sim {
namespace {

using core::Micros;

// "node/12" -> ("node", 12); a name without a numeric index sorts by its whole text.
std::pair<std::string, long long> GpuKey(const std::string& name) {
  const std::size_t slash = name.rfind('/');
  if (slash != std::string::npos) {
    long long index = 0;
    const char* first = name.data() + slash + 1;
    const char* last = name.data() + name.size();
    if (auto [end, ec] = std::from_chars(first, last, index); ec == std::errc() && end == last) {
      return {name.substr(0, slash), index};
    }
  }
  return {name, -1};
}

// The covered length of `intervals` within [lo, hi].
Micros Covered(std::vector<std::pair<Micros, Micros>> intervals, Micros lo, Micros hi) {
  std::sort(intervals.begin(), intervals.end());
  Micros total = 0;
  Micros reach = lo;
  for (auto [a, b] : intervals) {
    a = std::max(a, reach);
    b = std::min(b, hi);
    if (b > a) {
      total += b - a;
      reach = b;
    }
  }
  return total;
}

// The GPU lanes: every GPU named (given, or used by a job that ran), sorted by node and index.
std::vector<std::string> GpuLanes(const std::vector<MeasuredJob>& jobs,
                                  const std::vector<std::string>& gpu_names) {
  std::set<std::string> names(gpu_names.begin(), gpu_names.end());
  for (const MeasuredJob& j : jobs) {
    if (j.start_us || j.finish_us) names.insert(j.gpus.begin(), j.gpus.end());
  }
  std::vector<std::string> lanes(names.begin(), names.end());
  std::stable_sort(lanes.begin(), lanes.end(), [](const std::string& a, const std::string& b) {
    return GpuKey(a) < GpuKey(b);
  });
  return lanes;
}

// A job that succeeded, as the simulator's results write one.
DlJobResult FinishedJob(const MeasuredJob& j) {
  DlJobResult out;
  out.id = j.id;
  out.cls = j.cls;
  out.submit_us = j.submit_us;
  out.finish_us = std::max(*j.finish_us, j.submit_us);
  out.start_us = std::clamp(j.start_us.value_or(out.finish_us), j.submit_us, out.finish_us);
  std::string gpu;
  for (const std::string& g : j.gpus) {
    if (!gpu.empty()) gpu += '+';
    gpu += g;
  }
  out.gpu = gpu;
  return out;
}

// The timeline: every job that started, on each of its GPUs, to its finish (or the run's end:
// open). Returns each lane's busy intervals.
std::vector<std::vector<std::pair<Micros, Micros>>> Timeline(const std::vector<MeasuredJob>& jobs,
                                                             const std::vector<std::string>& lanes,
                                                             Micros last, DlResult& r) {
  std::map<std::string, int> lane_of;
  for (std::size_t i = 0; i < lanes.size(); ++i) lane_of[lanes[i]] = static_cast<int>(i);
  std::vector<std::vector<std::pair<Micros, Micros>>> busy(lanes.size());
  Micros run_end = last;
  for (const MeasuredJob& j : jobs) {
    if (j.start_us) run_end = std::max(run_end, *j.start_us);
    if (j.finish_us) run_end = std::max(run_end, *j.finish_us);
  }
  for (const MeasuredJob& j : jobs) {
    if (!j.start_us && !(j.succeeded && j.finish_us)) continue;
    const Micros start = j.start_us.value_or(*j.finish_us);
    const Micros end = j.finish_us ? std::max(*j.finish_us, start) : -1;
    for (const std::string& g : j.gpus) {
      const int lane = lane_of.at(g);
      r.timeline.push_back({lane, j.id, j.cls, start, end});
      busy[static_cast<std::size_t>(lane)].emplace_back(start, end < 0 ? run_end : end);
    }
  }
  return busy;
}

}  // namespace

DlResult MeasuredRun(const std::string& label, double load, const std::vector<MeasuredJob>& jobs,
                     const std::vector<std::string>& gpu_names) {
  DlResult r;
  r.policy = label;
  r.tuner.assign(1, '-');  // (assigning "-" trips a GCC 12 -Wrestrict false positive)
  r.queue.assign(1, '-');
  r.load = load;
  r.seed = 0;
  r.measured = true;

  const std::vector<std::string> lanes = GpuLanes(jobs, gpu_names);
  r.gpu_names = lanes;

  Micros first = std::numeric_limits<Micros>::max();
  Micros last = 0;
  std::vector<double> jct;
  double queue_sum = 0;
  for (const MeasuredJob& j : jobs) {
    if (!j.succeeded || !j.finish_us) continue;
    DlJobResult out = FinishedJob(j);
    first = std::min(first, out.submit_us);
    last = std::max(last, out.finish_us);
    jct.push_back(static_cast<double>(out.jct_us()) / 1e6);
    queue_sum += static_cast<double>(out.queue_us()) / 1e6;
    r.jobs.push_back(std::move(out));
  }
  auto busy = Timeline(jobs, lanes, last, r);
  DlMetrics& m = r.metrics;
  m.gpu_util = std::numeric_limits<double>::quiet_NaN();
  if (jct.empty()) return r;
  const double n = static_cast<double>(jct.size());
  m.avg_jct_s = std::accumulate(jct.begin(), jct.end(), 0.0) / n;
  std::sort(jct.begin(), jct.end());
  m.median_jct_s = Percentile(jct, 50);
  m.p95_jct_s = Percentile(jct, 95);
  m.makespan_s = static_cast<double>(last - first) / 1e6;
  m.avg_queue_s = queue_sum / n;
  if (!lanes.empty() && last > first) {
    Micros covered = 0;
    for (auto& intervals : busy) covered += Covered(std::move(intervals), first, last);
    m.gpu_busy = static_cast<double>(covered) /
                 (static_cast<double>(lanes.size()) * static_cast<double>(last - first));
  }
  return r;
}

}  // namespace gpumux::sim
