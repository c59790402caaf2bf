// Manifests of trace-driven workloads: every kind of request, read back by the extender's own
// decoder (DecodePod) into the request it came from.
#include "gpumux/runs/workload.h"

#include <gtest/gtest.h>

#include "gpumux/kube/objects.h"

namespace gpumux::runs {
namespace {

using nlohmann::json;

core::Request Share(int gpus, core::MilliGpu milli, core::MiB mib) {
  core::Request r;
  r.gpu_count = gpus;
  r.gpu_milli = milli;
  r.gpu_mib = mib;
  r.sharing = core::GpuSharing::kShared;
  return r;
}

struct RequestCase {
  std::string name;
  core::Request request;
  json limits;            // what the manifest asks
  core::Request decoded;  // what the extender reads from it (unit 1024 MiB)
};

class WorkloadRequests : public ::testing::TestWithParam<RequestCase> {};

TEST_P(WorkloadRequests, BecomeTheExtendedResourcesTheExtenderReadsBack) {
  const RequestCase& c = GetParam();
  WorkloadItem item;
  item.job = "j0001";
  item.request = c.request;
  ManifestOptions o;
  o.image = "busybox:1.36";
  auto pod = MakeManifest(item, o);
  ASSERT_TRUE(pod) << pod.error().message;
  const json& container = (*pod)["spec"]["containers"][0];
  EXPECT_EQ(container.value("resources", json::object()).value("limits", json::object()), c.limits)
      << *pod;

  json with_uid = *pod;
  with_uid["metadata"]["uid"] = "u-1";
  auto info = kube::DecodePod(with_uid, kube::kDefaultGpuMemUnitMib);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_TRUE(info->request_error.empty()) << info->request_error;
  if (c.request.gpu_count == 0) {
    EXPECT_TRUE(info->containers.empty());
    return;
  }
  ASSERT_EQ(info->containers.size(), 1u);
  const core::Request& got = info->containers[0].request;
  EXPECT_EQ(got.gpu_count, c.decoded.gpu_count);
  EXPECT_EQ(got.gpu_milli, c.decoded.gpu_milli);
  EXPECT_EQ(got.gpu_mib, c.decoded.gpu_mib);
  EXPECT_EQ(got.sharing, c.decoded.sharing);
  EXPECT_EQ(got.gpu_models, c.request.gpu_models);
  EXPECT_EQ(got.workload_class, c.request.workload_class);
}

core::Request Exclusive(int gpus) {
  core::Request r;
  r.gpu_count = gpus;
  r.gpu_milli = core::kMilliPerGpu;
  r.sharing = core::GpuSharing::kExclusive;
  return r;
}

core::Request WithModelsAndClass(core::Request r) {
  r.gpu_models = {"T4", "V100M16"};
  r.workload_class = "resnet50";
  return r;
}

INSTANTIATE_TEST_SUITE_P(
    Workload, WorkloadRequests,
    ::testing::Values(
        RequestCase{
            "AnExclusiveRequestIsWholeGpus", Exclusive(2), {{"gpumux.io/gpu", "2"}}, Exclusive(2)},
        RequestCase{"ATracePodOf1000MilliIsOneWholeGpu",
                    Share(1, 1000, 0),
                    {{"gpumux.io/gpu", "1"}},
                    Exclusive(1)},
        RequestCase{"ATracePodOf8x1000MilliIsEightWholeGpus",
                    Share(8, 1000, 0),
                    {{"gpumux.io/gpu", "8"}},
                    Exclusive(8)},
        RequestCase{"AFractionOfOneGpuIsGpuMilli",
                    WithModelsAndClass(Share(1, 460, 0)),
                    {{"gpumux.io/gpu-milli", "460"}},
                    Share(1, 460, 0)},
        RequestCase{"GpuMemoryIsInUnitsOf1024MibRoundedUp",
                    Share(1, 0, 8704),
                    {{"gpumux.io/gpu-mem", "9"}},
                    Share(1, 1, 9216)},
        RequestCase{"MemoryAndComputeTogether",
                    Share(1, 250, 4096),
                    {{"gpumux.io/gpu-milli", "250"}, {"gpumux.io/gpu-mem", "4"}},
                    Share(1, 250, 4096)},
        RequestCase{"TheSameShareOnEachOfTwoGpus",
                    Share(2, 500, 0),
                    {{"gpumux.io/gpu", "2"}, {"gpumux.io/gpu-milli", "500"}},
                    Share(2, 500, 0)},
        RequestCase{"ACpuOnlyPodAsksForNoGpu", core::Request{}, json::object(), core::Request{}}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(Workload, APodCarriesArrivalJobClassSchedulerRunAndHostRequests) {
  WorkloadItem item;
  item.job = "openb-pod-0017";
  item.submit_us = 12'500'000;
  item.request = WithModelsAndClass(Share(1, 220, 0));
  item.request.cpu_milli = 4000;
  item.request.memory_mib = 15258;
  item.command = {"sh", "-c", "sleep \"$GPUMUX_DURATION_S\""};
  item.annotations = {{std::string(kAnnotationDuration), "300"}};
  item.env_from_annotations = {{"GPUMUX_DURATION_S", std::string(kAnnotationDuration)}};
  ManifestOptions o;
  o.image = "busybox:1.36";
  o.run = "r1";
  auto pod = MakeManifest(item, o);
  ASSERT_TRUE(pod) << pod.error().message;
  const json& m = (*pod)["metadata"];
  EXPECT_EQ((*pod)["apiVersion"], "v1");
  EXPECT_EQ((*pod)["kind"], "Pod");
  EXPECT_EQ(m["name"], "openb-pod-0017");
  EXPECT_EQ(m["labels"]["gpumux.io/run"], "r1");
  EXPECT_EQ(m["annotations"]["gpumux.io/job"], "openb-pod-0017");
  EXPECT_EQ(m["annotations"]["gpumux.io/submit-at-s"], "12.5");
  EXPECT_EQ(m["annotations"]["gpumux.io/workload-class"], "resnet50");
  EXPECT_EQ(m["annotations"]["gpumux.io/gpu-model"], "T4,V100M16");
  EXPECT_EQ(m["annotations"]["gpumux.io/duration-s"], "300");
  const json& spec = (*pod)["spec"];
  EXPECT_EQ(spec["schedulerName"], "gpumux-scheduler");
  EXPECT_EQ(spec["restartPolicy"], "Never");
  const json& c = spec["containers"][0];
  EXPECT_EQ(c["image"], "busybox:1.36");
  EXPECT_EQ(c["resources"]["requests"], json({{"cpu", "4000m"}, {"memory", "15258Mi"}}));
  EXPECT_EQ(c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['gpumux.io/duration-s']");
  EXPECT_EQ(c["command"][0], "sh");
}

TEST(Workload, AJobCarriesTheSameLabelsAndAnnotationsOnItsPodTemplate) {
  WorkloadItem item;
  item.job = "j0002";
  item.submit_us = 1;
  item.request = Share(1, 0, 4096);
  item.request.workload_class = "vgg16";
  item.host_dir = "/run/gpumux";
  ManifestOptions o;
  o.kind = ManifestKind::kJob;
  o.image = "gpumux-train:latest";
  o.run = "r1";
  o.scheduler_name = "other-scheduler";
  auto job = MakeManifest(item, o);
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ((*job)["apiVersion"], "batch/v1");
  EXPECT_EQ((*job)["kind"], "Job");
  EXPECT_EQ((*job)["spec"]["backoffLimit"], 0);
  const json& tmpl = (*job)["spec"]["template"];
  EXPECT_EQ(tmpl["metadata"]["labels"], (*job)["metadata"]["labels"]);
  EXPECT_EQ(tmpl["metadata"]["annotations"], (*job)["metadata"]["annotations"]);
  EXPECT_EQ(tmpl["metadata"]["annotations"]["gpumux.io/submit-at-s"], "0.000001");
  EXPECT_EQ(tmpl["spec"]["schedulerName"], "other-scheduler");
  EXPECT_EQ(tmpl["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(tmpl["spec"]["volumes"][0]["hostPath"]["path"], "/run/gpumux");
  EXPECT_EQ(tmpl["spec"]["containers"][0]["volumeMounts"][0]["mountPath"], "/run/gpumux");
  // The extender reads the pod the job controller makes from this template.
  json pod = {{"metadata", tmpl["metadata"]}, {"spec", tmpl["spec"]}};
  pod["metadata"]["name"] = "j0002-abcde";
  pod["metadata"]["uid"] = "u";
  auto info = kube::DecodePod(pod, kube::kDefaultGpuMemUnitMib);
  ASSERT_TRUE(info);
  ASSERT_EQ(info->containers.size(), 1u);
  EXPECT_EQ(info->containers[0].request.gpu_mib, 4096);
  EXPECT_EQ(info->containers[0].request.workload_class, "vgg16");
}

TEST(Workload, NamesAreMadeValidAndCollisionsAreRefused) {
  EXPECT_EQ(ObjectName("", "j0001").value(), "j0001");
  EXPECT_EQ(ObjectName("run1-", "Job_7").value(), "run1-job-7");
  EXPECT_EQ(ObjectName("", "--x--").value(), "x");
  EXPECT_FALSE(ObjectName("", "__").has_value());
  EXPECT_FALSE(ObjectName("", std::string(64, 'a')).has_value());
  WorkloadItem a, b;
  a.job = "A";
  b.job = "a";
  a.request = b.request = Share(1, 100, 0);
  ManifestOptions o;
  o.image = "i";
  auto both = MakeManifests({a, b}, o);
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("jobs 'A' and 'a' both get the name 'a'"), std::string::npos)
      << both.error().message;
}

struct BadItemCase {
  std::string name;
  core::Request request;
  std::string image;
  std::string run;
  std::int64_t unit;
  std::string message;
};

class WorkloadErrors : public ::testing::TestWithParam<BadItemCase> {};

TEST_P(WorkloadErrors, NameTheJob) {
  const BadItemCase& c = GetParam();
  WorkloadItem item;
  item.job = "j9";
  item.request = c.request;
  ManifestOptions o;
  o.image = c.image;
  o.run = c.run;
  o.gpu_mem_unit_mib = c.unit;
  auto r = MakeManifest(item, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Workload, WorkloadErrors,
    ::testing::Values(BadItemCase{"MoreThanAWholeGpuOfMilli", Share(1, 1500, 0), "i", "", 1024,
                                  "job 'j9': 1500 milli-GPU per GPU, more than a whole GPU"},
                      BadItemCase{"ASharedGpuAskingForNothing", Share(1, 0, 0), "i", "", 1024,
                                  "neither compute nor memory"},
                      BadItemCase{"NoImage", Share(1, 100, 0), "", "", 1024, "job 'j9': no image"},
                      BadItemCase{"ARunThatIsNoLabelValue", Share(1, 100, 0), "i", "bad run!", 1024,
                                  "is not a label value"},
                      BadItemCase{"AZeroMemoryUnit", Share(1, 100, 0), "i", "", 0,
                                  "the gpumux.io/gpu-mem unit must be"}),
    [](const auto& test_case) { return test_case.param.name; });

}  // namespace
}  // namespace gpumux::runs
