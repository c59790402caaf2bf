// Fuzz target: manifests as `gpumux submit` reads them (multi-document YAML, JSON objects and
// Lists). What parses must write back as YAML that reads back equal, and must go through
// submit's preparation (kinds, namespaces, arrivals, labels) without a crash.
#include "gpumux/runs/manifests.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_support.h"
#include "gpumux/runs/submitter.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  auto objects = runs::ParseManifests(fuzz::AsText(data, size), "in.yaml");
  if (!objects) return 0;
  for (const nlohmann::json& object : *objects) {
    auto back = runs::ParseManifests(runs::ToYaml(object), "round-trip");
    if (!back || back->size() != 1 || back->front() != object) std::abort();
  }
  runs::PrepareOptions options;
  options.run = "fuzz";
  options.time_scale = 0.5;
  (void)runs::PrepareSubmission(std::move(*objects), options, "in.yaml");
  return 0;
}
