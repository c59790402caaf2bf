#include "gpumux/policy/observations.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <tuple>

#include "gpumux/core/check.h"
#include "gpumux/core/json.h"
#include "gpumux/core/plural.h"

namespace gpumux::policy {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

core::Error Bad(std::string message) {
  return core::Error{core::ErrorCode::kInvalidArgument, std::move(message)};
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The canonical (classes, batches) of an observation or a measured set.
using SetKey = std::pair<std::vector<std::string>, std::vector<int>>;

std::vector<std::size_t> CanonicalOrder(const std::vector<std::string>& classes,
                                        const std::vector<int>& batches) {
  std::vector<std::size_t> order(classes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(classes[a], batches[a]) < std::tie(classes[b], batches[b]);
  });
  return order;
}

SetKey KeyOf(const std::vector<std::string>& classes, const std::vector<int>& batches) {
  SetKey key;
  for (std::size_t i : CanonicalOrder(classes, batches)) {
    key.first.push_back(classes[i]);
    key.second.push_back(batches[i]);
  }
  return key;
}

// Reads one observation from a parsed JSON value; `where` prefixes every error.
core::Result<Observation> FromJson(const Json& j, const std::string& where) {
  if (!j.is_object()) return tl::unexpected(Bad(where + ": an observation is a JSON object"));
  const auto field = [&](const char* name) -> const Json* {
    const auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const auto missing = [&](const char* name, const char* what) {
    return tl::unexpected(Bad(where + ": \"" + name + "\" must be " + what));
  };
  Observation o;
  const Json* classes = field("classes");
  if (classes == nullptr || !classes->is_array()) {
    return missing("classes", "an array of class names");
  }
  for (const Json& c : *classes) {
    if (!c.is_string()) return missing("classes", "an array of class names");
    o.classes.push_back(c.get<std::string>());
  }
  const Json* batches = field("batches");
  if (batches == nullptr || !batches->is_array()) {
    return missing("batches", "an array of batch sizes");
  }
  for (const Json& b : *batches) {
    const auto* i = b.get_ptr<const Json::number_integer_t*>();
    const auto* u = b.get_ptr<const Json::number_unsigned_t*>();
    if (u != nullptr && *u <= static_cast<std::uint64_t>(kMaxProfileBatch)) {
      o.batches.push_back(static_cast<int>(*u));
    } else if (i != nullptr && *i >= -kMaxProfileBatch && *i <= kMaxProfileBatch) {
      o.batches.push_back(static_cast<int>(*i));  // a negative one fails CheckObservation
    } else if (u != nullptr || i != nullptr) {
      o.batches.push_back(kMaxProfileBatch + 1);  // out of range: CheckObservation says so
    } else {
      return missing("batches", "an array of integer batch sizes");
    }
  }
  const Json* slowdown = field("slowdown");
  if (slowdown == nullptr || !slowdown->is_array()) {
    return missing("slowdown", "an array of numbers");
  }
  for (const Json& s : *slowdown) {
    if (!s.is_number()) return missing("slowdown", "an array of numbers");
    o.slowdown.push_back(s.get<double>());
  }
  if (o.batches.size() != o.classes.size() || o.slowdown.size() != o.classes.size()) {
    return tl::unexpected(Bad(where + ": \"classes\" (" + std::to_string(o.classes.size()) +
                              "), \"batches\" (" + std::to_string(o.batches.size()) +
                              ") and \"slowdown\" (" + std::to_string(o.slowdown.size()) +
                              ") must have one entry per member"));
  }
  const Json* count = field("count");
  if (count == nullptr) return missing("count", "an integer number of windows");
  if (const auto* u = count->get_ptr<const Json::number_unsigned_t*>(); u != nullptr) {
    o.count = *u > static_cast<std::uint64_t>(kMaxObservationCount) ? kMaxObservationCount + 1
                                                                    : static_cast<std::int64_t>(*u);
  } else if (const auto* i = count->get_ptr<const Json::number_integer_t*>(); i != nullptr) {
    o.count = *i;
  } else {
    return missing("count", "an integer number of windows");
  }
  for (auto [name, out] : {std::pair<const char*, std::string*>{"node", &o.node},
                           {"gpu_model", &o.gpu_model},
                           {"solo", &o.solo},
                           {"updated", &o.updated}}) {
    const Json* v = field(name);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_string()) return missing(name, "a string");
    *out = v->get<std::string>();
  }
  return o;
}

OrderedJson ToJson(const Observation& o) {
  OrderedJson j;
  j["classes"] = o.classes;
  j["batches"] = o.batches;
  j["slowdown"] = o.slowdown;
  j["count"] = o.count;
  if (!o.node.empty()) j["node"] = o.node;
  if (!o.gpu_model.empty()) j["gpu_model"] = o.gpu_model;
  if (!o.solo.empty()) j["solo"] = o.solo;
  if (!o.updated.empty()) j["updated"] = o.updated;
  return j;
}

// An observed set being combined from several nodes' observations.
struct Combined {
  std::vector<double> weighted;  // sum of weight * count * slowdown, per member
  double weight = 0;             // sum of weight * count
  std::int64_t count = 0;
  std::set<std::string> nodes;
  std::size_t observations = 0;
};

}  // namespace

Observation Canonical(Observation o) {
  if (o.batches.size() != o.classes.size() || o.slowdown.size() != o.classes.size()) return o;
  const std::vector<std::size_t> order = CanonicalOrder(o.classes, o.batches);
  Observation c = o;
  for (std::size_t k = 0; k < order.size(); ++k) {
    c.classes[k] = o.classes[order[k]];
    c.batches[k] = o.batches[order[k]];
    c.slowdown[k] = o.slowdown[order[k]];
  }
  return c;
}

core::Result<void> CheckObservation(const Observation& o) {
  const std::size_t n = o.classes.size();
  if (n < 2 || n > kMaxMeasuredMembers) {
    return tl::unexpected(Bad("\"classes\": " + std::to_string(n) + " members, expected 2.." +
                              std::to_string(kMaxMeasuredMembers)));
  }
  if (o.batches.size() != n || o.slowdown.size() != n) {
    return tl::unexpected(
        Bad("\"classes\", \"batches\" and \"slowdown\" must have one entry per member"));
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (o.classes[k].empty()) return tl::unexpected(Bad("\"classes\": an empty class name"));
    if (o.batches[k] < 1 || o.batches[k] > kMaxProfileBatch) {
      return tl::unexpected(Bad("\"batches\": " + std::to_string(o.batches[k]) + " is outside 1.." +
                                std::to_string(kMaxProfileBatch)));
    }
    if (!(o.slowdown[k] >= 1 && o.slowdown[k] <= kMaxMeasuredSlowdown)) {
      return tl::unexpected(Bad("\"slowdown\": " + Num(o.slowdown[k]) + " is outside [1, " +
                                Num(kMaxMeasuredSlowdown) + "]"));
    }
  }
  if (o.count < 1 || o.count > kMaxObservationCount) {
    return tl::unexpected(Bad("\"count\": " + std::to_string(o.count) + " is outside 1..2^50"));
  }
  return {};
}

core::Result<void> CheckPlausible(const Observation& o) {
  const double bound = kPlausibleSlowdownPerJob * static_cast<double>(o.slowdown.size());
  for (std::size_t k = 0; k < o.slowdown.size(); ++k) {
    if (o.slowdown[k] > bound) {
      char value[32];
      std::snprintf(value, sizeof value, "%g", o.slowdown[k]);
      const std::string member = (k < o.classes.size() ? o.classes[k] : "?") + "@" +
                                 (k < o.batches.size() ? std::to_string(o.batches[k]) : "?");
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "slowdown " + std::string(value) + " of " + member + " is above " +
                                 std::to_string(static_cast<int>(bound)) + " for " +
                                 std::to_string(o.slowdown.size()) +
                                 " jobs sharing a GPU (a wrong solo reference, or forged)");
    }
  }
  return {};
}

core::Result<Observation> MergeObservations(const Observation& a, const Observation& b) {
  if (auto ok = CheckObservation(a); !ok) return tl::unexpected(ok.error());
  if (auto ok = CheckObservation(b); !ok) return tl::unexpected(ok.error());
  Observation x = Canonical(a);
  const Observation y = Canonical(b);
  if (x.classes != y.classes || x.batches != y.batches) {
    return tl::unexpected(Bad("observations of different co-locations cannot be merged"));
  }
  const double ca = static_cast<double>(x.count);
  const double cb = static_cast<double>(y.count);
  for (std::size_t k = 0; k < x.slowdown.size(); ++k) {
    x.slowdown[k] = (x.slowdown[k] * ca + y.slowdown[k] * cb) / (ca + cb);
  }
  x.count = std::min(kMaxObservationCount, x.count + y.count);
  if (x.node.empty()) x.node = y.node;
  if (x.gpu_model.empty()) x.gpu_model = y.gpu_model;
  if (x.solo != "profile" && (y.solo == "profile" || x.solo.empty())) x.solo = y.solo;
  x.updated = std::max(x.updated, y.updated);
  return x;
}

core::Result<Observation> ParseObservation(std::string_view json_text, const std::string& source) {
  const auto j = core::ParseJson(json_text, source);
  if (!j) return tl::unexpected(j.error());
  return FromJson(*j, source);
}

core::Result<std::vector<Observation>> ParseObservations(std::string_view json_text,
                                                         const std::string& source) {
  const auto parsed = core::ParseJson(json_text, source);
  if (!parsed) return tl::unexpected(parsed.error());
  const Json& j = *parsed;
  if (!j.is_array()) return tl::unexpected(Bad(source + ": expected a JSON array of observations"));
  if (j.size() > kMaxObservations) {
    return tl::unexpected(Bad(source + ": " + std::to_string(j.size()) +
                              " observations, more than " + std::to_string(kMaxObservations)));
  }
  std::vector<Observation> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    auto o = FromJson(j[i], source + ": observation " + std::to_string(i));
    if (!o) return tl::unexpected(o.error());
    out.push_back(std::move(*o));
  }
  return out;
}

std::string SerializeObservation(const Observation& o) { return ToJson(o).dump(); }

std::string SerializeObservations(std::span<const Observation> observations) {
  std::string out = "[";
  for (std::size_t i = 0; i < observations.size(); ++i) {
    out += i == 0 ? "\n  " : ",\n  ";
    out += SerializeObservation(observations[i]);
  }
  out += observations.empty() ? "]\n" : "\n]\n";
  return out;
}

std::string ObservationSummary::Describe() const {
  std::string s =
      core::Plural(read, "observation") + ": " + core::Plural(observed_sets(), "observed set");
  if (sets_replaced > 0) {
    s += " (";
    s += std::to_string(sets_replaced);
    s += sets_replaced == 1 ? " replaces a profile set)" : " replace profile sets)";
  }
  s += ", ";
  s += core::Plural(windows, "window");
  s += " on ";
  s += core::Plural(nodes, "node");
  const std::size_t skipped_n =
      unknown_class + out_of_range + over_limit + implausible + profile_relative + other_gpu;
  if (skipped_n > 0) {
    s += "; skipped ";
    s += std::to_string(skipped_n);
    std::vector<std::string> parts;
    if (unknown_class > 0) parts.push_back(std::to_string(unknown_class) + " unknown class");
    if (out_of_range > 0) parts.push_back(std::to_string(out_of_range) + " out of range");
    if (over_limit > 0) parts.push_back(std::to_string(over_limit) + " over the set limit");
    if (implausible > 0) parts.push_back(std::to_string(implausible) + " implausible");
    if (profile_relative > 0) {
      parts.push_back(std::to_string(profile_relative) + " relative to the profile's solo time");
    }
    if (other_gpu > 0) parts.push_back(std::to_string(other_gpu) + " on another GPU model");
    s += " (";
    for (std::size_t i = 0; i < parts.size(); ++i) s += (i > 0 ? ", " : "") + parts[i];
    s += ")";
  }
  if (too_few > 0) {
    s += "; ";
    s += std::to_string(too_few);
    s += " in sets with too few windows";
  }
  return s;
}

namespace {

// The observations that apply to `profile` combined per set (canonical classes and batches):
// their counts summed and their slowdowns weighted by count. Counts into `sum` the ones skipped
// (out of range, or naming a class the profile lacks), with the first reasons.
std::map<SetKey, Combined> CombineObservations(const WorkloadProfile& profile,
                                               std::span<const Observation> observations,
                                               ObservationSummary& sum,
                                               const ObservationOptions& options) {
  const auto skip = [&](std::size_t i, const std::string& why) {
    if (sum.skipped.size() < kMaxSkippedReasons) {
      sum.skipped.push_back("observation " + std::to_string(i) + ": " + why);
    }
  };
  std::map<SetKey, Combined> combined;
  for (std::size_t i = 0; i < observations.size(); ++i) {
    const Observation& raw = observations[i];
    if (auto ok = CheckObservation(raw); !ok) {
      ++sum.out_of_range;
      skip(i, ok.error().message);
      continue;
    }
    if (auto ok = CheckPlausible(raw); !ok) {
      ++sum.implausible;
      skip(i, ok.error().message);
      continue;
    }
    const bool relative = raw.solo == "profile";
    if (relative && options.measured_only) {
      ++sum.profile_relative;
      skip(i, "its solo reference is the profile's, not measured on its node");
      continue;
    }
    if (!options.gpu_model.empty() && !raw.gpu_model.empty() &&
        raw.gpu_model != options.gpu_model) {
      ++sum.other_gpu;
      skip(i, "measured on " + raw.gpu_model + ", not " + options.gpu_model);
      continue;
    }
    const auto unknown =
        std::find_if(raw.classes.begin(), raw.classes.end(),
                     [&](const std::string& c) { return profile.Find(c) == nullptr; });
    if (unknown != raw.classes.end()) {
      ++sum.unknown_class;
      skip(i, "class '" + *unknown + "' is not in profile '" + profile.name + "'");
      continue;
    }
    const Observation o = Canonical(raw);
    Combined& c = combined[{o.classes, o.batches}];
    if (c.weighted.empty()) c.weighted.assign(o.slowdown.size(), 0.0);
    for (std::size_t k = 0; k < o.slowdown.size(); ++k) {
      c.weighted[k] +=
          (relative ? kProfileRelativeWeight : 1.0) * static_cast<double>(o.count) * o.slowdown[k];
    }
    c.weight += (relative ? kProfileRelativeWeight : 1.0) * static_cast<double>(o.count);
    c.count = std::min(kMaxObservationCount, c.count + o.count);
    c.nodes.insert(o.node);
    ++c.observations;
  }
  return combined;
}

// The measured set of a combined one: its mean slowdowns, with a source naming the windows and
// nodes it comes from ("observed: 12 windows on 2 nodes").
MeasuredSet MakeSet(const SetKey& key, const Combined& c) {
  MeasuredSet m;
  m.classes = key.first;
  m.batches = key.second;
  for (double w : c.weighted) {
    // A mean of values in [1, max] is in [1, max]; clamp the rounding.
    m.slowdown.push_back(std::clamp(w / c.weight, 1.0, kMaxMeasuredSlowdown));
  }
  m.source = "observed: " + core::Plural(c.count, "window") + " on " +
             core::Plural(c.nodes.size(), "node");
  return m;
}

// Counts the combined set `c` as used: its observations and windows into `sum`, its nodes
// into `nodes`.
void CountUsed(const Combined& c, ObservationSummary& sum, std::set<std::string>& nodes) {
  sum.used += c.observations;
  sum.windows += c.count;
  nodes.insert(c.nodes.begin(), c.nodes.end());
}

}  // namespace

WorkloadProfile WithObservations(const WorkloadProfile& profile,
                                 std::span<const Observation> observations,
                                 ObservationSummary* summary, const ObservationOptions& options) {
  ObservationSummary local;
  ObservationSummary& sum = summary != nullptr ? *summary : local;
  sum = ObservationSummary{};
  sum.read = observations.size();
  const std::map<SetKey, Combined> combined =
      CombineObservations(profile, observations, sum, options);

  WorkloadProfile out = profile;
  std::map<SetKey, std::size_t> profile_index;  // the first profile set of each key
  for (std::size_t i = 0; i < out.measured.size(); ++i) {
    profile_index.try_emplace(KeyOf(out.measured[i].classes, out.measured[i].batches), i);
  }
  struct Added {
    const SetKey* key;
    const Combined* c;
  };
  std::vector<Added> added;
  std::set<std::string> nodes;
  for (const auto& [key, c] : combined) {
    if (c.count < options.min_count) {
      sum.too_few += c.observations;
      continue;
    }
    if (auto it = profile_index.find(key); it != profile_index.end()) {
      out.measured[it->second] = MakeSet(key, c);
      ++sum.sets_replaced;
      CountUsed(c, sum, nodes);
    } else {
      added.push_back({&key, &c});
    }
  }
  // Most windows first; ties in key order (the map's), so the result is deterministic.
  std::stable_sort(added.begin(), added.end(),
                   [](const Added& a, const Added& b) { return a.c->count > b.c->count; });
  const std::size_t room =
      kMaxMeasuredSets > out.measured.size() ? kMaxMeasuredSets - out.measured.size() : 0;
  for (std::size_t i = 0; i < added.size(); ++i) {
    const Combined& c = *added[i].c;
    if (i >= room) {
      sum.over_limit += c.observations;
      continue;
    }
    out.measured.push_back(MakeSet(*added[i].key, c));
    ++sum.sets_added;
    CountUsed(c, sum, nodes);
  }
  sum.nodes = nodes.size();
  return out;
}

LearningInterference::LearningInterference(const WorkloadProfile& profile,
                                           ObservationOptions options)
    : base_(&profile),
      options_(std::move(options)),
      learned_(std::make_unique<WorkloadProfile>(profile)),
      model_(std::make_unique<ProfileInterference>(*learned_)) {}

void LearningInterference::Observe(const Observation& o) {
  Observation c = Canonical(o);
  auto key = std::make_pair(c.classes, c.batches);
  auto it = seen_.find(key);
  if (it == seen_.end()) {
    seen_.emplace(std::move(key), std::move(c));
  } else {
    auto merged = MergeObservations(it->second, c);
    GPUMUX_CHECK(merged.has_value(), "observations of one key merge");
    it->second = std::move(*merged);
  }
  stale_ = true;
}

void LearningInterference::Refresh() {
  if (!stale_) return;
  std::vector<Observation> all;
  all.reserve(seen_.size());
  for (const auto& [key, o] : seen_) all.push_back(o);
  auto learned =
      std::make_unique<WorkloadProfile>(WithObservations(*base_, all, nullptr, options_));
  model_ = std::make_unique<ProfileInterference>(*learned);
  learned_ = std::move(learned);
  stale_ = false;
  ++version_;
}

}  // namespace gpumux::policy
