// The webhook's translation of other GPU stacks' requests into gpumux's (translate.h): each
// stack's form, the patch applied to the pod as the API server would (RFC 6902), idempotence,
// the refusals and the AdmissionReview around it.
#include "gpumux/admission/translate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpumux/kube/base64.h"

namespace gpumux::admission {
namespace {

using nlohmann::json;

// The containers as a vector: a braced list of one json would be that json itself under
// clang (a copy), an array of it under gcc.
json Pod(const std::vector<json>& containers, json annotations = nullptr,
         std::string scheduler = "") {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}, {"namespace", "team-a"}}},
              {"spec", {{"containers", containers}}}};
  if (!annotations.is_null()) pod["metadata"]["annotations"] = std::move(annotations);
  if (!scheduler.empty()) pod["spec"]["schedulerName"] = scheduler;
  return pod;
}

json Container(const std::string& name, json limits) {
  return {{"name", name}, {"image", "cuda"}, {"resources", {{"limits", std::move(limits)}}}};
}

// The pod after the webhook's patch, checked to change nothing more when translated again.
json Translated(const json& pod, const TranslateOptions& o = {}) {
  const Translation t = TranslatePod(pod, o);
  EXPECT_EQ(t.denied, "");
  EXPECT_FALSE(t.patch.empty());
  const json after = pod.patch(t.patch);
  const Translation again = TranslatePod(after, o);
  EXPECT_TRUE(again.patch.empty()) << again.patch.dump();
  EXPECT_EQ(again.denied, "");
  return after;
}

std::string Denied(const json& pod, const TranslateOptions& o = {}) {
  const Translation t = TranslatePod(pod, o);
  EXPECT_TRUE(t.patch.empty());
  return t.denied;
}

TEST(Translate, AnNvidiaGpuPodGetsWholeGpumuxGpusTheSchedulerAndARecord) {
  const json after = Translated(Pod({Container("main", {{"nvidia.com/gpu", "2"}, {"cpu", "1"}})}));
  const json& r = after["spec"]["containers"][0]["resources"];
  EXPECT_EQ(r["limits"], (json{{"cpu", "1"}, {"gpumux.io/gpu", "2"}}));
  EXPECT_EQ(r["requests"], (json{{"gpumux.io/gpu", "2"}}));
  EXPECT_EQ(after["spec"]["schedulerName"], "gpumux-scheduler");
  const json record =
      json::parse(after["metadata"]["annotations"][kAnnotationTranslatedFrom].get<std::string>());
  EXPECT_EQ(record["containers"]["main"], (json{{"nvidia.com/gpu", "2"}}));
  EXPECT_EQ(record["schedulerName"], "");
}

TEST(Translate, HamiMemoryAndCoresBecomeAShareRoundedUpToTheNodesUnit) {
  json c = Container(
      "main",
      {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}, {"nvidia.com/gpucores", "30"}});
  c["resources"]["requests"] = {{"nvidia.com/gpu", "1"}, {"memory", "1Gi"}};
  const json after = Translated(Pod({c}));
  const json& r = after["spec"]["containers"][0]["resources"];
  EXPECT_EQ(r["limits"], (json{{"gpumux.io/gpu-mem", "3"}, {"gpumux.io/gpu-milli", "300"}}));
  EXPECT_EQ(r["requests"],
            (json{{"gpumux.io/gpu-mem", "3"}, {"gpumux.io/gpu-milli", "300"}, {"memory", "1Gi"}}));
  TranslateOptions mib;
  mib.gpu_mem_unit_mib = 1;
  EXPECT_EQ(Translated(Pod({c}),
                       mib)["spec"]["containers"][0]["resources"]["limits"]["gpumux.io/gpu-mem"],
            "3000");
}

TEST(Translate, HamiOnSeveralGpusAsksForThatManySharedGpus) {
  const json after =
      Translated(Pod({Container("main", {{"nvidia.com/gpu", 2}, {"nvidia.com/gpumem", 8192}})}));
  EXPECT_EQ(after["spec"]["containers"][0]["resources"]["limits"],
            (json{{"gpumux.io/gpu", "2"}, {"gpumux.io/gpu-mem", "8"}}));
}

TEST(Translate, GpushareMemoryIsCountedInItsOwnUnit) {
  const json pod = Pod({Container("main", {{"aliyun.com/gpu-mem", "6"}})});
  EXPECT_EQ(Translated(pod)["spec"]["containers"][0]["resources"]["limits"],
            (json{{"gpumux.io/gpu-mem", "6"}}));
  TranslateOptions mib;  // gpushare configured in MiB
  mib.gpushare_mem_unit_mib = 1;
  EXPECT_EQ(Translated(Pod({Container("main", {{"aliyun.com/gpu-mem", "3000"}})}),
                       mib)["spec"]["containers"][0]["resources"]["limits"],
            (json{{"gpumux.io/gpu-mem", "3"}}));
}

TEST(Translate, AFractionAnnotationGivesItsContainerComputeAndMemoryWhenThePoolsIsKnown) {
  const json pod = Pod({Container("sidecar", json::object()), Container("main", json::object())},
                       {{"gpu-fraction", "0.5"}, {"gpu-fraction-container-name", "main"}});
  TranslateOptions o;
  o.fraction_gpu_memory_mib = 81920;
  const json after = Translated(pod, o);
  EXPECT_EQ(after["spec"]["containers"][1]["resources"]["limits"],
            (json{{"gpumux.io/gpu-mem", "40"}, {"gpumux.io/gpu-milli", "500"}}));
  EXPECT_TRUE(after["spec"]["containers"][0]["resources"]["limits"].empty());
  const json record =
      json::parse(after["metadata"]["annotations"][kAnnotationTranslatedFrom].get<std::string>());
  EXPECT_EQ(record["fraction"], "0.5");
  // Without the pool's memory: compute only, on the first container by default.
  json bare = Pod({{{"name", "only"}, {"image", "cuda"}}}, {{"gpumux.io/gpu-fraction", "0.25"}});
  EXPECT_EQ(Translated(bare)["spec"]["containers"][0]["resources"]["limits"],
            (json{{"gpumux.io/gpu-milli", "250"}}));
}

TEST(Translate, APodNamingAnotherSchedulerKeepsItAndTheRecordSaysSo) {
  const json after =
      Translated(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}, json::object(), "volcano"));
  EXPECT_EQ(after["spec"]["schedulerName"], "volcano");
  const json record =
      json::parse(after["metadata"]["annotations"][kAnnotationTranslatedFrom].get<std::string>());
  EXPECT_EQ(record["schedulerNameKept"], "volcano");
}

TEST(Translate, InitContainersAreTranslatedToo) {
  json pod = Pod({Container("main", json::object())});
  pod["spec"]["initContainers"] = json::array({Container("warm", {{"nvidia.com/gpu", "1"}})});
  EXPECT_EQ(Translated(pod)["spec"]["initContainers"][0]["resources"]["limits"],
            (json{{"gpumux.io/gpu", "1"}}));
}

// Found by the fuzzer (fuzz/corpus/admission_review/crash-no-metadata): the record was added
// under a /metadata the object did not have, so the patch did not apply.
TEST(Translate, APodWithoutMetadataGetsItsRecordInMetadataOfItsOwn) {
  json pod = Pod({Container("main", {{"nvidia.com/gpu", "0"}})});
  pod.erase("metadata");
  const json after = Translated(pod);
  EXPECT_TRUE(after["metadata"]["annotations"].contains(kAnnotationTranslatedFrom));
  EXPECT_FALSE(after["spec"]["containers"][0]["resources"].contains("limits"));
}

TEST(Translate, APodWithoutForeignRequestsIsLeftAlone) {
  const Translation t =
      TranslatePod(Pod({Container("main", {{"gpumux.io/gpu", "1"}, {"cpu", "2"}})}), {});
  EXPECT_TRUE(t.patch.empty());
  EXPECT_EQ(t.denied, "");
}

TEST(Translate, WhatCannotBeTranslatedIsRefusedSayingWhy) {
  EXPECT_NE(Denied(Pod({Container(
                       "main", {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem-percentage", "50"}})}))
                .find("nvidia.com/gpumem-percentage cannot be translated"),
            std::string::npos);
  EXPECT_NE(Denied(Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"gpumux.io/gpu-mem", "4"}})}))
                .find("both gpumux.io and nvidia.com/gpu"),
            std::string::npos);
  EXPECT_NE(
      Denied(Pod({Container("main", {{"nvidia.com/gpucores", "150"}})})).find("more than 100"),
      std::string::npos);
  EXPECT_NE(
      Denied(Pod({Container("main", {{"nvidia.com/gpu", "500m"}})})).find("not a whole number"),
      std::string::npos);
  EXPECT_NE(Denied(Pod({Container("main", {{"nvidia.com/gpu", "1"}, {"aliyun.com/gpu-mem", "2"}})}))
                .find("mixes aliyun.com/gpu-mem"),
            std::string::npos);
  EXPECT_NE(
      Denied(Pod({Container("main", json::object())}, {{"gpu-fraction", "1.5"}})).find("(0, 1]"),
      std::string::npos);
  EXPECT_NE(Denied(Pod({Container("main", json::object())},
                       {{"gpu-fraction", "0.5"}, {"gpu-fraction-container-name", "nope"}}))
                .find("\"nope\""),
            std::string::npos);
  EXPECT_NE(Denied(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}, {{"gpu-fraction", "0.5"}}))
                .find("asks for GPU resources itself"),
            std::string::npos);
}

json ReviewOf(json object, std::string operation = "CREATE", std::string kind = "Pod") {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "u-1"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", kind}}},
            {"operation", operation},
            {"namespace", "team-a"},
            {"object", std::move(object)}}}};
}

TEST(Review, APodCreationIsAnsweredWithItsPatchInBase64) {
  const json pod = Pod({Container("main", {{"nvidia.com/gpu", "1"}})});
  auto answer = Review(ReviewOf(pod), {});
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  const json& r = (*answer)["response"];
  EXPECT_EQ((*answer)["kind"], "AdmissionReview");
  EXPECT_EQ(r["uid"], "u-1");
  EXPECT_EQ(r["allowed"], true);
  EXPECT_EQ(r["patchType"], "JSONPatch");
  const json patch = json::parse(kube::DecodeBase64(r["patch"].get<std::string>()).value());
  EXPECT_EQ(pod.patch(patch)["spec"]["containers"][0]["resources"]["limits"],
            (json{{"gpumux.io/gpu", "1"}}));
}

TEST(Review, ARefusalCarriesTheReasonAndAnythingElseIsAllowedUnchanged) {
  auto refused = Review(ReviewOf(Pod({Container("main", {{"nvidia.com/gpucores", "101"}})})), {});
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ((*refused)["response"]["allowed"], false);
  EXPECT_EQ((*refused)["response"]["status"]["code"], 422);
  EXPECT_NE((*refused)["response"]["status"]["message"].get<std::string>().find("gpumux webhook:"),
            std::string::npos);
  for (const json& other : {ReviewOf(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}), "UPDATE"),
                            ReviewOf(json::object(), "CREATE", "Deployment")}) {
    auto answer = Review(other, {});
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ((*answer)["response"]["allowed"], true);
    EXPECT_FALSE((*answer)["response"].contains("patch"));
  }
}

TEST(Review, ABodyThatIsNotAnAdmissionReviewIsAnError) {
  EXPECT_FALSE(Review(json::array(), {}).has_value());
  EXPECT_FALSE(
      Review(json{{"apiVersion", "admission.k8s.io/v1beta1"}, {"kind", "AdmissionReview"}}, {})
          .has_value());
  json no_uid = ReviewOf(json::object());
  no_uid["request"].erase("uid");
  EXPECT_FALSE(Review(no_uid, {}).has_value());
}

// shared/reliability-repros/webhook-large-review-oom: a pod of 48,000 containers (under the
// review's 3 MiB) became 48,000 patch operations, ~14 MiB of base64 and an OOM-killed webhook.
// No real pod has that many (etcd keeps objects under 1.5 MiB): past the bound it is denied.
TEST(Translate, APodWithMoreContainersThanAnyRealOneIsDeniedNotTranslated) {
  std::vector<json> containers;
  for (std::size_t i = 0; i <= kMaxPodContainers; ++i) {
    containers.push_back(Container("c" + std::to_string(i), {{"nvidia.com/gpu", "1"}}));
  }
  const Translation t = TranslatePod(Pod(containers), {});
  EXPECT_TRUE(t.patch.empty());
  EXPECT_NE(t.denied.find("containers"), std::string::npos) << t.denied;
  EXPECT_NE(t.denied.find(std::to_string(kMaxPodContainers)), std::string::npos) << t.denied;
  containers.pop_back();
  EXPECT_EQ(TranslatePod(Pod(containers), {}).denied, "") << "at the bound it is translated";
}

// --- the warning for a share no node would enforce ---------------------------------------------

TEST(NodeQueries, ANodeSelectorAndEachAffinityTermBecomeLabelSelectors) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})});
  auto q = NodeQueriesOf(pod);
  ASSERT_TRUE(q.has_value());
  ASSERT_EQ(q->size(), 1u);
  EXPECT_EQ((*q)[0].label_selector, "");
  pod["spec"]["nodeSelector"] = {{"pool", "a100"}};
  pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
     ["nodeSelectorTerms"] = json::array(
         {{{"matchExpressions",
            {{{"key", "zone"}, {"operator", "In"}, {"values", {"a", "b"}}},
             {{"key", "spot"}, {"operator", "DoesNotExist"}}}}},
          {{"matchFields", {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"n7"}}}}}}});
  q = NodeQueriesOf(pod);
  ASSERT_TRUE(q.has_value());
  ASSERT_EQ(q->size(), 2u);
  EXPECT_EQ((*q)[0].label_selector, "pool=a100,zone in (a,b),!spot");
  EXPECT_EQ((*q)[1].label_selector, "pool=a100");
  EXPECT_EQ((*q)[1].field_selector, "metadata.name=n7");
}

TEST(NodeQueries, WhatASelectorCannotSayIsNotGuessed) {
  json pod = Pod({Container("main", {{"nvidia.com/gpumem", "3000"}})});
  auto& terms = pod["spec"]["affinity"]["nodeAffinity"]
                   ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  terms = json::array(
      {{{"matchExpressions", {{{"key", "gpus"}, {"operator", "Gt"}, {"values", {"4"}}}}}}});
  EXPECT_FALSE(NodeQueriesOf(pod).has_value());
  terms = json::array(
      {{{"matchExpressions", {{{"key", "zone"}, {"operator", "In"}, {"values", {"a,b"}}}}}}});
  EXPECT_FALSE(NodeQueriesOf(pod).has_value()) << "a value that is not a label value";
}

TEST(EnforcementWarnings, AShareNoNodeEnforcesIsWarnedAboutNamingItsContainer) {
  const json pod = Pod({Container(
      "main",
      {{"nvidia.com/gpu", "1"}, {"nvidia.com/gpumem", "3000"}, {"nvidia.com/gpucores", "30"}})});
  const Translation t = TranslatePod(pod, {});
  ASSERT_EQ(t.shares.size(), 1u);
  std::vector<std::string> asked;
  const NodeFinder none = [&](const NodeQuery& q) -> std::optional<bool> {
    asked.push_back(q.label_selector);
    return false;
  };
  const auto warnings = EnforcementWarnings(pod, t, none);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("enforces memory limits"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("\"main\""), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("enforces compute limits"), std::string::npos) << warnings[1];
  EXPECT_EQ(asked, (std::vector<std::string>{"enforcement.gpumux.io/memory=hard",
                                             "enforcement.gpumux.io/compute in "
                                             "(mps-namespace,hami-core)"}));
  for (const std::string& w : warnings) EXPECT_LE(w.size(), 200u) << w;
  // A node that enforces, or an API server that cannot say: no warning.
  EXPECT_TRUE(EnforcementWarnings(pod, t, [](const NodeQuery&) { return true; }).empty());
  EXPECT_TRUE(EnforcementWarnings(pod, t, [](const NodeQuery&) -> std::optional<bool> {
                return std::nullopt;
              }).empty());
  // A whole GPU is not a share.
  const Translation whole = TranslatePod(Pod({Container("main", {{"nvidia.com/gpu", "1"}})}), {});
  EXPECT_TRUE(EnforcementWarnings(pod, whole, none).empty());
}

TEST(EnforcementWarnings, TheReviewCarriesThemForKubectlToPrint) {
  const json review = {{"apiVersion", "admission.k8s.io/v1"},
                       {"kind", "AdmissionReview"},
                       {"request",
                        {{"uid", "u-1"},
                         {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                         {"operation", "CREATE"},
                         {"object", Pod({Container("main", {{"aliyun.com/gpu-mem", "4"}})})}}}};
  auto answer = Review(review, {}, [](const NodeQuery&) { return false; });
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE((*answer)["response"].contains("warnings")) << answer->dump();
  EXPECT_EQ((*answer)["response"]["warnings"].size(), 1u);
  auto quiet = Review(review, {});
  EXPECT_FALSE((*quiet)["response"].contains("warnings")) << "no finder, nothing said";
}

}  // namespace
}  // namespace gpumux::admission
