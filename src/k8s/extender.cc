#include "gpumux/k8s/extender.h"

namespace gpumux::k8s {

std::string_view VerbName(Verb verb) {
  switch (verb) {
    case Verb::kFilter: return "filter";
    case Verb::kPrioritize: return "prioritize";
    case Verb::kBind: return "bind";
    case Verb::kPreempt: return "preempt";
  }
  return "unknown";
}

Extender::Extender(ClusterState& state, KubeApi* api) : state_(&state), api_(api) {}

VerbReply Extender::Handle(Verb verb, std::string_view body) {
  switch (verb) {
    case Verb::kFilter: return Filter(body);
    case Verb::kPrioritize: return Prioritize(body);
    case Verb::kBind: return Bind(body);
    case Verb::kPreempt: return Preempt(body);
  }
  return VerbReply{400, R"({"Error":"unknown verb"})", "bad_request", 0};
}

// Placeholders until the verbs land (same session).
VerbReply Extender::Filter(std::string_view) { return {501, R"({"Error":"not yet"})", "unimplemented", 0}; }
VerbReply Extender::Prioritize(std::string_view) { return {501, "[]", "unimplemented", 0}; }
VerbReply Extender::Bind(std::string_view) { return {501, R"({"Error":"not yet"})", "unimplemented", 0}; }
VerbReply Extender::Preempt(std::string_view) { return {501, R"({"Error":"not yet"})", "unimplemented", 0}; }

}  // namespace gpumux::k8s
