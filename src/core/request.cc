#include "gpumux/core/request.h"

#include <string>

namespace gpumux::core {

Result<void> Request::Validate() const {
  auto bad = [this](const std::string& what) {
    return MakeError(ErrorCode::kInvalidArgument,
                     (name.empty() ? std::string("request") : "request " + name) + ": " + what);
  };
  if (cpu_milli < 0) return bad("negative cpu_milli " + std::to_string(cpu_milli));
  if (memory_mib < 0) return bad("negative memory_mib " + std::to_string(memory_mib));
  if (gpu_count < 0) return bad("negative gpu_count " + std::to_string(gpu_count));
  if (gpu_count == 0) {
    if (gpu_milli != 0 || gpu_mib != 0) return bad("GPU share given but gpu_count is 0");
    return {};
  }
  if (gpu_milli < 1 || gpu_milli > kMilliPerGpu) {
    return bad("gpu_milli " + std::to_string(gpu_milli) + " outside 1..1000");
  }
  if (gpu_mib < 0) return bad("negative gpu_mib " + std::to_string(gpu_mib));
  return {};
}

}  // namespace gpumux::core
