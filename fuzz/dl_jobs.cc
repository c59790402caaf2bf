// Fuzz target: a DL job list CSV (`simulate --workload dl --jobs`, `jobgen`'s output), read
// against the built-in workload profile.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/fuzz_support.h"
#include "gpumux/sim/dl_workload.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  const policy::WorkloadProfile& profile = sim::DefaultProfile();
  std::istringstream in{std::string(fuzz::AsText(data, size))};
  (void)sim::ReadJobs(in, "jobs.csv", profile);
  return 0;
}
