// Who is calling the coordinator, decided from the connection and never from the message: on
// the unix socket the kernel's peer credentials (SO_PEERCRED: pid and uid) and the peer
// process's cgroup (/proc/<pid>/cgroup), which names its pod and container; over TCP nothing
// is known of the peer (docs/COORDINATOR.md, "Who may act for a job"; docs/decisions.md).
//
// The coordinator (coordinator.h) lets a caller act only for the jobs it registered itself
// (its Principal), and with a membership source only as its own pod or container.
// Thread safety: values; ReadCaller reads /proc and may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpumux::coordinator {

// What a process's cgroup says about it.
struct CgroupIdentity {
  // The Kubernetes pod UID (lower case, with dashes) from a "pod<uid>" segment (cgroupfs) or
  // a "kubepods-...-pod<uid with underscores>.slice" segment (systemd); "" when none.
  std::string pod_uid;
  // The container id: a segment of 64 hex digits, bare (cgroupfs) or as
  // "<runtime>-<id>.scope" (systemd: cri-containerd-, crio-, docker-); "" when none.
  std::string container_id;
  // Every segment of the cgroup path, for runtimes that name containers otherwise (runc's ids
  // may be any string: the OCI runtime ledger matches its container ids against these).
  std::vector<std::string> segments;
  bool read = false;  // false: the cgroup could not be read (nothing above is known)
  bool in_container() const { return !pod_uid.empty() || !container_id.empty(); }
};

// Parses /proc/<pid>/cgroup ("<id>:<controllers>:<path>" lines, cgroup v1 or v2, or both on a
// hybrid host): the unified (v2, "0::") path when it names a pod or a container, else the first
// v1 path that does, else the unified path, else the first path. Unparsable text gives an empty
// identity.
CgroupIdentity ParseCgroup(std::string_view proc_cgroup);

struct Caller {
  enum class Kind : std::uint8_t {
    kNode,     // the coordinator's own process or a test: may act for any job
    kProcess,  // a process on this node, known by the kernel (the unix socket)
    kTcp,      // a TCP peer: who it is cannot be known
  };
  Kind kind = Kind::kNode;
  std::int64_t pid = -1, uid = -1;
  CgroupIdentity cgroup;
  std::string address;  // TCP: the peer's address

  static Caller Node() { return {}; }
  static Caller Tcp(std::string address);
  // The node's administrator may act for any job: the coordinator itself, or root (uid 0)
  // seen outside any container (it could edit the coordinator's store anyway). A peer whose
  // cgroup could not be read is never trusted: root in a container looks like root.
  bool trusted() const;
  // The owner of the jobs this caller registers: "pod <uid>", "container <id>", "uid <n>",
  // "tcp" or "node". Two callers with the same principal may act for each other's jobs.
  std::string Principal() const;
  // For replies: "a process of uid 1000 in pod 7c0f..." or "a TCP peer (127.0.0.1)"; never
  // the host pid.
  std::string Describe() const;
  // For the coordinator's log: Describe() with the host pid ("pid 4242: a process of ...").
  std::string LogName() const;
};

// The caller behind a unix-socket peer: reads `<proc>/<pid>/cgroup`. A pid of 0 or less (the
// peer lives in a PID namespace the coordinator cannot see: run it with hostPID) or an
// unreadable cgroup gives a kProcess caller whose cgroup is not `read`: a plain process of
// that uid, never trusted.
Caller ReadCaller(std::int64_t pid, std::int64_t uid, const std::string& proc = "/proc");

}  // namespace gpumux::coordinator
