// MPS (NVIDIA's Multi-Process Service) for shared GPUs: the device plugin runs one control
// daemon per GPU (`nvidia-cuda-mps-control -f`, a child it supervises), and Allocate hands a
// shared container that GPU's pipe folder (at /tmp/nvidia-mps, MPS's default) and a /dev/shm
// shared with the daemon, through mounts: no hostIPC, hostPID or hostPath in the pod's spec.
//
// Per GPU, under `root` (a host folder: the plugin's DaemonSet mounts it at the same path):
//   <root>/<uuid>/pipe   CUDA_MPS_PIPE_DIRECTORY of the daemon and of its clients
//   <root>/<uuid>/log    CUDA_MPS_LOG_DIRECTORY (control.log, server.log)
//   <root>/<uuid>/shm    the clients' and the servers' /dev/shm
// The daemon runs with CUDA_VISIBLE_DEVICES=<uuid> (one GPU each; a client sees it as ordinal
// 0). A daemon that exits is started again at the next check (and logged).
//
// Limits. MPS enforces pinned device memory and the active-thread percentage per MPS server,
// and one server serves every client of one user on a GPU; a client's own
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT / CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (container_env.h sets
// them to the container's grant) can only lower the server's. So the daemon is told, through
// its control commands, the largest share granted on its GPU since it started
// (set_default_device_pinned_mem_limit <uuid> <M>M and set_default_active_thread_percentage P,
// and the same for every running server): a client that drops its environment still cannot take
// more than the largest co-tenant's share; one that keeps it is held to its own. Exact per-pod
// limits against such a client need MPS namespaces (driver r615+), not used here.
// Whole-GPU grants and grants of several GPUs never get MPS.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/deviceplugin/container_env.h"

namespace gpumux::deviceplugin {

struct MpsOptions {
  std::string control = "nvidia-cuda-mps-control";  // a path, or a name found on PATH
  std::string root = "/run/gpumux/mps";             // host folder (see above)
  core::Logger log;
};

class MpsDaemons {
 public:
  MpsDaemons(MpsOptions options, std::vector<std::string> uuids);
  ~MpsDaemons();  // Stop()
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // Makes the folders and starts every GPU's daemon. Error (nothing left running) when a folder
  // cannot be made or the control program cannot be started.
  core::Result<void> Start();
  // Starts again any daemon that has exited; returns how many.
  int Check();
  // The folders of `uuid`'s daemon while it runs; nullopt otherwise (or for another GPU).
  std::optional<MpsFolders> Folders(const std::string& uuid);
  // A container is granted `mem_mib` and `thread_percent` of `uuid` (0: not limited): raises the
  // daemon's limits to the largest share so far. Error with the control program's answer.
  core::Result<void> Admit(const std::string& uuid, std::int64_t mem_mib, int thread_percent);
  // `quit` to every daemon, then waits for each to exit (SIGKILL after 5 s).
  void Stop();

 private:
  struct Gpu {
    std::string uuid, dir;
    pid_t pid = -1;
    std::int64_t mem_mib = 0;  // the largest share so far (0: none yet)
    int thread_percent = 0;
  };
  core::Result<void> Launch(Gpu& gpu);
  core::Result<void> Raise(Gpu& gpu, std::int64_t mem_mib, int thread_percent);  // mu_ held
  core::Result<std::string> Control(const Gpu& gpu, const std::string& command);
  std::vector<std::string> Environment(const Gpu& gpu) const;

  MpsOptions options_;
  std::mutex mu_;
  std::vector<Gpu> gpus_;
  bool stopped_ = false;
};

}  // namespace gpumux::deviceplugin
