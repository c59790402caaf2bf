#include "src/extender/verb_args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "gpumux/core/json.h"
#include "gpumux/core/json_text.h"

namespace gpumux::extender::detail {

using nlohmann::json;

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
  auto parsed = core::ParseJson(body, "body", {}, check);
  if (!parsed) {
    *error = parsed.error().message;
    return std::nullopt;
  }
  json& doc = *parsed;
  if (!doc.is_object()) {
    *error = std::string("body must be a JSON object, not ") + doc.type_name();
    return std::nullopt;
  }
  if (!repeated.empty()) {
    *error = repeated;
    return std::nullopt;
  }
  return std::move(doc);
}

namespace sj = simdjson::ondemand;

// An item of Nodes.items: its metadata.name, or an error saying what is wrong. The item goes
// back to kube-scheduler as it came, so it is parsed whole (the on-demand parser does not check
// the parts it skips: found by fuzz/extender_verbs) and the name read from that parse.
std::optional<std::string> NodeNameOf(std::string_view raw, std::string* error) {
  // Items are a few KB: one parser per thread, but not for an outsized item (its buffers would
  // stay with the thread).
  constexpr std::size_t kThreadParserBytes = std::size_t{64} << 10;
  // Both nest no deeper than external JSON may (gpumux/core/json.h).
  const auto make = [] {
    simdjson::dom::parser p;
    // Should it fail, so does the parse (it allocates the same).
    const simdjson::error_code allocated = p.allocate(kThreadParserBytes, core::kMaxJsonDepth);
    static_cast<void>(allocated);
    return p;
  };
  thread_local simdjson::dom::parser thread_parser = make();
  std::optional<simdjson::dom::parser> own_parser;
  if (raw.size() > kThreadParserBytes) own_parser.emplace(make());
  simdjson::dom::parser& parser = own_parser ? *own_parser : thread_parser;
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
      core::AppendJsonString(token, owned_name);
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

// "Pod": the object decoded as the extender reads pods (kube::DecodePod).
bool DecodePodField(sj::value& value, std::int64_t gpu_mem_unit_mib, ExtenderArgs& args,
                    std::string* error) {
  sj::object pod;
  std::string_view raw;
  if (value.get_object().get(pod) != simdjson::SUCCESS) {
    *error = "\"Pod\" must be an object";
    return false;
  }
  if (pod.raw_json().get(raw) != simdjson::SUCCESS) {
    *error = "\"Pod\" is not valid JSON";
    return false;
  }
  const auto parsed = core::ParseJson(raw, "\"Pod\"");
  if (!parsed) {
    *error = parsed.error().message;
    return false;
  }
  auto decoded = kube::DecodePod(*parsed, gpu_mem_unit_mib);
  if (!decoded) {
    *error = "\"Pod\": " + decoded.error().message;
    return false;
  }
  args.pod = std::move(*decoded);
  return true;
}

// Exactly one of "NodeNames" and "Nodes" was given, and it names no node twice.
bool CheckCandidates(const ExtenderArgs& args, bool names_given, bool nodes_given,
                     std::string* error) {
  if (names_given && nodes_given) {
    // kube-scheduler sends exactly one: NodeNames when the extender is nodeCacheCapable, else
    // Nodes. Both could name different nodes: which would the reply be about?
    *error =
        "both \"NodeNames\" and \"Nodes\" are given: expected \"NodeNames\" "
        "(nodeCacheCapable: true) or \"Nodes\" (a v1.NodeList), not both";
    return false;
  }
  if (!names_given && !nodes_given) {
    *error =
        "no candidate nodes: expected \"NodeNames\" (nodeCacheCapable: true) or \"Nodes\" "
        "(a v1.NodeList)";
    return false;
  }
  if (auto repeated = FindRepeated(args.names)) {
    *error = std::string(names_given ? "\"NodeNames\"" : "\"Nodes\".items") + " names node " +
             Quoted(*repeated) + " twice";
    return false;
  }
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
  if (args->parser == nullptr ||
      args->parser->iterate(args->padded).get(doc) != simdjson::SUCCESS ||
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
      if (!DecodePodField(value, gpu_mem_unit_mib, *args, error)) return nullptr;
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
  if (!CheckCandidates(*args, names_given, nodes_given, error)) return nullptr;
  return args;
}

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

}  // namespace gpumux::extender::detail
