#include "gpumux/sim/dl_workload.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "gpumux/core/cluster.h"
#include "gpumux/core/json.h"
#include "gpumux/core/json_text.h"
#include "gpumux/core/plural.h"
#include "gpumux/core/rng.h"
#include "gpumux/io/csv.h"
#include "src/sim/dl_sim_state.h"
#include "src/sim/input_file.h"

extern "C" {
extern const char gpumux_embedded_dl_fitted_begin[];
extern const char gpumux_embedded_dl_fitted_end[];
extern const char gpumux_embedded_dl_measured_begin[];
extern const char gpumux_embedded_dl_measured_end[];
extern const char gpumux_embedded_dl_assumed_begin[];
extern const char gpumux_embedded_dl_assumed_end[];
extern const char gpumux_embedded_dl_cpu_begin[];
extern const char gpumux_embedded_dl_cpu_end[];
}

namespace gpumux::sim {
namespace {

using nlohmann::json;

core::Error Bad(const std::string& source, const std::string& what) {
  return core::Error{core::ErrorCode::kInvalidArgument, source + ": " + what};
}

// Throws unless `v` is an integer within T's range (an error, not a wrapped value).
template <typename T>
void CheckInteger(const json& v, const char* key, const std::string& where) {
  if (!v.is_number_integer()) {
    throw std::runtime_error(where + ": field '" + key +
                             "' has the wrong type (an integer is expected)");
  }
  const auto* u = v.template get_ptr<const json::number_unsigned_t*>();
  const auto* i = v.template get_ptr<const json::number_integer_t*>();
  const bool fits = u != nullptr ? *u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                                 : i != nullptr && *i >= std::numeric_limits<T>::min() &&
                                       *i <= std::numeric_limits<T>::max();
  if (!fits) {
    throw std::runtime_error(where + ": field '" + key + "': " +
                             (u != nullptr ? std::to_string(*u) : std::to_string(i ? *i : 0)) +
                             " is outside the range of the field");
  }
}

template <typename T>
struct IsIntVector : std::false_type {};
template <typename I>
struct IsIntVector<std::vector<I>> : std::is_integral<I> {};

// Typed field access that names the field on error (nlohmann's messages do not). Integers,
// and the elements of a list of integers, must be integers within their type's range: a
// nlohmann conversion of 1e300 to int is a cast out of range.
template <typename T>
T Get(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw std::runtime_error(where + ": missing field '" + key + "'");
  const json& v = j.at(key);
  if constexpr (std::is_integral_v<T>) {
    CheckInteger<T>(v, key, where);
  } else if constexpr (IsIntVector<T>::value) {
    if (!v.is_array()) {
      throw std::runtime_error(where + ": field '" + key +
                               "' has the wrong type (a list of integers is expected)");
    }
    for (const json& e : v) CheckInteger<typename T::value_type>(e, key, where);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number())
      throw std::runtime_error(where + ": field '" + key +
                               "' has the wrong type (a number is expected)");
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw std::runtime_error(where + ": field '" + key + "' has the wrong type");
  }
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// us / load rounded to the nearest microsecond (in double precision, exact below 2^53 us, about
// 285 years; load 1 keeps every time exact), or nothing past kMaxSubmitUs.
std::optional<core::Micros> Scaled(core::Micros us, double load) {
  if (load == 1.0) return us >= 0 && us <= kMaxSubmitUs ? std::optional(us) : std::nullopt;
  const double v = static_cast<double>(us) / load;
  if (!(v >= 0 && v <= static_cast<double>(kMaxSubmitUs))) return std::nullopt;
  const auto r = static_cast<core::Micros>(std::llround(v));
  if (r > kMaxSubmitUs) return std::nullopt;
  return r;
}

}  // namespace

core::Result<policy::WorkloadProfile> ParseProfile(std::string_view text,
                                                   const std::string& source) {
  policy::WorkloadProfile p;
  try {
    auto parsed = core::ParseJson(text, "");
    if (!parsed) return tl::unexpected(Bad(source, parsed.error().message));
    const json& j = *parsed;
    if (!j.is_object()) return tl::unexpected(Bad(source, "a profile is a JSON object"));
    p.name = j.value("name", std::string());
    const json& gpu = j.contains("gpu") ? j.at("gpu") : json::object();
    p.gpu_model = gpu.value("model", std::string());
    p.gpu_memory_mib = Get<core::MiB>(gpu, "memory_mib", "gpu");
    p.companion_overhead = j.value("companion_overhead", 0.05);
    if (!j.contains("classes") || !j.at("classes").is_array()) {
      return tl::unexpected(Bad(source, "missing array 'classes'"));
    }
    for (const json& c : j.at("classes")) {
      policy::ClassProfile cp;
      cp.name = Get<std::string>(c, "name", "classes[]");
      const std::string where = "class '" + cp.name + "'";
      cp.default_batch = Get<int>(c, "default_batch", where);
      cp.noise_scale = Get<double>(c, "noise_scale", where);
      cp.dataset_samples = Get<std::int64_t>(c, "dataset_samples", where);
      cp.target_epochs = Get<double>(c, "target_epochs", where);
      if (c.contains("companion_overhead")) {
        // Present means the class's own: a negative value ("none") is not a value to write.
        cp.companion_overhead = Get<double>(c, "companion_overhead", where);
        if (!(cp.companion_overhead >= 0 && cp.companion_overhead < 1)) {
          throw std::runtime_error(where + ": companion_overhead " + Num(cp.companion_overhead) +
                                   " is outside [0, 1)");
        }
      }
      if (!c.contains("solo") || !c.at("solo").is_array()) {
        throw std::runtime_error(where + ": missing array 'solo'");
      }
      for (const json& s : c.at("solo")) {
        cp.solo.push_back({Get<int>(s, "batch", where + " solo"),
                           Get<double>(s, "step_s", where + " solo"),
                           Get<core::MiB>(s, "memory_mib", where + " solo"),
                           Get<double>(s, "gpu_busy", where + " solo")});
      }
      p.classes.push_back(std::move(cp));
    }
    if (j.contains("measured")) {
      if (!j.at("measured").is_array()) throw std::runtime_error("'measured' is not an array");
      for (const json& m : j.at("measured")) {
        policy::MeasuredSet set;
        set.classes = Get<std::vector<std::string>>(m, "classes", "measured[]");
        set.batches = Get<std::vector<int>>(m, "batches", "measured[]");
        set.slowdown = Get<std::vector<double>>(m, "slowdown", "measured[]");
        set.source = m.value("source", std::string());
        p.measured.push_back(std::move(set));
      }
    }
  } catch (const json::exception& e) {
    return tl::unexpected(Bad(source, "invalid JSON: " + core::JsonErrorText(e.what())));
  } catch (const std::runtime_error& e) {
    return tl::unexpected(Bad(source, e.what()));
  }
  if (auto ok = p.Validate(); !ok) return tl::unexpected(Bad(source, ok.error().message));
  return p;
}

core::Result<policy::WorkloadProfile> LoadProfile(const std::string& path) {
  auto text = ReadSimInput(path, kMaxProfileBytes);
  if (!text) return tl::unexpected(text.error());
  return ParseProfile(*text, path);
}

namespace {

struct Embedded {
  std::string_view name;
  std::string_view file;
  const char* begin;
  const char* end;
};

const std::vector<Embedded>& EmbeddedProfiles() {
  static const std::vector<Embedded> profiles{
      {"iadeep-fitted", "dl_profile_iadeep_fitted.json", gpumux_embedded_dl_fitted_begin,
       gpumux_embedded_dl_fitted_end},
      {"iadeep-measured", "dl_truth_iadeep_measured.json", gpumux_embedded_dl_measured_begin,
       gpumux_embedded_dl_measured_end},
      {"iadeep5-assumed", "dl_profile_iadeep5_assumed.json", gpumux_embedded_dl_assumed_begin,
       gpumux_embedded_dl_assumed_end},
      // The shipped training examples on a 2-core CPU (gpumux profile): for the coordinator's
      // try-it on a machine without a GPU, not for simulating GPUs.
      {"cpu-example", "dl_profile_cpu_example.json", gpumux_embedded_dl_cpu_begin,
       gpumux_embedded_dl_cpu_end},
  };
  return profiles;
}

}  // namespace

std::vector<std::string> EmbeddedProfileNames() {
  std::vector<std::string> names;
  for (const Embedded& e : EmbeddedProfiles()) names.emplace_back(e.name);
  return names;
}

std::optional<std::string_view> EmbeddedProfileJson(std::string_view name) {
  for (const Embedded& e : EmbeddedProfiles()) {
    if (e.name == name) return std::string_view(e.begin, static_cast<std::size_t>(e.end - e.begin));
  }
  return std::nullopt;
}

const policy::WorkloadProfile* EmbeddedProfile(std::string_view name) {
  // Parsed once each, on first use; the embedded files are tested, so a parse failure is a
  // build defect.
  static const std::vector<policy::WorkloadProfile> parsed = [] {
    std::vector<policy::WorkloadProfile> out;
    for (const Embedded& e : EmbeddedProfiles()) {
      auto p = ParseProfile(std::string_view(e.begin, static_cast<std::size_t>(e.end - e.begin)),
                            "<embedded " + std::string(e.file) + ">");
      if (!p) {
        std::fprintf(stderr, "gpumux: %s\n", p.error().message.c_str());
        std::abort();
      }
      out.push_back(std::move(*p));
    }
    return out;
  }();
  for (std::size_t i = 0; i < EmbeddedProfiles().size(); ++i) {
    if (EmbeddedProfiles()[i].name == name) return &parsed[i];
  }
  return nullptr;
}

std::string_view DefaultProfileJson() { return *EmbeddedProfileJson(kDefaultProfileName); }

const policy::WorkloadProfile& DefaultProfile() { return *EmbeddedProfile(kDefaultProfileName); }

const policy::WorkloadProfile& DefaultTruthProfile() {
  return *EmbeddedProfile(kDefaultTruthProfileName);
}

core::Result<policy::WorkloadProfile> ProfileByNameOrPath(const std::string& name_or_path) {
  if (const policy::WorkloadProfile* p = EmbeddedProfile(name_or_path)) return *p;
  std::error_code ec;
  if (!std::filesystem::exists(name_or_path, ec)) {
    std::string names;
    for (const auto& n : EmbeddedProfileNames()) names += (names.empty() ? "" : ", ") + n;
    return core::MakeError(core::ErrorCode::kNotFound,
                           name_or_path + ": cannot open: no such file, and no embedded profile " +
                               "has this name (" + names + ")");
  }
  return LoadProfile(name_or_path);
}

core::Result<core::Micros> ParseSeconds(std::string_view text) {
  const std::size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (whole.empty() || !digits(whole) || !digits(frac) || frac.size() > 6 || whole.size() > 12 ||
      (dot != std::string_view::npos && frac.empty())) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "'" + std::string(text) +
                               "' is not a non-negative number of seconds with at most 6 decimals");
  }
  core::Micros us = 0;
  std::from_chars(whole.data(), whole.data() + whole.size(), us);
  us *= 1000000;
  core::Micros f = 0;
  std::from_chars(frac.data(), frac.data() + frac.size(), f);
  for (std::size_t i = frac.size(); i < 6; ++i) f *= 10;
  return us + f;
}

std::string FormatSeconds(core::Micros us) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(us / 1000000),
                static_cast<long long>(us % 1000000));
  return buf;
}

core::Result<std::vector<JobSpec>> ReadJobs(std::istream& in, const std::string& source,
                                            const policy::WorkloadProfile& profile) {
  io::CsvReader csv(in, source);
  if (auto ok = csv.ReadHeader({"job", "class", "submit_s", "gpu_mib"}); !ok) {
    return tl::unexpected(ok.error());
  }
  std::vector<JobSpec> jobs;
  std::set<std::string> ids;
  while (true) {
    auto more = csv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    if (jobs.size() == kMaxDlJobs) {
      return tl::unexpected(csv.ErrorHere("more than " + std::to_string(kMaxDlJobs) +
                                          " jobs (the most a job list may hold)"));
    }
    JobSpec j;
    j.id = std::string(csv.Field("job"));
    if (j.id.empty()) return tl::unexpected(csv.ErrorHere("column 'job' is empty"));
    if (!ids.insert(j.id).second) {
      return tl::unexpected(csv.ErrorHere("duplicate job '" + j.id + "'"));
    }
    j.cls = std::string(csv.Field("class"));
    if (profile.Find(j.cls) == nullptr) {
      std::string known;
      for (const auto& c : profile.classes) known += (known.empty() ? "" : ", ") + c.name;
      return tl::unexpected(
          csv.ErrorHere("unknown workload class '" + j.cls + "' (the profile has: " + known + ")"));
    }
    auto submit = ParseSeconds(csv.Field("submit_s"));
    if (!submit) {
      return tl::unexpected(csv.ErrorHere("column 'submit_s': " + submit.error().message));
    }
    j.submit_us = *submit;
    auto mib = csv.Int("gpu_mib");
    if (!mib) return tl::unexpected(mib.error());
    if (*mib <= 0 || *mib > profile.gpu_memory_mib) {
      return tl::unexpected(
          csv.ErrorHere("column 'gpu_mib': " + std::to_string(*mib) + " is not in 1.." +
                        std::to_string(profile.gpu_memory_mib) + " (the profile's GPU memory)"));
    }
    j.gpu_mib = *mib;
    const policy::ClassProfile& c = *profile.Find(j.cls);
    if (c.MemoryMib(c.default_batch) > j.gpu_mib) {
      return tl::unexpected(
          csv.ErrorHere("job '" + j.id + "' asks " + std::to_string(j.gpu_mib) + " MiB but " +
                        j.cls + " needs " + std::to_string(c.MemoryMib(c.default_batch)) +
                        " MiB at its default batch size " + std::to_string(c.default_batch)));
    }
    jobs.push_back(std::move(j));
  }
  if (jobs.empty()) return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": no jobs");
  return jobs;
}

core::Result<std::vector<JobSpec>> LoadJobs(const std::string& path,
                                            const policy::WorkloadProfile& profile) {
  auto text = ReadSimInput(path);
  if (!text) return tl::unexpected(text.error());
  ViewStream in(*text);
  return ReadJobs(in, path, profile);
}

core::Result<std::vector<JobSpec>> ScaleSubmitTimes(std::vector<JobSpec> jobs, double load) {
  if (!(load > 0) || !std::isfinite(load)) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "load " + Num(load) + " is not a finite number > 0");
  }
  for (JobSpec& j : jobs) {
    const auto us = Scaled(j.submit_us, load);
    if (!us) {
      return core::MakeError(
          core::ErrorCode::kInvalidArgument,
          "job '" + j.id + "': submit time " + FormatSeconds(j.submit_us) + " s at load " +
              Num(load) + " becomes " + Num(static_cast<double>(j.submit_us) / load / 1e6) +
              " s, past the largest submit time " + FormatSeconds(kMaxSubmitUs) + " s");
    }
    j.submit_us = *us;
  }
  return jobs;
}

void WriteJobs(std::ostream& out, const std::vector<JobSpec>& jobs) {
  out << "job,class,submit_s,gpu_mib\n";
  for (const auto& j : jobs) {
    out << j.id << ',' << j.cls << ',' << FormatSeconds(j.submit_us) << ',' << j.gpu_mib << '\n';
  }
}

std::vector<std::string> MixNames() { return {"uniform", "iadeep", "conv-heavy", "light"}; }

namespace {

// Every class of the profile, those named in `heavy` at 3 times the weight of the others.
std::vector<ClassWeight> Weighted(const policy::WorkloadProfile& profile,
                                  std::initializer_list<std::string_view> heavy) {
  std::vector<ClassWeight> mix;
  for (const auto& c : profile.classes) {
    const bool is_heavy = std::find(heavy.begin(), heavy.end(), c.name) != heavy.end();
    mix.push_back({c.name, is_heavy ? 3.0 : 1.0});
  }
  return mix;
}

}  // namespace

core::Result<std::vector<ClassWeight>> ParseMix(std::string_view text,
                                                const policy::WorkloadProfile& profile) {
  std::vector<ClassWeight> mix;
  if (text == "uniform") {
    mix = Weighted(profile, {});
  } else if (text == "iadeep") {
    mix = {{"vgg16", 0.212},
           {"resnet50", 0.212},
           {"squeezenet", 0.212},
           {"neumf", 0.182},
           {"lstm", 0.182}};
  } else if (text == "conv-heavy") {
    mix = Weighted(profile, {"vgg16", "vgg19", "resnet50", "resnet152", "alexnet"});
  } else if (text == "light") {
    mix = Weighted(profile, {"squeezenet", "googlenet", "neumf", "adgcl", "lstm"});
  } else {
    std::stringstream ss{std::string(text)};
    std::string item;
    while (std::getline(ss, item, ',')) {
      const std::size_t eq = item.find('=');
      double w = -1;
      if (eq != std::string::npos) {
        const std::string v = item.substr(eq + 1);
        auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), w);
        if (ec != std::errc() || ptr != v.data() + v.size()) w = -1;
      }
      if (eq == std::string::npos || !(w > 0) || !std::isfinite(w)) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               "mix: '" + item +
                                   "' is not class=weight with a positive weight "
                                   "(or use a named mix: uniform, iadeep, conv-heavy, light)");
      }
      mix.push_back({item.substr(0, eq), w});
    }
  }
  if (mix.empty()) return core::MakeError(core::ErrorCode::kInvalidArgument, "mix: empty");
  for (const auto& m : mix) {
    if (profile.Find(m.cls) == nullptr) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "mix: the profile '" + profile.name + "' has no workload class '" +
                                 m.cls + "'" +
                                 (text == "iadeep" ? " (the iadeep mix names the classes of the "
                                                     "iadeep5-assumed profile)"
                                                   : ""));
    }
  }
  return mix;
}

core::Result<std::vector<core::Micros>> ParseSubmitTimes(std::istream& in,
                                                         const std::string& source) {
  std::vector<core::Micros> out;
  std::string line;
  std::int64_t no = 0;
  auto bad = [&](const std::string& what) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           source + ":" + std::to_string(no) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++no;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    if (line.empty()) continue;
    if (out.size() == kMaxDlJobs) {
      return bad("more than " + std::to_string(kMaxDlJobs) + " times (the most jobs a list holds)");
    }
    auto t = ParseSeconds(line);
    if (!t) return bad(t.error().message);
    if (!out.empty() && *t < out.back()) return bad("submit times must not decrease");
    out.push_back(*t);
  }
  if (out.empty()) return core::MakeError(core::ErrorCode::kInvalidArgument, source + ": no times");
  return out;
}

core::Result<std::vector<core::Micros>> LoadSubmitTimes(const std::string& path) {
  auto text = ReadSimInput(path);
  if (!text) return tl::unexpected(text.error());
  ViewStream in(*text);
  return ParseSubmitTimes(in, path);
}

namespace {

core::Error JobGenError(const std::string& m) {
  return core::Error{core::ErrorCode::kInvalidArgument, "jobgen: " + m};
}

// The options make sense for the profile; the mix's total weight.
core::Result<double> CheckJobGen(const JobGenOptions& o, const policy::WorkloadProfile& profile) {
  auto bad = [](const std::string& m) { return tl::unexpected(JobGenError(m)); };
  if (o.count <= 0) return bad("the job count must be positive");
  if (static_cast<std::size_t>(o.count) > kMaxDlJobs) {
    return bad("the job count " + std::to_string(o.count) + " is more than " +
               std::to_string(kMaxDlJobs));
  }
  if (!(o.load > 0) || !std::isfinite(o.load)) {
    return bad("the load factor must be positive and finite (" + o.load_name + " " + Num(o.load) +
               ")");
  }
  if (o.arrival != ArrivalKind::kFile && (!(o.rate_per_s > 0) || !std::isfinite(o.rate_per_s))) {
    return bad("the rate must be positive and finite (" + o.rate_name + " " + Num(o.rate_per_s) +
               ")");
  }
  if (o.arrival == ArrivalKind::kFile &&
      o.submit_times.size() < static_cast<std::size_t>(o.count)) {
    return bad("the arrival file has " + core::Plural(o.submit_times.size(), "time") + " for " +
               core::Plural(o.count, "job"));
  }
  if (o.min_gpu_mib <= 0 || o.max_gpu_mib < o.min_gpu_mib) {
    return bad("the GPU memory range is empty");
  }
  if (o.max_gpu_mib > core::kMaxGpuMemoryMib) {
    return bad("the GPU memory range ends past " + std::to_string(core::kMaxGpuMemoryMib) +
               " MiB, more than a GPU may have");
  }
  if (o.mix.empty()) return bad("the class mix is empty");
  double total = 0;
  for (const auto& m : o.mix) {
    if (profile.Find(m.cls) == nullptr) return bad("unknown workload class '" + m.cls + "'");
    if (!(m.weight > 0) || !std::isfinite(m.weight)) {
      return bad("the weight of class '" + m.cls + "' is not a finite number > 0");
    }
    total += m.weight;
  }
  if (!std::isfinite(total)) return bad("the weights of the class mix add up to infinity");
  return total;
}

// Submit times: the arrival file's (scaled by the load), or drawn gaps (Poisson or bursty).
class SubmitClock {
 public:
  explicit SubmitClock(const JobGenOptions& o) : o_(o), gap_rng_(o.seed, "jobgen-gap") {}

  core::Result<core::Micros> Next(int i, const std::string& job) {
    if (o_.arrival == ArrivalKind::kFile) {
      const core::Micros given = o_.submit_times[static_cast<std::size_t>(i)];
      const auto us = Scaled(given, o_.load);
      if (!us) {
        return tl::unexpected(JobGenError("job " + job + ": the submit time " +
                                          FormatSeconds(given) + " s at " + o_.load_name + " " +
                                          Num(o_.load) + " passes the largest submit time " +
                                          FormatSeconds(kMaxSubmitUs) + " s"));
      }
      return *us;
    }
    // Bursty gaps: with probability 0.85 a short gap (mean 0.3/rate), else a long one (mean
    // 4.967/rate); mean 1/rate, squared coefficient of variation about 4.7.
    constexpr double kShortP = 0.85, kShortMean = 0.3,
                     kLongMean = (1.0 - kShortP * kShortMean) / (1.0 - kShortP);
    if (i > 0) {
      double mean = 1.0 / o_.rate_per_s;
      if (o_.arrival == ArrivalKind::kBursty) {
        mean *= gap_rng_.Unit() < kShortP ? kShortMean : kLongMean;
      }
      t_ += -std::log(1.0 - gap_rng_.Unit()) * mean / o_.load;
    }
    // A tiny rate or load makes t huge or infinite: caught here, before the conversion.
    const double t_us = t_ * 1e6;
    if (!(t_us <= static_cast<double>(kMaxSubmitUs)) || std::llround(t_us) > kMaxSubmitUs) {
      return tl::unexpected(JobGenError(
          "job " + job + " would be submitted at " + Num(t_) + " s, past the largest submit time " +
          FormatSeconds(kMaxSubmitUs) + " s: " + o_.rate_name + " " + Num(o_.rate_per_s) + " at " +
          o_.load_name + " " + Num(o_.load) + " spaces jobs about " +
          Num(1.0 / (o_.rate_per_s * o_.load)) + " s apart (raise " + o_.rate_name + " or " +
          o_.load_name + ")"));
    }
    return static_cast<core::Micros>(std::llround(t_us));
  }

 private:
  const JobGenOptions& o_;
  core::Rng gap_rng_;
  double t_ = 0;
};

}  // namespace

core::Result<std::vector<JobSpec>> GenerateJobs(const JobGenOptions& o,
                                                const policy::WorkloadProfile& profile) {
  auto total = CheckJobGen(o, profile);
  if (!total) return tl::unexpected(total.error());
  core::Rng class_rng(o.seed, "jobgen-class");
  core::Rng mem_rng(o.seed, "jobgen-memory");
  SubmitClock clock(o);
  const core::MiB gib = 1024;
  const core::MiB lo_gib = (o.min_gpu_mib + gib - 1) / gib;
  const core::MiB hi_gib = std::max(lo_gib, o.max_gpu_mib / gib);
  std::vector<JobSpec> jobs;
  char id[32];
  for (int i = 0; i < o.count; ++i) {
    double u = class_rng.Unit() * *total;
    std::size_t pick = 0;
    while (pick + 1 < o.mix.size() && u >= o.mix[pick].weight) u -= o.mix[pick++].weight;
    const policy::ClassProfile& c = *profile.Find(o.mix[pick].cls);
    JobSpec j;
    std::snprintf(id, sizeof id, "j%04d", i + 1);
    j.id = id;
    j.cls = c.name;
    auto at = clock.Next(i, j.id);
    if (!at) return tl::unexpected(at.error());
    j.submit_us = *at;
    const core::MiB need = c.MemoryMib(c.default_batch);
    const auto span = static_cast<std::uint64_t>(hi_gib - lo_gib + 1);
    const core::MiB drawn = (lo_gib + static_cast<core::MiB>(mem_rng.Below(span))) * gib;
    j.gpu_mib = std::min(profile.gpu_memory_mib, std::max(drawn, (need + 511) / 512 * 512));
    jobs.push_back(std::move(j));
  }
  return jobs;
}

namespace dl_state {

core::Result<void> CheckDlRun(const policy::WorkloadProfile& profile,
                              const std::vector<JobSpec>& jobs, const DlSimOptions& options,
                              const policy::WorkloadProfile& truth) {
  auto bad = [](const std::string& m) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, m);
  };
  if (auto ok = profile.Validate(); !ok) return tl::unexpected(ok.error());
  if (auto ok = truth.Validate(); !ok) {
    return bad("the truth profile: " + ok.error().message);
  }
  const DlSimOptions& o = options;
  if (o.nodes < 1 || o.gpus_per_node < 1 || o.gpus_per_node > core::kMaxGpusPerNode ||
      o.nodes > kMaxDlGpus / o.gpus_per_node) {
    return bad("the cluster must have 1.." + std::to_string(kMaxDlGpus) + " GPUs, 1.." +
               std::to_string(core::kMaxGpusPerNode) + " per node");
  }
  if (o.max_jobs_per_gpu < 1 || o.max_jobs_per_gpu > kMaxDlJobsPerGpu) {
    return bad("jobs per GPU must be 1.." + std::to_string(kMaxDlJobsPerGpu));
  }
  if (!(o.reconfigure_s >= 0 && o.reconfigure_s <= 86400)) {
    return bad("the reconfiguration pause must be 0..86400 s");
  }
  if (!(o.measure_noise >= 0 && o.measure_noise <= 10)) return bad("measure noise must be 0..10");
  if (!(o.model_error >= 0 && o.model_error < 1)) return bad("model error must be in [0, 1)");
  if (!(o.work_spread >= 0 && o.work_spread <= 2)) return bad("work spread must be 0..2");
  if (!(o.noise_scale_spread >= 0 && o.noise_scale_spread <= 2)) {
    return bad("noise-scale spread must be 0..2");
  }
  if (auto rule = PairRuleFor(truth, o.truth_model); !rule) return tl::unexpected(rule.error());
  if (jobs.empty()) return bad("no jobs");
  if (jobs.size() > kMaxDlJobs) {
    return bad(std::to_string(jobs.size()) + " jobs, more than " + std::to_string(kMaxDlJobs));
  }
  for (const JobSpec& j : jobs) {
    if (profile.Find(j.cls) == nullptr) {
      return bad("job '" + j.id + "': unknown workload class '" + j.cls + "'");
    }
    if (truth.Find(j.cls) == nullptr) {
      return bad("job '" + j.id + "': workload class '" + j.cls +
                 "' is not in the truth profile '" + truth.name + "'");
    }
    if (j.submit_us < 0 || j.submit_us > kMaxSubmitUs) {
      return bad("job '" + j.id + "': submit time " + std::to_string(j.submit_us) +
                 " us is outside 0.." + std::to_string(kMaxSubmitUs));
    }
    if (j.gpu_mib <= 0) return bad("job '" + j.id + "': no GPU memory asked");
  }
  return {};
}

}  // namespace dl_state

}  // namespace gpumux::sim
