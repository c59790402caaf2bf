#include "gpumux/gpu/backend.h"

namespace gpumux::gpu {

std::string_view HealthName(Health h) { return h == Health::kHealthy ? "Healthy" : "Unhealthy"; }

}  // namespace gpumux::gpu
