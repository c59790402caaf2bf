// The IADeep-fitted belief profile and the measured truth (data/dl_profile_iadeep_fitted.json,
// data/dl_truth_iadeep_measured.json, written by data/derive_dl_profile.py --out data/): the
// C++ predictor on the fitted profile reproduces the fit's in-sample errors that the Python fit
// wrote into the file, so the two cannot drift apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpumux/io/read_file.h"
#include "gpumux/policy/interference.h"
#include "gpumux/policy/workload_profile.h"
#include "gpumux/sim/dl_workload.h"

namespace gpumux::sim {
namespace {

const std::string kData = std::string(GPUMUX_SOURCE_DIR) + "/data/";

policy::WorkloadProfile Load(const std::string& name) {
  auto p = LoadProfile(kData + name);
  EXPECT_TRUE(p.has_value()) << p.error().message;
  return p.has_value() ? *p : policy::WorkloadProfile{};
}

nlohmann::json FitSummary() {
  auto text = io::ReadInputFile(kData + "dl_profile_iadeep_fitted.json", kMaxProfileBytes);
  EXPECT_TRUE(text.has_value()) << text.error().message;
  return text.has_value() ? nlohmann::json::parse(*text).at("fit") : nlohmann::json::object();
}

TEST(IadeepFit, TheFittedProfileHasNoMeasuredSetsAndTheTruthHasEveryFittedPair) {
  const policy::WorkloadProfile fitted = Load("dl_profile_iadeep_fitted.json");
  const policy::WorkloadProfile truth = Load("dl_truth_iadeep_measured.json");
  EXPECT_TRUE(fitted.measured.empty());
  EXPECT_EQ(truth.measured.size(), FitSummary().at("pairs").get<std::size_t>());
  ASSERT_EQ(fitted.classes.size(), truth.classes.size());
  for (std::size_t k = 0; k < fitted.classes.size(); ++k) {
    EXPECT_EQ(fitted.classes[k].name, truth.classes[k].name);
    EXPECT_EQ(fitted.classes[k].default_batch, truth.classes[k].default_batch);
  }
  for (const policy::MeasuredSet& m : truth.measured) {
    ASSERT_EQ(m.classes.size(), 2U);
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(m.batches[k], truth.Find(m.classes[k])->default_batch) << m.source;
    }
  }
}

TEST(IadeepFit, TheCppPredictorReproducesTheFitsInSampleErrorOnTheSums) {
  const policy::WorkloadProfile fitted = Load("dl_profile_iadeep_fitted.json");
  const policy::WorkloadProfile truth = Load("dl_truth_iadeep_measured.json");
  ASSERT_FALSE(truth.measured.empty());
  const policy::ProfileInterference model(fitted);
  double total = 0;
  double worst = 0;
  for (const policy::MeasuredSet& m : truth.measured) {
    std::vector<policy::Member> members;
    double measured = 0;
    for (std::size_t k = 0; k < m.classes.size(); ++k) {
      members.push_back({fitted.Find(m.classes[k]), m.batches[k]});
      ASSERT_NE(members.back().cls, nullptr) << m.classes[k];
      measured += m.slowdown[k] - 1.0;
    }
    std::vector<double> slowdown(members.size());
    model.Predict(members, slowdown);
    double predicted = 0;
    for (double s : slowdown) predicted += s - 1.0;
    const double error = std::abs(predicted - measured);
    total += error;
    worst = std::max(worst, error);
  }
  const nlohmann::json in_sample = FitSummary().at("in_sample");
  EXPECT_NEAR(total / static_cast<double>(truth.measured.size()),
              in_sample.at("mean_abs_error_sum").get<double>(), 1e-6);
  EXPECT_NEAR(worst, in_sample.at("worst_abs_error_sum").get<double>(), 1e-6);
}

}  // namespace
}  // namespace gpumux::sim
