// `gpumux gpus --backend fake|nvml`, in process (cli::Main): nvidia-smi -L's text, JSON with
// every field, and the errors (no GPU file, NVML missing, a bad file).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_fixtures.h"
#include "tests/gpu/gpu_testing.h"
#include "tests/testing/builders.h"

namespace gpumux::cli {
namespace {

using Json = nlohmann::json;

using test::Contains;

class GpusBackends : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus_file_ = dir_.Write("gpus.csv",
                            "index,uuid,model,memory_mib,health,memory_used_mib,xids\n"
                            "0,GPU-aaaa,NVIDIA A100-SXM4-40GB,40960,healthy,100,\n"
                            "1,GPU-bbbb,NVIDIA A100-SXM4-40GB,40960,unhealthy,,79\n");
    state_dir_ = (dir_.path() / "state").string();
    nvml_state_ = dir_.Write("nvml-state",
                             "gpu=GPU-8f0c|NVIDIA H100 80GB HBM3|81559|1024|0|37|12|4242:512|\n"
                             "gpu=GPU-9a1d|NVIDIA H100 80GB HBM3|81559|0|1|0|0||\n");
    ::setenv("GPUMUX_FAKE_NVML", nvml_state_.c_str(), 1);
  }
  void TearDown() override { ::unsetenv("GPUMUX_FAKE_NVML"); }

  test::ScratchDir dir_;
  std::string gpus_file_;
  std::string state_dir_;
  std::string nvml_state_;
};

TEST_F(GpusBackends, FakeTextIsNvidiaSmiL) {
  const CliRun r = Gpumux({"gpus", "--backend", "fake", "--gpus-file", gpus_file_});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n"
            "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)\n");
  // --gpus, the hook's spelling, names the same file.
  EXPECT_EQ(Gpumux({"gpus", "--backend", "fake", "--gpus", gpus_file_}).out, r.out);
}

TEST_F(GpusBackends, FakeJsonHasEveryField) {
  const CliRun r = Gpumux({"gpus", "--backend", "fake", "--gpus-file", gpus_file_, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0], Json::parse(R"({"index":0,"uuid":"GPU-aaaa","name":"NVIDIA A100-SXM4-40GB",
              "memory_total_mib":40960,"memory_used_mib":100,"minor":0,"utilization_gpu":-1,
              "utilization_memory":-1,"processes":[],"health":"Healthy","health_reason":""})"));
  EXPECT_EQ(j[1]["health"], "Unhealthy");
  EXPECT_EQ(j[1]["health_reason"], "marked unhealthy in " + gpus_file_);
  EXPECT_EQ(j[1]["memory_used_mib"], -1);
}

TEST_F(GpusBackends, FakeWithReservationsSaysWhoHoldsEachGpu) {
  const CliRun r = Gpumux({"gpus", "--backend", "fake", "--gpus-file", gpus_file_, "--reservations",
                           "--state-dir", state_dir_});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)  free\n")) << r.out;
}

TEST_F(GpusBackends, FakeWithoutAGpuFileIsAUsageError) {
  ::unsetenv("GPUMUX_GPUS_FILE");
  const CliRun r = Gpumux({"gpus", "--backend", "fake"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "--backend fake needs a GPU file")) << r.err;
}

TEST_F(GpusBackends, AMalformedGpuFileNamesFileAndLine) {
  const std::string bad = dir_.Write("bad.csv", "index,uuid,model,memory_mib\n0,GPU-a,A100,0\n");
  const CliRun r = Gpumux({"gpus", "--backend", "fake", "--gpus-file", bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, bad + ":2: column 'memory_mib'")) << r.err;
}

TEST_F(GpusBackends, NvmlTextIsNvidiaSmiL) {
  const CliRun r = Gpumux({"gpus", "--backend", "nvml", "--nvml-library", GPUMUX_FAKE_NVML_LIB});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-8f0c)\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-9a1d)\n");
}

TEST_F(GpusBackends, NvmlJsonHasProcessesAndUtilisation) {
  const CliRun r =
      Gpumux({"gpus", "--backend", "nvml", "--nvml-library", GPUMUX_FAKE_NVML_LIB, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["memory_used_mib"], 1024);
  EXPECT_EQ(j[0]["utilization_gpu"], 37);
  EXPECT_EQ(j[0]["processes"], Json::parse(R"([{"pid":4242,"used_mib":512}])"));
  EXPECT_EQ(j[1]["minor"], 1);
  EXPECT_EQ(j[1]["health"], "Healthy");
}

TEST_F(GpusBackends, NvmlMissingIsExitOneWithTheReason) {
  const std::string missing = (dir_.path() / "libnvidia-ml.so.1").string();
  const CliRun r = Gpumux({"gpus", "--backend", "nvml", "--nvml-library", missing});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, "gpumux gpus: " + missing + ": cannot open (")) << r.err;
  EXPECT_TRUE(Contains(r.err, "is the NVIDIA driver installed?")) << r.err;
}

TEST_F(GpusBackends, NvmlWithReservationsIsRefused) {
  const CliRun r = Gpumux(
      {"gpus", "--backend", "nvml", "--nvml-library", GPUMUX_FAKE_NVML_LIB, "--reservations"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "--reservations is not supported with --backend nvml")) << r.err;
}

TEST_F(GpusBackends, AnUnknownBackendIsAUsageError) {
  const CliRun r = Gpumux({"gpus", "--backend", "cuda"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "cuda")) << r.err;
}

TEST_F(GpusBackends, HelpNamesTheBackends) {
  const CliRun r = Gpumux({"gpus", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Contains(r.out, "--backend")) << r.out;
  EXPECT_TRUE(Contains(r.out, "--nvml-library")) << r.out;
}

}  // namespace
}  // namespace gpumux::cli
