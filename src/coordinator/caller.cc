#include "gpumux/coordinator/caller.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "gpumux/io/read_file.h"

namespace gpumux::coordinator {

namespace {

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// "7c0f...-...": 8-4-4-4-12 hex digits with '-' or '_' between, as lower case with dashes.
std::string PodUid(std::string_view s) {
  static constexpr std::size_t kGroups[] = {8, 4, 4, 4, 12};
  std::string out;
  std::size_t at = 0;
  for (std::size_t g = 0; g < 5; ++g) {
    if (g > 0) {
      if (at >= s.size() || (s[at] != '-' && s[at] != '_')) return {};
      out += '-';
      ++at;
    }
    if (at + kGroups[g] > s.size() || !IsHex(s.substr(at, kGroups[g]))) return {};
    for (char c : s.substr(at, kGroups[g])) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    at += kGroups[g];
  }
  return at == s.size() ? out : std::string();
}

// The pod UID in one segment: "pod<uid>" or "...-pod<uid>.slice".
std::string PodOfSegment(std::string_view seg) {
  if (seg.size() > 6 && seg.substr(seg.size() - 6) == ".slice") seg.remove_suffix(6);
  const auto at = seg.rfind("pod");
  if (at == std::string_view::npos || (at > 0 && seg[at - 1] != '-')) return {};
  return PodUid(seg.substr(at + 3));
}

// The container id in one segment: 64 hex digits, bare or as "<runtime>-<id>.scope".
std::string ContainerOfSegment(std::string_view seg) {
  if (seg.size() > 6 && seg.substr(seg.size() - 6) == ".scope") {
    seg.remove_suffix(6);
    const auto dash = seg.rfind('-');
    if (dash != std::string_view::npos) seg.remove_prefix(dash + 1);
  }
  return seg.size() == 64 && IsHex(seg) ? std::string(seg) : std::string();
}

CgroupIdentity FromPath(std::string_view path) {
  CgroupIdentity id;
  id.read = true;
  std::size_t at = 0;
  while (at <= path.size()) {
    const auto end = std::min(path.find('/', at), path.size());
    const std::string_view seg = path.substr(at, end - at);
    if (!seg.empty() && seg != "." && seg != "..") {
      id.segments.emplace_back(seg);
      if (auto pod = PodOfSegment(seg); !pod.empty()) id.pod_uid = std::move(pod);
      if (auto c = ContainerOfSegment(seg); !c.empty()) id.container_id = std::move(c);
    }
    at = end + 1;
  }
  return id;
}

}  // namespace

CgroupIdentity ParseCgroup(std::string_view text) {
  // Every hierarchy is read: on a "hybrid" host (cgroup v1 controllers beside the unified
  // hierarchy) the runtime puts a container in the v1 ones only, and the unified line names the
  // runtime's service. A line that names a pod or a container decides, the unified one first.
  std::optional<CgroupIdentity> unified;
  std::vector<CgroupIdentity> paths;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    const auto first = line.find(':');
    const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    CgroupIdentity id = FromPath(line.substr(second + 1));
    if (line.substr(0, second + 1) == "0::" && !unified) {
      unified = std::move(id);
    } else {
      paths.push_back(std::move(id));
    }
  }
  if (unified && unified->in_container()) return std::move(*unified);
  for (auto& id : paths) {
    if (id.in_container()) return std::move(id);
  }
  if (unified) return std::move(*unified);
  return paths.empty() ? CgroupIdentity{} : std::move(paths.front());
}

Caller Caller::Tcp(std::string address) {
  Caller c;
  c.kind = Kind::kTcp;
  c.address = std::move(address);
  return c;
}

bool Caller::trusted() const {
  return kind == Kind::kNode ||
         (kind == Kind::kProcess && uid == 0 && cgroup.read && !cgroup.in_container());
}

std::string Caller::Principal() const {
  switch (kind) {
    case Kind::kNode:
      return "node";
    case Kind::kTcp:
      return "tcp";
    case Kind::kProcess:
      break;
  }
  if (!cgroup.pod_uid.empty()) return "pod " + cgroup.pod_uid;
  if (!cgroup.container_id.empty()) return "container " + cgroup.container_id;
  return "uid " + std::to_string(uid);
}

std::string Caller::Describe() const {
  switch (kind) {
    case Kind::kNode:
      return "the node";
    case Kind::kTcp:
      return "a TCP peer (" + address + ")";
    case Kind::kProcess:
      break;
  }
  // No host pid: a pod cannot otherwise see one, and this goes into replies.
  std::string out = "a process of uid " + std::to_string(uid);
  if (!cgroup.pod_uid.empty()) return out + " in pod " + cgroup.pod_uid;
  if (!cgroup.container_id.empty()) return out + " in container " + cgroup.container_id;
  if (!cgroup.read) return out + ", whose cgroup cannot be read";
  return out;
}

std::string Caller::LogName() const {
  if (kind != Kind::kProcess) return Describe();
  return "pid " + std::to_string(pid) + ": " + Describe();
}

Caller ReadCaller(std::int64_t pid, std::int64_t uid, const std::string& proc) {
  Caller c;
  c.kind = Caller::Kind::kProcess;
  c.pid = pid;
  c.uid = uid;
  if (pid <= 0) return c;
  auto text = io::ReadInputFile(proc + "/" + std::to_string(pid) + "/cgroup", 1 << 16);
  if (text) c.cgroup = ParseCgroup(*text);
  return c;
}

}  // namespace gpumux::coordinator
