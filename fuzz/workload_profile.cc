// Fuzz target: a DL workload profile (JSON, `simulate --workload dl --profile`). A profile that
// parses is then used as the simulator uses it: two jobs of every class (at most four classes)
// run to completion on a small cluster, with the gpumux policy and its tuner. A profile whose
// numbers make that run forever is a finding (libFuzzer's -timeout).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "gpumux/sim/dl_sim.h"
#include "gpumux/sim/dl_workload.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  auto profile = sim::ParseProfile(fuzz::AsText(data, size), "profile.json");
  if (!profile || profile->classes.empty()) return 0;
  sim::JobGenOptions gen;
  for (std::size_t i = 0; i < profile->classes.size() && i < 4; ++i) {
    gen.mix.push_back({profile->classes[i].name, 1.0});
  }
  gen.count = 2 * static_cast<int>(gen.mix.size());
  auto jobs = sim::GenerateJobs(gen, *profile);
  if (!jobs) return 0;
  sim::DlSimOptions options;
  options.nodes = 1;
  options.gpus_per_node = 2;
  options.record_timeline = false;
  (void)sim::RunDl(*profile, *jobs, options);
  return 0;
}
