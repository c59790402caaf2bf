// The extender's HTTP server over real loopback HTTP: every request body captured from
// kube-scheduler (../shared/k8s-samples) replayed, variants of them asking for gpumux
// resources, bad bodies, the probes, /metrics, /inspect, routing errors, limits and stops.
#include "gpumux/extender/extender_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/kube_fixtures.h"
#include "tests/testing/raw_http.h"

namespace gpumux::extender {
namespace {

namespace fs = std::filesystem;
using kube::testing::Eventually;
using kube::testing::GpuOf;
using kube::testing::NodeJson;
using nlohmann::json;
using test::RawConnection;
using test::RawExchange;
using test::Tricklers;
using SteadyClock = std::chrono::steady_clock;

constexpr std::int64_t kNow = 1'800'000'000;

fs::path SamplesDir() { return fs::path(GPUMUX_SOURCE_DIR) / ".." / "shared" / "k8s-samples"; }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The three nodes the samples name: fake-node-1 and -2 have 8 free 80 GiB GPUs, fake-node-3
// has 8 GPUs of 4 GiB (too small for an 8 GiB share).
std::vector<json> SampleNodes() {
  return {NodeJson("fake-node-1", 8, GpuOf{"H100", 81920}),
          NodeJson("fake-node-2", 8, GpuOf{"H100", 81920}),
          NodeJson("fake-node-3", 8, GpuOf{"T4-4G", 4096})};
}

// A sample request with its pod's only container asking for gpumux resources instead of
// example.com/gpu.
json WithGpumuxLimits(json request, const json& limits) {
  json& container = request["Pod"]["spec"]["containers"][0];
  container["resources"]["limits"] = limits;
  json requests = limits;
  requests["cpu"] = "100m";
  container["resources"]["requests"] = requests;
  return request;
}

struct Logged {
  std::mutex mu;
  std::vector<std::string> lines;
  void Add(std::string_view line) {
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  }
  bool Contains(std::string_view text) {
    std::lock_guard lock(mu);
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
};

class ExtenderServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Build({}); }

  // (Re)builds state, extender and server; `tweak` edits the server options.
  void Build(const std::function<void(ExtenderServerOptions&)>& tweak, bool synced = true,
             kube::KubeApi* api = nullptr) {
    server_.reset();
    extender_.reset();
    state_.reset();
    sched::ClusterStateOptions options;
    options.policy = "fgd";
    auto created = sched::ClusterState::Create(std::move(options), [] { return kNow; });
    ASSERT_TRUE(created.has_value()) << created.error().message;
    state_ = std::move(*created);
    const std::vector<json> nodes = SampleNodes();
    state_->SetNodes(nodes);
    state_->SetPods({});
    if (synced) state_->MarkSynced();
    extender_ = std::make_unique<Extender>(*state_, api);
    ExtenderServerOptions server_options;
    server_options.log = [this](std::string_view line) { log_.Add(line); };
    if (tweak) tweak(server_options);
    server_ = std::make_unique<ExtenderServer>(*extender_, *state_, server_options);
    auto started = server_->Start();
    ASSERT_TRUE(started.has_value()) << started.error().message;
    ASSERT_GT(server_->port(), 0);
  }

  httplib::Client Client() const {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_connection_timeout(std::chrono::seconds(5));
    client.set_tcp_nodelay(true);  // as Go's client (kube-scheduler) does
    client.set_read_timeout(std::chrono::seconds(10));
    return client;
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       const std::string& content_type = "application/json") {
    return Client().Post(path, body, content_type);
  }

  Logged log_;  // declared first: the server logs until it is destroyed
  std::unique_ptr<sched::ClusterState> state_;
  std::unique_ptr<Extender> extender_;
  std::unique_ptr<ExtenderServer> server_;
};

// A reply with "Error" as a non-empty string.
void ExpectJsonError(const httplib::Result& r, int status, const std::string& what) {
  ASSERT_TRUE(r) << what << ": no reply (" << httplib::to_string(r.error()) << ")";
  EXPECT_EQ(r->status, status) << what << ": " << r->body;
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << what << ": the error reply is not a JSON object: " << r->body;
  ASSERT_TRUE(body.contains("Error") && body["Error"].is_string()) << what << ": " << r->body;
  EXPECT_FALSE(body["Error"].get<std::string>().empty()) << what;
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
}

// Checks the shape of a 200 reply to `verb` for `request` (both parsed); returns a message
// naming the first problem, or "".
std::string CheckReplyShape(const std::string& verb, const json& request, const json& reply) {
  if (verb == "filter") {
    if (!reply.is_object()) return "filter reply is not an object";
    const bool by_names = request.contains("NodeNames") && request["NodeNames"].is_array();
    std::set<std::string> offered;
    if (by_names) {
      for (const json& n : request["NodeNames"]) offered.insert(n.get<std::string>());
      if (!reply.contains("NodeNames") || !reply["NodeNames"].is_array()) {
        return "nodeCacheCapable request, but the reply has no NodeNames list";
      }
      for (const json& n : reply["NodeNames"]) {
        if (!n.is_string() || offered.count(n.get<std::string>()) == 0) {
          return "reply names a node that was not offered: " + n.dump();
        }
      }
    } else {
      for (const json& n : request["Nodes"]["items"]) offered.insert(n["metadata"]["name"]);
      if (!reply.contains("Nodes") || !reply["Nodes"].is_object() ||
          !reply["Nodes"].contains("items") || !reply["Nodes"]["items"].is_array()) {
        return "NodeList request, but the reply has no Nodes.items list";
      }
      for (const json& n : reply["Nodes"]["items"]) {
        if (offered.count(n["metadata"]["name"].get<std::string>()) == 0) {
          return "reply has a node that was not offered: " + n["metadata"]["name"].dump();
        }
      }
    }
    if (!reply.contains("FailedNodes") || !reply["FailedNodes"].is_object()) {
      return "filter reply has no FailedNodes object";
    }
    return "";
  }
  if (verb == "prioritize") {
    if (!reply.is_array()) return "prioritize reply is not an array";
    for (const json& e : reply) {
      if (!e.is_object() || !e.contains("Host") || !e["Host"].is_string() || !e.contains("Score") ||
          !e["Score"].is_number_integer()) {
        return "prioritize entry is not {Host, Score}: " + e.dump();
      }
      const auto score = e["Score"].get<std::int64_t>();
      if (score < 0 || score > 10) return "score out of 0..10: " + e.dump();
    }
    return "";
  }
  if (verb == "preempt") {
    if (!reply.is_object() || !reply.contains("NodeNameToMetaVictims") ||
        !(reply["NodeNameToMetaVictims"].is_object() || reply["NodeNameToMetaVictims"].is_null())) {
      return "preempt reply has no NodeNameToMetaVictims object";
    }
    return "";
  }
  if (verb == "bind") {
    if (!reply.is_object() || !reply.contains("Error") || !reply["Error"].is_string()) {
      return "bind reply has no Error string";
    }
    return "";
  }
  return "unknown verb " + verb;
}

TEST_F(ExtenderServerTest, EveryCapturedKubeSchedulerRequestGetsAWellFormedReply) {
  if (!fs::is_directory(SamplesDir())) {
    GTEST_SKIP() << "no captured samples at " << SamplesDir() << " (../shared is absent)";
  }
  int replayed = 0;
  httplib::Client client = Client();
  client.set_keep_alive(true);
  for (const auto& dir : fs::directory_iterator(SamplesDir())) {
    if (!dir.is_directory()) continue;
    for (const auto& file : fs::directory_iterator(dir.path())) {
      const std::string name = file.path().filename().string();
      const std::string suffix = ".request.json";
      if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) {
        continue;
      }
      const std::string verb = name.substr(0, name.size() - suffix.size());
      const std::string what = dir.path().filename().string() + "/" + name;
      const std::string body = ReadFile(file.path());
      auto r = client.Post("/gpumux/" + verb, body, "application/json");
      ASSERT_TRUE(r) << what << ": " << httplib::to_string(r.error());
      EXPECT_EQ(r->status, 200) << what << ": " << r->body;
      const json reply = json::parse(r->body, nullptr, false);
      ASSERT_FALSE(reply.is_discarded()) << what << ": reply is not JSON: " << r->body;
      EXPECT_EQ(CheckReplyShape(verb, json::parse(body), reply), "") << what << ": " << r->body;
      if (verb == "filter") {
        // example.com/gpu is not gpumux's: the pod asks gpumux for nothing and every node passes.
        const json& passed = reply.contains("NodeNames") && reply["NodeNames"].is_array()
                                 ? reply["NodeNames"]
                                 : reply["Nodes"]["items"];
        EXPECT_EQ(passed.size(), 3U) << what << ": " << r->body;
      }
      if (verb == "bind") {
        // No API server in this test: bind says why, in the protocol's Error field.
        EXPECT_FALSE(reply["Error"].get<std::string>().empty()) << what;
      }
      ++replayed;
    }
  }
  EXPECT_GE(replayed, 11) << "expected every verb of the three sample folders";
}

TEST_F(ExtenderServerTest, ASampleAskingForAGpuShareIsFilteredAndPrioritisedForReal) {
  const fs::path dir = SamplesDir() / "v1.32.13-nodeCacheCapable-true";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no captured samples at " << dir;
  const json request =
      WithGpumuxLimits(json::parse(ReadFile(dir / "filter.request.json")),
                       {{"gpumux.io/gpu-mem", "8192"}, {"gpumux.io/gpu-milli", "250"}});
  auto r = Post("/gpumux/filter", request.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json reply = json::parse(r->body);
  ASSERT_EQ(CheckReplyShape("filter", request, reply), "") << r->body;
  EXPECT_EQ(reply["NodeNames"], json::array({"fake-node-1", "fake-node-2"})) << r->body;
  const bool failed_3 = reply["FailedNodes"].contains("fake-node-3") ||
                        (reply.contains("FailedAndUnresolvableNodes") &&
                         reply["FailedAndUnresolvableNodes"].is_object() &&
                         reply["FailedAndUnresolvableNodes"].contains("fake-node-3"));
  EXPECT_TRUE(failed_3) << "fake-node-3 (4 GiB GPUs) must be reported with a reason: " << r->body;

  json prioritize = request;
  prioritize["NodeNames"] = reply["NodeNames"];
  auto p = Post("/gpumux/prioritize", prioritize.dump());
  ASSERT_TRUE(p);
  ASSERT_EQ(p->status, 200) << p->body;
  const json scores = json::parse(p->body);
  ASSERT_EQ(CheckReplyShape("prioritize", prioritize, scores), "") << p->body;
  std::set<std::string> hosts;
  for (const json& e : scores) hosts.insert(e["Host"].get<std::string>());
  EXPECT_EQ(hosts, (std::set<std::string>{"fake-node-1", "fake-node-2"})) << p->body;
}

TEST_F(ExtenderServerTest, AFullNodeListRequestGetsTheNodesThatFitBack) {
  const fs::path dir = SamplesDir() / "v1.32.13-nodeCacheCapable-false";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no captured samples at " << dir;
  const json request = WithGpumuxLimits(json::parse(ReadFile(dir / "filter.request.json")),
                                        {{"gpumux.io/gpu-mem", "8192"}});
  auto r = Post("/gpumux/filter", request.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json reply = json::parse(r->body);
  ASSERT_EQ(CheckReplyShape("filter", request, reply), "") << r->body;
  std::vector<std::string> names;
  for (const json& n : reply["Nodes"]["items"]) names.push_back(n["metadata"]["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"fake-node-1", "fake-node-2"}));
}

TEST_F(ExtenderServerTest, APodAskingForMoreGpusThanAnyNodeHasPassesNowhere) {
  const fs::path dir = SamplesDir() / "v1.20.2-nodeCacheCapable-true";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no captured samples at " << dir;
  const json request = WithGpumuxLimits(json::parse(ReadFile(dir / "filter.request.json")),
                                        {{"gpumux.io/gpu", "9"}});
  auto r = Post("/gpumux/filter", request.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json reply = json::parse(r->body);
  ASSERT_EQ(CheckReplyShape("filter", request, reply), "") << r->body;
  EXPECT_TRUE(reply["NodeNames"].empty()) << r->body;
  std::size_t reported = reply["FailedNodes"].size();
  if (reply.contains("FailedAndUnresolvableNodes") &&
      reply["FailedAndUnresolvableNodes"].is_object()) {
    reported += reply["FailedAndUnresolvableNodes"].size();
  }
  EXPECT_EQ(reported, 3U) << "every node needs a reason for humans: " << r->body;
}

std::string Deep() { return std::string(100000, '[') + std::string(100000, ']'); }

TEST_F(ExtenderServerTest, BadBodiesAreAnswered400WithAMessageAndTheServerKeepsServing) {
  struct Case {
    const char* name;
    const char* verb;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"an empty filter body", "filter", ""},
      {"a filter body that is not JSON", "filter", "this is not json"},
      {"a truncated filter body", "filter", R"({"Pod":{"metadata":{"name":"p")"},
      {"a filter body that is a JSON array", "filter", "[]"},
      {"a filter body that is a JSON string", "filter", "\"Pod\""},
      {"a filter body whose Pod is a number", "filter", R"({"Pod":5,"NodeNames":["fake-node-1"]})"},
      {"a filter body whose NodeNames is a string", "filter",
       R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"}},"NodeNames":"fake-node-1"})"},
      {"a prioritize body that is not JSON", "prioritize", "{"},
      {"a prioritize body whose NodeNames holds numbers", "prioritize",
       R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"}},"NodeNames":[1,2]})"},
      {"an empty bind body", "bind", ""},
      {"a bind body that is not JSON", "bind", "nope"},
      {"a bind body whose PodName is a number", "bind",
       R"({"PodName":1,"PodNamespace":"d","PodUID":"u","Node":"fake-node-1"})"},
      {"an empty preempt body", "preempt", ""},
      {"a preempt body that is not JSON", "preempt", "]["},
      {"a preempt body whose victims map is a list", "preempt",
       R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"}},"NodeNameToMetaVictims":[1]})"},
      // Values nested 100,000 deep, at each reader (the repro webhook-extender-deep-json-crash):
      // refused before a recursive walk could see them.
      {"a filter Pod asking for a deep quantity", "filter",
       R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"},"spec":{"containers":[)"
       R"({"name":"c","resources":{"requests":{"gpumux.io/gpu":)" +
           Deep() + R"(}}}]}},"NodeNames":["fake-node-1"]})"},
      {"a filter NodeList item nested deep", "filter",
       R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"}},"Nodes":{"items":[)"
       R"({"metadata":{"name":"n","labels":)" +
           Deep() + "}}]}}"},
      {"a prioritize body nested deep", "prioritize", Deep()},
      {"a bind body nested deep", "bind", R"({"PodName":)" + Deep() + "}"},
      {"a preempt body nested deep", "preempt", R"({"Pod":)" + Deep() + "}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectJsonError(Post(std::string("/gpumux/") + c.verb, c.body), 400, c.name);
  }
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(ExtenderServerTest, ContentTypeMustBeJsonWithAnyParametersOrAbsent) {
  const std::string body = R"({"PodName":"p","PodNamespace":"d","PodUID":"u","Node":"n"})";
  for (const char* type :
       {"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"}) {
    auto r = Post("/gpumux/bind", body, type);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << type << ": " << r->body;
  }
  // No Content-Type header at all (a hand-written client; httplib's client always sends one).
  const std::string none = RawExchange(
      server_->port(), "POST /gpumux/bind HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_EQ(none.rfind("HTTP/1.1 200 ", 0), 0U) << none;

  ExpectJsonError(Post("/gpumux/filter", "{}", "text/plain"), 415, "text/plain");
  ExpectJsonError(Post("/gpumux/filter", "a=b", "application/x-www-form-urlencoded"), 415,
                  "a form");
  EXPECT_TRUE(log_.Contains("415"));
}

TEST_F(ExtenderServerTest, HealthzIsAlwaysOkAndReadyzWaitsForTheFirstSync) {
  Build({}, /*synced=*/false);
  httplib::Client client = Client();
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto not_ready = client.Get("/readyz");
  ASSERT_TRUE(not_ready);
  EXPECT_EQ(not_ready->status, 503);
  EXPECT_NE(not_ready->body.find("not ready"), std::string::npos) << not_ready->body;
  state_->MarkSynced();
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, "ok\n");
  auto head = client.Head("/healthz");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
}

TEST_F(ExtenderServerTest, MetricsCountRequestsByVerbAndCodeAndShowTheClusterState) {
  const fs::path dir = SamplesDir() / "v1.32.13-nodeCacheCapable-true";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no captured samples at " << dir;
  for (int i = 0; i < 3; ++i) {
    auto r = Post("/gpumux/filter", ReadFile(dir / "filter.request.json"));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }
  ASSERT_TRUE(Post("/gpumux/prioritize", ReadFile(dir / "prioritize.request.json")));
  ASSERT_TRUE(Post("/gpumux/bind", ReadFile(dir / "bind.request.json")));
  ASSERT_TRUE(Post("/gpumux/filter", "not json"));

  auto r = Client().Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain; version=0.0.4"),
            std::string::npos);
  const std::string& m = r->body;
  for (const char* expected : {
           "# TYPE gpumux_extender_requests_total counter",
           "gpumux_extender_requests_total{code=\"200\",verb=\"filter\"} 3",
           "gpumux_extender_requests_total{code=\"200\",verb=\"prioritize\"} 1",
           "gpumux_extender_requests_total{code=\"400\",verb=\"filter\"} 1",
           "# TYPE gpumux_extender_request_duration_seconds histogram",
           "gpumux_extender_request_duration_seconds_count{verb=\"filter\"} 4",
           "gpumux_extender_request_duration_seconds_bucket{verb=\"filter\",le=\"5e-05\"}",
           "gpumux_extender_request_duration_seconds_bucket{verb=\"filter\",le=\"+Inf\"} 4",
           "gpumux_extender_placements_total 0",
           "gpumux_extender_failures_total{reason=\"bad_request\",verb=\"filter\"} 1",
           "gpumux_extender_nodes 3",
           "gpumux_extender_gpus 24",
           "gpumux_extender_grants{state=\"bound\"} 0",
           "gpumux_extender_grants{state=\"assumed\"} 0",
           "gpumux_extender_grants{state=\"binding\"} 0",
           "gpumux_extender_grants{state=\"conflict\"} 0",
           "gpumux_extender_unusable_nodes 0",
           "gpumux_extender_synced 1",
           "gpumux_extender_info{policy=\"fgd\"} 1",
       }) {
    EXPECT_NE(m.find(expected), std::string::npos) << "missing: " << expected << "\n" << m;
  }
  // bind without an API server fails, and says so in the failures.
  EXPECT_NE(m.find("gpumux_extender_failures_total{reason="), std::string::npos);
  EXPECT_NE(m.find("verb=\"bind\"}"), std::string::npos);
}

TEST_F(ExtenderServerTest, InspectIsTheClusterStateAsJson) {
  auto r = Client().Get("/inspect");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json doc = json::parse(r->body, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << r->body;
  EXPECT_EQ(doc, sched::StateJson(state_->Snapshot()));
  EXPECT_NE(r->body.find("\n  "), std::string::npos) << "indented for humans";
}

TEST_F(ExtenderServerTest, UnknownPathsAre404AndWrongMethods405WithJson) {
  httplib::Client client = Client();
  ExpectJsonError(client.Get("/nope"), 404, "GET /nope");
  ExpectJsonError(client.Post("/gpumux/nope", "{}", "application/json"), 404, "POST /gpumux/nope");
  ExpectJsonError(client.Post("/filter", "{}", "application/json"), 404,
                  "a verb without the prefix");
  auto get_verb = client.Get("/gpumux/filter");
  ExpectJsonError(get_verb, 405, "GET on a verb");
  EXPECT_EQ(get_verb->get_header_value("Allow"), "POST");
  ExpectJsonError(client.Put("/gpumux/bind", "{}", "application/json"), 405, "PUT on a verb");
  ExpectJsonError(client.Delete("/gpumux/prioritize"), 405, "DELETE on a verb");
  auto post_health = client.Post("/healthz", "", "text/plain");
  ExpectJsonError(post_health, 405, "POST /healthz");
  EXPECT_EQ(post_health->get_header_value("Allow"), "GET, HEAD");
  ExpectJsonError(client.Delete("/metrics"), 405, "DELETE /metrics");
  EXPECT_TRUE(log_.Contains("GET /nope 404"));
}

TEST_F(ExtenderServerTest, ABodyOverTheLimitIs413AndCounted) {
  Build([](ExtenderServerOptions& o) { o.max_body_bytes = 1024; });
  const std::string big(4096, ' ');
  ExpectJsonError(Post("/gpumux/filter", big), 413, "a 4 KiB body over a 1 KiB limit");
  const std::string metrics = server_->RenderMetrics();
  EXPECT_NE(metrics.find("gpumux_extender_requests_total{code=\"413\",verb=\"filter\"} 1"),
            std::string::npos)
      << metrics;
  // Bodies under the limit still pass.
  auto ok = Post("/gpumux/bind", R"({"PodName":"p","PodNamespace":"d","PodUID":"u","Node":"n"})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(ExtenderServerTest, RepliesAreNotCompressedEvenWhenTheClientAcceptsGzip) {
  httplib::Client client = Client();
  client.set_decompress(false);
  httplib::Headers headers{{"Accept-Encoding", "gzip, br"}};
  const fs::path dir = SamplesDir() / "v1.32.13-nodeCacheCapable-false";
  const std::string body = fs::is_directory(dir) ? ReadFile(dir / "filter.request.json")
                                                 : std::string(R"({"Pod":null})");
  auto r = client.Post("/gpumux/filter", headers, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "");
  EXPECT_FALSE(json::parse(r->body, nullptr, false).is_discarded());
}

TEST_F(ExtenderServerTest, TheUrlPrefixIsNormalisedAndCanBeTheRoot) {
  Build([](ExtenderServerOptions& o) { o.url_prefix = "scheduler//extender/"; });
  EXPECT_EQ(server_->url_prefix(), "/scheduler/extender");
  const std::string body = R"({"PodName":"p","PodNamespace":"d","PodUID":"u","Node":"n"})";
  auto r = Post("/scheduler/extender/bind", body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  Build([](ExtenderServerOptions& o) { o.url_prefix = std::string(1, '/'); });
  EXPECT_EQ(server_->url_prefix(), "");
  auto root = Post("/bind", body);
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200) << root->body;
}

TEST(NormalizeUrlPrefixTest, SlashesAreNormalisedAndOddCharactersRefused) {
  struct Case {
    const char* in;
    const char* out;  // nullptr: an error
  };
  for (const Case& c : std::vector<Case>{{"/gpumux", "/gpumux"},
                                         {"gpumux", "/gpumux"},
                                         {"/gpumux/", "/gpumux"},
                                         {"//a//b//", "/a/b"},
                                         {"", ""},
                                         {"/", ""},
                                         {"/v1.2/x_y~z-w", "/v1.2/x_y~z-w"},
                                         {"/a b", nullptr},
                                         {"/a?b", nullptr},
                                         {"/a%20b", nullptr},
                                         {"/a/../b", nullptr},
                                         {"/./a", nullptr}}) {
    auto r = NormalizeUrlPrefix(c.in);
    if (c.out == nullptr) {
      EXPECT_FALSE(r.has_value()) << c.in;
    } else {
      ASSERT_TRUE(r.has_value()) << c.in << ": " << r.error().message;
      EXPECT_EQ(*r, c.out) << c.in;
    }
  }
}

TEST_F(ExtenderServerTest, StopIsPromptWithAnIdleKeepAliveConnectionOpen) {
  Build([](ExtenderServerOptions& o) { o.keep_alive_timeout = std::chrono::seconds(30); });
  httplib::Client client = Client();
  client.set_keep_alive(true);
  auto r = client.Get("/healthz");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  // The connection stays open, idle, for up to 30 s on the server's side.
  const auto start = SteadyClock::now();
  server_->Stop();
  const auto took = SteadyClock::now() - start;
  EXPECT_LT(took, std::chrono::milliseconds(1000))
      << std::chrono::duration<double>(took).count() << " s";
  EXPECT_FALSE(server_->running());
  EXPECT_TRUE(log_.Contains("stopped"));
  server_->Stop();  // idempotent
}

TEST_F(ExtenderServerTest, StopLetsARequestInFlightFinish) {
  // A reply of a few MB keeps the worker busy long enough to overlap the Stop.
  const fs::path dir = SamplesDir() / "v1.32.13-nodeCacheCapable-false";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no captured samples at " << dir;
  std::atomic<int> ok{0};
  std::atomic<int> attempted{0};
  std::vector<std::thread> clients;
  const std::string body = ReadFile(dir / "filter.request.json");
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_tcp_nodelay(true);
      c.set_keep_alive(true);
      for (int i = 0; i < 50; ++i) {
        ++attempted;
        auto r = c.Post("/gpumux/filter", body, "application/json");
        if (!r) break;  // the server has stopped
        if (r->status == 200 && !json::parse(r->body, nullptr, false).is_discarded()) ++ok;
      }
    });
  }
  // Stop while the clients are busy.
  const auto give_up = SteadyClock::now() + std::chrono::seconds(10);
  while (ok.load() < 8 && SteadyClock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->Stop();
  for (std::thread& t : clients) t.join();
  // Every reply that arrived is whole; the clients noticed the stop.
  EXPECT_GT(ok.load(), 0);
  EXPECT_LE(ok.load(), attempted.load());
}

TEST_F(ExtenderServerTest, ASecondServerOnTheSamePortFailsToStartAndSaysWhy) {
  const int port = server_->port();
  ExtenderServerOptions options;
  options.port = port;
  ExtenderServer second(*extender_, *state_, options);
  auto started = second.Start();
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.error().message.find(std::to_string(port)), std::string::npos)
      << started.error().message;
  EXPECT_NE(started.error().message.find("in use"), std::string::npos) << started.error().message;
  // The first one still serves.
  auto r = Client().Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(ExtenderServerTest, InvalidOptionsAreErrorsNotCrashes) {
  for (const auto& tweak : std::vector<std::function<void(ExtenderServerOptions&)>>{
           [](ExtenderServerOptions& o) { o.url_prefix = "/bad prefix"; },
           [](ExtenderServerOptions& o) { o.port = 70000; },
           [](ExtenderServerOptions& o) { o.threads = 0; },
           [](ExtenderServerOptions& o) { o.host = "192.0.2.1"; },  // not an address of ours
       }) {
    ExtenderServerOptions options;
    tweak(options);
    ExtenderServer server(*extender_, *state_, options);
    auto started = server.Start();
    EXPECT_FALSE(started.has_value());
    if (!started) {
      EXPECT_FALSE(started.error().message.empty());
    }
  }
}

TEST_F(ExtenderServerTest, ConcurrentClientsAllGetAnswers) {
  const fs::path dir = SamplesDir() / "v1.32.13-nodeCacheCapable-true";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no captured samples at " << dir;
  const std::string filter = WithGpumuxLimits(json::parse(ReadFile(dir / "filter.request.json")),
                                              {{"gpumux.io/gpu-mem", "8192"}})
                                 .dump();
  const std::string prioritize = ReadFile(dir / "prioritize.request.json");
  constexpr int kThreads = 12;  // more than the server's 8 workers
  constexpr int kEach = 40;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_tcp_nodelay(true);
      c.set_keep_alive(t % 2 == 0);
      for (int i = 0; i < kEach; ++i) {
        auto r = c.Post(i % 2 == 0 ? "/gpumux/filter" : "/gpumux/prioritize",
                        i % 2 == 0 ? filter : prioritize, "application/json");
        if (r && r->status == 200 && !json::parse(r->body, nullptr, false).is_discarded()) ++good;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(good.load(), kThreads * kEach);
}

// ---------------------------------------------------------------------------------------------
// Slow and hostile clients (the slowloris reproducer, tests/repros/extender-slowloris). These
// assert what happens, not how fast: every wait is generous, for a loaded 2-core machine.

// A KubeApi whose GET blocks until released: a bind that reads its pod is in flight for as long
// as the test wants.
class BlockingApi final : public kube::KubeApi {
 public:
  kube::ApiResult<json> Get(const std::string&) override {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
    return tl::unexpected(kube::ApiError{404, "NotFound", "not found"});
  }
  kube::ApiResult<json> List(const std::string&, int) override { return Fail(); }
  kube::ApiResult<json> Patch(const std::string&, const json&, kube::PatchType) override {
    return Fail();
  }
  kube::ApiResult<json> Post(const std::string&, const json&) override { return Fail(); }
  kube::ApiResult<void> Watch(const std::string&, const std::string&,
                              const std::function<bool(kube::WatchEvent&&)>&, std::stop_token,
                              int) override {
    return tl::unexpected(kube::ApiError{500, "InternalError", "not in this test"});
  }
  // Waits (up to 10 s) until a GET is blocked.
  bool WaitForCall() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return waiting_ > 0; });
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  static kube::ApiResult<json> Fail() {
    return tl::unexpected(kube::ApiError{500, "InternalError", "not in this test"});
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool released_ = false;
};

constexpr const char* kBindBody =
    R"({"PodName":"p","PodNamespace":"default","PodUID":"u-1","Node":"fake-node-1"})";

// The value of a metric line that starts with `prefix` (e.g. a name with its labels).
double MetricValue(const std::string& page, const std::string& prefix) {
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix + " ", 0) == 0) return std::stod(line.substr(prefix.size() + 1));
  }
  return -1;
}

TEST_F(ExtenderServerTest, ASlowClientIsClosedWith408OnceItsRequestDeadlinePasses) {
  Build([](ExtenderServerOptions& o) { o.request_read_timeout = std::chrono::milliseconds(300); });
  RawConnection slow(server_->port());
  ASSERT_TRUE(slow.connected());
  // One byte every 20 ms of a 100 KB head: it would take half an hour.
  const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(100000, 'a');
  bool closed = false;
  for (std::size_t k = 0; k < head.size() && !closed; ++k) {
    if (!slow.Send(head.substr(k, 1))) break;  // the server closed it
    closed = slow.ClosedWithin(std::chrono::milliseconds(20));
  }
  closed = closed || slow.ClosedWithin(std::chrono::seconds(10));
  EXPECT_TRUE(closed) << "the slow connection was not closed";
  EXPECT_NE(slow.received().find("408"), std::string::npos) << slow.received();
  EXPECT_TRUE(Eventually([&] { return log_.Contains("did not arrive within 0.3 s"); }));
  EXPECT_GE(MetricValue(server_->RenderMetrics(),
                        R"(gpumux_extender_connections_dropped_total{reason="request_timeout"})"),
            1);
  // A connection that sends nothing at all is closed too.
  RawConnection silent(server_->port());
  ASSERT_TRUE(silent.connected());
  EXPECT_TRUE(silent.ClosedWithin(std::chrono::seconds(10)));
}

TEST_F(ExtenderServerTest, AnIdleKeepAliveConnectionIsClosedAfterItsTimeout) {
  Build([](ExtenderServerOptions& o) { o.keep_alive_timeout = std::chrono::milliseconds(300); });
  RawConnection idle(server_->port());
  ASSERT_TRUE(idle.connected());
  ASSERT_TRUE(idle.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(idle.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(idle.received().rfind("HTTP/1.1 200", 0), 0U) << idle.received();
}

TEST_F(ExtenderServerTest, AKeepAliveConnectionServesRequestAfterRequest) {
  // kube-scheduler reuses its connection between scheduling cycles.
  httplib::Client client = Client();
  client.set_keep_alive(true);
  for (int i = 0; i < 20; ++i) {
    auto r = client.Post(
        "/gpumux/prioritize",
        R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"}},"NodeNames":["fake-node-1"]})",
        "application/json");
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_EQ(MetricValue(server_->RenderMetrics(), "gpumux_extender_connections"), 1);
}

TEST_F(ExtenderServerTest, ProbesAreAnsweredWhileManyMoreSlowClientsThanThreadsTrickle) {
  Build([](ExtenderServerOptions& o) {
    o.threads = 2;
    o.request_read_timeout = std::chrono::seconds(60);  // they stay for the whole test
  });
  Tricklers slow(server_->port(), 24, std::chrono::milliseconds(100));
  ASSERT_EQ(slow.connected(), 24);
  ASSERT_TRUE(Eventually(
      [&] { return MetricValue(server_->RenderMetrics(), "gpumux_extender_connections") >= 24; }));
  for (int i = 0; i < 10; ++i) {
    auto health = Client().Get("/healthz");
    ASSERT_TRUE(health) << "probe " << i << ": " << httplib::to_string(health.error());
    EXPECT_EQ(health->status, 200);
    auto verb = Post(
        "/gpumux/prioritize",
        R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"}},"NodeNames":["fake-node-1"]})");
    ASSERT_TRUE(verb) << "verb " << i;
    EXPECT_EQ(verb->status, 200) << verb->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST_F(ExtenderServerTest, AtTheConnectionLimitTheLongestWaitingConnectionMakesRoom) {
  Build([](ExtenderServerOptions& o) {
    o.max_connections = 4;
    o.request_read_timeout = std::chrono::seconds(60);
  });
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server_->port()));
    ASSERT_TRUE(idle.back()->connected());
    // Registered one after the other, so that the first is the one waiting longest.
    ASSERT_TRUE(Eventually([&] {
      return MetricValue(server_->RenderMetrics(), "gpumux_extender_connections") == i + 1;
    }));
  }
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(idle[0]->ClosedWithin(std::chrono::seconds(10))) << "the oldest was not evicted";
  EXPECT_FALSE(idle[3]->ClosedWithin(std::chrono::milliseconds(200)));
  EXPECT_LE(MetricValue(server_->RenderMetrics(), "gpumux_extender_connections"), 4);
  EXPECT_GE(MetricValue(server_->RenderMetrics(),
                        R"(gpumux_extender_connections_dropped_total{reason="evicted"})"),
            1);
  EXPECT_TRUE(Eventually([&] { return log_.Contains("made room for a new connection"); }));
}

TEST_F(ExtenderServerTest, AConnectionBeingAnsweredIsNeverEvictedANewcomerGets503) {
  BlockingApi api;
  Build([](ExtenderServerOptions& o) { o.max_connections = 1; }, /*synced=*/true, &api);
  std::thread bind([&] {
    auto r = Post("/gpumux/bind", kBindBody);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << r->body;  // the bind's own error, answered in full
    EXPECT_NE(r->body.find("Error"), std::string::npos);
  });
  ASSERT_TRUE(api.WaitForCall());
  auto refused = Client().Get("/healthz");
  if (refused) {  // or the connection was reset before the 503 could be read
    EXPECT_EQ(refused->status, 503) << refused->body;
    EXPECT_NE(refused->body.find("too many connections"), std::string::npos) << refused->body;
  }
  api.Release();
  bind.join();
  EXPECT_TRUE(Eventually([&] {
    auto health = Client().Get("/healthz");
    return health && health->status == 200;
  }));
}

TEST_F(ExtenderServerTest, ProbesTakeNoWorkSlotAndAVerbWaitsForOneOnlySoLong) {
  BlockingApi api;
  Build(
      [](ExtenderServerOptions& o) {
        o.threads = 1;
        o.request_read_timeout = std::chrono::milliseconds(300);
      },
      /*synced=*/true, &api);
  std::thread bind([&] { Post("/gpumux/bind", kBindBody); });
  ASSERT_TRUE(api.WaitForCall());  // the only work slot is taken
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = Client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  auto verb = Post(
      "/gpumux/prioritize",
      R"({"Pod":{"metadata":{"name":"p","namespace":"d","uid":"u"}},"NodeNames":["fake-node-1"]})");
  ASSERT_TRUE(verb);
  ExpectJsonError(verb, 503, "a verb with no work slot free");
  api.Release();
  bind.join();
}

TEST_F(ExtenderServerTest, AnOversizedHeadIs431AndAnOversizedChunkedBody413) {
  Build([](ExtenderServerOptions& o) { o.max_body_bytes = 1000; });
  const std::string big_head =
      "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(200000, 'a') + "\r\n\r\n";
  EXPECT_EQ(RawExchange(server_->port(), big_head).rfind("HTTP/1.1 431", 0), 0U);
  // Many small headers add up too.
  std::string many = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 5000; ++i) many += "X-H" + std::to_string(i) + ": 0123456789\r\n";
  EXPECT_EQ(RawExchange(server_->port(), many + "\r\n").rfind("HTTP/1.1 431", 0), 0U);
  // httplib 0.11 reads a chunked body past its payload limit; the server does not.
  std::string chunked =
      "POST /gpumux/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) chunked += "100\r\n" + std::string(256, ' ') + "\r\n";
  chunked += "0\r\n\r\n";
  const std::string reply = RawExchange(server_->port(), chunked);
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0U) << reply.substr(0, 200);
  // A Content-Length over the limit is refused before the body is sent.
  RawConnection declared(server_->port());
  ASSERT_TRUE(
      declared.Send("POST /gpumux/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: 100000000000\r\n\r\n{"));
  EXPECT_TRUE(declared.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(declared.received().rfind("HTTP/1.1 413", 0), 0U) << declared.received();
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

}  // namespace
}  // namespace gpumux::extender
