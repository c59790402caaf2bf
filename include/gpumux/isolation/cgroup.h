// The cgroup facts GPU memory partitioning needs: whether a folder is a cgroup v2 hierarchy,
// and which cgroup of that hierarchy a process (a container's first process) is in.
#pragma once

#include <cstdint>
#include <string>

#include "gpumux/core/result.h"

namespace gpumux::isolation {

inline constexpr const char* kDefaultCgroupRoot = "/sys/fs/cgroup";

struct CgroupHierarchy {
  std::string root;
  bool v2 = false;    // the root of a cgroup v2 (unified) hierarchy
  bool dmem = false;  // its controllers include the kernel's dmem (Linux >= 6.14)
  // For humans: "cgroup v2 at /sys/fs/cgroup (the kernel's dmem controller)", or why not: "no
  // cgroup v2 at /sys/fs/cgroup: a cgroup v1 or hybrid layout, its cgroup v2 hierarchy at
  // /sys/fs/cgroup/unified".
  std::string description;
};

// A folder is the root of a cgroup v2 hierarchy when it holds cgroup.controllers (every cgroup2
// mount has it; the tmpfs that a v1 or hybrid layout mounts at /sys/fs/cgroup has not), which
// also holds for a prepared tree in tests. Reads two small files; never fails.
CgroupHierarchy DetectCgroupHierarchy(const std::string& root);

// The folder of the cgroup v2 cgroup that process `pid` is in: the "0::<path>" line of
// <proc_root>/<pid>/cgroup joined onto `root` ("/sys/fs/cgroup" + "/kubepods/.../<id>"). Error
// naming the pid when the process is gone, has no unified-hierarchy line, or the folder does
// not exist under `root`. Nothing is created.
core::Result<std::string> ProcessCgroup(const std::string& proc_root, std::int64_t pid,
                                        const std::string& root);

// Whether `path` is an existing folder.
bool FolderExists(const std::string& path);

}  // namespace gpumux::isolation
