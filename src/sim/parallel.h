// Runs independent tasks on a few threads (internal to sim). Results go into slots the caller
// owns, so their order never depends on scheduling.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace gpumux::sim {

// The most threads RunParallel starts, whatever it is asked.
inline constexpr unsigned kMaxParallelThreads = 1024;

// Calls work(i) for i in [0, count) on up to `threads` threads (0 = all cores; at most
// kMaxParallelThreads, and fewer when the system refuses to start more: the started ones do
// all the work), then done(i, finished_so_far) under a lock, in completion order.
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
  n = std::min<unsigned>(n, static_cast<unsigned>(std::min<std::size_t>(
                                std::max<std::size_t>(count, 1), kMaxParallelThreads)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < n; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // out of threads: the ones running (and this one) take the rest
    }
  }
  worker();
  for (auto& t : pool) t.join();
}

}  // namespace gpumux::sim
