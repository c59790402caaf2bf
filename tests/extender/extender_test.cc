// Extender's decoding of the verb bodies, without HTTP: every malformed, wrongly typed, missing,
// repeated or oversized field is a 400 whose message names the field, in both of
// kube-scheduler's modes (nodeCacheCapable: NodeNames; otherwise a full v1.NodeList in Nodes),
// and the well-formed bodies of both modes still get their answers.
#include "gpumux/extender/extender.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/kube_fixtures.h"

namespace gpumux::extender {
namespace {

using kube::testing::NodeJson;
using kube::testing::PodWithOne;
using nlohmann::json;

constexpr std::int64_t kNow = 1'800'000'000;

class ExtenderBodies : public ::testing::Test {
 protected:
  void SetUp() override {
    sched::ClusterStateOptions options;
    options.policy = "best-fit";
    auto created = sched::ClusterState::Create(std::move(options), [] { return kNow; });
    ASSERT_TRUE(created.has_value()) << created.error().message;
    state_ = std::move(*created);
    const std::vector<json> nodes = {NodeJson("n1", 2), NodeJson("n2", 2)};
    state_->SetNodes(nodes);
    state_->SetPods({});
    state_->MarkSynced();
    extender_ = std::make_unique<Extender>(*state_, nullptr);
  }

  // The body of a filter/prioritize request for a pod asking for one GPU, with `nodes` as the
  // JSON text of the fields that name the nodes (e.g. R"("NodeNames":["n1"])").
  static std::string Args(const std::string& nodes) {
    return R"({"Pod":)" + PodWithOne("p", 1, 0, 0).dump() + (nodes.empty() ? "" : "," + nodes) +
           "}";
  }

  std::unique_ptr<sched::ClusterState> state_;
  std::unique_ptr<Extender> extender_;
};

struct BadBody {
  const char* name;
  Verb verb;
  std::string body;
  std::string names;  // the message must contain this (the field)
};

std::string Names(int n, const std::string& prefix = "n") {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    out += '"';
    out += prefix;
    out += std::to_string(i);
    out += '"';
  }
  return out;
}

TEST_F(ExtenderBodies, EveryMalformedFieldIsA400NamingIt) {
  const std::string pod = PodWithOne("p", 1, 0, 0).dump();
  const std::string node = NodeJson("n1", 2).dump();
  const std::string too_many = R"("NodeNames":[)" + Names(int{kMaxNodesPerRequest} + 1) + "]";
  const std::vector<BadBody> cases = {
      // The two reproducers: Nodes without items beside NodeNames; both naming other nodes.
      {"Nodes is an object without items while NodeNames lists a node", Verb::kFilter,
       Args(R"("Nodes":{},"NodeNames":["n1"])"), "Nodes"},
      {"NodeNames and Nodes both given and naming different nodes", Verb::kFilter,
       Args(R"("NodeNames":["n2"],"Nodes":{"items":[{"metadata":{"name":"nope"}}]})"), "Nodes"},
      {"NodeNames and Nodes both given for prioritize", Verb::kPrioritize,
       Args(R"("NodeNames":["n1"],"Nodes":{"items":[)" + node + "]}"), "Nodes"},
      {"Nodes alone without items", Verb::kFilter, Args(R"("Nodes":{"kind":"NodeList"})"),
       "\"Nodes\" has no \"items\""},
      {"Nodes.items twice", Verb::kFilter, Args(R"("Nodes":{"items":[],"items":[]})"), "items"},
      {"Nodes is an array", Verb::kFilter, Args(R"("Nodes":[)" + node + "]"), "Nodes"},
      {"Nodes is a string", Verb::kPrioritize, Args(R"("Nodes":"n1")"), "Nodes"},
      {"Nodes.items is an object", Verb::kFilter, Args(R"("Nodes":{"items":{}})"),
       "\"Nodes\".items"},
      {"an item of Nodes is a number", Verb::kFilter, Args(R"("Nodes":{"items":[1]})"),
       "\"Nodes\".items[0]"},
      // Found by fuzz/extender_verbs: the name parses, but the item as a whole is not JSON (it
      // would have gone back to kube-scheduler as given).
      {"an item of Nodes is not valid JSON past its name", Verb::kFilter,
       Args(R"("Nodes":{"items":[{"metadata":{"name":"n1"},"status":{"capacity":[1,}}]})"),
       "\"Nodes\".items[0]"},
      {"an item of Nodes has no metadata", Verb::kFilter,
       Args(R"("Nodes":{"items":[)" + node + R"(,{"kind":"Node"}]})"), "\"Nodes\".items[1]"},
      {"an item of Nodes has a numeric name", Verb::kPrioritize,
       Args(R"("Nodes":{"items":[{"metadata":{"name":7}}]})"), "metadata.name"},
      {"an item of Nodes has an empty name", Verb::kFilter,
       Args(R"("Nodes":{"items":[{"metadata":{"name":""}}]})"), "metadata.name"},
      {"Nodes names a node twice", Verb::kFilter,
       Args(R"("Nodes":{"items":[)" + node + "," + node + "]}"), "\"Nodes\".items"},
      {"NodeNames names a node twice", Verb::kFilter, Args(R"("NodeNames":["n1","n2","n1"])"),
       "\"NodeNames\" names node \"n1\" twice"},
      {"NodeNames names a node twice for prioritize", Verb::kPrioritize,
       Args(R"("NodeNames":["n2","n2"])"), "NodeNames"},
      {"NodeNames is an object", Verb::kFilter, Args(R"("NodeNames":{"n1":true})"), "NodeNames"},
      {"NodeNames holds a null", Verb::kFilter, Args(R"("NodeNames":["n1",null])"),
       "\"NodeNames\"[1]"},
      {"NodeNames holds an empty name", Verb::kPrioritize, Args(R"("NodeNames":[""])"),
       "\"NodeNames\"[0]"},
      {"NodeNames twice", Verb::kFilter, Args(R"("NodeNames":["n1"],"NodeNames":["n2"])"),
       "\"NodeNames\" appears twice"},
      {"more names than the limit", Verb::kFilter, Args(too_many), "NodeNames"},
      {"neither NodeNames nor Nodes", Verb::kFilter, Args(""), "NodeNames"},
      {"both null", Verb::kPrioritize, Args(R"("NodeNames":null,"Nodes":null)"), "Nodes"},
      {"no Pod", Verb::kFilter, R"({"NodeNames":["n1"]})", "Pod"},
      {"Pod is null", Verb::kFilter, R"({"Pod":null,"NodeNames":["n1"]})", "Pod"},
      {"Pod twice", Verb::kPrioritize,
       R"({"Pod":)" + pod + R"(,"Pod":)" + pod + R"(,"NodeNames":[]})", "\"Pod\" appears twice"},
      {"a truncated body", Verb::kFilter, Args(R"("NodeNames":["n1")").substr(0, 60), "JSON"},
      {"a truncated list of names", Verb::kFilter, R"({"Pod":)" + pod + R"(,"NodeNames":["n1",)",
       "JSON"},
      {"an array after the object", Verb::kFilter, Args(R"("NodeNames":["n1"])") + " []", "JSON"},
      {"an object after the object", Verb::kPrioritize, Args(R"("NodeNames":["n1"])") + "{}",
       "more follows the object"},
      // bind
      {"bind without Node", Verb::kBind, R"({"PodName":"p","PodNamespace":"d","PodUID":"u"})",
       "\"Node\" is missing"},
      {"bind with a numeric PodUID", Verb::kBind,
       R"({"PodName":"p","PodNamespace":"d","PodUID":5,"Node":"n1"})", "\"PodUID\""},
      {"bind with a null PodNamespace", Verb::kBind,
       R"({"PodName":"p","PodNamespace":null,"PodUID":"u","Node":"n1"})", "\"PodNamespace\""},
      {"bind with a pod name that is a path", Verb::kBind,
       R"({"PodName":"../../../nodes/n1","PodNamespace":"d","PodUID":"u","Node":"n1"})",
       "\"PodName\""},
      {"bind with a namespace holding a query", Verb::kBind,
       R"({"PodName":"p","PodNamespace":"d?watch=1","PodUID":"u","Node":"n1"})",
       "\"PodNamespace\""},
      {"bind with a node name holding a slash", Verb::kBind,
       R"({"PodName":"p","PodNamespace":"d","PodUID":"u","Node":"n1/status"})", "\"Node\""},
      {"bind with an empty uid", Verb::kBind,
       R"({"PodName":"p","PodNamespace":"d","PodUID":"","Node":"n1"})", "\"PodUID\""},
      {"bind with PodName twice", Verb::kBind,
       R"({"PodName":"p","PodName":"q","PodNamespace":"d","PodUID":"u","Node":"n1"})",
       "\"PodName\" appears twice"},
      // preempt
      {"preempt with both victim maps", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToVictims":{},"NodeNameToMetaVictims":{}})",
       "NodeNameToVictims"},
      {"preempt with no victim map", Verb::kPreempt, R"({"Pod":)" + pod + "}",
       "NodeNameToMetaVictims"},
      {"preempt with a list for NodeNameToVictims", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToVictims":[]})", "NodeNameToVictims"},
      {"preempt with a node twice", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[]},"n1":{"Pods":[]}}})",
       "\"n1\" appears twice in \"NodeNameToMetaVictims\""},
      {"preempt with a null node entry", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToMetaVictims":{"n1":null}})", "[\"n1\"]"},
      {"preempt with Pods as an object", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"Pods":{}}}})", ".Pods"},
      {"preempt with a victim without UID", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"a"},{}]}}})",
       ".Pods[1]"},
      {"preempt with a victim listed twice", Verb::kPreempt,
       R"({"Pod":)" + pod +
           R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"a"},{"UID":"a"}]}}})",
       "twice"},
      {"preempt with a textual NumPDBViolations", Verb::kPreempt,
       R"({"Pod":)" + pod +
           R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[],"NumPDBViolations":"1"}}})",
       "NumPDBViolations"},
      {"preempt with a negative NumPDBViolations", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToMetaVictims":{"n1":{"NumPDBViolations":-1}}})",
       "NumPDBViolations"},
      {"preempt with an empty node name", Verb::kPreempt,
       R"({"Pod":)" + pod + R"(,"NodeNameToMetaVictims":{"":{"Pods":[]}}})", "empty node name"},
  };
  for (const BadBody& c : cases) {
    SCOPED_TRACE(c.name);
    const VerbReply reply = extender_->Handle(c.verb, c.body);
    EXPECT_EQ(reply.http_status, 400) << reply.body;
    EXPECT_EQ(reply.failure, "bad_request");
    const json body = json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(body.is_object() && body.contains("Error") && body["Error"].is_string())
        << reply.body;
    EXPECT_NE(body["Error"].get<std::string>().find(c.names), std::string::npos)
        << "expected the message to name " << c.names << ": " << reply.body;
  }
}

TEST_F(ExtenderBodies, AVictimsListOverTheLimitIsA400NamingTheNode) {
  std::string pods;
  for (std::size_t i = 0; i <= kMaxVictimsPerNode; ++i) {
    if (i > 0) pods += ',';
    pods += R"({"UID":"v)";
    pods += std::to_string(i);
    pods += "\"}";
  }
  const std::string body = R"({"Pod":)" + PodWithOne("p", 1, 0, 0).dump() +
                           R"(,"NodeNameToMetaVictims":{"n1":{"Pods":[)" + pods + "]}}}";
  const VerbReply reply = extender_->Handle(Verb::kPreempt, body);
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.find("n1"), std::string::npos) << reply.body.substr(0, 300);
  EXPECT_NE(reply.body.find(std::to_string(kMaxVictimsPerNode)), std::string::npos);
}

TEST_F(ExtenderBodies, AsManyNodesAsTheLimitAreServed) {
  const std::string body = Args(R"("NodeNames":[)" + Names(int{kMaxNodesPerRequest}, "x") + "]");
  const VerbReply reply = extender_->Handle(Verb::kPrioritize, body);
  ASSERT_EQ(reply.http_status, 200) << reply.body.substr(0, 300);
  EXPECT_EQ(json::parse(reply.body).size(), kMaxNodesPerRequest);
}

TEST_F(ExtenderBodies, EitherModeAloneIsAnsweredAboutTheNodesItNames) {
  const VerbReply by_names = extender_->Handle(Verb::kFilter, Args(R"("NodeNames":["n2"])"));
  ASSERT_EQ(by_names.http_status, 200) << by_names.body;
  EXPECT_EQ(json::parse(by_names.body)["NodeNames"], json::array({"n2"}));

  const std::string list =
      R"("Nodes":{"apiVersion":"v1","kind":"NodeList","metadata":{},"items":[)" +
      NodeJson("n1", 2).dump() + "]},\"NodeNames\":null";
  const VerbReply by_list = extender_->Handle(Verb::kFilter, Args(list));
  ASSERT_EQ(by_list.http_status, 200) << by_list.body;
  const json reply = json::parse(by_list.body);
  ASSERT_EQ(reply["Nodes"]["items"].size(), 1U);
  EXPECT_EQ(reply["Nodes"]["items"][0]["metadata"]["name"], "n1");

  // An empty candidate list (null items, or no names) is an empty answer, not an error.
  for (const std::string& empty :
       {std::string(R"("Nodes":{"items":null})"), std::string(R"("NodeNames":[],"Nodes":null)")}) {
    SCOPED_TRACE(empty);
    const VerbReply none = extender_->Handle(Verb::kFilter, Args(empty));
    EXPECT_EQ(none.http_status, 200) << none.body;
  }
}

TEST_F(ExtenderBodies, PreemptAcceptsEitherVictimMapAndAnEmptyOne) {
  const std::string pod = PodWithOne("p", 1, 0, 0).dump();
  for (
      const std::string& victims :
      {std::string(
           R"("NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"a"}],"NumPDBViolations":0}},"NodeNameToVictims":null)"),
       std::string(R"("NodeNameToVictims":{"n1":{"Pods":[{"metadata":{"uid":"a"}}]}})"),
       std::string(R"("NodeNameToMetaVictims":{})")}) {
    SCOPED_TRACE(victims);
    const VerbReply reply =
        extender_->Handle(Verb::kPreempt, R"({"Pod":)" + pod + "," + victims + "}");
    EXPECT_EQ(reply.http_status, 200) << reply.body;
  }
}

TEST_F(ExtenderBodies, BindWithValidNamesGetsPastDecoding) {
  // No API server here: past decoding, bind answers 200 with the reason it cannot bind.
  const VerbReply reply = extender_->Handle(
      Verb::kBind,
      R"({"PodName":"gpu-pod-1","PodNamespace":"default","PodUID":"2773738c-c2a6-459d-b235-8fde2373b068","Node":"node-1.example.com"})");
  EXPECT_EQ(reply.http_status, 200) << reply.body;
  EXPECT_EQ(reply.failure, "no_api");
}

// prioritize's scores: kube-scheduler takes a node at random among the highest totals, so only
// the node the policy would choose (Engine::Decide: the highest score, ties to the smaller rank)
// may get 10; the rest map onto 0..9 by score.
TEST(ExtenderScores, OnlyThePolicysChoiceGetsTen) {
  using Kind = sched::NodeVerdict::Kind;
  const std::vector<sched::NodeVerdict> verdicts = {
      {Kind::kFits, 500, "", 3},      // 9 x (500 - 100) / 800 = 4.5 -> 5
      {Kind::kFits, 900, "", 5},      // the best score, but a larger rank than the next
      {Kind::kFits, 900, "", 2},      // the choice
      {Kind::kDoesNotFit, 0, "", 0},  // not a candidate, whatever its rank
      {Kind::kFits, 890, "", 1},      // 8.89 -> 9
      {Kind::kFits, 100, "", 4},      // the worst
      {Kind::kDeclined, 0, "", 0},
  };
  EXPECT_EQ(ExtenderScores(verdicts), (std::vector<int>{5, 9, 10, 0, 9, 0, 0}));
  EXPECT_EQ(ExtenderScores(
                std::vector<sched::NodeVerdict>{{Kind::kFits, 7, "", 3}, {Kind::kFits, 7, "", 1}}),
            (std::vector<int>{9, 10}))
      << "equal scores: the smaller rank";
  EXPECT_EQ(ExtenderScores(std::vector<sched::NodeVerdict>{{Kind::kDoesNotFit, 0, "x", 0}}),
            (std::vector<int>{0}));
  EXPECT_TRUE(ExtenderScores({}).empty());
}

}  // namespace
}  // namespace gpumux::extender
