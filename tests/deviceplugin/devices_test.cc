// Device lists per resource and what a container gets from its grant (pure functions).
#include "gpumux/deviceplugin/devices.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>

#include "gpumux/core/cluster.h"
#include "gpumux/deviceplugin/container_env.h"
#include "tests/testing/builders.h"

namespace gpumux::deviceplugin {
namespace {

std::vector<GpuSlot> TwoGpus() {
  return {GpuSlot{0, "GPU-aaaa", 40960, 0, true}, GpuSlot{1, "GPU-bbbb", 81559, 3, true}};
}

TEST(DeviceTable, WholeGpusAreOneDeviceEachNamedByUuid) {
  auto t = DeviceTable::Build(Resource::kGpu, TwoGpus(), 1024);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  ASSERT_EQ(t->devices().size(), 2u);
  EXPECT_EQ(t->devices()[0].id, "GPU-aaaa");
  EXPECT_EQ(t->devices()[1].id, "GPU-bbbb");
  EXPECT_EQ(t->Find("GPU-bbbb")->gpu, 1);
  EXPECT_EQ(t->Find("GPU-cccc"), nullptr);
}

TEST(DeviceTable, MemoryIsCountedInWholeUnitsPerGpu) {
  auto t = DeviceTable::Build(Resource::kGpuMem, TwoGpus(), 1024);
  ASSERT_TRUE(t.has_value());
  // 40960 / 1024 = 40; 81559 / 1024 = 79.6 -> 79 (a partial unit is not offered).
  EXPECT_EQ(t->PerGpu(0), 40);
  EXPECT_EQ(t->PerGpu(1), 79);
  EXPECT_EQ(t->devices().size(), 119u);
  EXPECT_EQ(t->devices()[0].id, "GPU-aaaa-m0");
  EXPECT_EQ(t->devices()[40].id, "GPU-bbbb-m0");
  EXPECT_EQ(t->Find("GPU-bbbb-m78")->gpu, 1);
  EXPECT_EQ(t->Find("GPU-bbbb-m79"), nullptr);
  auto small = DeviceTable::Build(Resource::kGpuMem, TwoGpus(), 256);
  EXPECT_EQ(small->PerGpu(0), 160);
}

TEST(DeviceTable, ComputeIsAThousandDevicesPerGpu) {
  auto t = DeviceTable::Build(Resource::kGpuMilli, TwoGpus(), 1024);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->devices().size(), 2000u);
  EXPECT_EQ(t->devices()[999].id, "GPU-aaaa-c999");
  EXPECT_EQ(t->Find("GPU-bbbb-c0")->gpu, 1);
}

TEST(DeviceTable, HealthFollowsTheGpu) {
  auto t = DeviceTable::Build(Resource::kGpuMem, TwoGpus(), 1024);
  t->SetHealth(1, false);
  EXPECT_TRUE(t->Find("GPU-aaaa-m39")->healthy);
  EXPECT_FALSE(t->Find("GPU-bbbb-m0")->healthy);
  EXPECT_FALSE(t->Find("GPU-bbbb-m78")->healthy);
  // A table moved elsewhere still finds its devices (the index points into the elements).
  DeviceTable moved = std::move(*t);
  EXPECT_FALSE(moved.Find("GPU-bbbb-m1")->healthy);
}

TEST(DeviceTable, BadInventoriesAreRefusedWithTheReason) {
  auto dup = DeviceTable::Build(
      Resource::kGpu, {GpuSlot{0, "GPU-a", 1, 0, true}, GpuSlot{1, "GPU-a", 1, 1, true}}, 1024);
  ASSERT_FALSE(dup.has_value());
  EXPECT_NE(dup.error().message.find("GPU UUID GPU-a appears twice"), std::string::npos);
  auto empty = DeviceTable::Build(Resource::kGpu, {GpuSlot{0, "", 1, 0, true}}, 1024);
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.error().message.find("GPU 0 has no UUID"), std::string::npos);
  auto long_id = DeviceTable::Build(Resource::kGpuMilli,
                                    {GpuSlot{0, std::string(60, 'x'), 1024, 0, true}}, 1024);
  ASSERT_FALSE(long_id.has_value());
  EXPECT_NE(long_id.error().message.find("63 characters"), std::string::npos);
  EXPECT_FALSE(DeviceTable::Build(Resource::kGpuMem, TwoGpus(), 0).has_value());
}

// The reproducer's GPU (1 EiB is refused by the GPU file; 4 PiB, the most a GPU may have, is
// still 4 million gpu-mem devices at 1 GiB each): refused before anything is built, naming the
// limit and the flag that makes the devices coarser.
TEST(DeviceTable, MoreDevicesThanTheKubeletCanTakeAreRefusedNamingTheLimitAndTheFlag) {
  const std::vector<GpuSlot> huge{GpuSlot{0, "GPU-a", core::kMaxGpuMemoryMib, 0, true}};
  auto t = DeviceTable::Build(Resource::kGpuMem, huge, 1024);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().message,
            "gpumux.io/gpu-mem would list more than 65536 devices, the most one resource may "
            "list (deviceplugin::kMaxDevicesPerResource): GPU 0 alone has 4194304 (4294967296 "
            "MiB of memory in units of 1024 MiB); raise the unit with --gpu-mem-unit-mib");
  // Coarser units fit.
  auto coarse = DeviceTable::Build(Resource::kGpuMem, huge, std::int64_t{1} << 20);
  ASSERT_TRUE(coarse.has_value()) << coarse.error().message;
  EXPECT_EQ(coarse->devices().size(), 4096u);
  // Eight 80 GiB GPUs in 1 MiB units: 655,360 devices.
  std::vector<GpuSlot> eight;
  for (int i = 0; i < 8; ++i)
    eight.push_back(GpuSlot{i, test::Numbered("GPU-", i), 81920, i, true});
  auto fine = DeviceTable::Build(Resource::kGpuMem, eight, 1);
  ASSERT_FALSE(fine.has_value());
  EXPECT_NE(fine.error().message.find("kMaxDevicesPerResource"), std::string::npos);
}

TEST(DeviceTable, ABiggestNodeOfNvidiaUuidsFitsEveryResource) {
  std::vector<GpuSlot> gpus;
  for (int i = 0; i < core::kMaxGpusPerNode; ++i) {
    std::string uuid = "GPU-8f0c1d2e-3a4b-5c6d-7e8f-";
    uuid += test::Numbered("", 100000000000 + i);  // 40 characters, as NVIDIA's
    gpus.push_back(GpuSlot{i, uuid, 81920, i, true});
  }
  ASSERT_EQ(gpus[0].uuid.size(), 40u);
  for (Resource r : kAllResources) {
    auto t = DeviceTable::Build(r, gpus, 1024);
    ASSERT_TRUE(t.has_value()) << ResourceName(r) << ": " << t.error().message;
    EXPECT_LE(DeviceListBytes(t->devices()), kMaxDeviceListBytes);
  }
}

TEST(DeviceTable, AListTooLongForTheKubeletsMessageLimitIsRefused) {
  // 65,536 gpu-mem devices (the count limit) with 57-character IDs: over 4 MiB on the wire.
  const std::vector<GpuSlot> gpus{GpuSlot{0, std::string(50, 'u'), 65536, 0, true}};
  auto t = DeviceTable::Build(Resource::kGpuMem, gpus, 1);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("the device list of gpumux.io/gpu-mem would take "),
            std::string::npos)
      << t.error().message;
  EXPECT_NE(t.error().message.find("-byte gRPC message limit (deviceplugin::kMaxDeviceListBytes); "
                                   "raise the unit with --gpu-mem-unit-mib"),
            std::string::npos)
      << t.error().message;
}

TEST(DeviceTable, GpusAndMemoryBeyondANodesLimitsAreRefused) {
  std::vector<GpuSlot> many;
  for (int i = 0; i <= core::kMaxGpusPerNode; ++i) {
    many.push_back(GpuSlot{i, test::Numbered("GPU-", i), 1024, i, true});
  }
  auto t = DeviceTable::Build(Resource::kGpu, many, 1024);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().message, "65 GPUs, more than the 64 a node may have (core::kMaxGpusPerNode)");
  for (std::int64_t mib : {std::int64_t{-1}, core::kMaxGpuMemoryMib + 1}) {
    auto bad = DeviceTable::Build(Resource::kGpu, {GpuSlot{3, "GPU-a", mib, 0, true}}, 1024);
    ASSERT_FALSE(bad.has_value()) << mib;
    EXPECT_EQ(bad.error().message, "GPU 3 reports " + std::to_string(mib) +
                                       " MiB of memory, outside 0..4294967296 "
                                       "(core::kMaxGpuMemoryMib)");
  }
}

TEST(DeviceTable, AnEmptyTableIgnoresHealthAndCountsNothing) {
  DeviceTable t;
  t.SetHealth(0, false);
  t.SetHealth(-1, false);
  EXPECT_EQ(t.PerGpu(0), 0);
  auto built = DeviceTable::Build(Resource::kGpu, TwoGpus(), 1024);
  built->SetHealth(2, false);  // a position it lacks
  EXPECT_EQ(built->PerGpu(2), 0);
  EXPECT_TRUE(built->devices()[1].healthy);
}

TEST(Resources, NamesParseShortOrFull) {
  EXPECT_EQ(*ParseResource("gpu-mem"), Resource::kGpuMem);
  EXPECT_EQ(*ParseResource("gpumux.io/gpu-milli"), Resource::kGpuMilli);
  EXPECT_EQ(ResourceName(Resource::kGpu), "gpumux.io/gpu");
  EXPECT_EQ(ShortName(Resource::kGpuMilli), "gpu-milli");
  auto bad = ParseResource("nvidia.com/gpu");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("accepted: gpu, gpu-mem, gpu-milli"), std::string::npos);
}

std::vector<NodeGpu> NodeGpus() { return {{0, "GPU-aaaa", 0}, {1, "GPU-bbbb", 3}}; }

GrantContext Context() { return {"team", "train", "uid-1", "n1", "fgd"}; }

TEST(ContainerEnv, AWholeGpuGetsItsUuidAndNoMpsLimits) {
  kube::ContainerGrant g{"main", {{1, "GPU-bbbb"}}, 1000, 0, false, true};
  auto env = BuildContainerEnv(g, Context(), NodeGpus(), {});
  ASSERT_TRUE(env.has_value()) << env.error().message;
  EXPECT_EQ(env->envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-bbbb");
  EXPECT_FALSE(env->envs.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  EXPECT_FALSE(env->envs.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
  EXPECT_EQ(env->envs.at("GPUMUX_EXCLUSIVE"), "true");
  EXPECT_EQ(env->envs.at("GPUMUX_GPU_INDICES"), "1");
  EXPECT_EQ(env->envs.at("GPUMUX_GPU_MILLI"), "1000");
  EXPECT_EQ(env->envs.at("GPUMUX_POD"), "team/train");
  EXPECT_EQ(env->envs.at("GPUMUX_POD_UID"), "uid-1");
  EXPECT_EQ(env->envs.at("GPUMUX_NODE"), "n1");
  EXPECT_EQ(env->envs.at("GPUMUX_POLICY"), "fgd");
  EXPECT_TRUE(env->devices.empty());
  EXPECT_TRUE(env->cdi_devices.empty());
}

TEST(ContainerEnv, ASharedGpuGetsMpsLimitsPerVisibleOrdinal) {
  kube::ContainerGrant g{"main", {{0, "GPU-aaaa"}, {1, "GPU-bbbb"}}, 255, 8192, true, false};
  auto env = BuildContainerEnv(g, Context(), NodeGpus(), {});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-aaaa,GPU-bbbb");
  EXPECT_EQ(env->envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "26");  // ceil(25.5)
  EXPECT_EQ(env->envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M,1=8192M");
  EXPECT_EQ(env->envs.at("GPUMUX_GPU_MEM_MIB"), "8192");
  EXPECT_EQ(env->envs.at("GPUMUX_GPU_MILLI"), "255");
  EXPECT_EQ(env->envs.at("GPUMUX_EXCLUSIVE"), "false");
  // Memory only: compute is not limited.
  kube::ContainerGrant mem_only{"main", {{0, "GPU-aaaa"}}, 1, 4096, false, false};
  auto m = BuildContainerEnv(mem_only, Context(), NodeGpus(), {});
  EXPECT_FALSE(m->envs.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  EXPECT_EQ(m->envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4096M");
}

// Issue 34: with volume mounts the toolkit learns the GPUs from mounts the pod cannot add, not
// from NVIDIA_VISIBLE_DEVICES, which a pod's own env (after the plugin's) would override.
TEST(ContainerEnv, VolumeMountsNameExactlyTheGrantedGpus) {
  InjectOptions inject;
  inject.device_list = DeviceListStrategy::kVolumeMounts;
  kube::ContainerGrant g{"main", {{0, "GPU-aaaa"}, {1, "GPU-bbbb"}}, 1000, 0, false, true};
  auto env = BuildContainerEnv(g, Context(), NodeGpus(), inject);
  ASSERT_TRUE(env.has_value()) << env.error().message;
  EXPECT_EQ(env->envs.at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
  EXPECT_EQ(env->envs.at("GPUMUX_GPU_UUIDS"), "GPU-aaaa,GPU-bbbb");
  ASSERT_EQ(env->mounts.size(), 2u);
  EXPECT_EQ(env->mounts[0].host_path, "/dev/null");
  EXPECT_EQ(env->mounts[0].container_path, "/var/run/nvidia-container-devices/GPU-aaaa");
  EXPECT_EQ(env->mounts[1].container_path, "/var/run/nvidia-container-devices/GPU-bbbb");
  EXPECT_TRUE(env->mounts[0].read_only && env->mounts[1].read_only);
}

TEST(ContainerEnv, DeviceNodesMountsAndCdiWhenConfigured) {
  const auto dir = std::filesystem::temp_directory_path() / "gpumux-dev-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "nvidiactl").put('x');
  std::ofstream(dir / "nvidia-uvm").put('x');
  InjectOptions inject;
  inject.inject_devices = true;
  inject.dev_dir = dir.string();
  inject.mounts = {MountSpec{"/usr/lib/libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so.1", true}};
  inject.cdi_kind = "nvidia.com/gpu";
  kube::ContainerGrant g{"main", {{1, "GPU-bbbb"}}, 1000, 0, false, true};
  auto env = BuildContainerEnv(g, Context(), NodeGpus(), inject);
  ASSERT_TRUE(env.has_value());
  ASSERT_EQ(env->devices.size(), 3u);
  EXPECT_EQ(env->devices[0].container_path, "/dev/nvidiactl");
  EXPECT_EQ(env->devices[1].container_path, "/dev/nvidia-uvm");
  EXPECT_EQ(env->devices[2].host_path, (dir / "nvidia3").string());  // minor 3, not index 1
  EXPECT_EQ(env->devices[2].container_path, "/dev/nvidia3");
  EXPECT_EQ(env->devices[2].permissions, "rwm");
  ASSERT_EQ(env->mounts.size(), 1u);
  EXPECT_TRUE(env->mounts[0].read_only);
  ASSERT_EQ(env->cdi_devices.size(), 1u);
  EXPECT_EQ(env->cdi_devices[0], "nvidia.com/gpu=GPU-bbbb");
  std::filesystem::remove_all(dir);
}

TEST(ContainerEnv, AGrantThatDoesNotMatchTheNodeIsRefused) {
  kube::ContainerGrant wrong_uuid{"main", {{1, "GPU-zzzz"}}, 1000, 0, false, true};
  auto a = BuildContainerEnv(wrong_uuid, Context(), NodeGpus(), {});
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("names GPU 1 as GPU-zzzz, but that GPU is GPU-bbbb"),
            std::string::npos);
  kube::ContainerGrant missing{"main", {{7, ""}}, 1000, 0, false, true};
  auto b = BuildContainerEnv(missing, Context(), NodeGpus(), {});
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("names GPU 7, but node n1 has 2 GPUs"), std::string::npos);
  kube::ContainerGrant none{"main", {}, 1000, 0, false, true};
  EXPECT_FALSE(BuildContainerEnv(none, Context(), NodeGpus(), {}).has_value());
}

}  // namespace
}  // namespace gpumux::deviceplugin
