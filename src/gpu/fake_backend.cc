// The fake backend: GPUs described in a CSV file, read again whenever the file changes.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "gpumux/core/cluster.h"
#include "gpumux/gpu/backend.h"
#include "gpumux/io/csv.h"
#include "gpumux/io/read_file.h"

namespace gpumux::gpu {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);
constexpr std::int64_t kMaxGpus = core::kMaxGpusPerNode;
constexpr std::int64_t kMaxMinor = (1 << 20) - 1;  // Linux MINORBITS

// What tells one version of the file from another. An atomic replace (rename) changes the
// inode; an edit in place changes size, mtime or ctime.
struct Stamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = -1;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const Stamp&) const = default;
};

core::Result<Stamp> StampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return core::MakeError(errno == ENOENT ? core::ErrorCode::kNotFound : core::ErrorCode::kIo,
                           path + ": cannot read: " + std::strerror(errno));
  }
  return Stamp{st.st_dev, st.st_ino, st.st_size,
               static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
               static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

struct FakeGpu {
  Gpu gpu;
  std::vector<std::uint64_t> xids;
  int line = 0;
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// An optional integer column: `fallback` when the column is absent or the field empty, else
// an integer in [lo, hi].
core::Result<std::int64_t> OptionalInt(const io::CsvReader& csv, std::string_view column,
                                       std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  if (!csv.HasColumn(column) || Trim(csv.Field(column)).empty()) return fallback;
  auto v = csv.Int(column);
  if (!v) return v;
  if (*v < lo || *v > hi) {
    std::string what = "column '";
    what += column;
    what += "': ";
    what += std::to_string(*v);
    what += " outside ";
    what += std::to_string(lo);
    what += "..";
    what += std::to_string(hi);
    return tl::unexpected(csv.ErrorHere(what));
  }
  return v;
}

// "79; 48" -> {79, 48} (a trailing ';' is allowed).
core::Result<std::vector<std::uint64_t>> ParseXids(const io::CsvReader& csv) {
  std::vector<std::uint64_t> xids;
  if (!csv.HasColumn("xids")) return xids;
  const std::string_view all = Trim(csv.Field("xids"));
  std::size_t begin = 0;
  while (begin < all.size()) {
    const std::size_t end = std::min(all.find(';', begin), all.size());
    const std::string_view item = Trim(all.substr(begin, end - begin));
    std::uint64_t v = 0;
    bool ok = !item.empty() && item.size() <= 19;  // 19 digits cannot overflow 64 bits
    for (char c : item) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (!ok) {
      return tl::unexpected(csv.ErrorHere("column 'xids': '" + std::string(item) +
                                          "' is not an XID number (write e.g. 79;48)"));
    }
    xids.push_back(v);
    begin = end + 1;
  }
  return xids;
}

// The GPU of the CSV reader's current row (of the file `path`). `line_of_uuid` holds the UUIDs
// of the rows before it, by line: a UUID seen before is an error, a new one is added.
core::Result<FakeGpu> ReadGpuRow(const io::CsvReader& csv, const std::string& path,
                                 std::map<std::string, int>& line_of_uuid) {
  FakeGpu f;
  f.line = csv.line();
  Gpu& g = f.gpu;
  auto index = csv.Int("index");
  if (!index) return tl::unexpected(index.error());
  if (*index < 0 || *index >= kMaxGpus) {
    return tl::unexpected(csv.ErrorHere("column 'index': " + std::to_string(*index) +
                                        " outside 0.." + std::to_string(kMaxGpus - 1) +
                                        " (a node has at most " + std::to_string(kMaxGpus) +
                                        " GPUs, core::kMaxGpusPerNode)"));
  }
  g.index = static_cast<int>(*index);
  auto uuid = csv.Text("uuid");
  auto model = csv.Text("model");
  if (!uuid) return tl::unexpected(uuid.error());
  if (!model) return tl::unexpected(model.error());
  g.uuid = std::string(Trim(*uuid));
  if (g.uuid.empty()) return tl::unexpected(csv.ErrorHere("column 'uuid': empty"));
  if (const auto [it, fresh] = line_of_uuid.emplace(g.uuid, f.line); !fresh) {
    return tl::unexpected(csv.ErrorHere("column 'uuid': " + g.uuid + " already on line " +
                                        std::to_string(it->second)));
  }
  g.name = std::string(Trim(*model));
  auto total = csv.Int("memory_mib");
  if (!total) return tl::unexpected(total.error());
  if (*total <= 0) {
    return tl::unexpected(
        csv.ErrorHere("column 'memory_mib': " + std::to_string(*total) + " is not > 0"));
  }
  if (*total > core::kMaxGpuMemoryMib) {
    return tl::unexpected(csv.ErrorHere("column 'memory_mib': " + std::to_string(*total) +
                                        " MiB is more memory than a GPU " + "may have (" +
                                        std::to_string(core::kMaxGpuMemoryMib) +
                                        " MiB = 4 PiB, core::kMaxGpuMemoryMib)"));
  }
  g.memory_total_mib = *total;
  auto used = OptionalInt(csv, "memory_used_mib", -1, 0, *total);
  if (!used) return tl::unexpected(used.error());
  g.memory_used_mib = *used;
  auto minor = OptionalInt(csv, "minor", *index, 0, kMaxMinor);
  if (!minor) return tl::unexpected(minor.error());
  g.minor = static_cast<int>(*minor);
  const std::string health =
      csv.HasColumn("health") ? Lower(Trim(csv.Field("health"))) : std::string();
  if (health == "unhealthy") {
    g.health = Health::kUnhealthy;
    g.health_reason = "marked unhealthy in " + path;
  } else if (!health.empty() && health != "healthy") {
    return tl::unexpected(csv.ErrorHere("column 'health': '" + std::string(csv.Field("health")) +
                                        "' is neither healthy nor unhealthy"));
  }
  auto xids = ParseXids(csv);
  if (!xids) return tl::unexpected(xids.error());
  f.xids = std::move(*xids);
  return f;
}

// Sorts the GPUs of the file `path` by index and checks that the indices are 0..n-1; the
// error names the line of the first repeated or the first missing index.
core::Result<void> SortByIndex(std::vector<FakeGpu>& gpus, const std::string& path) {
  std::sort(gpus.begin(), gpus.end(),
            [](const FakeGpu& a, const FakeGpu& b) { return a.gpu.index < b.gpu.index; });
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].gpu.index == static_cast<int>(i)) continue;
    std::string what = path + ":" + std::to_string(gpus[i].line) + ": column 'index': ";
    if (i > 0 && gpus[i].gpu.index == gpus[i - 1].gpu.index) {
      what += "GPU " + std::to_string(gpus[i].gpu.index) + " already on line " +
              std::to_string(gpus[i - 1].line);
    } else {
      what += "GPU " + std::to_string(i) + " is missing (indices must be 0..n-1 without gaps)";
    }
    return core::MakeError(core::ErrorCode::kInvalidArgument, std::move(what));
  }
  return {};
}

core::Result<std::vector<FakeGpu>> ReadGpuFile(const std::string& path) {
  auto text = io::ReadInputFile(path, kMaxGpuFileBytes);
  if (!text) return tl::unexpected(text.error());
  std::istringstream in(std::move(*text));
  io::CsvReader csv(in, path);
  if (auto h = csv.ReadHeader({"index", "uuid", "model", "memory_mib"}); !h) {
    return tl::unexpected(h.error());
  }
  std::vector<FakeGpu> gpus;
  std::map<std::string, int> line_of_uuid;
  while (true) {
    auto more = csv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    auto gpu = ReadGpuRow(csv, path, line_of_uuid);
    if (!gpu) return tl::unexpected(gpu.error());
    gpus.push_back(std::move(*gpu));
  }
  if (auto sorted = SortByIndex(gpus, path); !sorted) return tl::unexpected(sorted.error());
  return gpus;
}

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(std::string path) : path_(std::move(path)) {}

  std::string_view Name() const override { return "fake"; }

  core::Result<std::vector<Gpu>> List() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto r = RefreshLocked(); !r) return tl::unexpected(r.error());
    std::vector<Gpu> out;
    out.reserve(gpus_.size());
    for (const FakeGpu& f : gpus_) out.push_back(f.gpu);
    return out;
  }

  core::Result<std::vector<XidEvent>> WaitXid(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      core::Result<void> refreshed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        refreshed = RefreshLocked();
        if (refreshed && !pending_.empty()) return std::exchange(pending_, {});
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        if (!refreshed) return tl::unexpected(refreshed.error());
        return std::vector<XidEvent>{};
      }
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(kPoll, deadline - now));
    }
  }

  // Reads the file when it changed since the last good read; queues the XIDs not yet
  // delivered. On an error the previous snapshot stays, and the next call reads again.
  core::Result<void> RefreshLocked() {
    auto stamp = StampOf(path_);
    if (!stamp) return tl::unexpected(stamp.error());
    if (loaded_ && *stamp == stamp_) return {};
    auto gpus = ReadGpuFile(path_);
    if (!gpus) return tl::unexpected(gpus.error());
    for (const FakeGpu& f : *gpus) {
      std::size_t& delivered = delivered_[f.gpu.uuid];
      for (std::size_t k = delivered; k < f.xids.size(); ++k) {
        pending_.push_back(XidEvent{f.gpu.uuid, f.xids[k]});
      }
      delivered = f.xids.size();
    }
    gpus_ = std::move(*gpus);
    stamp_ = *stamp;
    loaded_ = true;
    return {};
  }

 private:
  std::string path_;
  std::mutex mu_;
  bool loaded_ = false;
  Stamp stamp_;
  std::vector<FakeGpu> gpus_;
  std::map<std::string, std::size_t> delivered_;  // XIDs delivered (or queued) per UUID
  std::vector<XidEvent> pending_;
};

}  // namespace

core::Result<std::unique_ptr<Backend>> OpenFake(const std::string& path) {
  auto backend = std::make_unique<FakeBackend>(path);
  if (auto r = backend->RefreshLocked(); !r) return tl::unexpected(r.error());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace gpumux::gpu
