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

namespace gpumux::extender {
namespace {

using nlohmann::json;

constexpr std::size_t kRecentPods = 4096;
// The least time between two reads of a busy node's lock by one bind.
constexpr std::chrono::milliseconds kMinLockRetry{20};

VerbReply BadRequest(const std::string& message) {
  // `replace`: a message may quote a name cut short in the middle of a UTF-8 sequence.
  return VerbReply{400,
                   json{{"Error", message}}.dump(-1, ' ', false, json::error_handler_t::replace),
                   "bad_request", 0};
}

// `text` as a JSON string for a message, cut to 100 bytes: names in messages come from the
// client and may be anything.
std::string Quoted(std::string_view text) {
  constexpr std::size_t kMax = 100;
  std::string out =
      json(std::string(text.substr(0, kMax))).dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMax) out += "...";
  return out;
}

// Parses a body that must be one JSON object without repeated keys (nlohmann would keep the
// last silently; kube-scheduler, which marshals Go structs and maps, never repeats one); a
// message naming the problem otherwise.
std::optional<json> ParseObject(std::string_view body, std::string* error) {
  if (body.empty()) {
    *error = "empty body: expected a JSON object";
    return std::nullopt;
  }
  struct Open {
    std::set<std::string> keys;
    std::string last;  // the key being read, for the path in a message
  };
  std::vector<Open> open;
  std::string repeated;
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (event == json::parse_event_t::object_end && !open.empty()) {
      open.pop_back();
    } else if (event == json::parse_event_t::key && !open.empty() && repeated.empty()) {
      std::string key = parsed.get<std::string>();
      if (!open.back().keys.insert(key).second) {
        std::string where;
        for (std::size_t i = 0; i + 1 < open.size(); ++i)
          where += (i > 0 ? "." : "") + open[i].last;
        repeated = "key " + Quoted(key) + " appears twice" +
                   (where.empty() ? std::string() : " in " + Quoted(where));
      }
      open.back().last = std::move(key);
    }
    return true;
  };
  json doc = json::parse(body, check, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *error = "body is not valid JSON";
    return std::nullopt;
  }
  if (!doc.is_object()) {
    *error = std::string("body must be a JSON object, not ") + doc.type_name();
    return std::nullopt;
  }
  if (!repeated.empty()) {
    *error = repeated;
    return std::nullopt;
  }
  return doc;
}

}  // namespace

// simdjson parsers for the filter and prioritize bodies. A parser keeps buffers of about five
// times the largest body it has read; one per thread (as before) kept them in every thread
// that had served a large body, and the server runs a thread per connection: 150,000-name
// bodies of a flood (2.5 MB) left ~13 MB in each. The pool keeps at most kPooledParsers, none
// sized for more than kPooledParserBytes; a request takes one and gives it back. Thread-safe.
class VerbParserPool {
 public:
  static constexpr std::size_t kPooledParsers = 4;
  // A 5,000-node NodeList (nodeCacheCapable: false) is ~15 MB.
  static constexpr std::size_t kPooledParserBytes = std::size_t{16} << 20;

  std::unique_ptr<simdjson::ondemand::parser> Take() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        auto parser = std::move(idle_.back());
        idle_.pop_back();
        return parser;
      }
    }
    return std::make_unique<simdjson::ondemand::parser>();
  }
  void Give(std::unique_ptr<simdjson::ondemand::parser> parser) {
    if (parser == nullptr || parser->capacity() > kPooledParserBytes) return;
    std::lock_guard lock(mu_);
    if (idle_.size() < kPooledParsers) idle_.push_back(std::move(parser));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<simdjson::ondemand::parser>> idle_;
};

namespace {

// ExtenderArgs: the pod and the candidate nodes (NodeNames, or the items of Nodes).
// Parsed with simdjson's on-demand API: at 5,000 nodes the body is ~60 KB of names (nlohmann
// takes over a millisecond for it; simdjson tens of microseconds). Only the pod object is
// handed to nlohmann (DecodePod), and in the full-NodeList mode each item is kept as raw JSON
// text so that the reply can echo the passing nodes without re-serialising them.
struct ExtenderArgs {
  explicit ExtenderArgs(VerbParserPool& from) : pool(&from), parser(from.Take()) {}
  ~ExtenderArgs() { pool->Give(std::move(parser)); }
  ExtenderArgs(const ExtenderArgs&) = delete;
  ExtenderArgs& operator=(const ExtenderArgs&) = delete;

  VerbParserPool* pool;
  std::unique_ptr<simdjson::ondemand::parser> parser;  // taken from `pool`; holds the names
  kube::PodInfo pod;
  // Candidate names (unescaped) and, for the reply, each name as the JSON string token it was
  // sent as (already quoted and escaped). Views into `padded`, `parser`'s string buffer or
  // `owned`; valid while this object lives.
  std::vector<std::string_view> names;
  std::vector<std::string_view> name_tokens;
  // Full-NodeList mode (`Nodes` given): each item's JSON text, index for index with `names`.
  std::vector<std::string_view> node_raw;
  std::deque<std::string> owned;  // names and tokens made here (full-NodeList mode)
  bool full_nodes = false;
  simdjson::padded_string padded;  // the body
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
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

namespace sj = simdjson::ondemand;

// An item of Nodes.items: its metadata.name, or an error saying what is wrong. The item goes
// back to kube-scheduler as it came, so it is parsed whole (the on-demand parser does not check
// the parts it skips: found by fuzz/extender_verbs) and the name read from that parse.
std::optional<std::string> NodeNameOf(std::string_view raw, std::string* error) {
  // Items are a few KB: one parser per thread, but not for an outsized item (its buffers would
  // stay with the thread).
  constexpr std::size_t kThreadParserBytes = std::size_t{64} << 10;
  thread_local simdjson::dom::parser thread_parser;
  simdjson::dom::parser own_parser;
  simdjson::dom::parser& parser = raw.size() <= kThreadParserBytes ? thread_parser : own_parser;
  const simdjson::padded_string padded(raw);
  simdjson::dom::element whole;
  if (parser.parse(padded).get(whole) != simdjson::SUCCESS) {
    *error = "is not valid JSON";
    return std::nullopt;
  }
  simdjson::dom::object metadata;
  std::string_view value;
  if (whole["metadata"].get(metadata) != simdjson::SUCCESS) {
    *error = "has no metadata object";
    return std::nullopt;
  }
  if (metadata["name"].get(value) != simdjson::SUCCESS) {
    *error = "has no metadata.name string";
    return std::nullopt;
  }
  if (value.empty()) {
    *error = "has an empty metadata.name";
    return std::nullopt;
  }
  return std::string(value);
}

bool IsNull(sj::value& v) {
  sj::json_type type;
  return v.type().get(type) == simdjson::SUCCESS && type == sj::json_type::null;
}

// The first name that occurs twice in `names`, if any. O(n): linear probing over indices
// (a node-based set would allocate once per name; this runs on every filter).
std::optional<std::string_view> FindRepeated(const std::vector<std::string_view>& names) {
  if (names.size() < 2) return std::nullopt;
  std::size_t capacity = 4;
  while (capacity < names.size() * 2) capacity <<= 1;
  std::vector<std::uint32_t> slots(capacity, 0);  // index + 1; 0: empty
  const std::hash<std::string_view> hash;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::size_t at = hash(names[i]) & (capacity - 1);
    for (; slots[at] != 0; at = (at + 1) & (capacity - 1)) {
      if (names[slots[at] - 1] == names[i]) return names[i];
    }
    slots[at] = static_cast<std::uint32_t>(i + 1);
  }
  return std::nullopt;
}

std::string TooManyNodes(const char* field) {
  return std::string(field) + " lists more than " + std::to_string(kMaxNodesPerRequest) +
         " nodes (the extender's limit per request)";
}

// NodeNames: an array of non-empty strings (or null).
bool DecodeNodeNames(sj::value& value, ExtenderArgs& args, std::string* error) {
  sj::array names;
  if (value.get_array().get(names) != simdjson::SUCCESS) {
    *error = "\"NodeNames\" must be an array of strings or null";
    return false;
  }
  for (auto item_result : names) {
    sj::value item;
    std::string_view name;
    if (std::move(item_result).get(item) != simdjson::SUCCESS) {
      *error = "\"NodeNames\" is not valid JSON";
      return false;
    }
    const std::size_t index = args.names.size();
    if (index == kMaxNodesPerRequest) {
      *error = TooManyNodes("\"NodeNames\"");
      return false;
    }
    std::string_view token = item.raw_json_token();
    if (item.get_string().get(name) != simdjson::SUCCESS) {
      *error = "\"NodeNames\"[" + std::to_string(index) + "] must be a string";
      return false;
    }
    if (name.empty()) {
      *error = "\"NodeNames\"[" + std::to_string(index) + "] is an empty string";
      return false;
    }
    while (!token.empty() && token.back() != '"') token.remove_suffix(1);
    args.names.push_back(name);
    args.name_tokens.push_back(token);
  }
  return true;
}

// Nodes: a v1.NodeList, i.e. an object whose "items" is an array of nodes (or null: none).
bool DecodeNodeList(sj::value& value, ExtenderArgs& args, std::string* error) {
  sj::object list;
  if (value.get_object().get(list) != simdjson::SUCCESS) {
    *error = "\"Nodes\" must be a v1.NodeList (an object with \"items\") or null";
    return false;
  }
  bool have_items = false;
  for (auto list_field : list) {
    sj::field lf;
    std::string_view list_key;
    if (std::move(list_field).get(lf) != simdjson::SUCCESS ||
        lf.unescaped_key().get(list_key) != simdjson::SUCCESS) {
      *error = "\"Nodes\" is not valid JSON";
      return false;
    }
    if (list_key != "items") continue;
    if (have_items) {
      *error = "\"Nodes\" has \"items\" twice";
      return false;
    }
    have_items = true;
    sj::value items_value = lf.value();
    if (IsNull(items_value)) continue;
    sj::array items;
    if (items_value.get_array().get(items) != simdjson::SUCCESS) {
      *error = "\"Nodes\".items must be an array of nodes";
      return false;
    }
    for (auto item : items) {
      const std::string where = "\"Nodes\".items[" + std::to_string(args.names.size()) + "]";
      if (args.node_raw.size() == kMaxNodesPerRequest) {
        *error = TooManyNodes("\"Nodes\".items");
        return false;
      }
      sj::object node;
      std::string_view raw;
      if (item.get_object().get(node) != simdjson::SUCCESS ||
          node.raw_json().get(raw) != simdjson::SUCCESS) {
        *error = where + " must be an object (a v1.Node)";
        return false;
      }
      std::string why;
      std::optional<std::string> name = NodeNameOf(raw, &why);
      if (!name) {
        *error = where + " " + why;
        return false;
      }
      const std::string& owned_name = args.owned.emplace_back(std::move(*name));
      std::string& token = args.owned.emplace_back();
      AppendJsonString(token, owned_name);
      args.names.push_back(owned_name);
      args.name_tokens.push_back(token);
      args.node_raw.push_back(raw);
    }
  }
  if (!have_items) {
    *error = "\"Nodes\" has no \"items\" (expected a v1.NodeList)";
    return false;
  }
  args.full_nodes = true;
  return true;
}

std::unique_ptr<ExtenderArgs> DecodeArgs(std::string_view body, std::int64_t gpu_mem_unit_mib,
                                         VerbParserPool& parsers, std::string* error) {
  auto args = std::make_unique<ExtenderArgs>(parsers);
  if (body.empty()) {
    *error = "empty body: expected a JSON object";
    return nullptr;
  }
  args->padded = simdjson::padded_string(body);
  // A node-cache body is mostly names of ~15 bytes each: reserve once instead of regrowing.
  const std::size_t expected = std::min(body.size() / 16, kMaxNodesPerRequest);
  args->names.reserve(expected);
  args->name_tokens.reserve(expected);
  sj::document doc;
  sj::object root;
  if (args->parser->iterate(args->padded).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(root) != simdjson::SUCCESS) {
    *error = "body is not valid JSON or not a JSON object";
    return nullptr;
  }
  bool have_pod = false, have_names = false, have_nodes = false;
  bool names_given = false, nodes_given = false;  // and not null
  for (auto field_result : root) {
    sj::field field;
    std::string_view key;
    if (std::move(field_result).get(field) != simdjson::SUCCESS ||
        field.unescaped_key().get(key) != simdjson::SUCCESS) {
      *error = "body is not valid JSON";
      return nullptr;
    }
    sj::value value = field.value();
    bool* seen = key == "Pod"         ? &have_pod
                 : key == "NodeNames" ? &have_names
                 : key == "Nodes"     ? &have_nodes
                                      : nullptr;
    if (seen == nullptr) continue;  // fields of newer kube-schedulers
    if (*seen) {
      *error = "\"" + std::string(key) + "\" appears twice";
      return nullptr;
    }
    *seen = true;
    if (key == "Pod") {
      sj::object pod;
      std::string_view raw;
      if (value.get_object().get(pod) != simdjson::SUCCESS) {
        *error = "\"Pod\" must be an object";
        return nullptr;
      }
      if (pod.raw_json().get(raw) != simdjson::SUCCESS) {
        *error = "\"Pod\" is not valid JSON";
        return nullptr;
      }
      const json parsed = json::parse(raw, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        *error = "\"Pod\" is not valid JSON";
        return nullptr;
      }
      auto decoded = kube::DecodePod(parsed, gpu_mem_unit_mib);
      if (!decoded) {
        *error = "\"Pod\": " + decoded.error().message;
        return nullptr;
      }
      args->pod = std::move(*decoded);
    } else if (IsNull(value)) {
      continue;
    } else if (key == "NodeNames") {
      if (!DecodeNodeNames(value, *args, error)) return nullptr;
      names_given = true;
    } else {
      if (!DecodeNodeList(value, *args, error)) return nullptr;
      nodes_given = true;
    }
  }
  // The on-demand parser reads only what is asked for: make sure nothing follows the object.
  if (const char* rest = nullptr; doc.current_location().get(rest) == simdjson::SUCCESS) {
    *error = "body is not valid JSON: more follows the object";
    return nullptr;
  }
  if (!have_pod) {
    *error = "\"Pod\" is missing";
    return nullptr;
  }
  if (names_given && nodes_given) {
    // kube-scheduler sends exactly one: NodeNames when the extender is nodeCacheCapable, else
    // Nodes. Both could name different nodes: which would the reply be about?
    *error =
        "both \"NodeNames\" and \"Nodes\" are given: expected \"NodeNames\" "
        "(nodeCacheCapable: true) or \"Nodes\" (a v1.NodeList), not both";
    return nullptr;
  }
  if (!names_given && !nodes_given) {
    *error =
        "no candidate nodes: expected \"NodeNames\" (nodeCacheCapable: true) or \"Nodes\" "
        "(a v1.NodeList)";
    return nullptr;
  }
  if (auto repeated = FindRepeated(args->names)) {
    *error = std::string(names_given ? "\"NodeNames\"" : "\"Nodes\".items") + " names node " +
             Quoted(*repeated) + " twice";
    return nullptr;
  }
  return args;
}

enum class NameKind : std::uint8_t { kSubdomain, kLabel, kUid };

// Kubernetes' names: a DNS-1123 subdomain (pods, nodes: lowercase letters, digits, '-' and '.',
// at most 253, starting and ending with a letter or digit) or label (namespaces: no '.', at most
// 63); a UID is a UUID, here any of letters, digits, '-', '_', '.', ':' up to 128.
bool IsValidName(std::string_view s, NameKind kind) {
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (kind == NameKind::kUid) {
    return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '-' || c == '_' || c == '.' || c == ':';
    });
  }
  const std::size_t max = kind == NameKind::kLabel ? 63 : 253;
  if (s.empty() || s.size() > max || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return alnum(c) || c == '-' || (c == '.' && kind == NameKind::kSubdomain);
  });
}

// A bind field: present, a string, and a valid name of its kind; else nullopt and *error says
// which field and why.
std::optional<std::string> BindField(const json& doc, const char* key, NameKind kind,
                                     std::string* error) {
  const json* v = kube::JsonChild(doc, key);
  const std::string field = std::string("\"") + key + "\"";
  if (v == nullptr) {
    *error = field + " is missing (bind needs PodName, PodNamespace, PodUID and Node)";
    return std::nullopt;
  }
  if (!v->is_string()) {
    *error = field + " must be a string, not " + v->type_name();
    return std::nullopt;
  }
  const auto& text = v->get_ref<const std::string&>();
  if (!IsValidName(text, kind)) {
    *error = field + " " + Quoted(text) + " is not a valid " +
             (kind == NameKind::kUid     ? "UID (letters, digits, '-', '_', '.', ':'; at most 128)"
              : kind == NameKind::kLabel ? "namespace (a DNS-1123 label: lowercase letters, "
                                           "digits and '-', at most 63)"
                                         : "name (a DNS-1123 subdomain: lowercase letters, digits, "
                                           "'-' and '.', at most 253)");
    return std::nullopt;
  }
  return text;
}

// Maps raw policy scores of the fitting nodes linearly onto 0..10 (kube-scheduler's
// MaxExtenderPriority): the best node gets 10, the worst 0; all equal -> all 10.
std::vector<int> ExtenderScores(const std::vector<sched::NodeVerdict>& verdicts) {
  std::int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const sched::NodeVerdict& v : verdicts) {
    if (v.kind != sched::NodeVerdict::Kind::kFits) continue;
    lo = std::min(lo, v.score);
    hi = std::max(hi, v.score);
  }
  std::vector<int> out(verdicts.size(), 0);
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    if (verdicts[i].kind != sched::NodeVerdict::Kind::kFits) continue;
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
bool MayHaveBeenApplied(const kube::ApiError& error) {
  return error.http_status == 0 || error.http_status == 408 || error.http_status >= 500;
}

enum class BindOutcome : std::uint8_t { kBound, kNotBound, kUnknown };

struct PodReadBack {
  BindOutcome outcome = BindOutcome::kUnknown;
  std::string detail;  // what was seen, for humans
};

// Reads the pod back after an ambiguous answer: bound to `node` with `grant`, not (pending,
// bound elsewhere or with another grant, replaced, gone), or unknown (the read failed).
PodReadBack ReadPodBack(kube::KubeApi& api, const std::string& ns, const std::string& name,
                        const std::string& uid, const std::string& node, const kube::Grant& grant,
                        std::int64_t gpu_mem_unit_mib) {
  auto got = api.Get("/api/v1/namespaces/" + ns + "/pods/" + name);
  if (!got) {
    if (got.error().http_status == 404) return {BindOutcome::kNotBound, "the pod is gone"};
    return {BindOutcome::kUnknown, "reading the pod back failed: " + got.error().ToString()};
  }
  auto pod = kube::DecodePod(*got, gpu_mem_unit_mib);
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

// Which pod bind puts on which node. The names go into API paths
// (/api/v1/namespaces/NS/pods/NAME, /api/v1/nodes/NODE): each is what Kubernetes allows for it,
// so that no body can aim a request elsewhere.
struct Extender::BindTarget {
  std::string ns, name, uid, node;
  std::string Key() const { return ns + "/" + name; }
};

namespace {

VerbReply BindFailed(std::string label, const std::string& message) {
  return VerbReply{200, json{{"Error", message}}.dump(), std::move(label), 0};
}
VerbReply BindDone() { return VerbReply{200, R"({"Error":""})", "", 1}; }

}  // namespace

VerbReply Extender::Bind(std::string_view body) {
  auto target = BindTargetOf(body);
  if (!target) return std::move(target.error());
  auto pod = PodToBind(*target);
  if (!pod) return std::move(pod.error());
  if (!pod->wants_gpu()) {
    // Nothing to grant (kube-scheduler only sends pods with a managed resource, but be exact).
    auto bound = kube::CreateBinding(*api_, target->ns, target->name, target->uid, target->node);
    if (!bound) return BindFailed("api_error", "binding: " + bound.error().ToString());
    return BindDone();
  }
  auto grant = state_->Assume(*pod, target->node);
  if (!grant) return BindFailed("no_fit", grant.error().message);
  auto lock = TakeNodeLock(*target, *grant);
  if (!lock) return std::move(lock.error());
  if (!lock->message.empty()) {
    options_.log.Info("bind " + target->Key() + " on " + target->node + ": " + lock->message);
  }
  // Release only a lock this bind took: a re-entered one may belong to an earlier bind of the
  // same pod that succeeded.
  return WriteGrantAndBind(*target, *grant,
                           lock->outcome == kube::AcquireOutcome::kTaken && !lock->reentered);
}

tl::expected<Extender::BindTarget, VerbReply> Extender::BindTargetOf(std::string_view body) const {
  std::string error;
  auto doc = ParseObject(body, &error);
  if (!doc) return tl::unexpected(BadRequest(error));
  const auto name = BindField(*doc, "PodName", NameKind::kSubdomain, &error);
  const auto ns = name ? BindField(*doc, "PodNamespace", NameKind::kLabel, &error) : std::nullopt;
  const auto uid = ns ? BindField(*doc, "PodUID", NameKind::kUid, &error) : std::nullopt;
  const auto node = uid ? BindField(*doc, "Node", NameKind::kSubdomain, &error) : std::nullopt;
  if (!node) return tl::unexpected(BadRequest(error));
  if (api_ == nullptr) {
    return tl::unexpected(BindFailed("no_api",
                                     "gpumux extender runs without an API server "
                                     "(--offline-nodes) and cannot bind pods"));
  }
  if (!state_->synced()) {
    // Until both pods and nodes are listed, grants made before a restart are not all known.
    return tl::unexpected(
        BindFailed("not_synced", "gpumux extender has not synced with the API server yet"));
  }
  return BindTarget{*ns, *name, *uid, *node};
}

tl::expected<kube::PodInfo, VerbReply> Extender::PodToBind(const BindTarget& target) {
  std::optional<kube::PodInfo> pod = Recall(target.uid);
  if (!pod) pod = state_->FindPod(target.uid);
  if (!pod) {
    // Neither filter nor the watch has shown us this pod yet: ask the API server.
    auto got = api_->Get("/api/v1/namespaces/" + target.ns + "/pods/" + target.name);
    if (!got) {
      return tl::unexpected(
          BindFailed("api_error", "reading pod " + target.Key() + ": " + got.error().ToString()));
    }
    auto decoded = kube::DecodePod(*got, state_->gpu_mem_unit_mib());
    if (!decoded) return tl::unexpected(BindFailed("api_error", decoded.error().message));
    pod = std::move(*decoded);
  }
  if (pod->uid != target.uid) {
    return tl::unexpected(BindFailed(
        "conflict", "pod " + target.Key() + " has uid " + pod->uid + ", not " + target.uid));
  }
  return *pod;
}

// The node lock: on nodes whose device plugin announces the handshake, this pod becomes the one
// whose devices the kubelet allocates next there (node_lock.h). While another pod holds it, the
// booking is kept and the bind waits (at most bind_wait) for the watch to show the lock
// released, then tries again: bouncing the pod would send it into kube-scheduler's 1 -> 10 s
// backoff. Any failure gives the booking back.
tl::expected<kube::AcquireResult, VerbReply> Extender::TakeNodeLock(const BindTarget& target,
                                                                    const kube::Grant& grant) {
  kube::NodeLock lock;
  lock.ns = target.ns;
  lock.name = target.name;
  lock.uid = target.uid;
  lock.since = state_->Now();
  kube::AcquireOptions acquire;
  acquire.ttl_seconds = options_.node_lock_ttl_seconds;
  acquire.attempts = options_.node_lock_attempts;
  sched::ClusterState* state = state_;
  acquire.holder_state = [state, node = target.node](const kube::NodeLock& held) {
    // From the extender's own watch of pods (synced before any bind). A holder asks for GPUs,
    // so the state follows it until it is deleted: not known means gone.
    if (!state->PodAwaitsDevices(held.uid)) return kube::HolderState::kDone;
    const std::optional<kube::PodInfo> holder = state->FindPod(held.uid);
    if (!holder) return kube::HolderState::kDone;
    if (holder->node_name.empty()) return kube::HolderState::kUnknown;
    return holder->node_name == node ? kube::HolderState::kNeedsDevices : kube::HolderState::kDone;
  };
  const auto deadline = std::chrono::steady_clock::now() + options_.bind_wait;
  struct WaitSlot {
    std::atomic<int>* count = nullptr;
    ~WaitSlot() {
      if (count != nullptr) count->fetch_sub(1);
    }
  } slot;
  kube::ApiResult<kube::AcquireResult> acquired = kube::AcquireResult{};
  for (;;) {
    acquired = kube::AcquireNodeLock(*api_, target.node, lock, lock.since, acquire);
    if (!acquired || (acquired->outcome != kube::AcquireOutcome::kBusy &&
                      acquired->outcome != kube::AcquireOutcome::kNotReady)) {
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    if (slot.count == nullptr) {  // a waiting bind from now on, within max_waiting_binds
      if (waiting_binds_.fetch_add(1) >= options_.max_waiting_binds) {
        waiting_binds_.fetch_sub(1);
        break;
      }
      slot.count = &waiting_binds_;
    }
    const auto until = std::min(deadline, now + options_.bind_poll);
    if (options_.lock_board != nullptr && acquired->outcome == kube::AcquireOutcome::kBusy &&
        acquired->holder) {
      options_.lock_board->WaitUntilNotHeldBy(target.node, acquired->holder->uid, until);
      // The watch may show the lock released a moment before a fresh read does, or not show
      // it held at all (the watch behind): never re-read the node in a tight loop.
      std::this_thread::sleep_until(std::min(until, now + kMinLockRetry));
    } else {
      std::this_thread::sleep_until(until);
    }
    lock.since = state_->Now();
  }
  if (acquired && acquired->outcome != kube::AcquireOutcome::kBusy &&
      acquired->outcome != kube::AcquireOutcome::kNotReady) {
    return *acquired;
  }
  state_->Forget(target.uid, grant);
  if (!acquired) {
    std::string message = "taking the node lock (";
    message += kube::kAnnotationAllocating;
    message += ") on " + target.node + ": " + acquired.error().ToString();
    return tl::unexpected(
        BindFailed(acquired.error().http_status == 409 ? "conflict" : "api_error", message));
  }
  if (acquired->outcome == kube::AcquireOutcome::kNotReady) {
    return tl::unexpected(BindFailed("plugin_not_ready", acquired->message + "; " + target.Key() +
                                                             " will be retried once it is ready"));
  }
  return tl::unexpected(BindFailed(
      "node_busy", acquired->message +
                       "; gpumux binds one pod at a time to a node until its device plugin has "
                       "served it, so " +
                       target.Key() + " will be retried"));
}

void Extender::Undo(const BindTarget& target, const kube::Grant& grant, bool release_lock) {
  if (release_lock) {
    auto released =
        kube::ReleaseNodeLock(*api_, target.node, target.uid, options_.node_lock_attempts);
    if (!released) {
      options_.log.Warn("bind " + target.Key() + " failed and its node lock on " + target.node +
                        " could not be released (it goes stale after " +
                        std::to_string(options_.node_lock_ttl_seconds) +
                        " s): " + released.error().ToString());
    }
  }
  state_->Forget(target.uid, grant);
}

// The grant annotation, then the Binding. A failure whose outcome is not known is read back,
// never guessed: a pod the API server shows bound with this grant holds it.
VerbReply Extender::WriteGrantAndBind(const BindTarget& target, const kube::Grant& grant,
                                      bool release_lock_on_failure) {
  auto read_back = [&] {
    return ReadPodBack(*api_, target.ns, target.name, target.uid, target.node, grant,
                       state_->gpu_mem_unit_mib());
  };
  auto patched = kube::PatchPodAnnotations(
      *api_, target.ns, target.name, target.uid,
      json{{std::string(kube::kAnnotationGrant), kube::EncodeGrant(grant)}});
  if (!patched) {
    // No Binding was sent by this bind, so unless the pod shows up bound with this very grant,
    // it does not hold these GPUs: they are given back.
    const PodReadBack seen = read_back();
    if (seen.outcome == BindOutcome::kBound) {
      state_->ConfirmBound(target.uid, grant);
      return BindDone();
    }
    Undo(target, grant, release_lock_on_failure);
    return BindFailed(patched.error().http_status == 409 ? "conflict" : "api_error",
                      "writing the grant annotation: " + patched.error().ToString() +
                          " (read back: " + seen.detail + ")");
  }
  if (!state_->BeginBinding(target.uid, grant)) {
    Undo(target, grant, release_lock_on_failure);
    return BindFailed("conflict", "the GPUs booked for pod " + target.Key() + " on " + target.node +
                                      " were given to a pod seen bound there, or the booking "
                                      "expired; not binding it, so that nothing is granted twice");
  }
  auto bound = kube::CreateBinding(*api_, target.ns, target.name, target.uid, target.node);
  if (bound) {
    state_->ConfirmBound(target.uid, grant);
    return BindDone();
  }
  // The Binding may have been applied although its answer says otherwise (a timeout, a 5xx
  // after the commit).
  const std::string label = bound.error().http_status == 409 ? "conflict" : "api_error";
  const PodReadBack seen = read_back();
  switch (seen.outcome) {
    case BindOutcome::kBound:
      state_->ConfirmBound(target.uid, grant);
      options_.log.Warn("bind " + target.Key() + " on " + target.node + ": the Binding answered " +
                        bound.error().ToString() + ", but " + seen.detail + ": bound");
      return BindDone();
    case BindOutcome::kNotBound:
      Undo(target, grant, release_lock_on_failure);
      return BindFailed(
          label, "binding: " + bound.error().ToString() + " (read back: " + seen.detail + ")");
    case BindOutcome::kUnknown:
      break;
  }
  if (!MayHaveBeenApplied(bound.error())) {
    Undo(target, grant, release_lock_on_failure);  // refused by the API server: not applied
    return BindFailed(label, "binding: " + bound.error().ToString() + " (" + seen.detail + ")");
  }
  // The pod may be bound: keep its GPUs booked (binding) and the node lock; the watch settles
  // it (bound), or the booking expires with its TTL if the pod is never seen bound.
  return BindFailed("api_error", "binding: " + bound.error().ToString() +
                                     "; its outcome is unknown (" + seen.detail +
                                     "), so the GPUs on " + target.node + " stay booked for " +
                                     target.Key() +
                                     " until the API server shows it bound or the booking "
                                     "expires");
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
  std::map<std::string, std::pair<std::vector<std::string>, std::int64_t>> victims;
  for (const auto& [node, entry] : source.items()) {
    const std::string where = field + "[" + Quoted(node) + "]";
    if (node.empty()) return BadRequest(field + " has an empty node name");
    if (!entry.is_object()) {
      return BadRequest(where + " must be an object {\"Pods\":[...],\"NumPDBViolations\":N}");
    }
    auto& [uids, pdb] = victims[node];
    if (const json* v = kube::JsonChild(entry, "NumPDBViolations"); v != nullptr) {
      if (!v->is_number_integer() || v->get<std::int64_t>() < 0) {
        return BadRequest(where + ".NumPDBViolations must be a non-negative integer");
      }
      pdb = v->get<std::int64_t>();
    }
    const json* pods = kube::JsonChild(entry, "Pods");
    if (pods == nullptr) continue;
    if (!pods->is_array()) return BadRequest(where + ".Pods must be an array");
    if (pods->size() > kMaxVictimsPerNode) {
      return BadRequest(where + ".Pods lists more than " + std::to_string(kMaxVictimsPerNode) +
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
        return BadRequest(at + " has no UID (a non-empty string in UID or metadata.uid)");
      }
      if (!seen.insert(uid->get<std::string>()).second) {
        return BadRequest(at + ": pod " + Quoted(uid->get<std::string>()) + " is listed twice");
      }
      uids.push_back(uid->get<std::string>());
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
  return VerbReply{200,
                   json{{"NodeNameToMetaVictims", std::move(out)}}.dump(
                       -1, ' ', false, json::error_handler_t::replace),
                   "", 0};
}

}  // namespace gpumux::extender
