#include "gpumux/isolation/limits.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "gpumux/core/json.h"
#include "gpumux/core/shown.h"
#include "gpumux/core/time.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/io/read_file.h"
#include "gpumux/isolation/cgroup.h"

namespace gpumux::isolation {
namespace {

using json = nlohmann::json;
constexpr int kRecordVersion = 1;
constexpr std::int64_t kMiB = 1024 * 1024;
// A record's strings: ids, names and a cgroup path are far shorter.
constexpr std::size_t kMaxFieldBytes = 4096;
constexpr int kMaxRecordDepth = 8;

bool UsableId(const std::string& id) {
  if (id.empty() || id.size() > 200 || id.front() == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

json ToJson(const LimitRecord& r) {
  json gpus = json::array();
  for (const GpuLimit& g : r.gpus) {
    gpus.push_back({{"uuid", g.uuid}, {"hard_mib", g.hard_mib}, {"soft_mib", g.soft_mib}});
  }
  return {{"version", kRecordVersion},
          {"container_id", r.container_id},
          {"pod", r.pod},
          {"pod_uid", r.pod_uid},
          {"container", r.container},
          {"cgroup", r.cgroup},
          {"state", r.state},
          {"gpus", std::move(gpus)},
          {"at", core::FormatRfc3339(r.at_unix_s)}};
}

core::Result<LimitRecord> FromJson(const std::string& text, const std::string& where) {
  const auto bad = [&](const std::string& what) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, where + ": " + what);
  };
  const auto parsed = core::ParseJson(text, "", {.max_depth = kMaxRecordDepth});
  if (!parsed) return bad(parsed.error().message);
  const json& doc = *parsed;
  if (!doc.is_object()) return bad("not a JSON object");
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() ||
      version->get<std::int64_t>() != kRecordVersion) {
    return bad("not a version " + std::to_string(kRecordVersion) + " limit record");
  }
  LimitRecord r;
  for (const auto& [key, field] :
       {std::pair<const char*, std::string*>{"container_id", &r.container_id},
        {"pod", &r.pod},
        {"pod_uid", &r.pod_uid},
        {"container", &r.container},
        {"cgroup", &r.cgroup},
        {"state", &r.state}}) {
    const auto it = doc.find(key);
    if (it == doc.end() || !it->is_string() ||
        it->get_ref<const std::string&>().size() > kMaxFieldBytes) {
      return bad(std::string("'") + key + "' is not a string of at most " +
                 std::to_string(kMaxFieldBytes) + " bytes");
    }
    *field = it->get<std::string>();
  }
  if (!UsableId(r.container_id)) return bad("'container_id' is not a container id");
  if (r.cgroup.empty() || r.cgroup.front() != '/') return bad("'cgroup' is not an absolute path");
  const auto gpus = doc.find("gpus");
  if (gpus == doc.end() || !gpus->is_array() || gpus->size() > kMaxLimitGpus) {
    return bad("'gpus' is not a list of at most " + std::to_string(kMaxLimitGpus));
  }
  for (const json& g : *gpus) {
    GpuLimit limit;
    const auto uuid = g.is_object() ? g.find("uuid") : g.end();
    const auto hard = g.is_object() ? g.find("hard_mib") : g.end();
    const auto soft = g.is_object() ? g.find("soft_mib") : g.end();
    if (uuid == g.end() || !uuid->is_string() || hard == g.end() || !hard->is_number_integer() ||
        soft == g.end() || !soft->is_number_integer()) {
      return bad("a GPU entry is not {uuid, hard_mib, soft_mib}");
    }
    limit.uuid = core::Shown(uuid->get_ref<const std::string&>(), 128);
    limit.hard_mib = hard->get<std::int64_t>();
    limit.soft_mib = soft->get<std::int64_t>();
    if (limit.hard_mib < 1 || limit.hard_mib > (std::int64_t{1} << 32) || limit.soft_mib < 0 ||
        limit.soft_mib > limit.hard_mib) {
      return bad("GPU " + limit.uuid + ": limits out of range");
    }
    r.gpus.push_back(std::move(limit));
  }
  if (const auto at = doc.find("at"); at != doc.end() && at->is_string()) {
    r.at_unix_s = core::ParseRfc3339(at->get<std::string>()).value_or(0);
  }
  return r;
}

std::string Named(const LimitRecord& r) {
  return (r.pod.empty() ? std::string("?") : r.pod) + "/" +
         (r.container.empty() ? std::string("?") : r.container) + " (container " +
         r.container_id.substr(0, 12) + ")";
}

// Clears every GPU of `record` on its cgroup (best effort), returns the first failure.
core::Result<void> ClearAll(const LimitRecord& record, const gpu::MemoryLimits& nvml) {
  core::Result<void> first;
  for (const GpuLimit& g : record.gpus) {
    auto cleared = nvml.Clear(g.uuid, record.cgroup);
    if (!cleared && first) first = cleared;
  }
  return first;
}

}  // namespace

LimitRecords::LimitRecords(std::string state_dir) : folder_(std::move(state_dir) + "/limits") {}

std::string LimitRecords::Path(const std::string& container_id) const {
  return folder_ + "/" + container_id + ".json";
}

core::Result<void> LimitRecords::Put(const LimitRecord& record) {
  if (!UsableId(record.container_id)) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "container id '" + core::Shown(record.container_id, 80) +
                               "' is not usable as a file name ([A-Za-z0-9_.-], at most 200)");
  }
  const std::string parent = folder_.substr(0, folder_.rfind('/'));
  for (const std::string& dir : {parent, folder_}) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return core::MakeError(core::ErrorCode::kIo,
                             dir + ": cannot create the folder: " + std::strerror(errno));
    }
  }
  return io::WriteFileAtomically(Path(record.container_id), ToJson(record).dump() + "\n");
}

core::Result<std::optional<LimitRecord>> LimitRecords::Get(const std::string& container_id) const {
  if (!UsableId(container_id)) return std::optional<LimitRecord>();
  auto text = io::ReadInputFile(Path(container_id), kMaxRecordBytes);
  if (!text) {
    if (text.error().code == core::ErrorCode::kNotFound) return std::optional<LimitRecord>();
    return tl::unexpected(text.error());
  }
  auto record = FromJson(*text, Path(container_id));
  if (!record) return tl::unexpected(record.error());
  return std::optional<LimitRecord>(std::move(*record));
}

core::Result<void> LimitRecords::Remove(const std::string& container_id) {
  if (!UsableId(container_id)) return {};
  if (::unlink(Path(container_id).c_str()) != 0 && errno != ENOENT) {
    return core::MakeError(core::ErrorCode::kIo,
                           Path(container_id) + ": cannot remove: " + std::strerror(errno));
  }
  return {};
}

std::vector<LimitRecord> LimitRecords::List(std::vector<std::string>* unreadable) const {
  std::vector<LimitRecord> out;
  DIR* dir = ::opendir(folder_.c_str());
  if (dir == nullptr) return out;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".json") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = folder_ + "/" + name;
    auto text = io::ReadInputFile(path, kMaxRecordBytes);
    auto record =
        text ? FromJson(*text, path) : core::Result<LimitRecord>(tl::unexpected(text.error()));
    if (record && record->container_id + ".json" == name) {
      out.push_back(std::move(*record));
    } else if (unreadable != nullptr) {
      unreadable->push_back(record ? path + ": names another container" : record.error().message);
    }
  }
  return out;
}

core::Result<LimitRecord> ApplyLimits(const ApplyRequest& request, const gpu::MemoryLimits& nvml,
                                      LimitRecords& records) {
  const std::string who = "container " + request.container_id.substr(0, 12) +
                          (request.pod.empty() ? "" : " of pod " + request.pod);
  const auto fail = [&](core::ErrorCode code, const std::string& what) {
    return core::MakeError(code, who + ": " + what);
  };
  if (request.pid <= 0) {
    return fail(core::ErrorCode::kInvalidArgument,
                "the runtime gave no process id (run the hook at createRuntime)");
  }
  if (request.gpus.empty() || request.gpus.size() > kMaxLimitGpus) {
    return fail(core::ErrorCode::kInvalidArgument,
                "1.." + std::to_string(kMaxLimitGpus) + " GPUs must be limited");
  }
  auto cgroup = ProcessCgroup(request.proc_root, request.pid, request.cgroup_root);
  if (!cgroup) return fail(cgroup.error().code, cgroup.error().message);
  if (*cgroup == request.cgroup_root) {
    return fail(core::ErrorCode::kFailedPrecondition,
                "its process is in the root cgroup, not a cgroup of its own: a limit there "
                "would hold every process of the node");
  }
  LimitRecord record{request.container_id, request.pod,       request.pod_uid,
                     request.container,    *cgroup,           "applying",
                     request.gpus,         request.now_unix_s};
  if (auto put = records.Put(record); !put) return fail(put.error().code, put.error().message);
  const auto undo = [&](const core::Error& e) -> core::Result<LimitRecord> {
    (void)ClearAll(record, nvml);
    (void)records.Remove(record.container_id);
    return fail(e.code, e.message);
  };
  for (const GpuLimit& g : request.gpus) {
    const auto soft = static_cast<std::uint64_t>(g.soft_mib) * kMiB;
    const auto hard = static_cast<std::uint64_t>(g.hard_mib) * kMiB;
    if (auto set = nvml.Set(g.uuid, *cgroup, soft, hard); !set) return undo(set.error());
    auto read = nvml.Get(g.uuid, *cgroup);
    if (!read) return undo(read.error());
    if (read->hard_bytes != hard) {
      return undo({core::ErrorCode::kFailedPrecondition,
                   "GPU " + g.uuid + ", cgroup " + *cgroup + ": hard limit set to " +
                       std::to_string(hard) + " bytes reads back as " +
                       std::to_string(read->hard_bytes)});
    }
  }
  record.state = "applied";
  if (auto put = records.Put(record); !put) return undo(put.error());
  return record;
}

core::Result<void> ReleaseLimits(const std::string& container_id, const gpu::MemoryLimits* nvml,
                                 LimitRecords& records) {
  auto record = records.Get(container_id);
  if (!record) return tl::unexpected(record.error());
  if (!*record) return {};
  if (nvml != nullptr && FolderExists((*record)->cgroup)) {
    if (auto cleared = ClearAll(**record, *nvml); !cleared) return cleared;
  }
  return records.Remove(container_id);
}

ReconcileResult ReconcileLimits(LimitRecords& records, const gpu::MemoryLimits* nvml,
                                const std::function<bool(const std::string&)>& cgroup_exists) {
  ReconcileResult result;
  for (const LimitRecord& r : records.List(&result.unreadable)) {
    if (cgroup_exists(r.cgroup)) {
      ++result.kept;
      continue;
    }
    if (nvml != nullptr) (void)ClearAll(r, *nvml);  // gone with the cgroup: "not found" expected
    if (records.Remove(r.container_id)) {
      ++result.reclaimed;
      result.reclaimed_names.push_back(Named(r));
    }
  }
  return result;
}

}  // namespace gpumux::isolation
