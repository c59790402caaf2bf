#include "gpumux/core/plural.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

namespace gpumux::core {
namespace {

TEST(Plural, OneIsSingularEverythingElsePlural) {
  EXPECT_EQ(Plural(1, "GPU"), "1 GPU");
  EXPECT_EQ(Plural(0, "GPU"), "0 GPUs");
  EXPECT_EQ(Plural(2, "GPU"), "2 GPUs");
  EXPECT_EQ(Plural(std::size_t{1}, "experiment"), "1 experiment");
  EXPECT_EQ(Plural(std::int64_t{-1}, "second"), "-1 seconds");
}

TEST(Plural, AnIrregularPluralIsGivenExplicitly) {
  EXPECT_EQ(Plural(1, "policy", "policies"), "1 policy");
  EXPECT_EQ(Plural(9, "policy", "policies"), "9 policies");
}

TEST(Plural, NounLeavesTheCountOut) {
  EXPECT_EQ(Noun(1, "GPU"), "GPU");
  EXPECT_EQ(Noun(4, "GPU"), "GPUs");
  EXPECT_EQ(Noun(0, "class", "classes"), "classes");
}

}  // namespace
}  // namespace gpumux::core
