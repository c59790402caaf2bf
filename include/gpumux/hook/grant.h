// Granting GPUs to a container: the decision shared by `gpumux oci-runtime` (before the runtime
// creates the container) and `gpumux hook` (when the engine runs the hook without the wrapper).
//
// A reservation is decided by the core placement engine with the `exclusive` policy on a
// one-node cluster made of the host's GPUs, where every live reservation is an exclusive tenant:
// the same ledger rules as everywhere else in gpumux (a GPU is never granted twice).
#pragma once

#include <string>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/hook/gpu_request.h"
#include "gpumux/hook/inventory.h"
#include "gpumux/hook/reservations.h"

namespace gpumux::hook {

struct Grant {
  std::vector<int> gpus;  // indices into the inventory, ascending
  bool reserved = false;  // true: exclusive reservation in the ledger
  bool existing = false;  // true: the container already held this reservation
  // For the log: "Reserved GPUs 0,2 for 'c1' (HOUDINI_GPU_REQUESTED=2)" for a new reservation,
  // "Found existing reservation for 'c1': GPUs 0,2 (since ...)" for one the container held.
  std::string message;
};

// What a grant knows beyond the runtime's container id.
struct GrantContext {
  PodContainer pod;  // recorded with a reservation and shown instead of the id; may be empty
  // Refuse a new reservation while a gpumux device plugin serves this folder (coexistence.h);
  // "" = do not check.
  std::string device_plugin_dir;
};

// Decides the GPUs for `container`. For kReserve, the reservation is written to the store with
// `holder` as its keeper (state "pending" or "running"); a container that already holds a
// reservation gets the same GPUs back (the holder is updated). Error when the host cannot
// satisfy the ask: "container 'c9' asks for 2 GPUs (HOUDINI_GPU_REQUESTED=2); 1 of 4 free;
// GPU 0 reserved by 'default/render/main' since ...; ...", or when a gpumux device plugin
// serves `context.device_plugin_dir` (checked under the ledger's lock).
core::Result<Grant> GrantGpus(const std::string& container, const GpuAsk& ask,
                              const Inventory& inventory, ReservationStore& store,
                              const ProcessRef& holder, const std::string& state,
                              const GrantContext& context = {});

// Drops the container's reservation; Ok (with false) when it had none.
core::Result<bool> ReleaseGpus(const std::string& container, ReservationStore& store);

}  // namespace gpumux::hook
