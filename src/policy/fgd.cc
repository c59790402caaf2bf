#include "gpumux/policy/fgd.h"

#include "fragmentation_gradient.h"

namespace gpumux::policy {

FgdPolicy::FgdPolicy(std::vector<TypicalPod> typical)
    : typical_(std::move(typical)), gradient_(std::make_unique<detail::FragmentationGradient>()) {}

FgdPolicy::~FgdPolicy() = default;

std::pair<std::int64_t, std::vector<int>> FgdPolicy::Evaluate(const Cycle& cycle,
                                                              const core::NodeView& node) {
  return gradient_->Evaluate(
      cycle, node,
      [this](core::MilliCpu cpu, std::span<const core::MilliGpu> gpus, core::ModelId model) {
        return detail::MeasureFragmentation<false>(cpu, gpus, model, typical_).f;
      });
}

std::int64_t FgdPolicy::Score(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).first;
}

std::vector<int> FgdPolicy::ChooseGpus(const Cycle& cycle, const core::NodeView& node) {
  return Evaluate(cycle, node).second;
}

}  // namespace gpumux::policy
