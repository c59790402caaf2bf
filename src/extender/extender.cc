#include "gpumux/extender/extender.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "gpumux/core/json_text.h"
#include "gpumux/policy/engine.h"
#include "src/extender/verb_args.h"

namespace gpumux::extender {
namespace {

using core::AppendJsonString;
using detail::BadRequest;
using detail::DecodeArgs;
using detail::ExtenderArgs;
using detail::ParseObject;
using detail::Quoted;
using detail::TooManyNodes;
using nlohmann::json;

constexpr std::size_t kRecentPods = 4096;

}  // namespace

// The policy's choice, then the rest: the fitting node the engine would pick (the highest
// score, ties to the smaller rank, as Engine::Decide) gets 10 (kube-scheduler's
// MaxExtenderPriority) and no other does; the others map linearly onto 0..9 by score. A linear
// map onto 0..10 rounded hundreds of near-best nodes to 10, among which kube-scheduler picks at
// random (bench/scale/README.md measured the spread).
std::vector<int> ExtenderScores(std::span<const sched::NodeVerdict> verdicts) {
  std::vector<std::int64_t> scores(verdicts.size(), policy::Engine::kNoFit);
  std::vector<std::int64_t> ranks(verdicts.size(), 0);
  std::int64_t lo = INT64_MAX;
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    const sched::NodeVerdict& v = verdicts[i];
    ranks[i] = v.rank;
    if (v.kind != sched::NodeVerdict::Kind::kFits) continue;
    scores[i] = v.score;
    lo = std::min(lo, v.score);
  }
  const std::optional<std::size_t> best = policy::ChooseBest(scores, ranks);
  std::vector<int> out(verdicts.size(), 0);
  if (!best) return out;
  const std::int64_t hi = verdicts[*best].score;
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    if (verdicts[i].kind != sched::NodeVerdict::Kind::kFits) continue;
    if (i == *best) {
      out[i] = 10;
    } else if (hi == lo) {
      out[i] = 9;
    } else {
      const double x = 9.0 * (static_cast<double>(verdicts[i].score) - static_cast<double>(lo)) /
                       (static_cast<double>(hi) - static_cast<double>(lo));
      out[i] = static_cast<int>(std::lround(x));
    }
  }
  return out;
}

namespace {

// The victims of each node (their UIDs) and its PodDisruptionBudget violations.
using Victims = std::map<std::string, std::pair<std::vector<std::string>, std::int64_t>>;

// Reads NodeNameToMetaVictims or NodeNameToVictims (`source`, named `field`) into `victims`;
// the error text when the body is not what kube-scheduler sends.
std::optional<std::string> ReadVictims(const json& source, const std::string& field,
                                       Victims& victims) {
  for (const auto& [node, entry] : source.items()) {
    const std::string where = field + "[" + Quoted(node) + "]";
    if (node.empty()) return field + " has an empty node name";
    if (!entry.is_object()) {
      return where + " must be an object {\"Pods\":[...],\"NumPDBViolations\":N}";
    }
    auto& [uids, pdb] = victims[node];
    if (const json* v = kube::JsonChild(entry, "NumPDBViolations"); v != nullptr) {
      if (!v->is_number_integer() || v->get<std::int64_t>() < 0) {
        return where + ".NumPDBViolations must be a non-negative integer";
      }
      pdb = v->get<std::int64_t>();
    }
    const json* pods = kube::JsonChild(entry, "Pods");
    if (pods == nullptr) continue;
    if (!pods->is_array()) return where + ".Pods must be an array";
    if (pods->size() > kMaxVictimsPerNode) {
      return (where + ".Pods lists more than " + std::to_string(kMaxVictimsPerNode) +
              " pods (the extender's limit per node)");
    }
    std::set<std::string> seen;
    for (std::size_t i = 0; i < pods->size(); ++i) {
      const json& p = (*pods)[i];
      const json* uid = kube::JsonChild(p, "UID");
      if (uid == nullptr) {
        const json* metadata = kube::JsonChild(p, "metadata");
        uid = metadata != nullptr ? kube::JsonChild(*metadata, "uid") : nullptr;
      }
      const std::string at = where + ".Pods[" + std::to_string(i) + "]";
      if (uid == nullptr || !uid->is_string() || uid->get_ref<const std::string&>().empty()) {
        return at + " has no UID (a non-empty string in UID or metadata.uid)";
      }
      if (!seen.insert(uid->get<std::string>()).second) {
        return at + ": pod " + Quoted(uid->get<std::string>()) + " is listed twice";
      }
      uids.push_back(uid->get<std::string>());
    }
  }
  return std::nullopt;
}

}  // namespace

std::string_view VerbName(Verb verb) {
  switch (verb) {
    case Verb::kFilter:
      return "filter";
    case Verb::kPrioritize:
      return "prioritize";
    case Verb::kBind:
      return "bind";
    case Verb::kPreempt:
      return "preempt";
  }
  return "unknown";
}

Extender::Extender(sched::ClusterState& state, kube::KubeApi* api, ExtenderOptions options)
    : state_(&state), api_(api), options_(options), parsers_(std::make_unique<VerbParserPool>()) {}

Extender::~Extender() = default;

VerbReply Extender::Handle(Verb verb, std::string_view body) {
  switch (verb) {
    case Verb::kFilter:
      return Filter(body);
    case Verb::kPrioritize:
      return Prioritize(body);
    case Verb::kBind:
      return Bind(body);
    case Verb::kPreempt:
      return Preempt(body);
  }
  return BadRequest("unknown verb");
}

void Extender::Remember(const kube::PodInfo& pod) {
  if (!pod.wants_gpu()) return;
  std::lock_guard lock(recent_mu_);
  auto [it, inserted] = recent_.insert_or_assign(pod.uid, pod);
  if (!inserted) return;
  recent_order_.push_back(pod.uid);
  if (recent_order_.size() > kRecentPods) {
    recent_.erase(recent_order_.front());
    recent_order_.pop_front();
  }
}

std::optional<kube::PodInfo> Extender::Recall(const std::string& uid) {
  std::lock_guard lock(recent_mu_);
  auto it = recent_.find(uid);
  if (it == recent_.end()) return std::nullopt;
  return it->second;
}

void Extender::TurnedAway(const kube::PodInfo& pod, bool held) {
  if (options_.requeuer == nullptr) return;
  const std::optional<std::int64_t> overdue_in =
      held ? state_->OverdueInSeconds(pod) : std::nullopt;
  options_.requeuer->TurnedAway(pod.ns, pod.name, pod.uid,
                                overdue_in && *overdue_in > 0
                                    ? std::chrono::seconds(*overdue_in)
                                    : std::chrono::steady_clock::duration{});
}

VerbReply Extender::Filter(std::string_view body) {
  std::string error;
  auto args = DecodeArgs(body, state_->gpu_mem_unit_mib(), *parsers_, &error);
  if (!args) return BadRequest(error);
  Remember(args->pod);
  if (args->pod.wants_gpu() && !state_->synced()) {
    // Not "unresolvable" (that would skip preemption for this cycle): an error, which
    // kube-scheduler treats as a scheduling error and retries with backoff; the requeuer also
    // nudges the pod once the state has synced.
    TurnedAway(args->pod, /*held=*/false);
    return VerbReply{200,
                     json{{"Nodes", nullptr},
                          {"NodeNames", nullptr},
                          {"FailedNodes", nullptr},
                          {"FailedAndUnresolvableNodes", nullptr},
                          {"Error",
                           "gpumux extender is waiting for its first sync with the API "
                           "server; the pod will be retried"}}
                         .dump(),
                     "not_synced", 0};
  }
  const std::vector<sched::NodeVerdict> verdicts = state_->Evaluate(args->pod, args->names);
  // The reply is written by hand: at 5,000 nodes building a json tree first costs more than
  // the placement work itself.
  std::string passed, failed, unresolvable;
  passed.reserve(args->full_nodes ? body.size() : args->names.size() * 24);
  int passing = 0;
  bool held = false;  // a policy declined a node that fits (fgd-sat-reserve: until overdue)
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    const sched::NodeVerdict& v = verdicts[i];
    held = held || v.kind == sched::NodeVerdict::Kind::kDeclined;
    if (v.kind == sched::NodeVerdict::Kind::kFits) {
      if (passing++ > 0) passed += ',';
      passed += args->full_nodes ? args->node_raw[i] : args->name_tokens[i];
      continue;
    }
    // kUnknownNode is retriable (FailedNodes): the node may be new and the watch behind.
    std::string& target = v.kind == sched::NodeVerdict::Kind::kUnresolvable ? unresolvable : failed;
    if (!target.empty()) target += ',';
    target += args->name_tokens[i];
    target += ':';
    AppendJsonString(target, "gpumux: " + v.reason);
  }
  std::string out;
  out.reserve(passed.size() + failed.size() + unresolvable.size() + 160);
  if (args->full_nodes) {
    out += R"({"Nodes":{"apiVersion":"v1","kind":"NodeList","metadata":{},"items":[)";
    out += passed;
    out += R"(]},"NodeNames":null)";
  } else {
    out += R"({"Nodes":null,"NodeNames":[)";
    out += passed;
    out += ']';
  }
  out += R"(,"FailedNodes":{)";
  out += failed;
  out += R"(},"FailedAndUnresolvableNodes":{)";
  out += unresolvable;
  out += R"(},"Error":""})";
  VerbReply reply{200, std::move(out), "", 0};
  if (passing == 0 && !verdicts.empty()) {
    reply.failure = "no_fit";
    if (args->pod.wants_gpu()) TurnedAway(args->pod, held);
  }
  return reply;
}

VerbReply Extender::Prioritize(std::string_view body) {
  std::string error;
  auto args = DecodeArgs(body, state_->gpu_mem_unit_mib(), *parsers_, &error);
  if (!args) return BadRequest(error);
  Remember(args->pod);
  std::vector<int> scores(args->names.size(), 0);
  if (args->pod.wants_gpu()) {
    scores = ExtenderScores(
        state_->Evaluate(args->pod, args->names, sched::ClusterState::Reasons::kSkip));
  }
  std::string out = "[";
  out.reserve(scores.size() * 40 + 2);
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"Host":)";
    out += args->name_tokens[i];
    out += R"(,"Score":)";
    out += std::to_string(scores[i]);
    out += '}';
  }
  out += ']';
  return VerbReply{200, std::move(out), "", 0};
}

VerbReply Extender::Preempt(std::string_view body) {
  std::string error;
  auto doc = ParseObject(body, &error);
  if (!doc) return BadRequest(error);
  const json* pod_json = kube::JsonChild(*doc, "Pod");
  if (pod_json == nullptr || !pod_json->is_object())
    return BadRequest("\"Pod\" is missing or not an object");
  auto pod = kube::DecodePod(*pod_json, state_->gpu_mem_unit_mib());
  if (!pod) return BadRequest("\"Pod\": " + pod.error().message);
  // Victims per node, as UIDs, from either form: NodeNameToMetaVictims (nodeCacheCapable:
  // {"Pods":[{"UID":...}]}) or NodeNameToVictims (whole pods); kube-scheduler sends one.
  const json* meta = kube::JsonChild(*doc, "NodeNameToMetaVictims");
  const json* full = kube::JsonChild(*doc, "NodeNameToVictims");
  if (meta != nullptr && full != nullptr) {
    return BadRequest(
        "both \"NodeNameToMetaVictims\" and \"NodeNameToVictims\" are given: "
        "expected one of them");
  }
  if (meta == nullptr && full == nullptr) {
    return BadRequest(
        "no victims: expected \"NodeNameToMetaVictims\" (nodeCacheCapable: true) or "
        "\"NodeNameToVictims\"");
  }
  const json& source = meta != nullptr ? *meta : *full;
  const std::string field = meta != nullptr ? "\"NodeNameToMetaVictims\"" : "\"NodeNameToVictims\"";
  if (!source.is_object()) {
    return BadRequest(field + " must be an object keyed by node name, not " + source.type_name());
  }
  if (source.size() > kMaxNodesPerRequest) return BadRequest(TooManyNodes(field.c_str()));
  Victims victims;
  if (auto bad = ReadVictims(source, field, victims)) return BadRequest(*bad);
  json out = json::object();
  for (const auto& [node, entry] : victims) {
    const auto& [uids, pdb] = entry;
    if (!state_->FitsWithout(*pod, node, uids)) continue;
    json pods = json::array();
    for (const std::string& uid : uids) pods.push_back({{"UID", uid}});
    out[node] = {{"Pods", std::move(pods)}, {"NumPDBViolations", pdb}};
  }
  return VerbReply{200,
                   json{{"NodeNameToMetaVictims", std::move(out)}}.dump(
                       -1, ' ', false, json::error_handler_t::replace),
                   "", 0};
}

}  // namespace gpumux::extender
