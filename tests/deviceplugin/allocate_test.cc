// AnswerAllocate / CheckAllocateRequest: what Allocate does with whatever the kubelet sends,
// without sockets or an API server (the claim is scripted). Every bad request is
// INVALID_ARGUMENT naming what is wrong; nothing crashes, whatever the IDs.
#include "gpumux/deviceplugin/allocate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::deviceplugin {
namespace {

std::vector<GpuSlot> TwoGpus() {
  return {GpuSlot{0, "GPU-aaaa", 4096, 0, true}, GpuSlot{1, "GPU-bbbb", 4096, 1, true}};
}

// The three tables of a two-GPU node with 1 GiB gpu-mem units (4 + 4 gpu-mem devices).
std::vector<DeviceTable> Tables() {
  std::vector<DeviceTable> tables;
  for (Resource r : kAllResources) {
    auto t = DeviceTable::Build(r, TwoGpus(), 1024);
    EXPECT_TRUE(t.has_value()) << t.error().message;
    tables.push_back(std::move(*t));
  }
  return tables;
}

std::vector<NodeGpu> NodeGpus() { return {NodeGpu{0, "GPU-aaaa", 0}, NodeGpu{1, "GPU-bbbb", 1}}; }

v1beta1::AllocateRequest Request(const std::vector<std::vector<std::string>>& containers) {
  v1beta1::AllocateRequest req;
  for (const auto& ids : containers) {
    auto* c = req.add_container_requests();
    for (const std::string& id : ids) c->add_devices_ids(id);
  }
  return req;
}

// A claim that serves container "c<k>" of pod default/p for each count, granted GPU 0.
AllocateClaim ServeGpu0(std::vector<std::vector<std::int64_t>>* seen = nullptr) {
  return [seen](Resource, const std::vector<std::int64_t>& counts)
             -> HandshakeResult<std::vector<ServedContainer>> {
    if (seen != nullptr) seen->push_back(counts);
    std::vector<ServedContainer> out;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      ServedContainer c;
      c.pod_ns = "default";
      c.pod_name = "p";
      c.pod_uid = "uid-1";
      c.policy = "fgd";
      c.grant.name = test::Numbered("c", static_cast<std::int64_t>(k));
      c.grant.gpus = {kube::GrantedGpu{0, "GPU-aaaa"}};
      c.grant.exclusive = true;
      out.push_back(c);
    }
    return out;
  };
}

grpc::Status Answer(Resource r, const v1beta1::AllocateRequest& req, const AllocateClaim& claim,
                    v1beta1::AllocateResponse* resp) {
  static const std::vector<DeviceTable> tables = Tables();
  return AnswerAllocate(r, req, tables, NodeGpus(), InjectOptions{}, "n1", claim, resp);
}

struct BadRequest {
  const char* name;
  Resource resource;
  std::vector<std::vector<std::string>> containers;
  std::string message;  // the error message contains this
};

class BadAllocateRequests : public ::testing::TestWithParam<BadRequest> {};

TEST_P(BadAllocateRequests, AreInvalidArgumentNamingTheFaultAndNeverClaim) {
  std::vector<std::vector<std::int64_t>> claimed;
  v1beta1::AllocateResponse resp;
  const grpc::Status s =
      Answer(GetParam().resource, Request(GetParam().containers), ServeGpu0(&claimed), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find(GetParam().message), std::string::npos) << s.error_message();
  EXPECT_TRUE(claimed.empty()) << "a bad request must not reach the handshake";
  EXPECT_EQ(resp.container_responses_size(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadAllocateRequests,
    ::testing::Values(
        BadRequest{
            "no_container", Resource::kGpu, {}, "Allocate for gpumux.io/gpu names no container"},
        BadRequest{"a_container_without_ids",
                   Resource::kGpu,
                   {{"GPU-aaaa"}, {}},
                   "has a container (request 2) with no device IDs"},
        BadRequest{"an_unknown_id",
                   Resource::kGpu,
                   {{"GPU-nope"}},
                   "unknown device ID 'GPU-nope' for gpumux.io/gpu on node n1 (this plugin lists "
                   "2 devices, e.g. 'GPU-aaaa')"},
        BadRequest{
            "an_id_of_another_resource",
            Resource::kGpu,
            {{"GPU-aaaa-m0"}},
            "device ID 'GPU-aaaa-m0' is a gpumux.io/gpu-mem device, not a gpumux.io/gpu one"},
        BadRequest{"a_whole_gpu_asked_as_memory",
                   Resource::kGpuMem,
                   {{"GPU-aaaa-m0", "GPU-bbbb"}},
                   "device ID 'GPU-bbbb' is a gpumux.io/gpu device, not a gpumux.io/gpu-mem one"},
        BadRequest{"an_id_twice_in_one_container",
                   Resource::kGpuMem,
                   {{"GPU-aaaa-m0", "GPU-aaaa-m0"}},
                   "device ID 'GPU-aaaa-m0' appears twice in one Allocate request"},
        BadRequest{"an_id_in_two_containers",
                   Resource::kGpuMem,
                   {{"GPU-aaaa-m0"}, {"GPU-aaaa-m1", "GPU-aaaa-m0"}},
                   "device ID 'GPU-aaaa-m0' appears twice in one Allocate request"},
        BadRequest{"an_empty_id", Resource::kGpu, {{""}}, "unknown device ID '' for gpumux.io/gpu"},
        BadRequest{"control_characters_are_not_echoed",
                   Resource::kGpu,
                   {{std::string("GPU-\n\x1b[31mred")}},
                   "unknown device ID 'GPU-??[31mred'"},
        BadRequest{"an_id_with_a_nul",
                   Resource::kGpu,
                   {{std::string("GPU-aaaa\0x", 10)}},
                   "unknown device ID 'GPU-aaaa?x'"}),
    test::CaseName());

TEST(AnswerAllocate, AHugeIdIsShownShortened) {
  const std::string huge(1 << 20, 'x');
  v1beta1::AllocateResponse resp;
  const grpc::Status s = Answer(Resource::kGpu, Request({{huge}}), ServeGpu0(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("'" + std::string(64, 'x') + "...'"), std::string::npos);
  EXPECT_LT(s.error_message().size(), 400u);
}

TEST(AnswerAllocate, AHugeRequestIsRefusedAtItsFirstRepeatedId) {
  // Every gpu-milli device of GPU 0, then 100,000 more entries: the first repeat stops it.
  std::vector<std::string> ids;
  for (int k = 0; k < 1000; ++k) ids.push_back(test::Numbered("GPU-aaaa-c", k));
  for (int k = 0; k < 100000; ++k) ids.push_back("GPU-aaaa-c0");
  v1beta1::AllocateResponse resp;
  const grpc::Status s = Answer(Resource::kGpuMilli, Request({ids}), ServeGpu0(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("'GPU-aaaa-c0' appears twice"), std::string::npos);
}

TEST(AnswerAllocate, AResourceThisPluginDoesNotServeKnowsNoDevice) {
  std::vector<DeviceTable> tables = Tables();
  tables[static_cast<std::size_t>(Resource::kGpuMem)] = DeviceTable();
  v1beta1::AllocateResponse resp;
  const grpc::Status s = AnswerAllocate(Resource::kGpuMem, Request({{"GPU-aaaa-m0"}}), tables,
                                        NodeGpus(), {}, "n1", ServeGpu0(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("this plugin lists 0 devices"), std::string::npos)
      << s.error_message();
  const grpc::Status none = AnswerAllocate(Resource::kGpu, Request({{"GPU-aaaa"}}), {}, NodeGpus(),
                                           {}, "n1", ServeGpu0(), &resp);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(AnswerAllocate, AGoodRequestIsClaimedWithItsCountsAndAnswersEachContainer) {
  std::vector<std::vector<std::int64_t>> claimed;
  v1beta1::AllocateResponse resp;
  const grpc::Status s =
      Answer(Resource::kGpuMem, Request({{"GPU-aaaa-m0", "GPU-aaaa-m1"}, {"GPU-bbbb-m3"}}),
             ServeGpu0(&claimed), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(claimed, (std::vector<std::vector<std::int64_t>>{{2, 1}}));
  ASSERT_EQ(resp.container_responses_size(), 2);
  EXPECT_EQ(resp.container_responses(1).envs().at("GPUMUX_CONTAINER"), "c1");
  EXPECT_EQ(resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-aaaa");
  EXPECT_EQ(resp.container_responses(0).annotations().at("gpumux.io/pod"), "default/p");
}

TEST(AnswerAllocate, TheHandshakesAnswerKeepsItsCode) {
  const std::vector<std::pair<HandshakeError::Code, grpc::StatusCode>> codes{
      {HandshakeError::Code::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {HandshakeError::Code::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {HandshakeError::Code::kUnavailable, grpc::StatusCode::UNAVAILABLE}};
  for (const auto& [code, status] : codes) {
    const AllocateClaim refuse = [code = code](Resource, const std::vector<std::int64_t>&)
        -> HandshakeResult<std::vector<ServedContainer>> {
      return tl::unexpected(HandshakeError{code, "no lock"});
    };
    v1beta1::AllocateResponse resp;
    const grpc::Status s = Answer(Resource::kGpu, Request({{"GPU-aaaa"}}), refuse, &resp);
    EXPECT_EQ(s.error_code(), status);
    EXPECT_EQ(s.error_message(), "no lock");
  }
  v1beta1::AllocateResponse resp;
  const grpc::Status offline = Answer(Resource::kGpu, Request({{"GPU-aaaa"}}), {}, &resp);
  EXPECT_EQ(offline.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(offline.error_message().find("without an API server"), std::string::npos);
}

TEST(AnswerAllocate, AClaimThatServesTheWrongNumberOfContainersIsAnErrorNotACrash) {
  const AllocateClaim none = [](Resource, const std::vector<std::int64_t>&)
      -> HandshakeResult<std::vector<ServedContainer>> { return std::vector<ServedContainer>{}; };
  v1beta1::AllocateResponse resp;
  const grpc::Status s = Answer(Resource::kGpu, Request({{"GPU-aaaa"}}), none, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(resp.container_responses_size(), 0);
}

TEST(AnswerAllocate, AGrantNamingAGpuTheNodeLacksIsFailedPreconditionNamingThePod) {
  const AllocateClaim stray =
      [](Resource,
         const std::vector<std::int64_t>&) -> HandshakeResult<std::vector<ServedContainer>> {
    ServedContainer c;
    c.pod_ns = "default";
    c.pod_name = "p";
    c.grant.name = "main";
    c.grant.gpus = {kube::GrantedGpu{7, ""}};
    return std::vector<ServedContainer>{c};
  };
  v1beta1::AllocateResponse resp;
  const grpc::Status s = Answer(Resource::kGpu, Request({{"GPU-aaaa"}}), stray, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("pod default/p container main: the grant names GPU 7"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(resp.container_responses_size(), 0);
}

// Random requests made of real IDs of every resource, repeats, and junk: each answer is OK or a
// clean INVALID_ARGUMENT, and OK exactly when the IDs are distinct devices of the resource.
TEST(AnswerAllocate, RandomRequestsGetOkOrInvalidArgumentNeverAnythingElse) {
  const std::vector<DeviceTable> tables = Tables();
  std::vector<std::string> pool{
      "", "GPU-", "GPU-aaaa-m", "GPU-aaaa-c1000", "gpu-aaaa", std::string(300, 'z')};
  for (const DeviceTable& t : tables) {
    for (const Device& d : t.devices()) pool.push_back(d.id);
  }
  std::mt19937_64 rng(20261123);
  auto below = [&rng](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  int ok = 0;
  for (int round = 0; round < 3000; ++round) {
    const auto resource = kAllResources[below(3)];
    std::vector<std::vector<std::string>> containers(below(4));
    for (auto& ids : containers) {
      ids.resize(below(5));
      for (auto& id : ids) id = pool[below(pool.size())];
    }
    v1beta1::AllocateResponse resp;
    const grpc::Status s = AnswerAllocate(resource, Request(containers), tables, NodeGpus(), {},
                                          "n1", ServeGpu0(), &resp);
    std::vector<std::string> all;
    bool valid = !containers.empty();
    for (const auto& ids : containers) {
      valid = valid && !ids.empty();
      for (const auto& id : ids) {
        valid = valid && tables[static_cast<std::size_t>(resource)].Find(id) != nullptr &&
                std::find(all.begin(), all.end(), id) == all.end();
        all.push_back(id);
      }
    }
    if (valid) {
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(resp.container_responses_size(), static_cast<int>(containers.size()));
      ++ok;
    } else {
      ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_EQ(resp.container_responses_size(), 0);
    }
  }
  EXPECT_GT(ok, 0) << "the generator never made a good request";
}

}  // namespace
}  // namespace gpumux::deviceplugin
