// Store round trips: Put, Get and List of one small value, one call at a time, against a real
// etcd (Debian's etcd-server, started here on free loopback ports with its data in a temporary
// folder: every Put is one fsync'd raft entry) and against the file store (every Put rewrites
// and fsyncs the file), and a batch of every key in one Apply (the coordinator's store writer:
// the file store fsyncs once for the batch). Prints percentiles in milliseconds; a plain program,
// like the other latency benches, so that it reports tails.
//
//   gpumux_store_bench [--iterations 1000] [--keys 100]
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/latency_table.h"
#include "gpumux/store/store.h"
#include "tests/testing/etcd_fixture.h"

namespace {

using namespace gpumux;
using Clock = std::chrono::steady_clock;

void Report(const std::string& what, std::vector<double> ms) {
  bench::PrintLatencies(what, std::move(ms));
}

// Times `iterations` calls of each kind; false (after saying why) when a call fails.
bool Run(const std::string& name, store::Store& s, int iterations, int keys) {
  std::vector<double> put, get, list;
  const std::string value(200, 'x');  // about a coordinator record
  auto key = [](int i) {
    std::string k = "/gpumux/bench/";
    k += std::to_string(i);
    return k;
  };
  const auto time = [](auto&& call, std::vector<double>& into) {
    const auto start = Clock::now();
    const bool ok = call();
    into.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    return ok;
  };
  for (int i = 0; i < iterations; ++i) {
    core::Result<void> done;
    const std::string v =
        value + std::to_string(i);  // a new value: the file store skips same-value Puts
    if (!time([&] { return (done = s.Put(key(i % keys), v)).has_value(); }, put)) {
      std::fprintf(stderr, "%s: Put: %s\n", name.c_str(), done.error().message.c_str());
      return false;
    }
  }
  for (int i = 0; i < iterations; ++i) {
    core::Result<std::optional<std::string>> got;
    if (!time([&] { return (got = s.Get(key(i % keys))).has_value(); }, get)) {
      std::fprintf(stderr, "%s: Get: %s\n", name.c_str(), got.error().message.c_str());
      return false;
    }
  }
  for (int i = 0; i < iterations / 10; ++i) {
    core::Result<std::vector<store::KeyValue>> listed;
    if (!time([&] { return (listed = s.List("/gpumux/bench/")).has_value(); }, list)) {
      std::fprintf(stderr, "%s: List: %s\n", name.c_str(), listed.error().message.c_str());
      return false;
    }
  }
  // A batch as the coordinator's store writer sends it: every key once, one Apply.
  std::vector<double> batch;
  for (int i = 0; i < std::max(1, iterations / 10); ++i) {
    std::vector<store::Change> changes;
    for (int k = 0; k < keys; ++k) changes.push_back({key(k), value + std::to_string(i)});
    core::Result<void> done;
    if (!time([&] { return (done = s.Apply(changes)).has_value(); }, batch)) {
      std::fprintf(stderr, "%s: Apply: %s\n", name.c_str(), done.error().message.c_str());
      return false;
    }
  }
  Report(name + " Put", put);
  Report(name + " Get", get);
  Report(name + " List (" + std::to_string(keys) + " keys)", list);
  Report(name + " Apply (" + std::to_string(keys) + " keys)", batch);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpumux store: Put/Get/List round trips to a local etcd and to the file store"};
  int iterations = 1000, keys = 100;
  app.add_option("--iterations", iterations, "Calls of Put and of Get (List: a tenth)")
      ->capture_default_str();
  app.add_option("--keys", keys, "Distinct keys written")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (iterations < 10 || keys < 1) {
    std::fprintf(stderr, "--iterations must be >= 10 and --keys >= 1\n");
    return 2;
  }

  std::printf("store round trips, one call at a time (ms)\n");
  bench::PrintLatencyHead("call");
  bool ok = true;
  auto etcd = test::EtcdProcess::Start();
  if (!etcd) {
    std::printf("etcd: skipped (%s)\n", etcd.error().message.c_str());
  } else {
    auto s = store::OpenStore((*etcd)->url());
    if (!s) std::fprintf(stderr, "etcd store: %s\n", s.error().message.c_str());
    ok = s.has_value() && Run("etcd", **s, iterations, keys);
  }
  std::string dir = (std::filesystem::temp_directory_path() / "gpumux-store-bench-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  {
    auto s = store::OpenStore(dir + "/store.json");
    if (!s) {
      std::fprintf(stderr, "file store: %s\n", s.error().message.c_str());
      return 1;
    }
    ok = Run("file", **s, iterations, keys) && ok;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return ok ? 0 : 1;
}
