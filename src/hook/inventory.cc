#include "gpumux/hook/inventory.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "gpumux/core/cluster.h"
#include "gpumux/io/csv.h"
#include "gpumux/io/read_file.h"

namespace gpumux::hook {
namespace {

namespace fs = std::filesystem;

core::Result<DeviceNode> StatDevice(const std::string& host_path, const std::string& name) {
  struct stat st {};
  if (::stat(host_path.c_str(), &st) != 0) {
    return core::MakeError(core::ErrorCode::kNotFound, host_path + ": no such device");
  }
  if (!S_ISCHR(st.st_mode)) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           host_path + ": not a character device");
  }
  return DeviceNode{host_path, "/dev/" + name, major(st.st_rdev), minor(st.st_rdev)};
}

std::string MaxGpusNote() {
  return " (a node has at most " + std::to_string(core::kMaxGpusPerNode) +
         " GPUs, core::kMaxGpusPerNode)";
}

// The GPUs of a GPU file, in file order. Every field is checked, naming file, line and column.
core::Result<std::vector<HostGpu>> ReadGpuFile(const InventoryOptions& options) {
  auto text = io::ReadInputFile(options.gpus_file, kMaxGpuFileBytes);
  if (!text) return tl::unexpected(text.error());
  std::istringstream in(std::move(*text));
  io::CsvReader csv(in, options.gpus_file);
  if (auto h = csv.ReadHeader({"index", "uuid", "model", "memory_mib"}); !h) {
    return tl::unexpected(h.error());
  }
  const bool has_device = csv.HasColumn("device");
  std::vector<HostGpu> gpus;
  std::map<std::int64_t, int> line_of_index;
  std::map<std::string, int> line_of_uuid;
  while (true) {
    auto more = csv.Next();
    if (!more) return tl::unexpected(more.error());
    if (!*more) break;
    auto index = csv.Int("index");
    auto mib = csv.Int("memory_mib");
    if (!index) return tl::unexpected(index.error());
    if (!mib) return tl::unexpected(mib.error());
    if (*index < 0 || *index >= core::kMaxGpusPerNode) {
      return tl::unexpected(csv.ErrorHere("index " + std::to_string(*index) + " outside 0.." +
                                          std::to_string(core::kMaxGpusPerNode - 1) +
                                          MaxGpusNote()));
    }
    if (const auto [it, fresh] = line_of_index.emplace(*index, csv.line()); !fresh) {
      return tl::unexpected(csv.ErrorHere("column 'index': GPU " + std::to_string(*index) +
                                          " already on line " + std::to_string(it->second)));
    }
    if (*mib < 0 || *mib > core::kMaxGpuMemoryMib) {
      return tl::unexpected(csv.ErrorHere("column 'memory_mib': " + std::to_string(*mib) +
                                          " outside 0.." + std::to_string(core::kMaxGpuMemoryMib) +
                                          " (core::kMaxGpuMemoryMib, 4 PiB)"));
    }
    HostGpu g;
    g.index = static_cast<int>(*index);
    auto uuid = csv.Text("uuid");
    auto model = csv.Text("model");
    if (!uuid) return tl::unexpected(uuid.error());
    if (!model) return tl::unexpected(model.error());
    g.uuid = std::string(*uuid);
    if (!g.uuid.empty()) {
      if (const auto [it, fresh] = line_of_uuid.emplace(g.uuid, csv.line()); !fresh) {
        return tl::unexpected(csv.ErrorHere("column 'uuid': " + g.uuid + " already on line " +
                                            std::to_string(it->second)));
      }
    }
    g.model = std::string(*model);
    g.memory_mib = *mib;
    const std::string dev_name = "nvidia" + std::to_string(g.index);
    std::string host_path = has_device ? std::string(csv.Field("device")) : "";
    if (host_path.empty()) host_path = options.dev_dir + "/" + dev_name;
    auto d = StatDevice(host_path, dev_name);
    if (!d) return tl::unexpected(csv.ErrorHere(d.error().message));
    g.device = *d;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace

core::Result<Inventory> LoadInventory(const InventoryOptions& options) {
  Inventory inv;
  std::error_code ec;
  if (!fs::is_directory(options.dev_dir, ec)) {
    return core::MakeError(core::ErrorCode::kNotFound,
                           options.dev_dir + ": device folder does not exist");
  }
  for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}) {
    const std::string p = options.dev_dir + "/" + name;
    if (fs::exists(p, ec)) {
      auto d = StatDevice(p, name);
      if (!d) return tl::unexpected(d.error());
      inv.control.push_back(*d);
    }
  }
  if (options.gpus_file.empty()) {
    inv.source = options.dev_dir;
    for (const auto& entry : fs::directory_iterator(options.dev_dir, ec)) {
      const std::string name = entry.path().filename().string();
      // nvidia<N>: "nvidia" followed by digits only (not nvidiactl, nvidia-uvm, ...).
      const std::string digits = name.rfind("nvidia", 0) == 0 ? name.substr(6) : "";
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      if (digits.size() > 3 || std::stoi(digits) >= core::kMaxGpusPerNode) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               entry.path().string() + ": GPU number outside 0.." +
                                   std::to_string(core::kMaxGpusPerNode - 1) + MaxGpusNote());
      }
      auto d = StatDevice(entry.path().string(), name);
      if (!d) return tl::unexpected(d.error());
      HostGpu g;
      g.index = std::stoi(digits);
      g.device = *d;
      inv.gpus.push_back(g);
    }
    if (ec) return core::MakeError(core::ErrorCode::kIo, options.dev_dir + ": " + ec.message());
    std::sort(inv.gpus.begin(), inv.gpus.end(),
              [](const HostGpu& a, const HostGpu& b) { return a.index < b.index; });
  } else {
    inv.source = options.gpus_file;
    auto gpus = ReadGpuFile(options);
    if (!gpus) return tl::unexpected(gpus.error());
    inv.gpus = std::move(*gpus);
    std::sort(inv.gpus.begin(), inv.gpus.end(),
              [](const HostGpu& a, const HostGpu& b) { return a.index < b.index; });
  }
  for (std::size_t i = 0; i < inv.gpus.size(); ++i) {
    if (inv.gpus[i].index != static_cast<int>(i)) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             inv.source + ": GPU indices must be 0..n-1 without gaps (found GPU " +
                                 std::to_string(inv.gpus[i].index) + " at position " +
                                 std::to_string(i) + ")");
    }
  }
  return inv;
}

std::string VisibleDevicesValue(const Inventory& inventory, const std::vector<int>& gpus) {
  const bool uuids = std::all_of(gpus.begin(), gpus.end(), [&](int g) {
    return !inventory.gpus[static_cast<std::size_t>(g)].uuid.empty();
  });
  std::string out;
  for (int g : gpus) {
    if (!out.empty()) out += ',';
    out += uuids ? inventory.gpus[static_cast<std::size_t>(g)].uuid : std::to_string(g);
  }
  return out;
}

std::string JoinIndices(const std::vector<int>& gpus) {
  std::string s;
  for (int g : gpus) {
    if (!s.empty()) s += ',';
    s += std::to_string(g);
  }
  return s;
}

core::Result<std::vector<int>> ResolveListed(const Inventory& inventory,
                                             const std::vector<std::string>& listed) {
  std::vector<int> out;
  for (const std::string& item : listed) {
    int found = -1;
    if (!item.empty() && item.find_first_not_of("0123456789") == std::string::npos &&
        item.size() < 4) {
      const int i = std::stoi(item);
      if (i < static_cast<int>(inventory.gpus.size())) found = i;
    } else {
      for (const auto& g : inventory.gpus) {
        if (!g.uuid.empty() && g.uuid == item) found = g.index;
      }
    }
    if (found < 0) {
      return core::MakeError(core::ErrorCode::kNotFound, "NVIDIA_VISIBLE_DEVICES names GPU '" +
                                                             item + "', but the host has " +
                                                             std::to_string(inventory.gpus.size()) +
                                                             " GPUs (" + inventory.source + ")");
    }
    if (std::find(out.begin(), out.end(), found) == out.end()) out.push_back(found);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gpumux::hook
