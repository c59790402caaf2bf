#include "gpumux/hook/grant.h"

#include <algorithm>
#include <chrono>
#include <ctime>

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

}  // namespace

core::Result<Grant> GrantGpus(const std::string& container, const GpuAsk& ask,
                              const Inventory& inventory, ReservationStore& store,
                              const ProcessRef& holder, const std::string& state,
                              const GrantContext& context) {
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
  if (ask.count > host_gpus) {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "container '" + container + "' asks for " + GpuCount(ask.count) + " (" +
                               ask.source + "), but the host has only " +
                               std::to_string(host_gpus) + " (" + inventory.source + ")");
  }
  auto cluster = HostCluster(inventory);
  if (!cluster) return tl::unexpected(cluster.error());
  grant.reserved = true;

  const std::string pid_ns = OwnPidNamespace();
  auto updated = store.Update([&](ReservationFile& file) -> core::Result<bool> {
    // Reclaim reservations whose keeper is gone.
    const auto dead = std::remove_if(
        file.reservations.begin(), file.reservations.end(), [&](const Reservation& r) {
          return r.container != container && HolderLiveness(r) == Liveness::kGone;
        });
    file.reservations.erase(dead, file.reservations.end());

    // Every reservation still in force must name GPUs this host has: the container's own is
    // handed back by index, the others are counted as taken. One that does not is refused,
    // not skipped: the host lost a GPU or the ledger was edited, and a person must look.
    for (const Reservation& r : file.reservations) {
      for (int g : r.gpus) {  // 0 <= g (ReservationStore checks): only the top can be wrong
        if (g < host_gpus) continue;
        return core::MakeError(core::ErrorCode::kFailedPrecondition,
                               store.path() + ": the reservation of container '" + r.container +
                                   "' names GPU " + std::to_string(g) + ", but the host has " +
                                   GpuCount(host_gpus) + " (" + inventory.source +
                                   "); the ledger is left as it is: remove that reservation " +
                                   "once its container is gone");
      }
    }

    // The same container again (the hook after the wrapper, or a retried create).
    for (Reservation& r : file.reservations) {
      if (r.container != container) continue;
      if (static_cast<int>(r.gpus.size()) != ask.count) {
        return core::MakeError(core::ErrorCode::kAlreadyExists,
                               "container '" + container + "' already holds " + GpuList(r.gpus) +
                                   " but now asks for " + std::to_string(ask.count) + " (" +
                                   ask.source + ")");
      }
      r.holder = holder;
      r.holder_pid_ns = pid_ns;
      r.state = state;
      if (!context.pod.empty()) r.pod = context.pod;
      grant.gpus = r.gpus;
      grant.existing = true;
      grant.message = "Found existing reservation for '" + container + "': " + GpuList(r.gpus) +
                      " (since " + r.since + ")";
      return true;
    }

    // A new reservation. The device plugin checks this ledger after serving its sockets, so
    // looking for them under the ledger's lock means one of the two always sees the other.
    if (!context.device_plugin_dir.empty()) {
      if (auto alone = CheckNoDevicePlugin(context.device_plugin_dir); !alone) {
        return tl::unexpected(alone.error());
      }
    }

    // Decide with the core ledger: every live reservation is an exclusive tenant.
    core::Ledger ledger(*cluster);
    for (const Reservation& r : file.reservations) {
      std::vector<int> gpus = r.gpus;
      std::sort(gpus.begin(), gpus.end());
      auto held =
          ledger.Assign(r.container, ExclusiveAsk(r.container, static_cast<int>(gpus.size())),
                        core::Placement{0, gpus});
      if (!held) {
        return core::MakeError(core::ErrorCode::kFailedPrecondition,
                               store.path() + ": inconsistent ledger: " + held.error().message);
      }
    }
    auto exclusive = policy::BuiltinPolicies().Make("exclusive", {});
    if (!exclusive) return tl::unexpected(exclusive.error());
    core::Rng rng(0, "hook");
    policy::Engine engine(ledger, **exclusive, {0}, rng);
    const policy::Decision d = engine.Decide(ExclusiveAsk(container, ask.count));
    if (!d.placement) {
      std::string held;
      std::vector<bool> taken(static_cast<std::size_t>(host_gpus), false);
      for (const Reservation& r : file.reservations) {
        for (int g : r.gpus) taken[static_cast<std::size_t>(g)] = true;
        held += "; " + GpuList(r.gpus) + " reserved by '" + HolderName(r) + "' since " + r.since;
      }
      const auto free = std::count(taken.begin(), taken.end(), false);
      return core::MakeError(core::ErrorCode::kFailedPrecondition,
                             "container '" + container + "' asks for " + GpuCount(ask.count) +
                                 " (" + ask.source + "); " + std::to_string(free) + " of " +
                                 std::to_string(host_gpus) + " free" + held);
    }
    Reservation r;
    r.container = container;
    r.gpus = d.placement->gpus;
    r.since = UtcNow(&r.since_unix);
    r.state = state;
    r.holder = holder;
    r.holder_pid_ns = pid_ns;
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
