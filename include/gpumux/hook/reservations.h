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

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::hook {

struct ProcessRef {
  std::int64_t pid = 0;
  std::uint64_t start_time = 0;  // clock ticks since boot, field 22 of /proc/<pid>/stat
};

// The process `pid` as it is now; start_time 0 if it does not exist or has exited (zombie).
ProcessRef CurrentProcess(std::int64_t pid);
bool IsAlive(const ProcessRef& p);

struct Reservation {
  std::string container;
  std::vector<int> gpus;
  std::string since;            // UTC, ISO 8601
  std::int64_t since_unix = 0;
  std::string state;            // "pending" (runtime wrapper) or "running" (container process)
  ProcessRef holder;
};

struct ReservationFile {
  std::vector<Reservation> reservations;
};

class ReservationStore {
 public:
  explicit ReservationStore(std::string state_dir);

  const std::string& path() const { return path_; }

  // Reads the ledger without locking (a consistent snapshot thanks to atomic writes).
  core::Result<ReservationFile> Read() const;

  // Locks, reads, lets `change` edit the ledger, and writes it back atomically if `change`
  // returned true. An error from `change` is passed through and nothing is written.
  core::Result<void> Update(const std::function<core::Result<bool>(ReservationFile&)>& change);

 private:
  std::string dir_;
  std::string path_;
  std::string lock_path_;
};

}  // namespace gpumux::hook
