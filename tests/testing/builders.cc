#include "tests/testing/builders.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <utility>

namespace gpumux::test {

ClusterBuilder& ClusterBuilder::Node(std::string name, core::MilliCpu cpu_milli,
                                     core::MiB memory_mib) {
  core::NodeSpec n;
  n.name = std::move(name);
  n.cpu_milli = cpu_milli;
  n.memory_mib = memory_mib;
  nodes_.push_back(std::move(n));
  return *this;
}

ClusterBuilder& ClusterBuilder::Gpus(int count, std::string model, core::MiB memory_mib) {
  if (nodes_.empty()) {
    ADD_FAILURE() << "ClusterBuilder::Gpus before any Node()";
    return *this;
  }
  core::NodeSpec& n = nodes_.back();
  for (int i = 0; i < count; ++i) {
    const int index = static_cast<int>(n.gpus.size());
    n.gpus.push_back(core::GpuSpec{index, "GPU-" + n.name + "-" + std::to_string(index), model,
                                   memory_mib, core::GpuHealth::kHealthy});
  }
  return *this;
}

ClusterBuilder& ClusterBuilder::Unhealthy(int index) {
  if (nodes_.empty() || index < 0 || index >= static_cast<int>(nodes_.back().gpus.size())) {
    ADD_FAILURE() << "ClusterBuilder::Unhealthy(" << index << "): no such GPU on the last node";
    return *this;
  }
  nodes_.back().gpus[static_cast<std::size_t>(index)].health = core::GpuHealth::kUnhealthy;
  return *this;
}

ClusterBuilder& ClusterBuilder::MaxPods(int max_pods) {
  if (nodes_.empty()) {
    ADD_FAILURE() << "ClusterBuilder::MaxPods before any Node()";
    return *this;
  }
  nodes_.back().max_pods = max_pods;
  return *this;
}

core::Cluster ClusterBuilder::Build() const {
  auto cluster = core::Cluster::Build(nodes_);
  if (!cluster) {
    ADD_FAILURE() << "ClusterBuilder: " << cluster.error().message;
    return *core::Cluster::Build({});
  }
  return std::move(*cluster);
}

RequestBuilder::RequestBuilder(std::string name) { request_.name = std::move(name); }

RequestBuilder& RequestBuilder::Cpu(core::MilliCpu cpu_milli) {
  request_.cpu_milli = cpu_milli;
  return *this;
}
RequestBuilder& RequestBuilder::Memory(core::MiB memory_mib) {
  request_.memory_mib = memory_mib;
  return *this;
}
RequestBuilder& RequestBuilder::Share(core::MilliGpu milli) { return Gpus(1, milli); }
RequestBuilder& RequestBuilder::Gpus(int count, core::MilliGpu milli) {
  request_.gpu_count = count;
  request_.gpu_milli = milli;
  return *this;
}
RequestBuilder& RequestBuilder::GpuMemory(core::MiB mib) {
  request_.gpu_mib = mib;
  return *this;
}
RequestBuilder& RequestBuilder::Exclusive() {
  request_.sharing = core::GpuSharing::kExclusive;
  return *this;
}
RequestBuilder& RequestBuilder::Models(std::initializer_list<std::string> models) {
  request_.gpu_models.assign(models.begin(), models.end());
  return *this;
}
RequestBuilder& RequestBuilder::Models(std::vector<std::string> models) {
  request_.gpu_models = std::move(models);
  return *this;
}

namespace {

template <typename T>
void PrintList(std::ostream* os, const char* name, const std::vector<T>& v) {
  *os << " " << name << "={";
  for (std::size_t i = 0; i < v.size(); ++i) *os << (i ? "," : "") << v[i];
  *os << "}";
}

}  // namespace

void PrintTo(const NodeState& s, std::ostream* os) {
  *os << "cpu_free=" << s.cpu_free << " memory_free=" << s.memory_free
      << " pods_free=" << s.pods_free;
  PrintList(os, "gpu_free_milli", s.gpu_free_milli);
  PrintList(os, "gpu_free_mib", s.gpu_free_mib);
  PrintList(os, "gpu_tenants", s.gpu_tenants);
  PrintList(os, "tenants", s.tenants);
}

LedgerSnapshot LedgerSnapshot::Of(const core::Ledger& ledger) {
  LedgerSnapshot s;
  for (core::NodeIndex n = 0; n < ledger.cluster().size(); ++n) {
    const core::NodeView v = ledger.Node(n);
    NodeState st;
    st.cpu_free = v.cpu_free;
    st.memory_free = v.memory_free;
    st.pods_free = v.pods_free;
    st.gpu_free_milli.assign(v.gpu_free_milli.begin(), v.gpu_free_milli.end());
    st.gpu_free_mib.assign(v.gpu_free_mib.begin(), v.gpu_free_mib.end());
    st.gpu_tenants.assign(v.gpu_tenants.begin(), v.gpu_tenants.end());
    st.tenants.assign(v.tenants.begin(), v.tenants.end());
    s.nodes.push_back(std::move(st));
    s.generations.push_back(v.generation);
  }
  s.used_gpu_milli = ledger.used_gpu_milli();
  s.used_cpu_milli = ledger.used_cpu_milli();
  s.busy_gpus = ledger.busy_gpus();
  s.tenant_count = ledger.tenant_count();
  return s;
}

bool LedgerSnapshot::SameResources(const LedgerSnapshot& other) const {
  return nodes == other.nodes && used_gpu_milli == other.used_gpu_milli &&
         used_cpu_milli == other.used_cpu_milli && busy_gpus == other.busy_gpus &&
         tenant_count == other.tenant_count;
}

void PrintTo(const LedgerSnapshot& s, std::ostream* os) {
  *os << "{used_gpu_milli=" << s.used_gpu_milli << " used_cpu_milli=" << s.used_cpu_milli
      << " busy_gpus=" << s.busy_gpus << " tenants=" << s.tenant_count;
  for (std::size_t i = 0; i < s.nodes.size(); ++i) {
    *os << "\n  node " << i << ": ";
    PrintTo(s.nodes[i], os);
    *os << " generation=" << s.generations[i];
  }
  *os << "}";
}

std::string Numbered(std::string_view prefix, std::int64_t n) {
  std::string out(prefix);
  out += std::to_string(n);
  return out;
}

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string stem = "gpumux-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  if (info != nullptr) stem += std::string("-") + info->name();
  for (char& c : stem) {
    if (c == '/') c = '_';
  }
  path_ = std::filesystem::path(::testing::TempDir()) / stem;
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string ScratchDir::Write(const std::string& name, const std::string& content) const {
  const std::filesystem::path p = path_ / name;
  std::ofstream out(p, std::ios::binary);
  out << content;
  if (!out) ADD_FAILURE() << "cannot write " << p;
  return p.string();
}

policy::TypicalPod Typical(core::MilliCpu cpu, core::MilliGpu milli, int count, double weight,
                           core::ModelMask mask) {
  policy::TypicalPod p;
  p.cpu_milli = cpu;
  p.gpu_milli = milli;
  p.gpu_count = count;
  p.model_mask = mask;
  p.weight = weight;
  p.count = 1;
  return p;
}

}  // namespace gpumux::test
