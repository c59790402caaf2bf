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
#include <set>
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
  std::string server = "gpumux";  // the MPS v3 server per GPU
};

enum class MpsProtocol : std::uint8_t {
  kLegacy,      // MPS v2: limits per server
  kNamespaces,  // MPS v3: a namespace per container
};

class MpsDaemons {
 public:
  MpsDaemons(MpsOptions options, std::vector<std::string> uuids);
  ~MpsDaemons();  // Stop()
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // Asks the control program once whether it speaks MPS v3 (`-p 3 -h`, 5 s at most); the answer
  // stays. Called by Start, or before it to know what will be enforced.
  MpsProtocol Detect();
  // Makes the folders and starts every GPU's daemon (v3: and its server). Error (nothing left
  // running) when a folder cannot be made or the control program cannot be started.
  core::Result<void> Start();
  // Starts again any daemon that has exited; returns how many.
  int Check();
  // The folders of `uuid`'s daemon while it runs; nullopt otherwise (or for another GPU).
  std::optional<MpsFolders> Folders(const std::string& uuid);
  // A container is granted `mem_mib` and `thread_percent` of `uuid` (0: not limited): raises the
  // daemon's limits to the largest share so far. Error with the control program's answer.
  core::Result<void> Admit(const std::string& uuid, std::int64_t mem_mib, int thread_percent);
  // A shared container of pod `owner`: under v3 its own namespace with these limits, whose pipe
  // folder is returned (to be its /tmp/nvidia-mps); under v2, Admit (nullopt: the GPU's folder).
  core::Result<std::optional<std::string>> AdmitContainer(const std::string& uuid,
                                                          std::int64_t mem_mib, int thread_percent,
                                                          const std::string& owner,
                                                          const std::string& container);
  // v3: deletes the namespaces whose owner is not in `live_pods`; their names.
  std::vector<std::string> Maintain(const std::set<std::string>& live_pods);
  // `quit` to every daemon at once, then waits for them; all within 5 s whatever the number of
  // GPUs, then SIGKILL for what is left.
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
  void RecreateNamespaces(const Gpu& gpu);                                       // mu_ held
  using Deadline = std::chrono::steady_clock::time_point;
  core::Result<std::string> Control(const Gpu& gpu, const std::string& command, Deadline deadline);
  // The v3 form: a command as arguments (`-p 3 namespace create ...`), not on stdin.
  core::Result<std::string> Command(const Gpu& gpu, const std::vector<std::string>& args);
  // Runs the control program; all of it (output and exit) within `deadline`, else it is killed.
  core::Result<std::string> Run(const Gpu& gpu, const std::vector<std::string>& args,
                                const std::string& input, const std::string& what,
                                Deadline deadline);
  std::vector<std::string> Environment(const Gpu& gpu) const;

  MpsOptions options_;
  std::mutex mu_;
  std::vector<Gpu> gpus_;
  bool stopped_ = false;
  std::optional<MpsProtocol> protocol_;
};

}  // namespace gpumux::deviceplugin
