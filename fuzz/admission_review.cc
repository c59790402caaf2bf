// Fuzz target: an AdmissionReview, as the API server (or anyone who reaches the port) POSTs it to
// `gpumux webhook`'s /mutate. Input: the body. Beyond "does not crash": a patch the webhook
// answers with must apply to the pod it came from (RFC 6902), and the patched pod must need no
// further patch (translation is idempotent), under two settings of the units.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "gpumux/admission/translate.h"
#include "gpumux/kube/base64.h"

namespace {

void Check(const nlohmann::json& review, const gpumux::admission::TranslateOptions& options) {
  using namespace gpumux;
  auto answer = admission::Review(review, options);
  if (!answer) return;
  const nlohmann::json& response = (*answer)["response"];
  if (!response.contains("patch")) return;
  auto bytes = kube::DecodeBase64(response["patch"].get<std::string>());
  if (!bytes) std::abort();  // the webhook's own base64 must decode
  const nlohmann::json patch = nlohmann::json::parse(*bytes);
  const nlohmann::json& pod = review["request"]["object"];
  nlohmann::json patched;
  try {
    patched = pod.patch(patch);
  } catch (const nlohmann::json::exception&) {
    std::abort();  // a patch that does not apply to the pod it was made for
  }
  if (!admission::TranslatePod(patched, options).patch.empty()) std::abort();  // not idempotent
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  const nlohmann::json review = nlohmann::json::parse(fuzz::AsText(data, size), nullptr, false);
  if (review.is_discarded()) return 0;
  Check(review, admission::TranslateOptions{});
  admission::TranslateOptions mib;
  mib.gpu_mem_unit_mib = 1;
  mib.gpushare_mem_unit_mib = 1;
  mib.fraction_gpu_memory_mib = 81920;
  mib.scheduler_name = "other";
  Check(review, mib);
  return 0;
}
