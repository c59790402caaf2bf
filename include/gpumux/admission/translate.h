// What `gpumux webhook` does to a pod: it translates the GPU requests other GPU-sharing stacks
// use into gpumux's resources, so that a workload written for NVIDIA's device plugin, HAMi,
// Alibaba's gpushare or KAI-Scheduler runs under gpumux unchanged. Pure functions; no I/O.
//
//   nvidia.com/gpu: N                        -> gpumux.io/gpu: N         (N whole GPUs)
//   nvidia.com/gpumem: M (MiB, HAMi)         -> gpumux.io/gpu-mem: ceil(M / unit)
//   nvidia.com/gpucores: P (percent, HAMi)   -> gpumux.io/gpu-milli: 10 x P
//     with nvidia.com/gpu: N > 1             -> also gpumux.io/gpu: N (N GPUs, each shared)
//   aliyun.com/gpu-mem: G (gpushare units)   -> gpumux.io/gpu-mem: ceil(G x gpushare unit / unit)
//   pod annotation gpu-fraction: F (KAI; or gpumux.io/gpu-fraction), 0 < F <= 1, on the
//   container named by annotation gpu-fraction-container-name (else the first container)
//                                            -> gpumux.io/gpu-milli: round(1000 x F), and
//                                               gpumux.io/gpu-mem: floor(F x GPU memory / unit)
//                                               when the pool's GPU memory is configured
// "unit" is the MiB per gpumux.io/gpu-mem that the nodes' device plugins count in (1024 by
// default). The foreign names leave the container's limits and requests; the gpumux ones are set
// in both. A pod that changes also gets spec.schedulerName (when it has none or
// "default-scheduler": a pod that names another scheduler keeps it, and the record says so) and
// the annotation gpumux.io/translated-from, a JSON object of what was there before:
//   {"containers":{"main":{"nvidia.com/gpu":"1"}},"schedulerName":"default-scheduler"}
// (plus "fraction" and "fractionContainer" for a fraction). A pod that carries that annotation
// is left as it is, so translating a translated pod changes nothing (the configuration's two
// webhooks may both see a pod; a reinvocation sees it again).
//
// Refused (the pod is not created; the message says why and what to write instead):
// nvidia.com/gpumem-percentage (a share of memory whose size is unknown until the pod is
// placed), a container asking for both gpumux and foreign GPU resources, nvidia.com/gpu with
// aliyun.com/gpu-mem, gpucores over 100, a fraction outside (0, 1] or on a container that asks
// for GPU resources, amounts that are not whole numbers, a pod of more than kMaxPodContainers
// containers.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::admission {

struct TranslateOptions {
  std::int64_t gpu_mem_unit_mib = 1024;       // MiB per gpumux.io/gpu-mem on the nodes
  std::int64_t gpushare_mem_unit_mib = 1024;  // MiB per aliyun.com/gpu-mem (gpushare: GiB)
  std::int64_t fraction_gpu_memory_mib = 0;   // a fraction's GPU memory; 0: compute only
  std::string scheduler_name = "gpumux-scheduler";
};

// A container the translation gives a share of a GPU (gpumux.io/gpu-mem or gpu-milli).
struct TranslatedShare {
  std::string container;
  bool memory = false;   // asks gpumux.io/gpu-mem
  bool compute = false;  // asks gpumux.io/gpu-milli
};

struct Translation {
  nlohmann::json patch = nlohmann::json::array();    // RFC 6902 JSON Patch; empty: unchanged
  nlohmann::json record = nlohmann::json::object();  // gpumux.io/translated-from's value
  std::string denied;                                // non-empty: refuse the pod with this message
  std::vector<TranslatedShare> shares;
};

// A question to the API server: is there a node matching these selectors? (The webhook asks
// it with a list of limit 1.) `label_selector` and `field_selector` are in the API's syntax.
struct NodeQuery {
  std::string label_selector, field_selector;
};
// true: a node matches; false: none does; nullopt: cannot tell (the API server did not answer).
using NodeFinder = std::function<std::optional<bool>(const NodeQuery&)>;

// The queries (one per node selector term, ORed) that find the nodes a pod may run on, from
// spec.nodeSelector and the required node affinity; nullopt when they cannot be written as
// selectors (Gt, Lt, matchFields beyond one name, a value outside a label's syntax, more than
// 8 terms or 32 expressions in one).
std::optional<std::vector<NodeQuery>> NodeQueriesOf(const nlohmann::json& pod);

// The AdmissionReview warnings for a translated pod: for each kind of limit its shares ask for
// (memory, compute) that no node it may run on enforces (the nodes' enforcement.gpumux.io/
// labels, kube/enforcement.h), one warning saying so. None when `find` cannot tell.
std::vector<std::string> EnforcementWarnings(const nlohmann::json& pod, const Translation& t,
                                             const NodeFinder& find);

inline constexpr const char* kAnnotationTranslatedFrom = "gpumux.io/translated-from";

// The most containers (init and regular together) a pod may have to be translated; one with more
// is denied. No real pod comes near it (etcd keeps an object under 1.5 MiB), and each container
// costs a patch operation and a copy of its resources.
inline constexpr std::size_t kMaxPodContainers = 256;

// `pod` is a Pod object as the API server sends it (the AdmissionReview's request.object).
Translation TranslatePod(const nlohmann::json& pod, const TranslateOptions& options);

// Answers an admission.k8s.io/v1 AdmissionReview: the response echoes request.uid; a Pod being
// created is translated (allowed with a base64 JSONPatch, or refused with the reason); anything
// else is allowed unchanged. Error (the HTTP answer is then 400) when the body is not an
// AdmissionReview v1 with a request and a uid.
// With `find`, a translated pod's response also carries EnforcementWarnings.
core::Result<nlohmann::json> Review(const nlohmann::json& review, const TranslateOptions& options,
                                    const NodeFinder& find = {});

}  // namespace gpumux::admission
