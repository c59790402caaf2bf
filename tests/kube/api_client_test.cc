// The libcurl KubeApi against the in-test API server on loopback (plain HTTP, HTTPS with the
// test CA, mutual TLS, bearer tokens).
#include "gpumux/kube/api_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "tests/testing/fake_apiserver.h"

namespace gpumux::kube {
namespace {

using nlohmann::json;
using test::FakeApiServer;
using test::FakeApiServerOptions;
using test::FakeTls;
using test::GoneMode;
using Clock = std::chrono::steady_clock;

json Pod(const std::string& name, const std::string& ns = "ns") {
  return json{{"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec", {{"containers", json::array({{{"name", "c"}}})}}}};
}

json Node(const std::string& name) { return json{{"metadata", {{"name", name}}}}; }

// "p3" (built by appending: GCC 12 warns falsely about "p" + std::to_string(3) at -O3).
std::string Numbered(std::string prefix, int i) {
  prefix += std::to_string(i);
  return prefix;
}

ClientConfig ConfigFor(const FakeApiServer& server) {
  ClientConfig config;
  config.server = server.url();
  config.request_timeout = std::chrono::milliseconds(2000);
  return config;
}

std::int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// --- ApiError and QueryEscape ---

struct ToStringCase {
  std::string name;
  ApiError error;
  std::string expected;
};

class ApiClientErrorToString : public ::testing::TestWithParam<ToStringCase> {};

TEST_P(ApiClientErrorToString, NamesTheStatusReasonAndMessage) {
  EXPECT_EQ(GetParam().error.ToString(), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    ApiClient, ApiClientErrorToString,
    ::testing::Values(
        ToStringCase{"AnHttpErrorShowsCodeReasonAndMessage",
                     ApiError{409, "Conflict", "Operation cannot be fulfilled on pods \"p\""},
                     "HTTP 409 Conflict: Operation cannot be fulfilled on pods \"p\""},
        ToStringCase{"ATransportErrorSaysThereWasNoAnswer",
                     ApiError{0, "Timeout was reached", "GET https://x/api: timed out"},
                     "no answer from the API server (Timeout was reached): GET https://x/api: "
                     "timed out"},
        ToStringCase{"AnEmptyMessageIsLeftOut", ApiError{404, "NotFound", ""},
                     "HTTP 404 NotFound"}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(ApiClientQueryEscape, KeepsUnreservedCharactersAndEncodesTheRest) {
  EXPECT_EQ(QueryEscape("abc-XYZ_0.9~"), "abc-XYZ_0.9~");
  EXPECT_EQ(QueryEscape("spec.nodeName=n 1"), "spec.nodeName%3Dn%201");
  EXPECT_EQ(QueryEscape("a/b?c&d+e"), "a%2Fb%3Fc%26d%2Be");
  EXPECT_EQ(QueryEscape("\xC3\xA9"), "%C3%A9");
}

// --- plain requests ---

TEST(ApiClient, GetReturnsTheDecodedObject) {
  FakeApiServer server;
  ASSERT_TRUE(server.ok()) << server.error();
  server.AddPod(Pod("p"));
  auto api = MakeCurlClient(ConfigFor(server));
  auto pod = api->Get("/api/v1/namespaces/ns/pods/p");
  ASSERT_TRUE(pod.has_value()) << pod.error().ToString();
  EXPECT_EQ((*pod)["metadata"]["name"], "p");
  EXPECT_EQ((*pod)["kind"], "Pod");
  const auto seen = server.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].user_agent, "gpumux");
}

TEST(ApiClient, NotFoundKeepsTheStatusReasonAndMessage) {
  FakeApiServer server;
  auto api = MakeCurlClient(ConfigFor(server));
  auto pod = api->Get("/api/v1/namespaces/ns/pods/missing");
  ASSERT_FALSE(pod.has_value());
  EXPECT_EQ(pod.error().http_status, 404);
  EXPECT_EQ(pod.error().reason, "NotFound");
  EXPECT_EQ(pod.error().message, "pods \"missing\" not found");
}

TEST(ApiClient, AnErrorBodyThatIsNotAStatusIsQuotedInTheMessage) {
  FakeApiServer server;
  const std::string html = "<html><body>" + std::string(300, 'x') + "</body></html>";
  server.FailNextWithBody("GET", "/api/v1/nodes", 502, "text/html", html);
  auto api = MakeCurlClient(ConfigFor(server));
  auto nodes = api->Get("/api/v1/nodes");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().http_status, 502);
  EXPECT_EQ(nodes.error().reason, "InternalError");
  EXPECT_EQ(nodes.error().message, html.substr(0, 200) + "...");
}

TEST(ApiClient, ASuccessfulAnswerThatIsNotJsonIsAnError) {
  FakeApiServer server;
  server.FailNextWithBody("GET", "/api/v1/nodes", 200, "text/plain", "hello");
  auto api = MakeCurlClient(ConfigFor(server));
  auto nodes = api->Get("/api/v1/nodes");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().reason, "InvalidResponse");
  EXPECT_NE(nodes.error().message.find("the answer: not JSON (line 1, column 1: "),
            std::string::npos)
      << nodes.error().message;
  EXPECT_NE(nodes.error().message.find("): hello"), std::string::npos);
}

TEST(ApiClient, ListFollowsContinueTokensAndReturnsOneList) {
  FakeApiServer server;
  for (int i = 0; i < 5; ++i) server.AddPod(Pod(Numbered("p", i)));
  server.AddPod(Pod("other", "elsewhere"));
  auto api = MakeCurlClient(ConfigFor(server));
  auto list = api->List("/api/v1/namespaces/ns/pods", 2);
  ASSERT_TRUE(list.has_value()) << list.error().ToString();
  EXPECT_EQ((*list)["kind"], "PodList");
  ASSERT_EQ((*list)["items"].size(), 5u);
  EXPECT_EQ((*list)["items"][4]["metadata"]["name"], "p4");
  EXPECT_EQ((*list)["metadata"]["resourceVersion"], server.resource_version());
  EXPECT_EQ(server.requests("list pods"), 3);
  const auto seen = server.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].target, "/api/v1/namespaces/ns/pods?limit=2");
  // The token "rv:N;after:ns/p1" is percent-encoded.
  EXPECT_NE(seen[1].target.find("&continue=rv%3A"), std::string::npos) << seen[1].target;
  EXPECT_NE(seen[1].target.find("%3Bafter%3Ans%2Fp1"), std::string::npos) << seen[1].target;
}

TEST(ApiClient, ListKeepsAnExistingQueryOfThePath) {
  FakeApiServer server;
  server.AddPod(Pod("a"));
  json b = Pod("b");
  b["spec"]["nodeName"] = "n1";
  server.AddPod(b);
  auto api = MakeCurlClient(ConfigFor(server));
  auto list = api->List("/api/v1/pods?fieldSelector=" + QueryEscape("spec.nodeName=n1"), 10);
  ASSERT_TRUE(list.has_value()) << list.error().ToString();
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["items"][0]["metadata"]["name"], "b");
}

TEST(ApiClient, ListStartsAgainOnceWhenItsContinueTokenExpires) {
  FakeApiServer server;
  for (int i = 0; i < 3; ++i) server.AddNode(Node(Numbered("n", i)));
  server.FailNext("GET", "continue=", 410, "Expired", "continue token too old");
  auto api = MakeCurlClient(ConfigFor(server));
  auto list = api->List("/api/v1/nodes", 2);
  ASSERT_TRUE(list.has_value()) << list.error().ToString();
  EXPECT_EQ((*list)["items"].size(), 3u);
  EXPECT_EQ(server.requests("list nodes"), 4);  // page 1, expired page 2, page 1, page 2
}

TEST(ApiClient, ListGivesUpWhenTheContinueTokenExpiresTwice) {
  FakeApiServer server;
  for (int i = 0; i < 3; ++i) server.AddNode(Node(Numbered("n", i)));
  server.FailNext("GET", "continue=", 410, "Expired", "continue token too old", 2);
  auto api = MakeCurlClient(ConfigFor(server));
  auto list = api->List("/api/v1/nodes", 2);
  ASSERT_FALSE(list.has_value());
  EXPECT_EQ(list.error().http_status, 410);
  EXPECT_EQ(list.error().reason, "Expired");
}

TEST(ApiClient, PatchPodAnnotationsMergesWithTheUidAsPrecondition) {
  FakeApiServer server;
  json pod = Pod("p");
  pod["metadata"]["annotations"] = {{"keep", "1"}, {"drop", "2"}};
  server.AddPod(pod);
  const std::string uid = (*server.GetPod("ns", "p"))["metadata"]["uid"];
  auto api = MakeCurlClient(ConfigFor(server));
  auto patched = PatchPodAnnotations(*api, "ns", "p", uid,
                                     {{"gpumux.io/grant", "{\"gpus\":[0]}"}, {"drop", nullptr}});
  ASSERT_TRUE(patched.has_value()) << patched.error().ToString();
  EXPECT_EQ((*patched)["metadata"]["annotations"],
            (json{{"keep", "1"}, {"gpumux.io/grant", "{\"gpus\":[0]}"}}));
  const auto seen = server.seen();
  EXPECT_EQ(seen.back().content_type, "application/merge-patch+json");
}

TEST(ApiClient, PatchPodAnnotationsOfAReplacedPodIsAConflict) {
  FakeApiServer server;
  server.AddPod(Pod("p"));
  auto api = MakeCurlClient(ConfigFor(server));
  auto patched = PatchPodAnnotations(*api, "ns", "p", "uid-of-an-older-pod", {{"a", "1"}});
  ASSERT_FALSE(patched.has_value());
  EXPECT_EQ(patched.error().http_status, 409);
  EXPECT_EQ(patched.error().reason, "Conflict");
  EXPECT_FALSE((*server.GetPod("ns", "p"))["metadata"].contains("annotations"));
}

TEST(ApiClient, JsonPatchAppliesItsOperations) {
  FakeApiServer server;
  server.AddNode(Node("n1"));
  auto api = MakeCurlClient(ConfigFor(server));
  const json ops = json::array({
      {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{"a", "1"}}}},
      {{"op", "test"}, {"path", "/metadata/annotations/a"}, {"value", "1"}},
      {{"op", "replace"}, {"path", "/metadata/annotations/a"}, {"value", "2"}},
  });
  auto patched = api->Patch("/api/v1/nodes/n1", ops, PatchType::kJson);
  ASSERT_TRUE(patched.has_value()) << patched.error().ToString();
  EXPECT_EQ((*patched)["metadata"]["annotations"]["a"], "2");
  EXPECT_EQ(server.seen().back().content_type, "application/json-patch+json");
}

TEST(ApiClient, CreateBindingBindsThePodOnce) {
  FakeApiServer server;
  server.AddPod(Pod("p"));
  const std::string uid = (*server.GetPod("ns", "p"))["metadata"]["uid"];
  auto api = MakeCurlClient(ConfigFor(server));
  auto bound = CreateBinding(*api, "ns", "p", uid, "n1");
  ASSERT_TRUE(bound.has_value()) << bound.error().ToString();
  EXPECT_EQ((*server.GetPod("ns", "p"))["spec"]["nodeName"], "n1");
  auto again = CreateBinding(*api, "ns", "p", uid, "n2");
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().http_status, 409);
  EXPECT_NE(again.error().message.find("already assigned to node \"n1\""), std::string::npos)
      << again.error().message;
  EXPECT_EQ(server.bindings(), 1);
}

TEST(ApiClient, CreateBindingOfAnAbsentPodIsNotFound) {
  FakeApiServer server;
  auto api = MakeCurlClient(ConfigFor(server));
  auto bound = CreateBinding(*api, "ns", "gone", "", "n1");
  ASSERT_FALSE(bound.has_value());
  EXPECT_EQ(bound.error().http_status, 404);
  EXPECT_EQ(bound.error().reason, "NotFound");
}

TEST(ApiClient, CreateBindingWithAnotherUidIsAConflict) {
  FakeApiServer server;
  server.AddPod(Pod("p"));
  auto api = MakeCurlClient(ConfigFor(server));
  auto bound = CreateBinding(*api, "ns", "p", "another-uid", "n1");
  ASSERT_FALSE(bound.has_value());
  EXPECT_EQ(bound.error().http_status, 409);
  EXPECT_EQ(server.bindings(), 0);
}

TEST(ApiClient, ASlowServerIsATransportErrorAfterTheRequestTimeout) {
  FakeApiServer server;
  server.SetLatency(std::chrono::milliseconds(3000));
  ClientConfig config = ConfigFor(server);
  config.request_timeout = std::chrono::milliseconds(200);
  auto api = MakeCurlClient(config);
  const auto start = Clock::now();
  auto nodes = api->Get("/api/v1/nodes");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().http_status, 0);
  EXPECT_NE(nodes.error().message.find("GET " + server.url() + "/api/v1/nodes"), std::string::npos)
      << nodes.error().message;
  EXPECT_LT(MillisSince(start), 1500);
}

TEST(ApiClient, ARefusedConnectionIsATransportError) {
  int port = 0;
  {
    FakeApiServer server;
    port = server.port();
  }
  ClientConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  auto api = MakeCurlClient(config);
  auto nodes = api->Get("/api/v1/nodes");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().http_status, 0);
  EXPECT_EQ(nodes.error().reason, "Couldn't connect to server");
}

TEST(ApiClient, CallsFromManyThreadsAtOnceAllSucceed) {
  FakeApiServer server;
  server.AddNode(Node("n1"));
  auto api = MakeCurlClient(ConfigFor(server));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 15; ++i) {
        if (!api->Get("/api/v1/nodes/n1")) failures.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(server.requests("get node"), 90);
}

// --- authentication ---

TEST(ApiClient, AMissingOrWrongBearerTokenIsUnauthorized) {
  FakeApiServer server(FakeApiServerOptions::Token("right"));
  for (const std::string token : {"", "wrong"}) {
    ClientConfig config = ConfigFor(server);
    config.bearer_token = token;
    auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
    ASSERT_FALSE(nodes.has_value()) << "token \"" << token << "\"";
    EXPECT_EQ(nodes.error().http_status, 401);
    EXPECT_EQ(nodes.error().reason, "Unauthorized");
  }
  ClientConfig config = ConfigFor(server);
  config.bearer_token = "right";
  auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
  EXPECT_TRUE(nodes.has_value()) << nodes.error().ToString();
}

TEST(ApiClient, TheTokenFileIsReadAgainWhenItChanges) {
  FakeApiServer server(FakeApiServerOptions::Token("first"));
  const auto dir = std::filesystem::path(::testing::TempDir()) / "api_client_token";
  std::filesystem::create_directories(dir);
  const auto file = dir / "token";
  std::ofstream(file) << "first\n";
  ClientConfig config = ConfigFor(server);
  config.token_file = file.string();
  auto api = MakeCurlClient(config);
  auto before = api->Get("/api/v1/nodes");
  ASSERT_TRUE(before.has_value()) << before.error().ToString();

  server.SetBearerToken("second-token");  // rotated; a different size as well as mtime
  std::ofstream(file) << "second-token\n";
  auto after = api->Get("/api/v1/nodes");
  EXPECT_TRUE(after.has_value()) << after.error().ToString();
  std::filesystem::remove_all(dir);
}

TEST(ApiClient, AnUnreadableTokenFileIsAnErrorNamingIt) {
  FakeApiServer server;
  ClientConfig config = ConfigFor(server);
  config.token_file = "/nonexistent/gpumux/token";
  auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().http_status, 0);
  EXPECT_NE(nodes.error().message.find("/nonexistent/gpumux/token"), std::string::npos);
  EXPECT_EQ(server.total_requests(), 0);
}

// --- TLS ---

TEST(ApiClient, HttpsWithTheRightCaIsVerified) {
  FakeApiServer server(FakeApiServerOptions::Tls(FakeTls::kServerCert));
  ASSERT_TRUE(server.ok()) << server.error();
  ClientConfig config = ConfigFor(server);
  config.ca_pem = server.tls().ca_pem;
  auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
  EXPECT_TRUE(nodes.has_value()) << nodes.error().ToString();
}

TEST(ApiClient, HttpsWithAnotherCaIsRejected) {
  FakeApiServer server(FakeApiServerOptions::Tls(FakeTls::kServerCert));
  ASSERT_TRUE(server.ok()) << server.error();
  ClientConfig config = ConfigFor(server);
  config.ca_pem = server.tls().other_ca_pem;
  auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_EQ(nodes.error().http_status, 0);
  EXPECT_NE(nodes.error().message.find("certificate"), std::string::npos) << nodes.error().message;
  EXPECT_EQ(server.total_requests(), 0);
}

TEST(ApiClient, InsecureSkipTlsVerifyAcceptsAnUnknownCa) {
  FakeApiServer server(FakeApiServerOptions::Tls(FakeTls::kServerCert));
  ASSERT_TRUE(server.ok()) << server.error();
  ClientConfig config = ConfigFor(server);
  config.insecure_skip_tls_verify = true;
  auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
  EXPECT_TRUE(nodes.has_value()) << nodes.error().ToString();
}

TEST(ApiClient, AClientCertificateFromTheCaIsAccepted) {
  FakeApiServer server(FakeApiServerOptions::Tls(FakeTls::kRequireClientCert));
  ASSERT_TRUE(server.ok()) << server.error();
  ClientConfig config = ConfigFor(server);
  config.ca_pem = server.tls().ca_pem;
  config.client_cert_pem = server.tls().client_cert_pem;
  config.client_key_pem = server.tls().client_key_pem;
  auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
  EXPECT_TRUE(nodes.has_value()) << nodes.error().ToString();
}

TEST(ApiClient, AMissingOrForeignClientCertificateIsRejected) {
  FakeApiServer server(FakeApiServerOptions::Tls(FakeTls::kRequireClientCert));
  ASSERT_TRUE(server.ok()) << server.error();
  ClientConfig none = ConfigFor(server);
  none.ca_pem = server.tls().ca_pem;
  ClientConfig foreign = none;
  foreign.client_cert_pem = server.tls().other_client_cert_pem;
  foreign.client_key_pem = server.tls().other_client_key_pem;
  for (const ClientConfig& config : {none, foreign}) {
    auto nodes = MakeCurlClient(config)->Get("/api/v1/nodes");
    ASSERT_FALSE(nodes.has_value());
    EXPECT_EQ(nodes.error().http_status, 0) << nodes.error().ToString();
  }
  EXPECT_EQ(server.total_requests(), 0);
}

// --- watch ---

TEST(ApiClient, WatchStreamsEventsInOrderAndStopsWhenTheHandlerSaysSo) {
  FakeApiServer server;
  const std::string rv = server.AddPod(Pod("a"));
  server.AddPod(Pod("b"));
  auto api = MakeCurlClient(ConfigFor(server));
  std::vector<std::string> seen;
  std::jthread writer([&] {
    server.WaitForOpenWatches(1, std::chrono::seconds(5));
    server.DeletePod("ns", "a");
    server.AddPod(Pod("c"));
  });
  auto result = api->Watch(
      "/api/v1/namespaces/ns/pods", rv,
      [&](WatchEvent&& event) {
        seen.push_back(event.type + " " + event.object["metadata"]["name"].get<std::string>());
        return seen.size() < 3;
      },
      std::stop_token(), 10);
  ASSERT_TRUE(result.has_value()) << result.error().ToString();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED b", "DELETED a", "ADDED c"}));
  EXPECT_NE(server.seen().back().target.find(
                "watch=1&allowWatchBookmarks=true&resourceVersion=" + rv + "&timeoutSeconds=10"),
            std::string::npos);
}

TEST(ApiClient, AStopRequestEndsASilentWatchPromptly) {
  FakeApiServer server;
  auto api = MakeCurlClient(ConfigFor(server));
  std::stop_source stop;
  std::jthread stopper([&] {
    server.WaitForOpenWatches(1, std::chrono::seconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop.request_stop();
  });
  const auto start = Clock::now();
  auto result = api->Watch(
      "/api/v1/pods", server.resource_version(), [](WatchEvent&&) { return true; },
      stop.get_token(), 300);
  EXPECT_TRUE(result.has_value()) << result.error().ToString();
  EXPECT_LT(MillisSince(start), 1000);
}

// External JSON goes through core::ParseJson: a value nested 100,000 deep is an error, in an
// answer and in a watch event, never a value that a recursive walk would overflow the stack on.
TEST(ApiClient, AnAnswerOrEventNestedTooDeepIsAnError) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  FakeApiServer server;
  server.FailNextWithBody("GET", "/api/v1/nodes", 200, "application/json",
                          R"({"kind":"NodeList","items":)" + deep + "}");
  auto api = MakeCurlClient(ConfigFor(server));
  auto nodes = api->Get("/api/v1/nodes");
  ASSERT_FALSE(nodes.has_value());
  EXPECT_NE(nodes.error().message.find("the answer: nested deeper than 128 levels"),
            std::string::npos)
      << nodes.error().message;
  server.FailNextWithBody("GET", "watch", 200, "application/json",
                          R"({"type":"ADDED","object":{"a":)" + deep + "}}\n");
  int events = 0;
  auto watched = api->Watch(
      "/api/v1/pods", server.resource_version(), [&](WatchEvent&&) { return ++events > 0; },
      std::stop_token(), 10);
  ASSERT_FALSE(watched.has_value());
  EXPECT_EQ(watched.error().reason, "InvalidWatchEvent");
  EXPECT_NE(watched.error().message.find("the event: nested deeper than 128 levels"),
            std::string::npos)
      << watched.error().message;
  EXPECT_EQ(events, 0);
}

TEST(ApiClient, WatchEndsSuccessfullyWhenTheServerEndsTheStream) {
  FakeApiServer server;
  auto api = MakeCurlClient(ConfigFor(server));
  std::jthread closer([&] {
    server.WaitForOpenWatches(1, std::chrono::seconds(5));
    server.CloseWatches();
  });
  auto result = api->Watch(
      "/api/v1/nodes", server.resource_version(), [](WatchEvent&&) { return true; },
      std::stop_token(), 300);
  EXPECT_TRUE(result.has_value()) << result.error().ToString();
}

TEST(ApiClient, WatchFromACompactedVersionIsHttp410) {
  FakeApiServer server;
  const std::string old = server.AddPod(Pod("a"));
  server.Compact();
  auto api = MakeCurlClient(ConfigFor(server));
  int events = 0;
  auto result = api->Watch(
      "/api/v1/pods", old, [&](WatchEvent&&) { return ++events > 0; }, std::stop_token(), 10);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().http_status, 410);
  EXPECT_EQ(result.error().reason, "Expired");
  EXPECT_EQ(events, 0);
}

TEST(ApiClient, AnErrorEventIsPassedToTheHandler) {
  FakeApiServer server(FakeApiServerOptions::Gone(GoneMode::kErrorEvent));
  const std::string old = server.AddPod(Pod("a"));
  server.Compact();
  auto api = MakeCurlClient(ConfigFor(server));
  std::vector<WatchEvent> events;
  auto result = api->Watch(
      "/api/v1/pods", old,
      [&](WatchEvent&& event) {
        events.push_back(std::move(event));
        return true;
      },
      std::stop_token(), 10);
  ASSERT_TRUE(result.has_value()) << result.error().ToString();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "ERROR");
  EXPECT_EQ(events[0].object["code"], 410);
}

TEST(ApiClient, AnInjectedWatchFailureIsAnHttpError) {
  FakeApiServer server;
  server.FailNext("GET", "watch=1", 500, "InternalError", "etcd is down");
  auto api = MakeCurlClient(ConfigFor(server));
  auto result = api->Watch(
      "/api/v1/pods", "1", [](WatchEvent&&) { return true; }, std::stop_token(), 10);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().http_status, 500);
  EXPECT_EQ(result.error().message, "etcd is down");
}

TEST(ApiClient, AnUndecodableWatchLineIsAnError) {
  FakeApiServer server;
  server.FailNextWithBody("GET", "watch=1", 200, "application/json",
                          "{\"type\":\"ADDED\",\"object\":{}}\nnot json\n");
  auto api = MakeCurlClient(ConfigFor(server));
  int events = 0;
  auto result = api->Watch(
      "/api/v1/pods", "1", [&](WatchEvent&&) { return ++events > 0; }, std::stop_token(), 10);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().reason, "InvalidWatchEvent");
  EXPECT_NE(result.error().message.find("not json"), std::string::npos);
  EXPECT_EQ(events, 1);
}

}  // namespace
}  // namespace gpumux::kube
