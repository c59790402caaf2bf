// Fuzz target: a record of `gpumux submit` (JSON lines), as `gpumux report --from-cluster`
// reads it.
#include "gpumux/runs/run_record.h"

#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  (void)runs::ParseRunRecord(fuzz::AsText(data, size), "run.jsonl");
  return 0;
}
