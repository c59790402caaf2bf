#include "gpumux/isolation/cgroup.h"

#include <sys/stat.h>

#include <string_view>

#include "gpumux/io/read_file.h"

namespace gpumux::isolation {
namespace {

// /proc/<pid>/cgroup is a line per hierarchy; a few KB at most.
constexpr std::size_t kMaxProcCgroupBytes = 64 * 1024;

bool HasWord(std::string_view text, std::string_view word) {
  std::size_t at = 0;
  while ((at = text.find(word, at)) != std::string_view::npos) {
    const bool starts = at == 0 || text[at - 1] == ' ' || text[at - 1] == '\n';
    const std::size_t end = at + word.size();
    const bool ends = end == text.size() || text[end] == ' ' || text[end] == '\n';
    if (starts && ends) return true;
    at = end;
  }
  return false;
}

}  // namespace

bool FolderExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

CgroupHierarchy DetectCgroupHierarchy(const std::string& root) {
  CgroupHierarchy h;
  h.root = root;
  auto controllers = io::ReadInputFile(root + "/cgroup.controllers", 64 * 1024);
  if (!controllers) {
    h.description = "no cgroup v2 at " + root;
    if (FolderExists(root + "/unified") || FolderExists(root + "/memory")) {
      h.description += ": a cgroup v1 or hybrid layout";
      if (FolderExists(root + "/unified")) {
        h.description += ", its cgroup v2 hierarchy at " + root + "/unified";
      }
    }
    return h;
  }
  h.v2 = true;
  h.dmem = HasWord(*controllers, "dmem");
  h.description = "cgroup v2 at " + root +
                  (h.dmem ? " (the kernel's dmem controller)"
                          : " (no dmem controller: the driver's own accounting)");
  return h;
}

core::Result<std::string> ProcessCgroup(const std::string& proc_root, std::int64_t pid,
                                        const std::string& root) {
  const std::string file = proc_root + "/" + std::to_string(pid) + "/cgroup";
  auto text = io::ReadInputFile(file, kMaxProcCgroupBytes);
  if (!text) {
    return core::MakeError(core::ErrorCode::kNotFound,
                           "process " + std::to_string(pid) + ": " + text.error().message);
  }
  std::string_view rest = *text;
  while (!rest.empty()) {
    const auto end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (line.substr(0, 3) != "0::") continue;
    const std::string_view path = line.substr(3);
    if (path.empty() || path.front() != '/' || path.find("/../") != std::string_view::npos ||
        path.find('\0') != std::string_view::npos ||
        (path.size() >= 3 && path.substr(path.size() - 3) == "/..")) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             file + ": the unified-hierarchy path is not an absolute cgroup path");
    }
    std::string folder = root + (path == "/" ? std::string() : std::string(path));
    if (!FolderExists(folder)) {
      return core::MakeError(core::ErrorCode::kNotFound,
                             "process " + std::to_string(pid) + " is in cgroup " +
                                 std::string(path) + ", which is not a folder under " + root);
    }
    return folder;
  }
  return core::MakeError(core::ErrorCode::kFailedPrecondition,
                         file + " has no cgroup v2 (0::) line");
}

}  // namespace gpumux::isolation
