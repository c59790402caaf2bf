// Runs independent tasks on a few threads (internal to sim). Results go into slots the caller
// owns, so their order never depends on scheduling.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace gpumux::sim {

// Calls work(i) for i in [0, count) on up to `threads` threads (0 = all cores), then
// done(i, finished_so_far) under a lock, in completion order.
template <typename Work, typename Done>
void RunParallel(std::size_t count, int threads, Work work, Done done) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::size_t finished = 0;
  auto worker = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      work(i);
      std::lock_guard<std::mutex> lock(mu);
      done(i, ++finished);
    }
  };
  unsigned n = threads > 0 ? static_cast<unsigned>(threads)
                           : std::max(1U, std::thread::hardware_concurrency());
  n = std::min<unsigned>(n, static_cast<unsigned>(std::max<std::size_t>(count, 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

}  // namespace gpumux::sim
