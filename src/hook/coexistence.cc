#include "gpumux/hook/coexistence.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gpumux/hook/inventory.h"
#include "gpumux/hook/reservations.h"
#include "gpumux/io/fd.h"

namespace gpumux::hook {
namespace {

// Whether something listens on the unix socket `path`. Non-blocking: a listener whose backlog
// is full (EAGAIN) is still a listener.
bool Listening(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  io::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return false;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return true;
  return errno == EAGAIN || errno == EINPROGRESS;
}

}  // namespace

std::vector<std::string> ServingDevicePluginSockets(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("gpumux", 0) != 0 || name.size() < 11 ||
        name.compare(name.size() - 5, 5, ".sock") != 0) {
      continue;
    }
    std::error_code type_ec;
    if (!entry.is_socket(type_ec)) continue;
    if (Listening(entry.path().string())) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

core::Result<void> CheckNoDevicePlugin(const std::string& dir) {
  const std::vector<std::string> sockets = ServingDevicePluginSockets(dir);
  if (sockets.empty()) return {};
  return core::MakeError(core::ErrorCode::kFailedPrecondition,
                         "a gpumux device plugin serves this node (" + sockets.front() +
                             "); the OCI runtime path keeps its own GPU ledger and would grant "
                             "GPUs twice; use one of the two");
}

core::Result<void> CheckNoActiveReservations(const std::string& state_dir) {
  ReservationStore store(state_dir);
  std::string held;
  int live = 0;
  auto read = store.ReadLocked([&](const ReservationFile& file) {
    for (const Reservation& r : file.reservations) {
      const Liveness l = HolderLiveness(r);
      if (l == Liveness::kGone) continue;
      ++live;
      if (live > 4) continue;  // the message names the first four
      held += (held.empty() ? "" : "; ") + std::string(r.gpus.size() == 1 ? "GPU " : "GPUs ") +
              JoinIndices(r.gpus) + " reserved by '" + HolderName(r) + "' since " + r.since;
      if (l == Liveness::kUnknown) {
        held += " (its holder, pid " + std::to_string(r.holder.pid) +
                " in another pid namespace, cannot be checked from here)";
      }
    }
  });
  if (!read) return tl::unexpected(read.error());
  if (live == 0) return {};
  if (live > 4) held += "; and " + std::to_string(live - 4) + " more";
  return core::MakeError(
      core::ErrorCode::kFailedPrecondition,
      "the OCI runtime path's GPU reservation ledger " + store.path() + " holds " +
          std::to_string(live) + (live == 1 ? " live reservation (" : " live reservations (") +
          held +
          "); a device plugin beside it would grant GPUs twice; use one of the two (stop those "
          "containers, or remove the ledger once they are gone)");
}

}  // namespace gpumux::hook
