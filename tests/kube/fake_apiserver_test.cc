// The fake API server itself, spoken to with cpp-httplib's client (not gpumux's), so that a
// bug in one cannot hide a bug in the other.
#include "tests/testing/fake_apiserver.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace gpumux::test {
namespace {

using nlohmann::json;

json Pod(const std::string& name, json annotations = json::object()) {
  return json{{"metadata", {{"name", name}, {"namespace", "ns"}, {"annotations", annotations}}},
              {"spec", {{"containers", json::array({{{"name", "c"}}})}}}};
}

struct MergePatchCase {
  std::string name;
  json before;  // annotations
  json patch;   // annotations part of a merge patch
  json after;   // annotations
};

class FakeApiServerMergePatch : public ::testing::TestWithParam<MergePatchCase> {};

TEST_P(FakeApiServerMergePatch, FollowsRfc7386) {
  const MergePatchCase& c = GetParam();
  FakeApiServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  server.AddPod(Pod("p", c.before));
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Patch("/api/v1/namespaces/ns/pods/p",
                          json{{"metadata", {{"annotations", c.patch}}}}.dump(),
                          "application/merge-patch+json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  auto pod = server.GetPod("ns", "p");
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ((*pod)["metadata"].value("annotations", json::object()), c.after);
}

INSTANTIATE_TEST_SUITE_P(
    FakeApiServer, FakeApiServerMergePatch,
    ::testing::Values(
        MergePatchCase{"AddsAKey", json::object(), {{"a", "1"}}, {{"a", "1"}}},
        MergePatchCase{"ReplacesAValue", {{"a", "1"}}, {{"a", "2"}}, {{"a", "2"}}},
        MergePatchCase{"NullDeletesAKey", {{"a", "1"}, {"b", "2"}}, {{"a", nullptr}}, {{"b", "2"}}},
        MergePatchCase{"NullOfAMissingKeyIsNoChange", {{"b", "2"}}, {{"a", nullptr}}, {{"b", "2"}}},
        MergePatchCase{"KeepsKeysNotNamed", {{"a", "1"}}, {{"b", "2"}}, {{"a", "1"}, {"b", "2"}}}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(FakeApiServer, PatchThatChangesNothingKeepsTheResourceVersion) {
  FakeApiServer server;
  const std::string rv = server.AddPod(Pod("p", {{"a", "1"}}));
  httplib::Client client("127.0.0.1", server.port());
  auto res =
      client.Patch("/api/v1/namespaces/ns/pods/p", R"({"metadata":{"annotations":{"a":"1"}}})",
                   "application/merge-patch+json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(server.resource_version(), rv);
}

TEST(FakeApiServer, MergePatchWithAnotherUidIsAConflictStatus) {
  FakeApiServer server;
  server.AddPod(Pod("p"));
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Patch("/api/v1/namespaces/ns/pods/p",
                          R"({"metadata":{"uid":"not-it","annotations":{"a":"1"}}})",
                          "application/merge-patch+json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  const json status = json::parse(res->body);
  EXPECT_EQ(status["kind"], "Status");
  EXPECT_EQ(status["status"], "Failure");
  EXPECT_EQ(status["reason"], "Conflict");
  EXPECT_EQ(status["code"], 409);
  EXPECT_NE(status["message"].get<std::string>().find("UID in precondition: not-it"),
            std::string::npos);
}

// The node lock's compare-and-swap: a merge patch on a node carrying a resourceVersion other
// than the node's is refused, and every change to the node bumps its resourceVersion.
TEST(FakeApiServer, NodeMergePatchWithAStaleResourceVersionIsAConflict) {
  FakeApiServer server;
  const std::string rv =
      server.AddNode(json{{"metadata", {{"name", "n1"}, {"annotations", json::object()}}}});
  httplib::Client client("127.0.0.1", server.port());
  auto first = client.Patch(
      "/api/v1/nodes/n1",
      json{{"metadata", {{"resourceVersion", rv}, {"annotations", {{"lock", "a"}}}}}}.dump(),
      "application/merge-patch+json");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const std::string bumped = json::parse(first->body)["metadata"]["resourceVersion"];
  EXPECT_NE(bumped, rv);
  EXPECT_EQ(server.GetNode("n1")->at("metadata").at("resourceVersion"), bumped);

  auto second = client.Patch(
      "/api/v1/nodes/n1",
      json{{"metadata", {{"resourceVersion", rv}, {"annotations", {{"lock", "b"}}}}}}.dump(),
      "application/merge-patch+json");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 409) << second->body;
  EXPECT_EQ(json::parse(second->body)["reason"], "Conflict");
  EXPECT_EQ((*server.GetNode("n1"))["metadata"]["annotations"]["lock"], "a");
}

TEST(FakeApiServer, JsonPatchTestOperationThatFailsIsRejected) {
  FakeApiServer server;
  server.AddPod(Pod("p", {{"a", "1"}}));
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Patch("/api/v1/namespaces/ns/pods/p",
                          R"([{"op":"test","path":"/metadata/annotations/a","value":"2"},)"
                          R"({"op":"replace","path":"/metadata/annotations/a","value":"3"}])",
                          "application/json-patch+json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 422);
  EXPECT_EQ((*server.GetPod("ns", "p"))["metadata"]["annotations"]["a"], "1");
}

TEST(FakeApiServer, BindingSetsTheNodeOnceAndThenConflicts) {
  FakeApiServer server;
  server.AddPod(Pod("p"));
  httplib::Client client("127.0.0.1", server.port());
  const std::string body =
      R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"p","namespace":"ns"},)"
      R"("target":{"apiVersion":"v1","kind":"Node","name":"n1"}})";
  auto first = client.Post("/api/v1/namespaces/ns/pods/p/binding", body, "application/json");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 201) << first->body;
  EXPECT_EQ((*server.GetPod("ns", "p"))["spec"]["nodeName"], "n1");
  auto second = client.Post("/api/v1/namespaces/ns/pods/p/binding", body, "application/json");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 409);
  EXPECT_NE(second->body.find("is already assigned to node \\\"n1\\\""), std::string::npos)
      << second->body;
  auto absent = client.Post("/api/v1/namespaces/ns/pods/q/binding",
                            R"({"metadata":{"name":"q"},"target":{"kind":"Node","name":"n1"}})",
                            "application/json");
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->status, 404);
  EXPECT_EQ(server.bindings(), 1);
  EXPECT_EQ(server.requests("create binding"), 3);
}

TEST(FakeApiServer, ListPagesWithContinueTokensAtOneResourceVersion) {
  FakeApiServer server;
  for (const char* name : {"a", "b", "c"}) server.AddNode({{"metadata", {{"name", name}}}});
  httplib::Client client("127.0.0.1", server.port());
  auto first = client.Get("/api/v1/nodes?limit=2");
  ASSERT_TRUE(first);
  const json page1 = json::parse(first->body);
  ASSERT_EQ(page1["items"].size(), 2u);
  EXPECT_EQ(page1["kind"], "NodeList");
  EXPECT_FALSE(page1["items"][0].contains("kind"));  // as Kubernetes: no kind in list items
  const std::string token = page1["metadata"]["continue"];
  server.AddNode({{"metadata", {{"name", "d"}}}});
  auto second =
      client.Get("/api/v1/nodes?limit=2&continue=" + httplib::detail::encode_query_param(token));
  ASSERT_TRUE(second);
  const json page2 = json::parse(second->body);
  ASSERT_EQ(page2["items"].size(), 2u);
  EXPECT_EQ(page2["items"][0]["metadata"]["name"], "c");
  EXPECT_EQ(page2["metadata"]["resourceVersion"], page1["metadata"]["resourceVersion"]);
}

TEST(FakeApiServer, WatchReplaysHistoryAfterTheResourceVersionThenEnds) {
  FakeApiServer server;
  const std::string rv = server.AddPod(Pod("a"));
  server.AddPod(Pod("b"));
  server.DeletePod("ns", "a");
  httplib::Client client("127.0.0.1", server.port());
  std::vector<std::string> types;
  // Closing flushes what is pending first, so the whole history arrives.
  std::jthread closer([&] {
    server.WaitForOpenWatches(1, std::chrono::seconds(5));
    server.CloseWatches();
  });
  auto res = client.Get(
      "/api/v1/pods?watch=1&resourceVersion=" + rv, [&](const char* data, size_t length) {
        std::string text(data, length);
        for (std::size_t at = 0; (at = text.find("\"type\":\"", at)) != std::string::npos;) {
          at += 8;
          types.push_back(text.substr(at, text.find('"', at) - at));
        }
        return true;
      });
  ASSERT_TRUE(res);
  EXPECT_EQ(types, (std::vector<std::string>{"ADDED", "DELETED"}));
}

TEST(FakeApiServer, WatchEndsCleanlyAfterTimeoutSeconds) {
  FakeApiServer server;
  httplib::Client client("127.0.0.1", server.port());
  const auto start = std::chrono::steady_clock::now();
  auto res = client.Get("/api/v1/nodes?watch=1&timeoutSeconds=1&resourceVersion=" +
                        server.resource_version());
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "");
  EXPECT_GE(elapsed, std::chrono::milliseconds(990));
  EXPECT_LT(elapsed, std::chrono::milliseconds(2500));
}

TEST(FakeApiServer, FieldSelectorWatchSeesAPodMovingInAsAdded) {
  FakeApiServer server;
  const std::string rv = server.AddPod(Pod("a"));
  json bound = Pod("a");
  bound["spec"]["nodeName"] = "n1";
  server.UpdatePod(bound);
  httplib::Client client("127.0.0.1", server.port());
  std::string body;
  std::jthread closer([&] {
    server.WaitForOpenWatches(1, std::chrono::seconds(5));
    server.CloseWatches();
  });
  auto res = client.Get(
      "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dn1"
      "&resourceVersion=" +
          rv,
      [&](const char* data, size_t length) {
        body.append(data, length);
        return true;
      });
  ASSERT_TRUE(res);
  EXPECT_EQ(body.find("\"type\":\"MODIFIED\""), std::string::npos) << body;
  EXPECT_NE(body.find("\"type\":\"ADDED\""), std::string::npos) << body;
}

TEST(FakeApiServer, CompactedResourceVersionIsGoneAsHttp410) {
  FakeApiServer server;
  const std::string rv = server.AddPod(Pod("a"));
  server.Compact();
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Get("/api/v1/pods?watch=1&resourceVersion=" + rv);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 410);
  EXPECT_EQ(json::parse(res->body)["reason"], "Expired");
}

TEST(FakeApiServer, FailNextAnswersTheInjectedStatusOnce) {
  FakeApiServer server;
  server.FailNext("GET", "/api/v1/nodes", 503, "ServiceUnavailable", "try later");
  httplib::Client client("127.0.0.1", server.port());
  auto failed = client.Get("/api/v1/nodes");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 503);
  EXPECT_EQ(json::parse(failed->body)["message"], "try later");
  auto next = client.Get("/api/v1/nodes");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
}

TEST(FakeApiServer, RequiredBearerTokenIsCheckedWithAStatus) {
  FakeApiServer server(FakeApiServerOptions::Token("secret"));
  httplib::Client client("127.0.0.1", server.port());
  auto denied = client.Get("/api/v1/nodes");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(json::parse(denied->body)["reason"], "Unauthorized");
  auto allowed = client.Get("/api/v1/nodes", {{"Authorization", "Bearer secret"}});
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 200);
}

// --- create (POST) ---

json NewPod(const std::string& name) {
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"labels", {{"app", "x"}}}}},
              {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
}

TEST(FakeApiServerCreate, APodIsStoredWithUidTimestampAndPendingPhaseAndWatchersSeeIt) {
  FakeApiServer server;
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Post("/api/v1/namespaces/ns/pods", NewPod("p1").dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  const json created = json::parse(res->body);
  EXPECT_EQ(created["metadata"]["namespace"], "ns");
  EXPECT_FALSE(created["metadata"]["uid"].get<std::string>().empty());
  EXPECT_FALSE(created["metadata"]["creationTimestamp"].get<std::string>().empty());
  EXPECT_EQ(created["metadata"]["resourceVersion"], server.resource_version());
  EXPECT_EQ(created["status"]["phase"], "Pending");
  auto stored = server.GetPod("ns", "p1");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(*stored, created);
  EXPECT_EQ(server.creations(), 1);
  EXPECT_EQ(server.requests("create pod"), 1);
  // A watch from before the create sees it as ADDED.
  auto listed = client.Get("/api/v1/namespaces/ns/pods?labelSelector=app%3Dx");
  ASSERT_TRUE(listed);
  EXPECT_EQ(json::parse(listed->body)["items"].size(), 1u);
}

struct CreateErrorCase {
  std::string name;
  std::string path;
  std::string body;
  int status;
  std::string reason;
  std::string message_part;
};

class FakeApiServerCreateErrors : public ::testing::TestWithParam<CreateErrorCase> {};

TEST_P(FakeApiServerCreateErrors, AnswerAStatusAsTheApiServerWordsIt) {
  const CreateErrorCase& c = GetParam();
  FakeApiServer server;
  server.AddPod(NewPod("taken"));
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Post(c.path, c.body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, c.status) << res->body;
  const json status = json::parse(res->body);
  EXPECT_EQ(status["kind"], "Status");
  EXPECT_EQ(status["status"], "Failure");
  EXPECT_EQ(status["code"], c.status);
  EXPECT_EQ(status["reason"], c.reason);
  EXPECT_NE(status["message"].get<std::string>().find(c.message_part), std::string::npos)
      << status["message"];
  EXPECT_EQ(server.creations(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    FakeApiServer, FakeApiServerCreateErrors,
    ::testing::Values(
        CreateErrorCase{"ANameTakenIsAlreadyExists", "/api/v1/namespaces/default/pods",
                        NewPod("taken").dump(), 409, "AlreadyExists",
                        "pods \"taken\" already exists"},
        CreateErrorCase{
            "NoNameIsInvalid", "/api/v1/namespaces/default/pods",
            json{{"kind", "Pod"}, {"spec", {{"containers", json::array({{{"name", "c"}}})}}}}
                .dump(),
            422, "Invalid", "metadata.name: Required value"},
        CreateErrorCase{"AnUppercaseNameIsInvalid", "/api/v1/namespaces/default/pods",
                        NewPod("Bad_Name").dump(), 422, "Invalid",
                        "a lowercase RFC 1123 subdomain"},
        CreateErrorCase{"APodWithoutContainersIsInvalid", "/api/v1/namespaces/default/pods",
                        json{{"metadata", {{"name", "p"}}}, {"spec", json::object()}}.dump(), 422,
                        "Invalid", "spec.containers: Required value"},
        CreateErrorCase{"AnotherNamespaceIsABadRequest", "/api/v1/namespaces/default/pods",
                        json{{"metadata", {{"name", "p"}, {"namespace", "other"}}},
                             {"spec", {{"containers", json::array({{{"name", "c"}}})}}}}
                            .dump(),
                        400, "BadRequest", "does not match the namespace"},
        CreateErrorCase{
            "AJobPostedAsAPodIsABadRequest", "/api/v1/namespaces/default/pods",
            json{{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"metadata", {{"name", "j"}}}}.dump(),
            400, "BadRequest", "does not match the resource"},
        CreateErrorCase{"NotJsonIsABadRequest", "/api/v1/namespaces/default/pods", "{nope", 400,
                        "BadRequest", "not a JSON object"},
        CreateErrorCase{"AJobWithoutTemplateIsInvalid", "/apis/batch/v1/namespaces/default/jobs",
                        json{{"metadata", {{"name", "j"}}}, {"spec", json::object()}}.dump(), 422,
                        "Invalid", "spec.template: Required value"}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(FakeApiServerCreate, AJobIsStoredUnderBatchV1AndListedAndWatchedLikePods) {
  FakeApiServer server;
  httplib::Client client("127.0.0.1", server.port());
  const json job = {{"apiVersion", "batch/v1"},
                    {"kind", "Job"},
                    {"metadata", {{"name", "j1"}}},
                    {"spec", {{"template", {{"spec", {{"containers", json::array()}}}}}}}};
  auto res = client.Post("/apis/batch/v1/namespaces/ns/jobs", job.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  EXPECT_EQ(json::parse(res->body)["apiVersion"], "batch/v1");
  auto got = client.Get("/apis/batch/v1/namespaces/ns/jobs/j1");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(json::parse(got->body)["metadata"]["name"], "j1");
  auto list = client.Get("/apis/batch/v1/jobs");
  ASSERT_TRUE(list);
  EXPECT_EQ(json::parse(list->body)["kind"], "JobList");
  EXPECT_EQ(json::parse(list->body)["items"].size(), 1u);
  ASSERT_TRUE(server.GetJob("ns", "j1").has_value());
  EXPECT_EQ(server.Objects("jobs").size(), 1u);
  EXPECT_TRUE(server.Objects("pods").empty());  // no job controller runs in the fake
  auto again = client.Post("/apis/batch/v1/namespaces/ns/jobs", job.dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 409);
  EXPECT_EQ(json::parse(again->body)["details"]["kind"], "jobs");
}

TEST(FakeApiServerCreate, GenerateNameGivesANewNameEachTime) {
  FakeApiServer server;
  httplib::Client client("127.0.0.1", server.port());
  json pod = NewPod("");
  pod["metadata"].erase("name");
  pod["metadata"]["generateName"] = "p-";
  auto a = client.Post("/api/v1/namespaces/ns/pods", pod.dump(), "application/json");
  auto b = client.Post("/api/v1/namespaces/ns/pods", pod.dump(), "application/json");
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->status, 201);
  ASSERT_EQ(b->status, 201);
  EXPECT_NE(json::parse(a->body)["metadata"]["name"], json::parse(b->body)["metadata"]["name"]);
}

TEST(FakeApiServerCreate, FailNextAfterApplyingStoresTheObjectAndAnswersTheFailure) {
  FakeApiServer server;
  server.FailNextAfterApplying("POST", "/pods", 504, "Timeout", "lost");
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Post("/api/v1/namespaces/ns/pods", NewPod("p1").dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 504);
  EXPECT_EQ(json::parse(res->body)["message"], "lost");
  EXPECT_TRUE(server.GetPod("ns", "p1").has_value());
  auto again = client.Post("/api/v1/namespaces/ns/pods", NewPod("p1").dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 409);
}

}  // namespace
}  // namespace gpumux::test
