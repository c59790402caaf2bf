#include "gpumux/sim/report.h"

namespace gpumux::sim {
core::Result<void> WriteReportDir(const std::string&, const std::vector<ExperimentResult>&,
                                  const ReportContext&) {
  return {};
}
}  // namespace gpumux::sim
