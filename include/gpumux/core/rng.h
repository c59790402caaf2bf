// Deterministic random numbers, injected wherever randomness is needed (never global).
// xoshiro256** seeded through SplitMix64 from (seed, stream name), so that separate uses
// (shuffle, resampling, node ranks, the random policy) draw from independent named streams
// and adding a draw in one never shifts another. Distributions are written here, not taken
// from <random>, whose distributions differ between standard library versions.
#pragma once

#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumux::core {

class Rng {
 public:
  Rng(std::uint64_t seed, std::string_view stream);

  std::uint64_t Next();
  // Uniform integer in [0, n); n > 0. Unbiased (Lemire's method).
  std::uint64_t Below(std::uint64_t n);
  // Uniform double in [0, 1).
  double Unit();

  template <typename T>
  void Shuffle(std::span<T> items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      std::size_t j = static_cast<std::size_t>(Below(i));
      std::swap(items[i - 1], items[j]);
    }
  }
  // A random permutation of 0..n-1.
  std::vector<int> Permutation(int n);

 private:
  std::uint64_t s_[4];
};

}  // namespace gpumux::core
