#include "gpumux/hook/grant.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>

#include "gpumux/core/ledger.h"
#include "gpumux/core/plural.h"
#include "gpumux/core/time.h"
#include "gpumux/hook/coexistence.h"
#include "gpumux/policy/engine.h"
#include "gpumux/policy/registry.h"

namespace gpumux::hook {
namespace {

std::string GpuCount(int n) { return core::Plural(n, "GPU"); }

// "GPU 2" or "GPUs 0,2".
std::string GpuList(const std::vector<int>& gpus) {
  return core::Noun(gpus.size(), "GPU") + " " + JoinIndices(gpus);
}

std::string UtcNow(std::int64_t* unix_seconds) {
  *unix_seconds = static_cast<std::int64_t>(std::time(nullptr));
  return core::FormatRfc3339(*unix_seconds);
}

// The host as a one-node cluster, so that the core ledger and placement engine decide.
core::Result<core::Cluster> HostCluster(const Inventory& inventory) {
  core::NodeSpec host;
  host.name = "host";
  host.cpu_milli = 1'000'000'000;
  host.memory_mib = 1'000'000'000;
  host.max_pods = 1'000'000;
  for (const HostGpu& g : inventory.gpus) {
    host.gpus.push_back(
        core::GpuSpec{g.index, g.uuid, g.model, g.memory_mib, core::GpuHealth::kHealthy});
  }
  return core::Cluster::Build({host});
}

core::Request ExclusiveAsk(const std::string& container, int count) {
  core::Request r;
  r.name = container;
  r.gpu_count = count;
  r.gpu_milli = core::kMilliPerGpu;
  r.sharing = core::GpuSharing::kExclusive;
  return r;
}

// The grant of an ask that reserves nothing: none, all of the host's GPUs or the listed ones,
// shared with every other container. kReserve is the caller's (GrantGpus) and gets no GPUs here.
core::Result<Grant> SharedGrant(const std::string& container, const GpuAsk& ask,
                                const Inventory& inventory) {
  Grant grant;
  const int host_gpus = static_cast<int>(inventory.gpus.size());
  switch (ask.kind) {
    case AskKind::kNone:
      return grant;
    case AskKind::kAll:
      for (int i = 0; i < host_gpus; ++i) grant.gpus.push_back(i);
      grant.message = "container '" + container + "' gets " +
                      (host_gpus == 1 ? "the host's one GPU" : "all " + GpuCount(host_gpus)) +
                      ", shared (" + ask.source + ")";
      return grant;
    case AskKind::kListed: {
      auto listed = ResolveListed(inventory, ask.listed);
      if (!listed) return tl::unexpected(listed.error());
      grant.gpus = *listed;
      grant.message = "container '" + container + "' gets " + GpuList(grant.gpus) + ", shared (" +
                      ask.source + ")";
      return grant;
    }
    case AskKind::kReserve:
      break;
  }
  return grant;
}

// Who keeps a reservation now, written into it when the container is granted GPUs.
struct Keeper {
  const ProcessRef& holder;
  std::string pid_ns;  // OwnPidNamespace()
  const std::string& state;
};

void SetKeeper(Reservation& r, const Keeper& keeper) {
  r.holder = keeper.holder;
  r.holder_pid_ns = keeper.pid_ns;
  r.state = keeper.state;
}

// Drops the reservations, other than the container's own, whose keeper is gone.
void ReclaimGone(ReservationFile& file, const std::string& container) {
  const auto dead =
      std::remove_if(file.reservations.begin(), file.reservations.end(), [&](const Reservation& r) {
        return r.container != container && HolderLiveness(r) == Liveness::kGone;
      });
  file.reservations.erase(dead, file.reservations.end());
}

// Every reservation still in force must name GPUs this host has: the container's own is
// handed back by index, the others are counted as taken. One that does not is refused,
// not skipped: the host lost a GPU or the ledger was edited, and a person must look.
core::Result<void> CheckReservedGpusExist(const ReservationFile& file, int host_gpus,
                                          const std::string& store_path,
                                          const std::string& inventory_source) {
  for (const Reservation& r : file.reservations) {
    for (int g : r.gpus) {  // 0 <= g (ReservationStore checks): only the top can be wrong
      if (g < host_gpus) continue;
      return core::MakeError(core::ErrorCode::kFailedPrecondition,
                             store_path + ": the reservation of container '" + r.container +
                                 "' names GPU " + std::to_string(g) + ", but the host has " +
                                 GpuCount(host_gpus) + " (" + inventory_source +
                                 "); the ledger is left as it is: remove that reservation " +
                                 "once its container is gone");
    }
  }
  return {};
}

// The same container again (the hook after the wrapper, or a retried create): `own` is its
// reservation, renewed for `keeper` when the ask has the same count; the grant hands its GPUs back.
core::Result<bool> RenewOwn(Reservation& own, const std::string& container, const GpuAsk& ask,
                            const Keeper& keeper, const PodContainer& pod, Grant& grant) {
  if (static_cast<int>(own.gpus.size()) != ask.count) {
    return core::MakeError(core::ErrorCode::kAlreadyExists,
                           "container '" + container + "' already holds " + GpuList(own.gpus) +
                               " but now asks for " + std::to_string(ask.count) + " (" +
                               ask.source + ")");
  }
  SetKeeper(own, keeper);
  if (!pod.empty()) own.pod = pod;
  grant.gpus = own.gpus;
  grant.existing = true;
  grant.message = "Found existing reservation for '" + container + "': " + GpuList(own.gpus) +
                  " (since " + own.since + ")";
  return true;
}

// Decides `count` exclusive GPUs for `container` with the core ledger, where every live
// reservation is an exclusive tenant. Empty when they do not fit; error when the reservations
// themselves do not (an inconsistent ledger at `store_path`).
core::Result<std::optional<core::Placement>> PlaceExclusive(const core::Cluster& cluster,
                                                            const ReservationFile& file,
                                                            const std::string& container, int count,
                                                            const std::string& store_path) {
  core::Ledger ledger(cluster);
  for (const Reservation& r : file.reservations) {
    std::vector<int> gpus = r.gpus;
    std::sort(gpus.begin(), gpus.end());
    auto held = ledger.Assign(r.container, ExclusiveAsk(r.container, static_cast<int>(gpus.size())),
                              core::Placement{0, gpus});
    if (!held) {
      return core::MakeError(core::ErrorCode::kFailedPrecondition,
                             store_path + ": inconsistent ledger: " + held.error().message);
    }
  }
  auto exclusive = policy::BuiltinPolicies().Make("exclusive", {});
  if (!exclusive) return tl::unexpected(exclusive.error());
  core::Rng rng(0, "hook");
  policy::Engine engine(ledger, **exclusive, {0}, rng);
  return engine.Decide(ExclusiveAsk(container, count)).placement;
}

// The refusal of an ask that does not fit: how many GPUs are free, and who holds the others.
tl::unexpected<core::Error> NoRoomError(const std::string& container, const GpuAsk& ask,
                                        const ReservationFile& file, int host_gpus) {
  std::string held;
  std::vector<bool> taken(static_cast<std::size_t>(host_gpus), false);
  for (const Reservation& r : file.reservations) {
    for (int g : r.gpus) taken[static_cast<std::size_t>(g)] = true;
    held += "; " + GpuList(r.gpus) + " reserved by '" + HolderName(r) + "' since " + r.since;
  }
  const auto free = std::count(taken.begin(), taken.end(), false);
  return core::MakeError(core::ErrorCode::kFailedPrecondition,
                         "container '" + container + "' asks for " + GpuCount(ask.count) + " (" +
                             ask.source + "); " + std::to_string(free) + " of " +
                             std::to_string(host_gpus) + " free" + held);
}

// A shared ask (every GPU, or listed ones) never reaches a GPU another container reserved:
// "all" means every GPU nobody holds, a listed held GPU is refused naming its holder; and, as a
// reservation, it is refused where a gpumux device plugin serves the node (checked under the
// ledger's lock). Reservations whose keeper is gone are reclaimed on the way.
core::Result<Grant> SharedGrantOutsideReservations(const std::string& container, const GpuAsk& ask,
                                                   const Inventory& inventory,
                                                   ReservationStore& store,
                                                   const GrantContext& context) {
  auto grant = SharedGrant(container, ask, inventory);
  if (!grant || ask.kind == AskKind::kNone) return grant;
  auto updated = store.Update([&](ReservationFile& file) -> core::Result<bool> {
    const std::size_t before = file.reservations.size();
    ReclaimGone(file, container);
    if (!context.device_plugin_dir.empty()) {
      if (auto alone = CheckNoDevicePlugin(context.device_plugin_dir); !alone) {
        return tl::unexpected(alone.error());
      }
    }
    std::vector<int> kept;
    for (int g : grant->gpus) {
      const auto holder =
          std::find_if(file.reservations.begin(), file.reservations.end(), [&](const auto& r) {
            return r.container != container &&
                   std::find(r.gpus.begin(), r.gpus.end(), g) != r.gpus.end();
          });
      if (holder == file.reservations.end()) {
        kept.push_back(g);
      } else if (ask.kind == AskKind::kListed) {
        return core::MakeError(core::ErrorCode::kFailedPrecondition,
                               "container '" + container + "' asks for GPU " + std::to_string(g) +
                                   " (" + ask.source + "), which '" + HolderName(*holder) +
                                   "' has reserved since " + holder->since);
      }
    }
    if (kept.empty()) {
      const int n = static_cast<int>(grant->gpus.size());
      return core::MakeError(core::ErrorCode::kFailedPrecondition,
                             "container '" + container + "' asks for every GPU (" + ask.source +
                                 "), but other containers have reserved " +
                                 (n == 1 ? "the host's one GPU" : "all " + GpuCount(n)));
    }
    if (kept.size() != grant->gpus.size()) {
      grant->message = "container '" + container + "' gets " + GpuList(kept) +
                       ", shared: the others are reserved (" + ask.source + ")";
    }
    grant->gpus = std::move(kept);
    return file.reservations.size() != before;
  });
  if (!updated) return tl::unexpected(updated.error());
  return grant;
}

}  // namespace

core::Result<Grant> GrantGpus(const std::string& container, const GpuAsk& ask,
                              const Inventory& inventory, ReservationStore& store,
                              const ProcessRef& holder, const std::string& state,
                              const GrantContext& context) {
  if (ask.kind != AskKind::kReserve) {
    return SharedGrantOutsideReservations(container, ask, inventory, store, context);
  }
  const int host_gpus = static_cast<int>(inventory.gpus.size());
  if (ask.count > host_gpus) {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "container '" + container + "' asks for " + GpuCount(ask.count) + " (" +
                               ask.source + "), but the host has only " +
                               std::to_string(host_gpus) + " (" + inventory.source + ")");
  }
  auto cluster = HostCluster(inventory);
  if (!cluster) return tl::unexpected(cluster.error());
  Grant grant;
  grant.reserved = true;

  const Keeper keeper{holder, OwnPidNamespace(), state};
  auto updated = store.Update([&](ReservationFile& file) -> core::Result<bool> {
    ReclaimGone(file, container);
    if (auto exist = CheckReservedGpusExist(file, host_gpus, store.path(), inventory.source);
        !exist) {
      return tl::unexpected(exist.error());
    }
    for (Reservation& r : file.reservations) {
      if (r.container == container) return RenewOwn(r, container, ask, keeper, context.pod, grant);
    }

    // A new reservation. The device plugin checks this ledger after serving its sockets, so
    // looking for them under the ledger's lock means one of the two always sees the other.
    if (!context.device_plugin_dir.empty()) {
      if (auto alone = CheckNoDevicePlugin(context.device_plugin_dir); !alone) {
        return tl::unexpected(alone.error());
      }
    }
    auto placement = PlaceExclusive(*cluster, file, container, ask.count, store.path());
    if (!placement) return tl::unexpected(placement.error());
    if (!*placement) return NoRoomError(container, ask, file, host_gpus);
    Reservation r;
    r.container = container;
    r.gpus = (*placement)->gpus;
    r.since = UtcNow(&r.since_unix);
    SetKeeper(r, keeper);
    r.pod = context.pod;
    grant.gpus = r.gpus;
    grant.message = "Reserved " + GpuList(r.gpus) + " for '" + container + "' (" + ask.source + ")";
    file.reservations.push_back(std::move(r));
    return true;
  });
  if (!updated) return tl::unexpected(updated.error());
  return grant;
}

core::Result<bool> ReleaseGpus(const std::string& container, ReservationStore& store) {
  bool released = false;
  auto updated = store.Update([&](ReservationFile& file) -> core::Result<bool> {
    const auto it = std::remove_if(file.reservations.begin(), file.reservations.end(),
                                   [&](const Reservation& r) { return r.container == container; });
    released = it != file.reservations.end();
    file.reservations.erase(it, file.reservations.end());
    return released;
  });
  if (!updated) return tl::unexpected(updated.error());
  return released;
}

}  // namespace gpumux::hook
