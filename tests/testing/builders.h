// Builders for tests: small clusters, requests, ledger snapshots and scratch folders.
// Everything here is test-only; failures to build report through GoogleTest (ADD_FAILURE)
// rather than aborting, so a broken builder shows up as a failing test with a message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/cluster.h"
#include "gpumux/core/ledger.h"
#include "gpumux/core/request.h"
#include "gpumux/policy/fragmentation.h"

namespace gpumux::test {

// Makes core::NodeSpec lists. Each Node() call starts a new node; the GPU and pod modifiers
// apply to the node added last.
//
//   auto nodes = ClusterBuilder()
//                    .Node("a", 32000, 65536).Gpus(2, "T4", 16384)
//                    .Node("cpu-only", 8000, 16384)
//                    .Specs();
class ClusterBuilder {
 public:
  ClusterBuilder& Node(std::string name, core::MilliCpu cpu_milli, core::MiB memory_mib);
  // Appends `count` healthy GPUs of `model` with `memory_mib` each to the last node.
  ClusterBuilder& Gpus(int count, std::string model = "T4", core::MiB memory_mib = 16384);
  // Marks GPU `index` of the last node unhealthy.
  ClusterBuilder& Unhealthy(int index);
  ClusterBuilder& MaxPods(int max_pods);

  std::vector<core::NodeSpec> Specs() const { return nodes_; }
  // Cluster::Build of Specs(); an invalid spec is a test failure (and an empty cluster).
  core::Cluster Build() const;

 private:
  std::vector<core::NodeSpec> nodes_;
};

// Makes core::Request values with named setters instead of positional fields.
//
//   core::Request r = RequestBuilder("p").Cpu(4000).Share(500).Models({"T4"});
class RequestBuilder {
 public:
  explicit RequestBuilder(std::string name = "req");
  RequestBuilder& Cpu(core::MilliCpu cpu_milli);
  RequestBuilder& Memory(core::MiB memory_mib);
  // One GPU, `milli` of it, shared.
  RequestBuilder& Share(core::MilliGpu milli);
  // `count` GPUs with `milli` each.
  RequestBuilder& Gpus(int count, core::MilliGpu milli = core::kMilliPerGpu);
  RequestBuilder& GpuMemory(core::MiB mib);
  RequestBuilder& Exclusive();
  RequestBuilder& Models(std::initializer_list<std::string> models);
  RequestBuilder& Models(std::vector<std::string> models);

  core::Request Build() const { return request_; }
  operator core::Request() const { return request_; }  // NOLINT: builder convenience

 private:
  core::Request request_;
};

// The observable free resources of one node (NodeView without the spans' lifetimes).
struct NodeState {
  core::MilliCpu cpu_free = 0;
  core::MiB memory_free = 0;
  int pods_free = 0;
  std::vector<core::MilliGpu> gpu_free_milli;
  std::vector<core::MiB> gpu_free_mib;
  std::vector<std::uint16_t> gpu_tenants;
  std::vector<core::TenantIndex> tenants;
  bool operator==(const NodeState&) const = default;
};
void PrintTo(const NodeState& s, std::ostream* os);

// Everything a ledger shows from outside: per node state and the totals. Generations are kept
// apart so that "Release restores exactly" can compare resources while generations move on.
struct LedgerSnapshot {
  std::vector<NodeState> nodes;
  std::vector<std::uint64_t> generations;
  core::MilliGpu used_gpu_milli = 0;
  core::MilliCpu used_cpu_milli = 0;
  std::int64_t busy_gpus = 0;
  std::size_t tenant_count = 0;

  static LedgerSnapshot Of(const core::Ledger& ledger);
  // Equal resources and totals (generations ignored).
  bool SameResources(const LedgerSnapshot& other) const;
  bool operator==(const LedgerSnapshot&) const = default;
};
void PrintTo(const LedgerSnapshot& s, std::ostream* os);

// Names a value-parameterized case after the `name` field of its parameter (a sentence in
// snake_case): INSTANTIATE_TEST_SUITE_P(Table, Suite, Values(...), CaseName()).
struct CaseName {
  template <typename P>
  std::string operator()(const ::testing::TestParamInfo<P>& param_info) const {
    return std::string(param_info.param.name);
  }
};

// prefix + decimal n. (Spelled out because GCC 12 at -O3 warns falsely, -Wrestrict, on
// `"literal" + std::to_string(n)`.)
std::string Numbered(std::string_view prefix, std::int64_t n);

// A fresh folder under ::testing::TempDir(), removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Writes `content` to path()/name and returns the full path.
  std::string Write(const std::string& name, const std::string& content) const;

 private:
  std::filesystem::path path_;
};

// A typical pod (policy/fragmentation.h) with count 1 and the given weight.
policy::TypicalPod Typical(core::MilliCpu cpu, core::MilliGpu milli, int count, double weight,
                           core::ModelMask mask = core::kAnyModel);

}  // namespace gpumux::test
