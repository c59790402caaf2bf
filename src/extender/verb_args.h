// Reading the extender's verb bodies (internal to the extender): the error reply, the
// arguments of filter and prioritize (simdjson on demand), bind's names, the parser pool.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/json.h"
#include "gpumux/extender/extender.h"

namespace gpumux::extender::detail {

// 400 with {"Error": message}.
VerbReply BadRequest(const std::string& message);
// `text` in quotes, cut short after 64 characters (for messages).
std::string Quoted(std::string_view text);
// The body as a JSON object; error text when it is not one.
std::optional<nlohmann::json> ParseObject(std::string_view body, std::string* error);

}  // namespace gpumux::extender::detail

namespace gpumux::extender {
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
  static constexpr std::size_t kFirstParserBytes = std::size_t{64} << 10;

  std::unique_ptr<simdjson::ondemand::parser> Take() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        auto parser = std::move(idle_.back());
        idle_.pop_back();
        return parser;
      }
    }
    // External JSON nests no deeper than core::kMaxJsonDepth (gpumux/core/json.h), here too:
    // the parser keeps its depth when it grows.
    auto parser = std::make_unique<simdjson::ondemand::parser>();
    if (parser->allocate(kFirstParserBytes, core::kMaxJsonDepth) != simdjson::SUCCESS) {
      return nullptr;
    }
    return parser;
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
}  // namespace gpumux::extender

namespace gpumux::extender::detail {

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

// "more than N nodes in <field>" (kMaxNodesPerRequest).
std::string TooManyNodes(const char* field);

// The filter and prioritize arguments; nullptr with `error` set when the body is not what
// kube-scheduler sends.
std::unique_ptr<ExtenderArgs> DecodeArgs(std::string_view body, std::int64_t gpu_mem_unit_mib,
                                         VerbParserPool& pool, std::string* error);

enum class NameKind : std::uint8_t { kSubdomain, kLabel, kUid };
// The string `key` of bind's body, checked to be a Kubernetes name of `kind`; error text else.
std::optional<std::string> BindField(const nlohmann::json& doc, const char* key, NameKind kind,
                                     std::string* error);

}  // namespace gpumux::extender::detail
