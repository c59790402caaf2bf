// The host's GPU reservation ledger: one JSON file, updated under an exclusive file lock with an
// atomic, fsync'd write (temporary file, fsync, rename, fsync of the folder), so that concurrent
// container starts never receive the same GPU and a crash at any point leaves either the old or
// the new ledger, never a mix.
//
// Each reservation names its container, its GPUs, since when, and the process that keeps it
// alive: the runtime wrapper while the container is being created ("pending"), then the
// container's init process ("running"). A process is identified by pid and start time (from
// /proc/<pid>/stat), so a reused pid does not keep a dead reservation alive. Reservations whose
// process is gone (crash, killed runtime) are reclaimed by the next grant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::hook {

// Linux's PID_MAX_LIMIT on 64-bit machines: no pid is larger.
inline constexpr std::int64_t kMaxPid = std::int64_t{1} << 22;

struct ProcessRef {
  std::int64_t pid = 0;
  std::uint64_t start_time = 0;  // clock ticks since boot, field 22 of /proc/<pid>/stat
};

// The process `pid` as it is now; start_time 0 if it does not exist or has exited (zombie).
ProcessRef CurrentProcess(std::int64_t pid);
bool IsAlive(const ProcessRef& p);

// The pid namespace of this process as /proc/self/ns/pid names it ("pid:[4026531836]"); ""
// when it cannot be read. Pids in the ledger are only meaningful in the namespace that wrote
// them (a device plugin in a pod without hostPID sees other pids).
std::string OwnPidNamespace();

// The Kubernetes pod and container a reservation serves, from the CRI annotations of the
// container's config.json (hook::PodOf); empty when the runtime did not say.
struct PodContainer {
  std::string ns;         // io.kubernetes.cri.sandbox-namespace
  std::string pod;        // io.kubernetes.cri.sandbox-name
  std::string container;  // io.kubernetes.cri.container-name
  bool empty() const { return pod.empty(); }
};

struct Reservation {
  std::string container;  // the runtime's container id (64 hex digits under containerd)
  std::vector<int> gpus;
  std::string since;  // UTC, ISO 8601
  std::int64_t since_unix = 0;
  std::string state;  // "pending" (runtime wrapper) or "running" (container process)
  ProcessRef holder;
  std::string holder_pid_ns;  // OwnPidNamespace() of the writer; "" in ledgers from before it
  PodContainer pod;           // optional
};

// How a holder is remembered in messages: "namespace/pod/container" when the pod is known
// (the parts that are), else the runtime's container id.
std::string HolderName(const Reservation& r);

enum class Liveness : std::uint8_t {
  kAlive,    // the holder process runs
  kGone,     // it exited (or its pid was reused): the reservation is reclaimable
  kUnknown,  // written in another pid namespace: this process cannot tell, so counts it alive
};
Liveness HolderLiveness(const Reservation& r);

struct ReservationFile {
  std::vector<Reservation> reservations;
};

// Bounds on the ledger file. A host has at most core::kMaxGpusPerNode GPUs, so live
// reservations are few; entries of dead holders stay until the next grant reclaims them.
inline constexpr std::size_t kMaxReservations = 1024;
inline constexpr std::size_t kMaxLedgerBytes = std::size_t{4} << 20;  // 4 MiB

class ReservationStore {
 public:
  explicit ReservationStore(std::string state_dir);

  const std::string& path() const { return path_; }

  // Reads the ledger without locking (a consistent snapshot thanks to atomic writes). The
  // whole file is checked, and any fault is an error naming the file (kInvalidArgument,
  // "<path>: malformed reservation ledger: reservation 2 (container 'c1'): ..."): at most
  // kMaxLedgerBytes and kMaxReservations; every field of its type (container a non-empty
  // string, gpus a non-empty list of distinct GPU indexes 0..core::kMaxGpusPerNode-1,
  // holder_pid 0..kMaxPid, holder_start_time a non-negative integer, ...); no container twice.
  // A missing file is an empty ledger; a folder, FIFO or unreadable file is an error.
  core::Result<ReservationFile> Read() const;

  // Reads the ledger under a shared lock: waits for an update in progress, and no update
  // starts before `use` returns. Creates nothing: a missing folder or lock file is an empty
  // ledger (no grant has ever been made here). For a reader that must order itself with the
  // writers (the device plugin's start, see hook/coexistence.h).
  core::Result<void> ReadLocked(const std::function<void(const ReservationFile&)>& use) const;

  // Locks, reads, lets `change` edit the ledger, and writes it back atomically if `change`
  // returned true. An error from `change` is passed through and nothing is written.
  core::Result<void> Update(const std::function<core::Result<bool>(ReservationFile&)>& change);

 private:
  std::string dir_;
  std::string path_;
  std::string lock_path_;
};

}  // namespace gpumux::hook
