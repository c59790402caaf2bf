// hook::LoadInventory (device folder listing, GPU file), VisibleDevicesValue, ResolveListed.
#include "gpumux/hook/inventory.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/builders.h"
#include "tests/testing/fake_gpu_host.h"

namespace gpumux::hook {
namespace {

namespace fs = std::filesystem;

#define SKIP_UNLESS_ROOT()                                                  \
  do {                                                                      \
    if (!test::IsRoot()) GTEST_SKIP() << "not root: mknod needs CAP_MKNOD"; \
  } while (false)

Inventory FourGpus(bool with_uuids) {
  Inventory inv;
  inv.source = "test";
  for (int i = 0; i < 4; ++i) {
    HostGpu g;
    g.index = i;
    if (with_uuids) g.uuid = test::Numbered("GPU-uuid-", i);
    inv.gpus.push_back(g);
  }
  return inv;
}

TEST(LoadInventory, ListsTheNvidiaNodesOfTheDeviceFolderInIndexOrder) {
  SKIP_UNLESS_ROOT();
  test::ScratchDir dir;
  const fs::path dev = dir.path() / "dev";
  ASSERT_EQ(test::MakeFakeDevDir(dev, 3), "");
  dir.Write("dev/null-but-a-file", "");
  ASSERT_EQ(test::MakeCharDevice(dev, "nvidia-uvm-tools", 511, 1), "");
  const auto inv = LoadInventory({dev.string(), ""});
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  EXPECT_EQ(inv->source, dev.string());
  ASSERT_EQ(inv->gpus.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const HostGpu& g = inv->gpus[static_cast<std::size_t>(i)];
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.uuid, "");
    EXPECT_EQ(g.device.host_path, (dev / test::Numbered("nvidia", i)).string());
    EXPECT_EQ(g.device.container_path, test::Numbered("/dev/nvidia", i));
    EXPECT_EQ(g.device.major, test::kNvidiaMajor);
    EXPECT_EQ(g.device.minor, static_cast<std::uint32_t>(i));
  }
  ASSERT_EQ(inv->control.size(), 3u);
  EXPECT_EQ(inv->control[0].container_path, "/dev/nvidiactl");
  EXPECT_EQ(inv->control[0].major, test::kNvidiaMajor);
  EXPECT_EQ(inv->control[0].minor, test::kNvidiaCtlMinor);
  EXPECT_EQ(inv->control[1].container_path, "/dev/nvidia-uvm");
  EXPECT_EQ(inv->control[1].major, test::kNvidiaUvmMajor);
  EXPECT_EQ(inv->control[1].minor, 0u);
  EXPECT_EQ(inv->control[2].container_path, "/dev/nvidia-uvm-tools");
  EXPECT_EQ(inv->control[2].host_path, (dev / "nvidia-uvm-tools").string());
}

TEST(LoadInventory, TenGpusSortNumericallyNotAlphabetically) {
  SKIP_UNLESS_ROOT();
  test::ScratchDir dir;
  const fs::path dev = dir.path() / "dev";
  ASSERT_EQ(test::MakeFakeDevDir(dev, 11), "");
  const auto inv = LoadInventory({dev.string(), ""});
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  ASSERT_EQ(inv->gpus.size(), 11u);
  EXPECT_EQ(inv->gpus[2].device.container_path, "/dev/nvidia2");
  EXPECT_EQ(inv->gpus[10].device.container_path, "/dev/nvidia10");
  EXPECT_EQ(inv->gpus[10].device.minor, 10u);
}

TEST(LoadInventory, AnEmptyDeviceFolderHasNoGpus) {
  test::ScratchDir dir;
  const auto inv = LoadInventory({dir.path().string(), ""});
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  EXPECT_TRUE(inv->gpus.empty());
  EXPECT_TRUE(inv->control.empty());
}

TEST(LoadInventory, AMissingDeviceFolderIsAnErrorNamingIt) {
  test::ScratchDir dir;
  const std::string missing = (dir.path() / "no-such-dev").string();
  const auto inv = LoadInventory({missing, ""});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message, missing + ": device folder does not exist");
}

TEST(LoadInventory, AGapInTheGpuNumbersIsAnError) {
  SKIP_UNLESS_ROOT();
  test::ScratchDir dir;
  const fs::path dev = dir.path() / "dev";
  ASSERT_EQ(test::MakeCharDevice(dev, "nvidia0", 195, 0), "");
  ASSERT_EQ(test::MakeCharDevice(dev, "nvidia2", 195, 2), "");
  const auto inv = LoadInventory({dev.string(), ""});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message, dev.string() +
                                     ": GPU indices must be 0..n-1 without gaps (found GPU 2 at "
                                     "position 1)");
}

TEST(LoadInventory, ARegularFileNamedLikeAGpuIsAnError) {
  test::ScratchDir dir;
  const std::string file = dir.Write("nvidia0", "not a device");
  const auto inv = LoadInventory({dir.path().string(), ""});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message, file + ": not a character device");
}

TEST(LoadInventory, ARegularFileNamedLikeAControlDeviceIsAnError) {
  test::ScratchDir dir;
  const std::string file = dir.Write("nvidiactl", "");
  const auto inv = LoadInventory({dir.path().string(), ""});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message, file + ": not a character device");
}

TEST(LoadInventory, AGpuNumberTooLargeForAnIntIsAnErrorNotACrash) {
  SKIP_UNLESS_ROOT();
  test::ScratchDir dir;
  const fs::path dev = dir.path() / "dev";
  ASSERT_EQ(test::MakeCharDevice(dev, "nvidia99999999999", 195, 7), "");
  const auto inv = LoadInventory({dev.string(), ""});
  ASSERT_FALSE(inv.has_value());
  EXPECT_NE(inv.error().message.find("nvidia99999999999"), std::string::npos)
      << inv.error().message;
}

TEST(LoadInventory, AGpuNumberBeyondWhatANodeMayHaveIsAnError) {
  SKIP_UNLESS_ROOT();
  test::ScratchDir dir;
  const fs::path dev = dir.path() / "dev";
  ASSERT_EQ(test::MakeCharDevice(dev, "nvidia64", 195, 64), "");
  const auto inv = LoadInventory({dev.string(), ""});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message, (dev / "nvidia64").string() +
                                     ": GPU number outside 0..63 (a node has at most 64 GPUs, "
                                     "core::kMaxGpusPerNode)");
}

// The GPU file: the device column names any character device, so /dev/null stands in for the
// GPUs on machines where the tests cannot mknod.
TEST(LoadInventory, AGpuFileGivesUuidsModelsAndMemoryInIndexOrder) {
  test::ScratchDir dir;
  const std::string file = dir.Write("gpus.csv",
                                     "index,uuid,model,memory_mib,device\n"
                                     "1,GPU-bbbb,A100,40960,/dev/null\n"
                                     "0,GPU-aaaa,A100,40960,/dev/null\n"
                                     "\n"
                                     "2,GPU-cccc,T4,16384,/dev/null\n");
  const auto inv = LoadInventory({dir.path().string(), file});
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  EXPECT_EQ(inv->source, file);
  ASSERT_EQ(inv->gpus.size(), 3u);
  EXPECT_EQ(inv->gpus[0].uuid, "GPU-aaaa");
  EXPECT_EQ(inv->gpus[1].uuid, "GPU-bbbb");
  EXPECT_EQ(inv->gpus[2].uuid, "GPU-cccc");
  EXPECT_EQ(inv->gpus[2].model, "T4");
  EXPECT_EQ(inv->gpus[2].memory_mib, 16384);
  EXPECT_EQ(inv->gpus[2].device.host_path, "/dev/null");
  EXPECT_EQ(inv->gpus[2].device.container_path, "/dev/nvidia2")
      << "the container sees GPU N as /dev/nvidiaN whatever the host path";
  EXPECT_EQ(inv->gpus[2].device.major, 1u);
  EXPECT_EQ(inv->gpus[2].device.minor, 3u);
}

TEST(LoadInventory, AGpuFileWithoutDeviceColumnUsesTheDeviceFolder) {
  SKIP_UNLESS_ROOT();
  test::ScratchDir dir;
  const fs::path dev = dir.path() / "dev";
  ASSERT_EQ(test::MakeFakeDevDir(dev, 2), "");
  const std::string file = dir.Write("gpus.csv",
                                     "index,uuid,model,memory_mib\n"
                                     "0,GPU-aaaa,A100,40960\n"
                                     "1,GPU-bbbb,A100,40960\n");
  const auto inv = LoadInventory({dev.string(), file});
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  ASSERT_EQ(inv->gpus.size(), 2u);
  EXPECT_EQ(inv->gpus[1].device.host_path, (dev / "nvidia1").string());
  EXPECT_EQ(inv->gpus[1].device.minor, 1u);
  EXPECT_EQ(inv->control.size(), 2u) << "control devices still come from the device folder";
}

struct GpuFileCase {
  const char* name;
  std::string csv;
  std::string message_after_path;  // the error is "<file>" + this
};

class GpuFileErrors : public ::testing::TestWithParam<GpuFileCase> {};

TEST_P(GpuFileErrors, NameTheFileAndLine) {
  const GpuFileCase& c = GetParam();
  test::ScratchDir dir;
  const std::string file = dir.Write("gpus.csv", c.csv);
  const auto inv = LoadInventory({dir.path().string(), file});
  ASSERT_FALSE(inv.has_value()) << "accepted:\n" << c.csv;
  EXPECT_EQ(inv.error().message, file + c.message_after_path);
}

INSTANTIATE_TEST_SUITE_P(
    Table, GpuFileErrors,
    ::testing::Values(
        GpuFileCase{"a_missing_column", "index,uuid,model\n0,GPU-a,A100\n",
                    ":1: missing column 'memory_mib' (header is: index,uuid,model)"},
        GpuFileCase{"an_index_that_is_not_a_number",
                    "index,uuid,model,memory_mib,device\nzero,GPU-a,A100,1,/dev/null\n",
                    ":2: column 'index': 'zero' is not an integer"},
        GpuFileCase{"an_index_out_of_range",
                    "index,uuid,model,memory_mib,device\n64,GPU-a,A100,1,/dev/null\n",
                    ":2: index 64 outside 0..63 (a node has at most 64 GPUs, "
                    "core::kMaxGpusPerNode)"},
        GpuFileCase{"a_negative_index",
                    "index,uuid,model,memory_mib,device\n-1,GPU-a,A100,1,/dev/null\n",
                    ":2: index -1 outside 0..63 (a node has at most 64 GPUs, "
                    "core::kMaxGpusPerNode)"},
        GpuFileCase{"memory_beyond_what_a_gpu_may_have",
                    "index,uuid,model,memory_mib,device\n0,GPU-a,A100,1099511627776,/dev/null\n",
                    ":2: column 'memory_mib': 1099511627776 outside 0..4294967296 "
                    "(core::kMaxGpuMemoryMib, 4 PiB)"},
        GpuFileCase{"negative_memory",
                    "index,uuid,model,memory_mib,device\n0,GPU-a,A100,-1,/dev/null\n",
                    ":2: column 'memory_mib': -1 outside 0..4294967296 "
                    "(core::kMaxGpuMemoryMib, 4 PiB)"},
        // The OCI runtime aborted after reserving: its ledger kept a pending entry.
        GpuFileCase{"a_uuid_that_is_not_utf8",
                    "index,uuid,model,memory_mib,device\n0,GPU-\xff\xfe,A100,1,/dev/null\n",
                    ":2: column 'uuid': not UTF-8 text: 'GPU-\\xff\\xfe'"},
        GpuFileCase{"a_repeated_uuid",
                    "index,uuid,model,memory_mib,device\n0,GPU-a,A100,1,/dev/null\n"
                    "1,GPU-a,A100,1,/dev/null\n",
                    ":3: column 'uuid': GPU-a already on line 2"},
        GpuFileCase{"a_missing_device_node",
                    "index,uuid,model,memory_mib,device\n0,GPU-a,A100,1,/nonexistent/nvidia0\n",
                    ":2: /nonexistent/nvidia0: no such device"},
        GpuFileCase{"a_gap_in_the_indices",
                    "index,uuid,model,memory_mib,device\n0,GPU-a,A100,1,/dev/null\n"
                    "2,GPU-c,A100,1,/dev/null\n",
                    ": GPU indices must be 0..n-1 without gaps (found GPU 2 at position 1)"},
        GpuFileCase{"a_repeated_index",
                    "index,uuid,model,memory_mib,device\n0,GPU-a,A100,1,/dev/null\n"
                    "0,GPU-b,A100,1,/dev/null\n",
                    ":3: column 'index': GPU 0 already on line 2"},
        GpuFileCase{"a_short_row", "index,uuid,model,memory_mib,device\n0,GPU-a,A100\n",
                    ":2: expected 5 fields, found 3"}),
    test::CaseName());

TEST(LoadInventory, AMissingGpuFileIsAnErrorNamingIt) {
  test::ScratchDir dir;
  const std::string missing = (dir.path() / "nope.csv").string();
  const auto inv = LoadInventory({dir.path().string(), missing});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message, missing + ": no such file");
}

TEST(LoadInventory, AGpuFileThatIsAFolderIsAnErrorNamingIt) {
  test::ScratchDir dir;
  const fs::path folder = dir.path() / "gpus.csv";
  fs::create_directories(folder);
  const auto inv = LoadInventory({dir.path().string(), folder.string()});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message, folder.string() + ": is a directory (expected a file)");
}

TEST(LoadInventory, AGpuFileLargerThanTheLimitIsRefusedNamingIt) {
  test::ScratchDir dir;
  const std::string file = dir.Write(
      "gpus.csv", "index,uuid,model,memory_mib,device\n" + std::string(kMaxGpuFileBytes, '\n'));
  const auto inv = LoadInventory({dir.path().string(), file});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().message,
            file + ": larger than " + std::to_string(kMaxGpuFileBytes) + " bytes");
}

TEST(VisibleDevicesValue, SaysUuidsWhenEveryGrantedGpuHasOne) {
  EXPECT_EQ(VisibleDevicesValue(FourGpus(true), {0, 2}), "GPU-uuid-0,GPU-uuid-2");
  EXPECT_EQ(VisibleDevicesValue(FourGpus(true), {3}), "GPU-uuid-3");
}

TEST(VisibleDevicesValue, SaysIndicesWhenAUuidIsUnknown) {
  EXPECT_EQ(VisibleDevicesValue(FourGpus(false), {0, 2}), "0,2");
  Inventory mixed = FourGpus(true);
  mixed.gpus[2].uuid.clear();
  EXPECT_EQ(VisibleDevicesValue(mixed, {1, 2, 3}), "1,2,3");
  EXPECT_EQ(VisibleDevicesValue(mixed, {1, 3}), "GPU-uuid-1,GPU-uuid-3")
      << "only the granted GPUs' UUIDs matter";
}

struct ResolveCase {
  const char* name;
  std::vector<std::string> listed;
  std::vector<int> want;
};

class ResolveListedTable : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(ResolveListedTable, GivesSortedUniqueIndices) {
  const auto got = ResolveListed(FourGpus(true), GetParam().listed);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  EXPECT_EQ(*got, GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ResolveListedTable,
    ::testing::Values(ResolveCase{"indices", {"0", "2"}, {0, 2}},
                      ResolveCase{"indices_out_of_order", {"3", "1"}, {1, 3}},
                      ResolveCase{"uuids", {"GPU-uuid-2", "GPU-uuid-0"}, {0, 2}},
                      ResolveCase{"a_mix_of_index_and_uuid_naming_the_same_gpu",
                                  {"1", "GPU-uuid-1", "GPU-uuid-3"},
                                  {1, 3}},
                      ResolveCase{"nothing", {}, {}}),
    test::CaseName());

struct UnknownCase {
  const char* name;
  std::string item;
};

class ResolveListedErrors : public ::testing::TestWithParam<UnknownCase> {};

TEST_P(ResolveListedErrors, NameTheItemAndTheHostsGpus) {
  const auto got = ResolveListed(FourGpus(true), {"0", GetParam().item});
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, core::ErrorCode::kNotFound);
  EXPECT_EQ(got.error().message, "NVIDIA_VISIBLE_DEVICES names GPU '" + GetParam().item +
                                     "', but the host has 4 GPUs (test)");
}

INSTANTIATE_TEST_SUITE_P(Table, ResolveListedErrors,
                         ::testing::Values(UnknownCase{"an_index_past_the_last_gpu", "4"},
                                           UnknownCase{"a_large_index", "999"},
                                           UnknownCase{"a_very_long_index", "99999999999999"},
                                           UnknownCase{"a_negative_index", "-1"},
                                           UnknownCase{"an_unknown_uuid", "GPU-nope"}),
                         test::CaseName());

TEST(ResolveListed, AUuidDoesNotMatchAGpuWhoseUuidIsUnknown) {
  const auto got = ResolveListed(FourGpus(false), {"GPU-uuid-0"});
  ASSERT_FALSE(got.has_value());
  EXPECT_NE(got.error().message.find("'GPU-uuid-0'"), std::string::npos);
}

}  // namespace
}  // namespace gpumux::hook
