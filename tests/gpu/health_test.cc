// XID classification and the HealthTracker: application XIDs change nothing, transient ones
// recover after the window, fatal ones do not, disappearance and backend health combine.
#include "gpumux/gpu/health.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/builders.h"

namespace gpumux::gpu {
namespace {

struct XidCase {
  const char* name;
  std::uint64_t xid;
  XidClass cls;
};

class ClassifyXidTable : public ::testing::TestWithParam<XidCase> {};

TEST_P(ClassifyXidTable, ClassOfTheXid) {
  EXPECT_EQ(ClassifyXid(GetParam().xid), GetParam().cls)
      << "XID " << GetParam().xid << " is " << XidClassName(ClassifyXid(GetParam().xid));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ClassifyXidTable,
    ::testing::Values(
        XidCase{"graphics_engine_exception_13_is_the_application", 13, XidClass::kApplication},
        XidCase{"page_fault_31_is_the_application", 31, XidClass::kApplication},
        XidCase{"stopped_processing_43_is_the_application", 43, XidClass::kApplication},
        XidCase{"preemptive_cleanup_45_is_the_application", 45, XidClass::kApplication},
        XidCase{"video_processor_68_is_the_application", 68, XidClass::kApplication},
        XidCase{"context_switch_timeout_109_is_the_application", 109, XidClass::kApplication},
        XidCase{"double_bit_ecc_48_is_fatal", 48, XidClass::kFatal},
        XidCase{"micro_controller_61_is_fatal", 61, XidClass::kFatal},
        XidCase{"micro_controller_halt_62_is_fatal", 62, XidClass::kFatal},
        XidCase{"row_remap_failure_64_is_fatal", 64, XidClass::kFatal},
        XidCase{"nvlink_74_is_fatal", 74, XidClass::kFatal},
        XidCase{"fallen_off_the_bus_79_is_fatal", 79, XidClass::kFatal},
        XidCase{"uncontained_ecc_95_is_fatal", 95, XidClass::kFatal},
        XidCase{"gsp_rpc_timeout_119_is_fatal", 119, XidClass::kFatal},
        XidCase{"gsp_error_120_is_fatal", 120, XidClass::kFatal},
        XidCase{"unrecovered_ecc_140_is_fatal", 140, XidClass::kFatal},
        XidCase{"stopped_processing_8_is_transient", 8, XidClass::kTransient},
        XidCase{"contained_ecc_94_is_transient", 94, XidClass::kTransient},
        XidCase{"nvml_unknown_999_is_transient", 999, XidClass::kTransient},
        XidCase{"an_unlisted_xid_is_transient", 12345, XidClass::kTransient}),
    test::CaseName());

TEST(XidNames, ClassesAndDescriptionsReadWell) {
  EXPECT_EQ(XidClassName(XidClass::kApplication), "application");
  EXPECT_EQ(XidClassName(XidClass::kTransient), "transient");
  EXPECT_EQ(XidClassName(XidClass::kFatal), "fatal");
  EXPECT_EQ(XidDescription(79), "GPU has fallen off the bus");
  EXPECT_EQ(XidDescription(12345), "");
  EXPECT_EQ(HealthName(Health::kHealthy), "Healthy");
  EXPECT_EQ(HealthName(Health::kUnhealthy), "Unhealthy");
}

// 2024-05-01T10:00:00Z in ms.
constexpr std::int64_t kT0 = 1714557600000;

Gpu G(const std::string& uuid, int index, Health health = Health::kHealthy,
      const std::string& reason = "") {
  Gpu g;
  g.uuid = uuid;
  g.index = index;
  g.name = "NVIDIA H100 80GB HBM3";
  g.memory_total_mib = 81559;
  g.health = health;
  g.health_reason = reason;
  return g;
}

class Tracker : public ::testing::Test {
 protected:
  Tracker() : tracker_(HealthPolicy{60000, {94}}) {
    tracker_.OnSnapshot({G("GPU-a", 0), G("GPU-b", 1)}, kT0);
  }
  HealthTracker tracker_;
};

TEST_F(Tracker, GpusInTheSnapshotAreHealthyAndUnknownOnesAreNot) {
  EXPECT_EQ(tracker_.Of("GPU-a", kT0).health, Health::kHealthy);
  EXPECT_EQ(tracker_.Of("GPU-a", kT0).reason, "");
  const GpuHealth unknown = tracker_.Of("GPU-zzz", kT0);
  EXPECT_EQ(unknown.health, Health::kUnhealthy);
  EXPECT_EQ(unknown.reason, "unknown GPU");
}

TEST_F(Tracker, ApplicationXidsLeaveTheGpuHealthy) {
  for (std::uint64_t xid : {13u, 31u, 43u, 45u, 68u, 109u}) tracker_.OnXid({"GPU-a", xid}, kT0);
  tracker_.OnXid({"GPU-a", 94}, kT0);  // ignored by this policy
  EXPECT_EQ(tracker_.Of("GPU-a", kT0 + 1).health, Health::kHealthy);
  tracker_.TakeChanges(kT0);
  EXPECT_TRUE(tracker_.TakeChanges(kT0 + 1).empty());
}

TEST_F(Tracker, ATransientXidRecoversOnceTheWindowPassesWithoutAnother) {
  tracker_.OnXid({"GPU-a", 8}, kT0 + 1000);
  const GpuHealth h = tracker_.Of("GPU-a", kT0 + 1000);
  EXPECT_EQ(h.health, Health::kUnhealthy);
  EXPECT_EQ(h.reason,
            "XID 8 (transient: GPU stopped processing) at 2024-05-01T10:00:01.000Z; healthy again "
            "at 2024-05-01T10:01:01.000Z without another XID");
  EXPECT_EQ(tracker_.Of("GPU-b", kT0 + 1000).health, Health::kHealthy);
  // Another transient XID restarts the window; an application one does not.
  tracker_.OnXid({"GPU-a", 12345}, kT0 + 30000);
  tracker_.OnXid({"GPU-a", 13}, kT0 + 50000);
  EXPECT_EQ(tracker_.Of("GPU-a", kT0 + 61000).health, Health::kUnhealthy);
  EXPECT_EQ(tracker_.Of("GPU-a", kT0 + 89999).health, Health::kUnhealthy);
  EXPECT_EQ(tracker_.Of("GPU-a", kT0 + 90000).health, Health::kHealthy);
  EXPECT_EQ(tracker_.Of("GPU-a", kT0 + 90000).reason, "");
}

TEST_F(Tracker, AFatalXidStaysUnhealthyForever) {
  tracker_.OnXid({"GPU-b", 79}, kT0 + 5);
  tracker_.OnXid({"GPU-b", 48}, kT0 + 6);  // the first fatal one is the reason
  for (std::int64_t later : {kT0 + 5, kT0 + 3600000, kT0 + std::int64_t{86400000} * 30}) {
    const GpuHealth h = tracker_.Of("GPU-b", later);
    EXPECT_EQ(h.health, Health::kUnhealthy);
    EXPECT_EQ(h.reason,
              "XID 79 (fatal: GPU has fallen off the bus) at 2024-05-01T10:00:00.005Z; unhealthy "
              "until gpumux restarts");
  }
  EXPECT_EQ(tracker_.Of("GPU-a", kT0 + 5).health, Health::kHealthy);
}

TEST_F(Tracker, AnXidWithoutAUuidCountsForEveryGpu) {
  tracker_.OnXid({"", 62}, kT0);
  EXPECT_EQ(tracker_.Of("GPU-a", kT0).health, Health::kUnhealthy);
  EXPECT_EQ(tracker_.Of("GPU-b", kT0).health, Health::kUnhealthy);
}

TEST_F(Tracker, AGpuMissingFromASnapshotIsUnhealthyUntilItIsBack) {
  tracker_.OnSnapshot({G("GPU-a", 0)}, kT0 + 10);
  GpuHealth h = tracker_.Of("GPU-b", kT0 + 10);
  EXPECT_EQ(h.health, Health::kUnhealthy);
  EXPECT_EQ(h.reason, "GPU GPU-b disappeared");
  tracker_.OnSnapshot({G("GPU-a", 0), G("GPU-b", 1)}, kT0 + 20);
  EXPECT_EQ(tracker_.Of("GPU-b", kT0 + 20).health, Health::kHealthy);
}

TEST_F(Tracker, BackendHealthCombinesWithXids) {
  tracker_.OnSnapshot(
      {G("GPU-a", 0, Health::kUnhealthy, "marked unhealthy in gpus.csv"), G("GPU-b", 1)}, kT0);
  tracker_.OnXid({"GPU-a", 95}, kT0);
  GpuHealth h = tracker_.Of("GPU-a", kT0);
  EXPECT_EQ(h.health, Health::kUnhealthy);
  EXPECT_EQ(h.reason,
            "marked unhealthy in gpus.csv; XID 95 (fatal: uncontained ECC error) at "
            "2024-05-01T10:00:00.000Z; unhealthy until gpumux restarts");
  // The backend recovering does not clear the fatal XID.
  tracker_.OnSnapshot({G("GPU-a", 0), G("GPU-b", 1)}, kT0 + 1);
  EXPECT_EQ(tracker_.Of("GPU-a", kT0 + 1).health, Health::kUnhealthy);
  // A backend verdict alone, without a reason, still says something.
  tracker_.OnSnapshot({G("GPU-a", 0), G("GPU-b", 1, Health::kUnhealthy)}, kT0 + 2);
  EXPECT_EQ(tracker_.Of("GPU-b", kT0 + 2).reason, "reported unhealthy");
}

TEST_F(Tracker, AnXidBeforeTheGpuIsListedCountsOnceItIs) {
  tracker_.OnXid({"GPU-new", 79}, kT0);
  EXPECT_EQ(tracker_.Of("GPU-new", kT0).reason, "unknown GPU");
  tracker_.OnSnapshot({G("GPU-a", 0), G("GPU-b", 1), G("GPU-new", 2)}, kT0 + 1);
  EXPECT_NE(tracker_.Of("GPU-new", kT0 + 1).reason.find("XID 79 (fatal"), std::string::npos);
}

TEST_F(Tracker, TakeChangesReportsNewGpusThenFlipsIncludingRecoveryByTime) {
  EXPECT_EQ(tracker_.TakeChanges(kT0), (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_TRUE(tracker_.TakeChanges(kT0).empty());
  tracker_.OnXid({"GPU-b", 8}, kT0 + 100);
  tracker_.OnXid({"GPU-a", 13}, kT0 + 100);
  EXPECT_EQ(tracker_.TakeChanges(kT0 + 100), (std::vector<std::string>{"GPU-b"}));
  EXPECT_TRUE(tracker_.TakeChanges(kT0 + 60099).empty());
  EXPECT_EQ(tracker_.TakeChanges(kT0 + 60100), (std::vector<std::string>{"GPU-b"}));
  EXPECT_EQ(tracker_.Of("GPU-b", kT0 + 60100).health, Health::kHealthy);
  // A second XID while already unhealthy changes the reason, not the verdict.
  tracker_.OnXid({"GPU-a", 79}, kT0 + 70000);
  tracker_.OnXid({"GPU-a", 8}, kT0 + 70001);
  EXPECT_EQ(tracker_.TakeChanges(kT0 + 70001), (std::vector<std::string>{"GPU-a"}));
  EXPECT_TRUE(tracker_.TakeChanges(kT0 + 999999).empty());
  tracker_.OnSnapshot({G("GPU-a", 0), G("GPU-b", 1), G("GPU-c", 2)}, kT0 + 1000000);
  EXPECT_EQ(tracker_.TakeChanges(kT0 + 1000000), (std::vector<std::string>{"GPU-c"}));
}

TEST(TrackerDefaults, TheDefaultWindowIsFiveMinutes) {
  HealthTracker t{HealthPolicy{}};
  t.OnSnapshot({G("GPU-a", 0)}, kT0);
  t.OnXid({"GPU-a", 8}, kT0);
  EXPECT_EQ(t.Of("GPU-a", kT0 + 299999).health, Health::kUnhealthy);
  EXPECT_EQ(t.Of("GPU-a", kT0 + 300000).health, Health::kHealthy);
}

}  // namespace
}  // namespace gpumux::gpu
