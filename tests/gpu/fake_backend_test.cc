// The fake backend: the hook's GPU file plus optional columns, validated with file:line errors,
// read again when it changes (health flips, XIDs appended), XIDs delivered once.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/gpu/backend.h"
#include "tests/gpu/gpu_testing.h"
#include "tests/testing/builders.h"

namespace gpumux::gpu {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using test::Contains;

class FakeBackendTest : public ::testing::Test {
 protected:
  // Replaces the GPU file as a writer should: a new file renamed over the old one.
  void Rewrite(const std::string& content) { test::ReplaceFile(dir_, "gpus.csv", content); }
  std::unique_ptr<Backend> Open(const std::string& content) {
    path_ = dir_.Write("gpus.csv", content);
    auto b = OpenFake(path_);
    EXPECT_TRUE(b.has_value()) << b.error().message;
    return b ? std::move(*b) : nullptr;
  }
  std::string OpenError(const std::string& content) {
    path_ = dir_.Write("gpus.csv", content);
    auto b = OpenFake(path_);
    EXPECT_FALSE(b.has_value());
    return b ? "" : b.error().message;
  }

  test::ScratchDir dir_;
  std::string path_;
};

TEST_F(FakeBackendTest, TheHookGpuFileListsAsItIs) {
  auto b = Open(
      "index,uuid,model,memory_mib,device\n"
      "1,GPU-bbbb,A100,40960,/dev/null\n"
      "0,GPU-aaaa,A100,40960,/dev/null\n");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->Name(), "fake");
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  ASSERT_EQ(gpus->size(), 2u);
  const Gpu& g = (*gpus)[0];
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.uuid, "GPU-aaaa");
  EXPECT_EQ(g.name, "A100");
  EXPECT_EQ(g.memory_total_mib, 40960);
  EXPECT_EQ(g.memory_used_mib, -1);
  EXPECT_EQ(g.minor, 0);
  EXPECT_EQ(g.utilization_gpu, -1);
  EXPECT_EQ(g.utilization_memory, -1);
  EXPECT_TRUE(g.processes.empty());
  EXPECT_EQ(g.health, Health::kHealthy);
  EXPECT_EQ(g.health_reason, "");
  EXPECT_EQ((*gpus)[1].uuid, "GPU-bbbb");
  EXPECT_EQ((*gpus)[1].minor, 1);
}

TEST_F(FakeBackendTest, OptionalColumnsFillTheirFields) {
  auto b = Open(
      "index,uuid,model,memory_mib,minor,health,memory_used_mib,xids\n"
      "0,GPU-aaaa,NVIDIA H100 80GB HBM3,81559,3,Healthy,1024,\n"
      "1,GPU-bbbb,NVIDIA H100 80GB HBM3,81559,,unhealthy,,\n");
  ASSERT_NE(b, nullptr);
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  EXPECT_EQ((*gpus)[0].minor, 3);
  EXPECT_EQ((*gpus)[0].memory_used_mib, 1024);
  EXPECT_EQ((*gpus)[0].health, Health::kHealthy);
  EXPECT_EQ((*gpus)[1].minor, 1);
  EXPECT_EQ((*gpus)[1].memory_used_mib, -1);
  EXPECT_EQ((*gpus)[1].health, Health::kUnhealthy);
  EXPECT_EQ((*gpus)[1].health_reason, "marked unhealthy in " + path_);
}

struct BadFile {
  const char* name;
  const char* content;
  const char* error;  // after "<path>:"
};

class FakeBackendBadFile : public FakeBackendTest, public ::testing::WithParamInterface<BadFile> {};

TEST_P(FakeBackendBadFile, IsRefusedNamingFileLineAndField) {
  const std::string error = OpenError(GetParam().content);
  EXPECT_TRUE(Contains(error, path_ + ":" + GetParam().error)) << error;
}

INSTANTIATE_TEST_SUITE_P(
    Table, FakeBackendBadFile,
    ::testing::Values(
        BadFile{"a_required_column_missing", "index,uuid,model\n0,GPU-a,A100\n", ""},
        BadFile{"an_empty_uuid", "index,uuid,model,memory_mib\n0,,A100,1\n",
                "2: column 'uuid': empty"},
        // Bytes that are not UTF-8 aborted the device plugin at start (its JSON annotation).
        BadFile{"a_model_that_is_not_utf8",
                "index,uuid,model,memory_mib\n0,GPU-a,Tesla\xff\xfe,1\n",
                "2: column 'model': not UTF-8 text: 'Tesla\\xff\\xfe'"},
        BadFile{"a_uuid_with_a_control_character",
                "index,uuid,model,memory_mib\n0,GPU-\x1b,A100,1\n",
                "2: column 'uuid': not UTF-8 text"},
        BadFile{"a_uuid_twice", "index,uuid,model,memory_mib\n0,GPU-a,A100,1\n1,GPU-a,A100,1\n",
                "3: column 'uuid': GPU-a already on line 2"},
        BadFile{"an_index_twice", "index,uuid,model,memory_mib\n0,GPU-a,A100,1\n0,GPU-b,A100,1\n",
                "3: column 'index': GPU 0 already on line 2"},
        BadFile{"a_gap_in_the_indices",
                "index,uuid,model,memory_mib\n0,GPU-a,A100,1\n2,GPU-b,A100,1\n",
                "3: column 'index': GPU 1 is missing"},
        BadFile{"a_negative_index", "index,uuid,model,memory_mib\n-1,GPU-a,A100,1\n",
                "2: column 'index': -1 outside 0..63 (a node has at most 64 GPUs, "
                "core::kMaxGpusPerNode)"},
        BadFile{"an_index_beyond_a_nodes_gpus", "index,uuid,model,memory_mib\n64,GPU-a,A100,1\n",
                "2: column 'index': 64 outside 0..63"},
        BadFile{"an_exbibyte_of_memory", "index,uuid,model,memory_mib\n0,GPU-a,T4,1099511627776\n",
                "2: column 'memory_mib': 1099511627776 MiB is more memory than a GPU may have "
                "(4294967296 MiB = 4 PiB, core::kMaxGpuMemoryMib)"},
        BadFile{"memory_beyond_int64",
                "index,uuid,model,memory_mib\n0,GPU-a,T4,99999999999999999999\n",
                "2: column 'memory_mib'"},
        BadFile{"zero_memory", "index,uuid,model,memory_mib\n0,GPU-a,A100,0\n",
                "2: column 'memory_mib': 0 is not > 0"},
        BadFile{"memory_that_is_not_a_number", "index,uuid,model,memory_mib\n0,GPU-a,A100,lots\n",
                "2: column 'memory_mib'"},
        BadFile{"more_memory_used_than_there_is",
                "index,uuid,model,memory_mib,memory_used_mib\n0,GPU-a,A100,10,11\n",
                "2: column 'memory_used_mib': 11 outside 0..10"},
        BadFile{"a_negative_minor", "index,uuid,model,memory_mib,minor\n0,GPU-a,A100,1,-3\n",
                "2: column 'minor': -3 outside"},
        BadFile{"a_health_word_it_does_not_know",
                "index,uuid,model,memory_mib,health\n0,GPU-a,A100,1,sickly\n",
                "2: column 'health': 'sickly' is neither healthy nor unhealthy"},
        BadFile{"an_xid_that_is_not_a_number",
                "index,uuid,model,memory_mib,xids\n0,GPU-a,A100,1,79;x\n",
                "2: column 'xids': 'x' is not an XID number"},
        BadFile{"an_empty_xid_entry", "index,uuid,model,memory_mib,xids\n0,GPU-a,A100,1,;79\n",
                "2: column 'xids': '' is not an XID number"},
        BadFile{"a_short_row", "index,uuid,model,memory_mib\n0,GPU-a,A100\n", "2:"}),
    test::CaseName());

TEST_F(FakeBackendTest, AFolderOrAnOversizeFileIsRefusedNamingIt) {
  const auto folder = dir_.path() / "gpus-folder.csv";
  std::filesystem::create_directories(folder);
  auto b = OpenFake(folder.string());
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().message, folder.string() + ": is a directory (expected a file)");
  const std::string big =
      dir_.Write("big.csv", "index,uuid,model,memory_mib\n" + std::string(kMaxGpuFileBytes, '\n'));
  auto too_big = OpenFake(big);
  ASSERT_FALSE(too_big.has_value());
  EXPECT_EQ(too_big.error().message,
            big + ": larger than " + std::to_string(kMaxGpuFileBytes) + " bytes");
}

TEST_F(FakeBackendTest, AMissingFileIsAnErrorNamingIt) {
  auto b = OpenFake((dir_.path() / "absent.csv").string());
  ASSERT_FALSE(b.has_value());
  EXPECT_TRUE(Contains(b.error().message, "absent.csv: cannot read")) << b.error().message;
}

TEST_F(FakeBackendTest, AHealthFlipWrittenToTheFileShowsInTheNextList) {
  auto b = Open("index,uuid,model,memory_mib,health\n0,GPU-a,A100,1,healthy\n");
  ASSERT_NE(b, nullptr);
  Rewrite("index,uuid,model,memory_mib,health\n0,GPU-a,A100,1,unhealthy\n");
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  EXPECT_EQ((*gpus)[0].health, Health::kUnhealthy);
  Rewrite("index,uuid,model,memory_mib,health\n0,GPU-a,A100,1,healthy\n");
  gpus = b->List();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_EQ((*gpus)[0].health, Health::kHealthy);
  // A GPU added to the file appears; one removed disappears.
  Rewrite("index,uuid,model,memory_mib\n0,GPU-b,A100,1\n1,GPU-c,A100,1\n");
  gpus = b->List();
  ASSERT_TRUE(gpus.has_value());
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].uuid, "GPU-b");
}

TEST_F(FakeBackendTest, AnEditInPlaceThatChangesTheSizeIsNoticedToo) {
  auto b = Open("index,uuid,model,memory_mib,health\n0,GPU-a,A100,1,healthy\n");
  ASSERT_NE(b, nullptr);
  dir_.Write("gpus.csv", "index,uuid,model,memory_mib,health\n0,GPU-a,A100,1,unhealthy\n");
  auto gpus = b->List();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_EQ((*gpus)[0].health, Health::kUnhealthy);
}

TEST_F(FakeBackendTest, AMalformedRewriteIsAnErrorUntilTheFileIsFixed) {
  auto b = Open("index,uuid,model,memory_mib\n0,GPU-a,A100,1\n");
  ASSERT_NE(b, nullptr);
  Rewrite("index,uuid,model,memory_mib\n0,GPU-a,A100,-5\n");
  auto gpus = b->List();
  ASSERT_FALSE(gpus.has_value());
  EXPECT_TRUE(Contains(gpus.error().message, path_ + ":2: column 'memory_mib'"))
      << gpus.error().message;
  const auto start = Clock::now();
  auto xids = b->WaitXid(milliseconds(60));
  EXPECT_GE(Clock::now() - start, milliseconds(60));  // waits out the timeout, then says why
  ASSERT_FALSE(xids.has_value());
  EXPECT_TRUE(Contains(xids.error().message, "memory_mib")) << xids.error().message;
  Rewrite("index,uuid,model,memory_mib\n0,GPU-a,A100,5\n");
  gpus = b->List();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  EXPECT_EQ((*gpus)[0].memory_total_mib, 5);
}

TEST_F(FakeBackendTest, XidsInTheFileAreDeliveredOnceEach) {
  auto b = Open(
      "index,uuid,model,memory_mib,xids\n"
      "0,GPU-a,A100,1,13;79\n"
      "1,GPU-b,A100,1,\n");
  ASSERT_NE(b, nullptr);
  auto first = b->WaitXid(milliseconds(0));
  ASSERT_TRUE(first.has_value()) << first.error().message;
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].uuid, "GPU-a");
  EXPECT_EQ((*first)[0].xid, 13u);
  EXPECT_EQ((*first)[1].xid, 79u);
  auto none = b->WaitXid(milliseconds(30));
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  // Appending delivers only the new entries; List() noticing the change first loses nothing.
  Rewrite(
      "index,uuid,model,memory_mib,xids\n"
      "0,GPU-a,A100,1,13;79;48\n"
      "1,GPU-b,A100,1,8\n");
  ASSERT_TRUE(b->List().has_value());
  auto next = b->WaitXid(milliseconds(0));
  ASSERT_TRUE(next.has_value());
  ASSERT_EQ(next->size(), 2u);
  EXPECT_EQ((*next)[0].uuid, "GPU-a");
  EXPECT_EQ((*next)[0].xid, 48u);
  EXPECT_EQ((*next)[1].uuid, "GPU-b");
  EXPECT_EQ((*next)[1].xid, 8u);
  // A shorter list (the history was reset) delivers nothing; growing again delivers past it.
  Rewrite("index,uuid,model,memory_mib,xids\n0,GPU-a,A100,1,62\n1,GPU-b,A100,1,8\n");
  EXPECT_TRUE(b->WaitXid(milliseconds(0))->empty());
  Rewrite("index,uuid,model,memory_mib,xids\n0,GPU-a,A100,1,62;74\n1,GPU-b,A100,1,8\n");
  next = b->WaitXid(milliseconds(0));
  ASSERT_EQ(next->size(), 1u);
  EXPECT_EQ((*next)[0].xid, 74u);
}

TEST_F(FakeBackendTest, WaitXidReturnsSoonAfterTheFileGainsAnXid) {
  auto b = Open("index,uuid,model,memory_mib,xids\n0,GPU-a,A100,1,\n");
  ASSERT_NE(b, nullptr);
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(100));
    Rewrite("index,uuid,model,memory_mib,xids\n0,GPU-a,A100,1,79\n");
  });
  const auto start = Clock::now();
  auto xids = b->WaitXid(milliseconds(5000));
  const auto waited = Clock::now() - start;
  writer.join();
  ASSERT_TRUE(xids.has_value()) << xids.error().message;
  ASSERT_EQ(xids->size(), 1u);
  EXPECT_EQ((*xids)[0].xid, 79u);
  EXPECT_LT(waited, milliseconds(2000));
}

}  // namespace
}  // namespace gpumux::gpu
