#include "gpumux/policy/fgd_sat.h"

#include "fragmentation_gradient.h"

namespace gpumux::policy {

double NodeSaturationFragmentation(core::MilliCpu cpu_free,
                                   std::span<const core::MilliGpu> gpu_free, core::ModelId model,
                                   std::span<const TypicalPod> typical) {
  return detail::MeasureFragmentation<true>(cpu_free, gpu_free, model, typical).s;
}

FgdSatPolicy::FgdSatPolicy(std::vector<TypicalPod> typical)
    : typical_(std::move(typical)), gradient_(std::make_unique<detail::FragmentationGradient>()) {}

FgdSatPolicy::~FgdSatPolicy() = default;

double FgdSatPolicy::Mixed(core::MilliCpu cpu_free, std::span<const core::MilliGpu> gpu_free,
                           core::ModelId model) const {
  // F and S in one pass (the same operations in the same order as NodeFragmentation and
  // NodeSaturationFragmentation, so M equals F + 0.1 * S computed by those two bit for bit;
  // fgd_sat_test checks it).
  const detail::FragmentationTerms t =
      detail::MeasureFragmentation<true>(cpu_free, gpu_free, model, typical_);
  return t.f + kSaturationWeight * t.s;
}

std::pair<std::int64_t, std::vector<int>> FgdSatPolicy::Evaluate(const Cycle& cycle,
                                                                 const core::NodeView& node) {
  return gradient_->Evaluate(
      cycle, node,
      [this](core::MilliCpu cpu, std::span<const core::MilliGpu> gpus, core::ModelId model) {
        return Mixed(cpu, gpus, model);
      });
}

std::int64_t FgdSatPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).first;
}

std::vector<int> FgdSatPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).second;
}

}  // namespace gpumux::policy
