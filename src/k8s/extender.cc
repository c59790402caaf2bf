#include "gpumux/k8s/extender.h"

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <deque>
#include <thread>

#include <nlohmann/json.hpp>
#include <simdjson.h>

namespace gpumux::k8s {
namespace {

using nlohmann::json;

constexpr std::size_t kRecentPods = 4096;
// The least time between two reads of a busy node's lock by one bind.
constexpr std::chrono::milliseconds kMinLockRetry{20};

VerbReply BadRequest(const std::string& message) {
  return VerbReply{400, json{{"Error", message}}.dump(), "bad_request", 0};
}

// Parses a body that must be a JSON object; a message naming the problem otherwise.
std::optional<json> ParseObject(std::string_view body, std::string* error) {
  if (body.empty()) {
    *error = "empty body: expected a JSON object";
    return std::nullopt;
  }
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *error = "body is not valid JSON";
    return std::nullopt;
  }
  if (!doc.is_object()) {
    *error = std::string("body must be a JSON object, not ") + doc.type_name();
    return std::nullopt;
  }
  return doc;
}

// ExtenderArgs: the pod and the candidate nodes (NodeNames, or the items of Nodes).
// Parsed with simdjson's on-demand API: at 5,000 nodes the body is ~60 KB of names (nlohmann
// takes over a millisecond for it; simdjson tens of microseconds). Only the pod object is
// handed to nlohmann (DecodePod), and in the full-NodeList mode each item is kept as raw JSON
// text so that the reply can echo the passing nodes without re-serialising them.
struct ExtenderArgs {
  PodInfo pod;
  // Candidate names (unescaped) and, for the reply, each name as the JSON string token it was
  // sent as (already quoted and escaped). Views into `padded`, the parser's string buffer or
  // `owned`; valid while this object lives and the thread's parser is not reused.
  std::vector<std::string_view> names;
  std::vector<std::string_view> name_tokens;
  std::vector<std::string_view> node_raw;  // full-NodeList mode: each item's JSON text
  std::deque<std::string> owned;           // names and tokens made here (full-NodeList mode)
  bool full_nodes = false;
  simdjson::padded_string padded;          // the body
};

// Appends `s` as a JSON string literal.
void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  const bool plain = std::none_of(s.begin(), s.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
  if (plain) {  // node names (DNS labels) always are
    out += s;
    out += '"';
    return;
  }
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

namespace sj = simdjson::ondemand;

bool NodeNameOf(std::string_view raw, std::string* name) {
  thread_local sj::parser parser;
  simdjson::padded_string padded(raw);
  sj::document doc;
  if (parser.iterate(padded).get(doc) != simdjson::SUCCESS) return false;
  std::string_view value;
  if (doc.find_field_unordered("metadata").find_field_unordered("name").get_string().get(value) !=
      simdjson::SUCCESS) {
    return false;
  }
  *name = std::string(value);
  return true;
}

bool IsNull(sj::value& v) {
  sj::json_type type;
  return v.type().get(type) == simdjson::SUCCESS && type == sj::json_type::null;
}

std::unique_ptr<ExtenderArgs> DecodeArgs(std::string_view body, std::int64_t gpu_mem_unit_mib,
                                         std::string* error) {
  auto args = std::make_unique<ExtenderArgs>();
  if (body.empty()) {
    *error = "empty body: expected a JSON object";
    return nullptr;
  }
  args->padded = simdjson::padded_string(body);
  // A node-cache body is mostly names of ~15 bytes each: reserve once instead of regrowing.
  args->names.reserve(body.size() / 16);
  args->name_tokens.reserve(body.size() / 16);
  thread_local sj::parser parser;
  sj::document doc;
  sj::object root;
  if (parser.iterate(args->padded).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(root) != simdjson::SUCCESS) {
    *error = "body is not a JSON object";
    return nullptr;
  }
  bool have_pod = false;
  for (auto field_result : root) {
    sj::field field;
    std::string_view key;
    if (std::move(field_result).get(field) != simdjson::SUCCESS ||
        field.unescaped_key().get(key) != simdjson::SUCCESS) {
      *error = "body is not valid JSON";
      return nullptr;
    }
    sj::value value = field.value();
    if (key == "Pod") {
      sj::object pod;
      std::string_view raw;
      if (value.get_object().get(pod) != simdjson::SUCCESS ||
          pod.raw_json().get(raw) != simdjson::SUCCESS) {
        *error = "\"Pod\" must be an object";
        return nullptr;
      }
      const json parsed = json::parse(raw, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        *error = "\"Pod\" is not valid JSON";
        return nullptr;
      }
      auto decoded = DecodePod(parsed, gpu_mem_unit_mib);
      if (!decoded) {
        *error = "\"Pod\": " + decoded.error().message;
        return nullptr;
      }
      args->pod = std::move(*decoded);
      have_pod = true;
    } else if (key == "NodeNames") {
      if (IsNull(value)) continue;
      sj::array names;
      if (value.get_array().get(names) != simdjson::SUCCESS) {
        *error = "\"NodeNames\" must be an array of strings";
        return nullptr;
      }
      for (auto item_result : names) {
        sj::value item;
        std::string_view name;
        if (std::move(item_result).get(item) != simdjson::SUCCESS) {
          *error = "\"NodeNames\" is not valid JSON";
          return nullptr;
        }
        std::string_view token = item.raw_json_token();
        if (item.get_string().get(name) != simdjson::SUCCESS) {
          *error = "\"NodeNames\" must be an array of strings";
          return nullptr;
        }
        while (!token.empty() && token.back() != '"') token.remove_suffix(1);
        args->names.push_back(name);
        args->name_tokens.push_back(token);
      }
    } else if (key == "Nodes") {
      if (IsNull(value)) continue;
      sj::object list;
      if (value.get_object().get(list) != simdjson::SUCCESS) {
        *error = "\"Nodes\" must be a v1.NodeList";
        return nullptr;
      }
      args->full_nodes = true;
      for (auto list_field : list) {
        sj::field lf;
        std::string_view list_key;
        if (std::move(list_field).get(lf) != simdjson::SUCCESS ||
            lf.unescaped_key().get(list_key) != simdjson::SUCCESS) {
          *error = "\"Nodes\" is not valid JSON";
          return nullptr;
        }
        if (list_key != "items") continue;
        sj::value items_value = lf.value();
        if (IsNull(items_value)) continue;
        sj::array items;
        if (items_value.get_array().get(items) != simdjson::SUCCESS) {
          *error = "\"Nodes\".items must be an array";
          return nullptr;
        }
        for (auto item : items) {
          sj::object node;
          std::string_view raw;
          std::string name;
          if (item.get_object().get(node) != simdjson::SUCCESS ||
              node.raw_json().get(raw) != simdjson::SUCCESS || !NodeNameOf(raw, &name)) {
            *error = "\"Nodes\".items[" + std::to_string(args->names.size()) +
                     "] has no metadata.name";
            return nullptr;
          }
          const std::string& owned_name = args->owned.emplace_back(std::move(name));
          std::string& token = args->owned.emplace_back();
          AppendJsonString(token, owned_name);
          args->names.push_back(owned_name);
          args->name_tokens.push_back(token);
          args->node_raw.push_back(raw);
        }
      }
    }
  }
  if (!have_pod) {
    *error = "\"Pod\" is missing";
    return nullptr;
  }
  return args;
}

// Maps raw policy scores of the fitting nodes linearly onto 0..10 (kube-scheduler's
// MaxExtenderPriority): the best node gets 10, the worst 0; all equal -> all 10.
std::vector<int> ExtenderScores(const std::vector<NodeVerdict>& verdicts) {
  std::int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const NodeVerdict& v : verdicts) {
    if (v.kind != NodeVerdict::Kind::kFits) continue;
    lo = std::min(lo, v.score);
    hi = std::max(hi, v.score);
  }
  std::vector<int> out(verdicts.size(), 0);
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    if (verdicts[i].kind != NodeVerdict::Kind::kFits) continue;
    if (hi == lo) {
      out[i] = 10;
      continue;
    }
    const double x = 10.0 * (static_cast<double>(verdicts[i].score) - static_cast<double>(lo)) /
                     (static_cast<double>(hi) - static_cast<double>(lo));
    out[i] = static_cast<int>(std::lround(x));
  }
  return out;
}

// Whether a failed call may still have been applied by the API server: no answer (timeout,
// connection reset), a server-side timeout, or a server error that may come after the commit.
// Other 4xx answers (400, 403, 404, 409, 422, 429, ...) are refusals.
bool MayHaveBeenApplied(const ApiError& error) {
  return error.http_status == 0 || error.http_status == 408 || error.http_status >= 500;
}

enum class BindOutcome : std::uint8_t { kBound, kNotBound, kUnknown };

struct PodReadBack {
  BindOutcome outcome = BindOutcome::kUnknown;
  std::string detail;  // what was seen, for humans
};

// Reads the pod back after an ambiguous answer: bound to `node` with `grant`, not (pending,
// bound elsewhere or with another grant, replaced, gone), or unknown (the read failed).
PodReadBack ReadPodBack(KubeApi& api, const std::string& ns, const std::string& name,
                        const std::string& uid, const std::string& node, const Grant& grant,
                        std::int64_t gpu_mem_unit_mib) {
  auto got = api.Get("/api/v1/namespaces/" + ns + "/pods/" + name);
  if (!got) {
    if (got.error().http_status == 404) return {BindOutcome::kNotBound, "the pod is gone"};
    return {BindOutcome::kUnknown, "reading the pod back failed: " + got.error().ToString()};
  }
  auto pod = DecodePod(*got, gpu_mem_unit_mib);
  if (!pod) {
    return {BindOutcome::kUnknown, "the pod read back does not decode: " + pod.error().message};
  }
  if (pod->uid != uid) {
    return {BindOutcome::kNotBound, "the pod was replaced (uid " + pod->uid + ")"};
  }
  const bool written = pod->grant.has_value() && *pod->grant == grant;
  if (pod->node_name.empty()) {
    return {BindOutcome::kNotBound,
            written ? "the pod carries the grant but is not bound" : "the pod is not bound"};
  }
  if (pod->node_name == node && written) {
    return {BindOutcome::kBound, "the pod is bound to " + node + " with this grant"};
  }
  return {BindOutcome::kNotBound, "the pod is bound to " + pod->node_name +
                                      (written ? "" : " with another grant (or none)")};
}

}  // namespace

std::string_view VerbName(Verb verb) {
  switch (verb) {
    case Verb::kFilter: return "filter";
    case Verb::kPrioritize: return "prioritize";
    case Verb::kBind: return "bind";
    case Verb::kPreempt: return "preempt";
  }
  return "unknown";
}

Extender::Extender(ClusterState& state, KubeApi* api, ExtenderOptions options)
    : state_(&state), api_(api), options_(options) {}

VerbReply Extender::Handle(Verb verb, std::string_view body) {
  switch (verb) {
    case Verb::kFilter: return Filter(body);
    case Verb::kPrioritize: return Prioritize(body);
    case Verb::kBind: return Bind(body);
    case Verb::kPreempt: return Preempt(body);
  }
  return BadRequest("unknown verb");
}

void Extender::Remember(const PodInfo& pod) {
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

std::optional<PodInfo> Extender::Recall(const std::string& uid) {
  std::lock_guard lock(recent_mu_);
  auto it = recent_.find(uid);
  if (it == recent_.end()) return std::nullopt;
  return it->second;
}

VerbReply Extender::Filter(std::string_view body) {
  std::string error;
  auto args = DecodeArgs(body, state_->gpu_mem_unit_mib(), &error);
  if (!args) return BadRequest(error);
  Remember(args->pod);
  if (args->pod.wants_gpu() && !state_->synced()) {
    // Not "unresolvable" (that would skip preemption for this cycle): an error, which
    // kube-scheduler treats as a scheduling error and retries with backoff; the requeuer also
    // nudges the pod once the state has synced.
    if (options_.requeuer != nullptr) {
      options_.requeuer->TurnedAway(args->pod.ns, args->pod.name, args->pod.uid);
    }
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
  const std::vector<NodeVerdict> verdicts = state_->Evaluate(args->pod, args->names);
  // The reply is written by hand: at 5,000 nodes building a json tree first costs more than
  // the placement work itself.
  std::string passed, failed, unresolvable;
  passed.reserve(args->full_nodes ? body.size() : args->names.size() * 24);
  int passing = 0;
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    const NodeVerdict& v = verdicts[i];
    if (v.kind == NodeVerdict::Kind::kFits) {
      if (passing++ > 0) passed += ',';
      passed += args->full_nodes ? args->node_raw[i] : args->name_tokens[i];
      continue;
    }
    // kUnknownNode is retriable (FailedNodes): the node may be new and the watch behind.
    std::string& target = v.kind == NodeVerdict::Kind::kUnresolvable ? unresolvable : failed;
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
    if (options_.requeuer != nullptr && args->pod.wants_gpu()) {
      options_.requeuer->TurnedAway(args->pod.ns, args->pod.name, args->pod.uid);
    }
  }
  return reply;
}

VerbReply Extender::Prioritize(std::string_view body) {
  std::string error;
  auto args = DecodeArgs(body, state_->gpu_mem_unit_mib(), &error);
  if (!args) return BadRequest(error);
  Remember(args->pod);
  std::vector<int> scores(args->names.size(), 0);
  if (args->pod.wants_gpu()) {
    scores = ExtenderScores(
        state_->Evaluate(args->pod, args->names, ClusterState::Reasons::kSkip));
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

VerbReply Extender::Bind(std::string_view body) {
  std::string error;
  auto doc = ParseObject(body, &error);
  if (!doc) return BadRequest(error);
  auto field = [&](const char* key) -> std::optional<std::string> {
    const json* v = JsonChild(*doc, key);
    if (v == nullptr || !v->is_string() || v->get_ref<const std::string&>().empty()) {
      return std::nullopt;
    }
    return v->get<std::string>();
  };
  const auto name = field("PodName"), ns = field("PodNamespace"), uid = field("PodUID"),
             node = field("Node");
  if (!name || !ns || !uid || !node) {
    return BadRequest("bind needs non-empty strings PodName, PodNamespace, PodUID and Node");
  }
  auto fail = [](std::string label, const std::string& message) {
    return VerbReply{200, json{{"Error", message}}.dump(), std::move(label), 0};
  };
  if (api_ == nullptr) {
    return fail("no_api", "gpumux extender runs without an API server (--offline-nodes) and "
                          "cannot bind pods");
  }
  if (!state_->synced()) {
    // Until both pods and nodes are listed, grants made before a restart are not all known.
    return fail("not_synced", "gpumux extender has not synced with the API server yet");
  }
  std::optional<PodInfo> pod = Recall(*uid);
  if (!pod) pod = state_->FindPod(*uid);
  if (!pod) {
    // Neither filter nor the watch has shown us this pod yet: ask the API server.
    auto got = api_->Get("/api/v1/namespaces/" + *ns + "/pods/" + *name);
    if (!got) return fail("api_error", "reading pod " + *ns + "/" + *name + ": " + got.error().ToString());
    auto decoded = DecodePod(*got, state_->gpu_mem_unit_mib());
    if (!decoded) return fail("api_error", decoded.error().message);
    pod = std::move(*decoded);
  }
  if (pod->uid != *uid) {
    return fail("conflict", "pod " + *ns + "/" + *name + " has uid " + pod->uid + ", not " + *uid);
  }
  if (!pod->wants_gpu()) {
    // Nothing to grant (kube-scheduler only sends pods with a managed resource, but be exact).
    auto bound = CreateBinding(*api_, *ns, *name, *uid, *node);
    if (!bound) return fail("api_error", "binding: " + bound.error().ToString());
    return VerbReply{200, R"({"Error":""})", "", 1};
  }
  auto grant = state_->Assume(*pod, *node);
  if (!grant) return fail("no_fit", grant.error().message);
  // The node lock: on nodes whose device plugin announces the handshake, this pod becomes the
  // one whose devices the kubelet allocates next there (node_lock.h).
  NodeLock lock;
  lock.ns = *ns;
  lock.name = *name;
  lock.uid = *uid;
  lock.since = state_->Now();
  AcquireOptions acquire;
  acquire.ttl_seconds = options_.node_lock_ttl_seconds;
  acquire.attempts = options_.node_lock_attempts;
  ClusterState* state = state_;
  acquire.holder_state = [state, node](const NodeLock& held) {
    // From the extender's own watch of pods (synced before any bind). A holder asks for GPUs,
    // so the state follows it until it is deleted: not known means gone.
    if (!state->PodAwaitsDevices(held.uid)) return HolderState::kDone;
    const std::optional<PodInfo> holder = state->FindPod(held.uid);
    if (!holder) return HolderState::kDone;
    if (holder->node_name.empty()) return HolderState::kUnknown;
    return holder->node_name == *node ? HolderState::kNeedsDevices : HolderState::kDone;
  };
  // While another pod holds the lock, keep the booking and wait for the watch to show the lock
  // released (the device plugin removes it once that pod's devices are allocated), then try
  // again: bouncing the pod would send it into kube-scheduler's 1 -> 10 s backoff.
  const auto deadline = std::chrono::steady_clock::now() + options_.bind_wait;
  bool waiting = false;
  struct WaitSlot {
    std::atomic<int>* count = nullptr;
    ~WaitSlot() {
      if (count != nullptr) count->fetch_sub(1);
    }
  } slot;
  ApiResult<AcquireResult> acquired = AcquireResult{};
  for (;;) {
    acquired = AcquireNodeLock(*api_, *node, lock, lock.since, acquire);
    if (!acquired || (acquired->outcome != AcquireOutcome::kBusy &&
                      acquired->outcome != AcquireOutcome::kNotReady)) {
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (!waiting) {
      if (waiting_binds_.fetch_add(1) >= options_.max_waiting_binds) {
        waiting_binds_.fetch_sub(1);
        break;
      }
      slot.count = &waiting_binds_;
      waiting = true;
    }
    const auto until = std::min(deadline, now + options_.bind_poll);
    if (options_.lock_board != nullptr && acquired->outcome == AcquireOutcome::kBusy &&
        acquired->holder) {
      options_.lock_board->WaitUntilNotHeldBy(*node, acquired->holder->uid, until);
      // The watch may show the lock released a moment before a fresh read does, or not show
      // it held at all (the watch behind): never re-read the node in a tight loop.
      std::this_thread::sleep_until(std::min(until, now + kMinLockRetry));
    } else {
      std::this_thread::sleep_until(until);
    }
    lock.since = state_->Now();
  }
  if (!acquired) {
    state_->Forget(*uid, *grant);
    std::string message = "taking the node lock (";
    message += kAnnotationAllocating;
    message += ") on ";
    message += *node;
    message += ": ";
    message += acquired.error().ToString();
    return fail(acquired.error().http_status == 409 ? "conflict" : "api_error", message);
  }
  if (acquired->outcome == AcquireOutcome::kNotReady) {
    state_->Forget(*uid, *grant);
    return fail("plugin_not_ready", acquired->message + "; " + *ns + "/" + *name +
                                        " will be retried once it is ready");
  }
  if (acquired->outcome == AcquireOutcome::kBusy) {
    state_->Forget(*uid, *grant);
    return fail("node_busy", acquired->message +
                                 "; gpumux binds one pod at a time to a node until its device "
                                 "plugin has served it, so " +
                                 *ns + "/" + *name + " will be retried");
  }
  if (!acquired->message.empty() && options_.log) {
    options_.log("bind " + *ns + "/" + *name + " on " + *node + ": " + acquired->message);
  }
  // Release only a lock this bind took: a re-entered one may belong to an earlier bind of the
  // same pod that succeeded.
  const bool release_on_failure =
      acquired->outcome == AcquireOutcome::kTaken && !acquired->reentered;
  auto undo = [&] {
    if (!release_on_failure) return state_->Forget(*uid, *grant);
    auto released = ReleaseNodeLock(*api_, *node, *uid, options_.node_lock_attempts);
    if (!released && options_.log) {
      options_.log("bind " + *ns + "/" + *name + " failed and its node lock on " + *node +
                   " could not be released (it goes stale after " +
                   std::to_string(options_.node_lock_ttl_seconds) +
                   " s): " + released.error().ToString());
    }
    state_->Forget(*uid, *grant);
  };
  auto patched = PatchPodAnnotations(*api_, *ns, *name, *uid,
                                     json{{std::string(kAnnotationGrant), EncodeGrant(*grant)}});
  if (!patched) {
    // Read back rather than guess. No Binding was sent by this bind, so unless the pod shows
    // up bound with this very grant, it does not hold these GPUs: they are given back.
    const PodReadBack seen =
        ReadPodBack(*api_, *ns, *name, *uid, *node, *grant, state_->gpu_mem_unit_mib());
    if (seen.outcome == BindOutcome::kBound) {
      state_->ConfirmBound(*uid, *grant);
      return VerbReply{200, R"({"Error":""})", "", 1};
    }
    undo();
    return fail(patched.error().http_status == 409 ? "conflict" : "api_error",
                "writing the grant annotation: " + patched.error().ToString() +
                    " (read back: " + seen.detail + ")");
  }
  if (!state_->BeginBinding(*uid, *grant)) {
    undo();
    return fail("conflict", "the GPUs booked for pod " + *ns + "/" + *name + " on " + *node +
                                " were given to a pod seen bound there, or the booking expired; "
                                "not binding it, so that nothing is granted twice");
  }
  auto bound = CreateBinding(*api_, *ns, *name, *uid, *node);
  if (bound) {
    state_->ConfirmBound(*uid, *grant);
    return VerbReply{200, R"({"Error":""})", "", 1};
  }
  // The Binding may have been applied although its answer says otherwise (a timeout, a 5xx
  // after the commit): never guess, read the pod back.
  const std::string label = bound.error().http_status == 409 ? "conflict" : "api_error";
  const PodReadBack seen =
      ReadPodBack(*api_, *ns, *name, *uid, *node, *grant, state_->gpu_mem_unit_mib());
  switch (seen.outcome) {
    case BindOutcome::kBound:
      state_->ConfirmBound(*uid, *grant);
      if (options_.log) {
        options_.log("bind " + *ns + "/" + *name + " on " + *node + ": the Binding answered " +
                     bound.error().ToString() + ", but " + seen.detail + ": bound");
      }
      return VerbReply{200, R"({"Error":""})", "", 1};
    case BindOutcome::kNotBound:
      undo();
      return fail(label,
                  "binding: " + bound.error().ToString() + " (read back: " + seen.detail + ")");
    case BindOutcome::kUnknown:
      break;
  }
  if (!MayHaveBeenApplied(bound.error())) {
    undo();  // refused by the API server: not applied
    return fail(label, "binding: " + bound.error().ToString() + " (" + seen.detail + ")");
  }
  // The pod may be bound: keep its GPUs booked (binding) and the node lock; the watch settles
  // it (bound), or the booking expires with its TTL if the pod is never seen bound.
  return fail("api_error", "binding: " + bound.error().ToString() + "; its outcome is unknown (" +
                               seen.detail + "), so the GPUs on " + *node + " stay booked for " +
                               *ns + "/" + *name +
                               " until the API server shows it bound or the booking expires");
}

VerbReply Extender::Preempt(std::string_view body) {
  std::string error;
  auto doc = ParseObject(body, &error);
  if (!doc) return BadRequest(error);
  const json* pod_json = JsonChild(*doc, "Pod");
  if (pod_json == nullptr || !pod_json->is_object()) return BadRequest("\"Pod\" is missing or not an object");
  auto pod = DecodePod(*pod_json, state_->gpu_mem_unit_mib());
  if (!pod) return BadRequest("\"Pod\": " + pod.error().message);
  // Victims per node, as UIDs, from either form.
  std::map<std::string, std::pair<std::vector<std::string>, std::int64_t>> victims;
  const json* meta = JsonChild(*doc, "NodeNameToMetaVictims");
  const json* full = JsonChild(*doc, "NodeNameToVictims");
  const json* source = meta != nullptr ? meta : full;
  if (source != nullptr) {
    if (!source->is_object()) return BadRequest("victims must be an object keyed by node name");
    for (const auto& [node, entry] : source->items()) {
      const json* pods = JsonChild(entry, "Pods");
      if (!entry.is_object() || (pods != nullptr && !pods->is_array())) {
        return BadRequest("victims of node " + node + " must be {\"Pods\":[...]}");
      }
      auto& [uids, pdb] = victims[node];
      if (const json* v = JsonChild(entry, "NumPDBViolations"); v != nullptr && v->is_number_integer()) {
        pdb = v->get<std::int64_t>();
      }
      if (pods == nullptr) continue;
      for (const json& p : *pods) {
        const json* uid = JsonChild(p, "UID");
        if (uid == nullptr) {
          const json* metadata = JsonChild(p, "metadata");
          uid = metadata != nullptr ? JsonChild(*metadata, "uid") : nullptr;
        }
        if (uid == nullptr || !uid->is_string()) {
          return BadRequest("a victim on node " + node + " has no UID");
        }
        uids.push_back(uid->get<std::string>());
      }
    }
  }
  json out = json::object();
  for (const auto& [node, entry] : victims) {
    const auto& [uids, pdb] = entry;
    if (!state_->FitsWithout(*pod, node, uids)) continue;
    json pods = json::array();
    for (const std::string& uid : uids) pods.push_back({{"UID", uid}});
    out[node] = {{"Pods", std::move(pods)}, {"NumPDBViolations", pdb}};
  }
  return VerbReply{200, json{{"NodeNameToMetaVictims", std::move(out)}}.dump(), "", 0};
}

}  // namespace gpumux::k8s
