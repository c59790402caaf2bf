#include "gpumux/core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace gpumux::core {
namespace {

std::vector<std::uint64_t> Draw(std::uint64_t seed, std::string_view stream, int n) {
  Rng rng(seed, stream);
  std::vector<std::uint64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(rng.Next());
  return out;
}

TEST(Rng, TheSameSeedAndStreamGiveTheSameSequence) {
  EXPECT_EQ(Draw(42, "shuffle", 1000), Draw(42, "shuffle", 1000));
  EXPECT_EQ(Draw(0, "", 10), Draw(0, "", 10));
}

TEST(Rng, DifferentStreamsOfOneSeedDiffer) {
  const auto a = Draw(42, "shuffle", 100);
  const auto b = Draw(42, "tune", 100);
  const auto c = Draw(42, "policy", 100);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(b, c);
  // Not merely shifted: no value of one appears among the first 100 of the other.
  for (std::uint64_t x : a) EXPECT_EQ(std::count(b.begin(), b.end(), x), 0);
}

TEST(Rng, DifferentSeedsOfOneStreamDiffer) {
  EXPECT_NE(Draw(42, "shuffle", 10), Draw(43, "shuffle", 10));
  EXPECT_NE(Draw(0, "shuffle", 10), Draw(1, "shuffle", 10));
}

TEST(Rng, AStreamIsNotDisturbedByDrawsFromAnother) {
  Rng a(7, "a");
  Rng b(7, "b");
  std::vector<std::uint64_t> with_interleaving;
  for (int i = 0; i < 50; ++i) {
    with_interleaving.push_back(a.Next());
    b.Next();
    b.Below(10);
  }
  EXPECT_EQ(with_interleaving, Draw(7, "a", 50));
}

TEST(Rng, BelowStaysInRange) {
  Rng rng(1, "below");
  const std::vector<std::uint64_t> bounds{1,
                                          2,
                                          3,
                                          7,
                                          1000,
                                          (std::uint64_t{1} << 32) + 1,
                                          (std::uint64_t{1} << 63) + 1,
                                          std::numeric_limits<std::uint64_t>::max()};
  for (std::uint64_t n : bounds) {
    for (int i = 0; i < 2000; ++i) {
      const std::uint64_t v = rng.Below(n);
      ASSERT_LT(v, n) << "n = " << n;
    }
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(rng.Below(1), 0U);
}

// Pearson's chi-square over k equally likely outcomes. With a fixed seed the test is
// deterministic; the bound is loose (the 99.9999th percentile of chi-square is far below it for
// these degrees of freedom), so it only catches a grossly non-uniform generator.
double ChiSquare(const std::vector<int>& counts, double expected) {
  double chi = 0;
  for (int c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

TEST(Rng, BelowIsRoughlyUniform) {
  for (std::uint64_t k : {2ULL, 3ULL, 10ULL, 37ULL}) {
    Rng rng(2024, "uniform");
    std::vector<int> counts(k, 0);
    const int draws = 20000 * static_cast<int>(k);
    for (int i = 0; i < draws; ++i) ++counts[rng.Below(k)];
    const double chi = ChiSquare(counts, 20000.0);
    // dof = k - 1; mean k - 1, sd sqrt(2(k - 1)). Allow mean + 8 sd + 10.
    const double dof = static_cast<double>(k - 1);
    EXPECT_LT(chi, dof + 8.0 * std::sqrt(2.0 * dof) + 10.0) << "k = " << k;
  }
}

TEST(Rng, BelowALargeBoundUsesTheHighHalfToo) {
  Rng rng(5, "wide");
  const std::uint64_t n = (std::uint64_t{1} << 63) + (std::uint64_t{1} << 62);
  int high = 0;
  for (int i = 0; i < 10000; ++i) high += rng.Below(n) >= n / 2 ? 1 : 0;
  EXPECT_GT(high, 4500);
  EXPECT_LT(high, 5500);
}

TEST(Rng, UnitIsInTheHalfOpenUnitIntervalWithMeanOneHalf) {
  Rng rng(3, "unit");
  double sum = 0;
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    const double u = rng.Unit();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);
}

TEST(Rng, ShuffleIsAPermutation) {
  Rng rng(9, "shuffle");
  for (int n : {0, 1, 2, 5, 100, 1000}) {
    std::vector<int> items(static_cast<std::size_t>(n));
    std::iota(items.begin(), items.end(), 0);
    std::vector<int> shuffled = items;
    rng.Shuffle(std::span<int>(shuffled));
    std::vector<int> sorted = shuffled;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, items) << "n = " << n;
    if (n >= 100) {
      EXPECT_NE(shuffled, items) << "n = " << n;
    }
  }
}

TEST(Rng, ShuffleOfStringsKeepsEveryElement) {
  Rng rng(9, "strings");
  std::vector<std::string> items{"a", "b", "c", "d", "e", "f"};
  std::vector<std::string> shuffled = items;
  rng.Shuffle(std::span<std::string>(shuffled));
  std::sort(shuffled.begin(), shuffled.end());
  EXPECT_EQ(shuffled, items);
}

TEST(Rng, ShuffleReachesEveryOrderOfThreeAboutEquallyOften) {
  Rng rng(11, "orders");
  std::map<std::array<int, 3>, int> seen;
  constexpr int kRounds = 60000;
  for (int i = 0; i < kRounds; ++i) {
    std::array<int, 3> a{0, 1, 2};
    rng.Shuffle(std::span<int>(a));
    ++seen[a];
  }
  ASSERT_EQ(seen.size(), 6U);
  std::vector<int> counts;
  for (const auto& [order, count] : seen) counts.push_back(count);
  EXPECT_LT(ChiSquare(counts, kRounds / 6.0), 5.0 + 8.0 * std::sqrt(10.0) + 10.0);
}

TEST(Rng, PermutationIsAPermutationAndDeterministic) {
  for (int n : {0, 1, 2, 13, 1213}) {
    Rng a(42, "ranks");
    Rng b(42, "ranks");
    const std::vector<int> p = a.Permutation(n);
    EXPECT_EQ(p, b.Permutation(n));
    ASSERT_EQ(p.size(), static_cast<std::size_t>(n));
    std::vector<int> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> expected(static_cast<std::size_t>(n));
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(sorted, expected);
  }
  EXPECT_NE(Rng(42, "ranks").Permutation(50), Rng(43, "ranks").Permutation(50));
}

}  // namespace
}  // namespace gpumux::core
