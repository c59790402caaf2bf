// Hand-made workload profiles for the co-location tests (interference, tuners, policies): the
// policy module cannot read data/dl_profile_default.json, and small made-up classes make the
// expected numbers computable by hand.
//
// A LinearClass has two solo points, at lo_batch and hi_batch, so its step time, GPU busy
// fraction and memory are linear in the batch size (and extrapolated linearly beyond).
// With step time t(b) = a + c b the solo goodput b / t(b) * (phi + b0) / (phi + b) peaks at
// b* = sqrt(a phi / c) (the derivative's numerator is a phi - c b^2), whatever b0 is: choose
// phi = c b*^2 / a to put the solo optimum where a test wants it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/core/quantity.h"
#include "gpumux/policy/workload_profile.h"

namespace gpumux::test {

struct LinearClass {
  std::string name = "a";
  int lo_batch = 100;
  int hi_batch = 200;
  double lo_step_s = 0.08;  // with hi_step_s: t(b) = 0.04 + 0.0004 b, a / c = 100
  double hi_step_s = 0.12;
  double lo_busy = 0.3;
  double hi_busy = 0.3;
  core::MiB lo_mib = 2000;
  core::MiB hi_mib = 4000;
  int default_batch = 100;
  double noise_scale = 100;  // with the default steps: the solo optimum is b* = 100 = b0
  std::int64_t dataset_samples = 12500;
  double target_epochs = 10;  // 125000 samples: 100 s alone at b0 with the default steps
};

inline policy::ClassProfile MakeClass(const LinearClass& s) {
  policy::ClassProfile c;
  c.name = s.name;
  c.solo = {policy::SoloPoint{s.lo_batch, s.lo_step_s, s.lo_mib, s.lo_busy},
            policy::SoloPoint{s.hi_batch, s.hi_step_s, s.hi_mib, s.hi_busy}};
  c.default_batch = s.default_batch;
  c.noise_scale = s.noise_scale;
  c.dataset_samples = s.dataset_samples;
  c.target_epochs = s.target_epochs;
  return c;
}

// A class whose busy fraction is `busy` at every batch size, otherwise the defaults.
inline policy::ClassProfile BusyClass(std::string name, double busy) {
  LinearClass s;
  s.name = std::move(name);
  s.lo_busy = busy;
  s.hi_busy = busy;
  return MakeClass(s);
}

// A profile for a 16 GiB GPU with companion overhead `beta`.
inline policy::WorkloadProfile MakeProfile(std::vector<policy::ClassProfile> classes,
                                           double beta = 0.05,
                                           std::vector<policy::MeasuredSet> measured = {}) {
  policy::WorkloadProfile p;
  p.name = "test-profile";
  p.gpu_model = "T4";
  p.gpu_memory_mib = 16384;
  p.companion_overhead = beta;
  p.classes = std::move(classes);
  p.measured = std::move(measured);
  return p;
}

inline policy::MeasuredSet Measured(std::vector<std::string> classes, std::vector<int> batches,
                                    std::vector<double> slowdown) {
  return policy::MeasuredSet{std::move(classes), std::move(batches), std::move(slowdown),
                             "made up for a test"};
}

}  // namespace gpumux::test
