#include "gpumux/coordinator/node_status.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "gpumux/core/time.h"
#include "gpumux/kube/grant.h"
#include "tests/testing/fake_apiserver.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::coordinator {
namespace {

using nlohmann::json;

std::vector<GpuView> OneGpu(int batch) {
  GpuView g{"GPU-0", "tuned", {}, 2, 5};
  g.jobs.push_back(
      {"default/a/main", "resnet", "GPU-0", batch, batch, 0.08, batch / 0.08, 1.3, 0.06, 100});
  return {g};
}

TEST(NodeStatusTest, DecodesWhatStateJsonWrites) {
  json state = kube::StateJson("gpu-1", "joint", OneGpu(64));
  state["updated"] = "2026-11-26T10:00:00Z";
  auto status = kube::DecodeNodeStatus(state.dump());
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_EQ(status->node, "gpu-1");
  EXPECT_EQ(status->tuner, "joint");
  EXPECT_EQ(status->updated, *core::ParseRfc3339("2026-11-26T10:00:00Z"));
  ASSERT_EQ(status->gpus.size(), 1u);
  EXPECT_EQ(status->gpus[0].sessions, 2);
  EXPECT_EQ(status->gpus[0].windows, 5);
  ASSERT_EQ(status->gpus[0].jobs.size(), 1u);
  const JobView& j = status->gpus[0].jobs[0];
  EXPECT_EQ(j.job, "default/a/main");
  EXPECT_EQ(j.gpu, "GPU-0");
  EXPECT_EQ(j.batch_size, 64);
  EXPECT_DOUBLE_EQ(j.slowdown, 1.3);
  EXPECT_EQ(j.steps, 100);
}

TEST(NodeStatusTest, ABadAnnotationNamesTheField) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c :
       {Case{"[]", "gpumux.io/coordinator: not a JSON object"},
        Case{"{\"gpus\": {}}", "gpumux.io/coordinator: gpus is not a list"},
        Case{"{\"gpus\": [{\"jobs\": 1}]}", "gpumux.io/coordinator: gpus[0].jobs is not a list"},
        Case{"{\"gpus\": [{\"uuid\": \"G\", \"jobs\": [{\"job\": \"j\", \"step_s\": \"x\"}]}]}",
             "gpumux.io/coordinator: gpus[0].jobs[0].step_s is not a number"},
        Case{"{\"updated\": \"yesterday\", \"gpus\": []}", "gpumux.io/coordinator: updated: "},
        // Written by whoever may patch the node: numbers no cast may take (UB before).
        Case{"{\"gpus\": [{\"uuid\": \"G\", \"tuning_sessions\": 1e300}]}",
             "gpumux.io/coordinator: gpus[0].tuning_sessions is not a whole number from 0 to"},
        Case{"{\"gpus\": [{\"uuid\": \"G\", \"jobs\": [{\"job\": \"j\", \"batch_size\": 1e300}]}]}",
             "gpumux.io/coordinator: gpus[0].jobs[0].batch_size is not a whole number from 0 to "
             "2147483647"},
        Case{"{\"gpus\": [{\"uuid\": \"G\", \"jobs\": [{\"job\": \"j\", \"steps\": -1}]}]}",
             "gpumux.io/coordinator: gpus[0].jobs[0].steps is not a whole number"}}) {
    auto status = kube::DecodeNodeStatus(c.text);
    ASSERT_FALSE(status) << c.text;
    EXPECT_EQ(status.error().message.rfind(c.message, 0), 0u) << status.error().message;
  }
}

std::optional<kube::NodeStatus> Published(const test::FakeApiServer& api) {
  auto node = api.GetNode("gpu-1");
  if (!node) return std::nullopt;
  const json& annotations = (*node)["metadata"]["annotations"];
  auto it = annotations.find(std::string(kube::kAnnotationCoordinator));
  if (it == annotations.end()) return std::nullopt;
  auto status = kube::DecodeNodeStatus(it->get<std::string>());
  if (!status) return std::nullopt;
  return *status;
}

TEST(NodeStatusPublisherTest, PatchesTheNodeWhenTheStateChangesAndLogsAFailureStreakOnce) {
  test::FakeApiServer api;
  ASSERT_TRUE(api.ok()) << api.error();
  api.AddNode(kube::testing::NodeJson("gpu-1", 1));
  kube::ClientConfig config;
  config.server = api.url();
  auto client = kube::MakeCurlClient(config);
  std::mutex mu;
  std::vector<std::string> lines;
  NodeStatusPublisher::Options options;
  options.every = std::chrono::milliseconds(50);
  options.heartbeat = std::chrono::hours(1);
  NodeStatusPublisher publisher(*client, "gpu-1", options, [&](std::string_view line) {
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  });
  ASSERT_TRUE(publisher.Due());
  publisher.Offer(kube::StateJson("gpu-1", "joint", OneGpu(64)));
  ASSERT_TRUE(kube::testing::Eventually([&] { return publisher.patches() == 1; }));
  auto first = Published(api);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->gpus.at(0).jobs.at(0).batch_size, 64);
  EXPECT_GT(first->updated, 0);

  // The same state again is not patched (no heartbeat due).
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  publisher.Offer(kube::StateJson("gpu-1", "joint", OneGpu(64)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(publisher.patches(), 1);

  // A refused patch is logged once; the next offer succeeds and says so.
  api.FailNext("PATCH", "/api/v1/nodes/gpu-1", 500, "InternalError", "etcd is down");
  publisher.Offer(kube::StateJson("gpu-1", "joint", OneGpu(32)));
  ASSERT_TRUE(kube::testing::Eventually([&] {
    std::lock_guard lock(mu);
    return !lines.empty();
  }));
  publisher.Offer(kube::StateJson("gpu-1", "joint", OneGpu(32)));
  ASSERT_TRUE(kube::testing::Eventually([&] { return publisher.patches() == 2; }));
  EXPECT_EQ(Published(api)->gpus.at(0).jobs.at(0).batch_size, 32);
  std::lock_guard lock(mu);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("annotation=gpumux.io/coordinator error=\"HTTP 500"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("published again"), std::string::npos) << lines[1];
}

}  // namespace
}  // namespace gpumux::coordinator
