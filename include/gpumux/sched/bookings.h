// The bookings of the extender's cluster state: what each pod holds, as one state machine. Every
// change comes through Apply(event), and each event is a row group of this table (the table of
// cluster_state.h, where BookingState is described; table-tested in cluster_state_booking_test).
// The rule above all others: a pod the API server shows bound (spec.nodeName) with its grant
// (grant.node == spec.nodeName) holds that grant, whatever this state believed; nothing done
// locally (Forget, the TTL, another pod's assumption) takes it away.
//
//   event           from                       to
//   kAssumed        none, assumed              assumed (replacing an earlier assumed grant)
//   kBindingBegun   assumed                    binding (refused when the grant is not held)
//   kConfirmedBound assumed, binding           bound (as kSeen bound with the grant)
//   kForgotten      assumed, binding           none (released); bound and conflict unchanged
//   kExpired        assumed, binding           none (released), older than the TTL only
//   kSeen           (the API server's view of the pod; Reconcile)
//                   any, finished              none (released)
//                   any, bound with grant G    bound with G (evicting assumed or binding
//                                              bookings of G's GPUs, youngest first), or
//                                              conflict when G does not fit
//                   any, bound elsewhere than  none (void grant; counted)
//                   its grant names
//                   none, pending with a grant assumed, within its TTL and not the grant
//                                              released last
//                   other, pending             unchanged (the watch is behind, or stale)
//   kRemoved        any                        none (released), the record forgotten
//   (GPUs freed)    conflict                   bound, if its grant fits now (RetryConflicts)
//
// Invariants, whenever the ledger is built:
//   state assumed, binding or bound  <=>  booked && in_ledger
//   state conflict                   =>   booked && !in_ledger
//   state none                       <=>  !booked
//
// The ledger belongs to the cluster state: Bookings places and removes grants through a
// GrantLedger, which says whether the ledger is built (while it awaits a rebuild nothing is
// placed, and Replay puts every booking back once it is). Not thread-safe: the cluster state
// calls it under its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpumux/core/log.h"
#include "gpumux/kube/grant.h"
#include "gpumux/kube/objects.h"

namespace gpumux::sched {

// Where one pod's booking stands.
enum class BookingState : std::uint8_t { kNone, kAssumed, kBinding, kBound, kConflict };
std::string_view BookingStateName(BookingState state);  // "none", "assumed", ...

struct PodRecord {
  kube::PodInfo info;                 // the pod as last seen (or as bind was given it)
  std::optional<kube::Grant> booked;  // the grant this pod holds (or claims, in conflict)
  BookingState state = BookingState::kNone;
  bool in_ledger = false;
  std::string problem;  // conflict: why not in the ledger; none: why a booking was dropped
  // The latest grant given back (failed bind, TTL, eviction): its annotation on a pending pod
  // does not book it again. A bound view of the pod still does.
  std::optional<kube::Grant> released;
};

// "GPU 0" / "GPUs 0, 2" of a grant, for humans.
std::string GpusOf(const kube::Grant& grant);

// Why a grant could not go into the ledger.
struct PlaceFailure {
  std::string reason;
  bool overlap = false;  // the ledger refused it (else its node is unusable or unknown)
};

// The ledger as the bookings see it (implemented by the cluster state).
class GrantLedger {
 public:
  virtual ~GrantLedger() = default;
  virtual bool built() const = 0;  // false while the ledger awaits a rebuild
  // Puts the record's grant into the ledger (all containers or none). Built ledger only.
  virtual std::optional<PlaceFailure> Place(const PodRecord& record) = 0;
  // Takes the record's grant out of the ledger. Built ledger, record in it.
  virtual void Unplace(const PodRecord& record) = 0;
};

struct BookingEvent {
  enum class Kind : std::uint8_t {
    kSeen,            // the API server's view of the pod (`pod`)
    kRemoved,         // the pod is gone (deleted, or missing from a full list)
    kAssumed,         // bind picked `grant` for `pod` (computed by the engine on a built ledger)
    kBindingBegun,    // `grant` is written on the pod; the Binding is next
    kConfirmedBound,  // the API server bound the pod with `grant`
    kForgotten,       // bind failed and the pod is known not bound with `grant`
    kExpired,         // the booking is older than the TTL (the caller checked)
  };
  Kind kind = Kind::kSeen;
  const kube::PodInfo* pod = nullptr;
  const kube::Grant* grant = nullptr;
};

struct Transition {
  BookingState from = BookingState::kNone;
  BookingState to = BookingState::kNone;
  bool refused = false;  // kBindingBegun for a grant the pod does not hold; kAssumed that failed
};

struct BookingCounters {
  std::int64_t grant_conflicts = 0;    // conflicts seen (see StateCounters)
  std::int64_t unreadable_grants = 0;  // grant annotations that did not decode
};

class Bookings {
 public:
  struct Options {
    std::int64_t grant_ttl_seconds = 60;
    std::function<std::int64_t()> clock;  // unix seconds
    // A line for the log (collected by the caller, written once its lock is released).
    std::function<void(core::LogLevel, std::string)> log;
  };
  Bookings(GrantLedger& ledger, Options options);

  // The event for the pod with `uid` (kSeen and kAssumed: the event's pod's uid).
  Transition Apply(const std::string& uid, const BookingEvent& event);
  // After a rebuild of the ledger: every booking back into it, bound ones first (those in
  // conflict after them, so that a rebuild does not swap which of two overlapping bound grants
  // is in the ledger), then binding and assumed ones by age; an assumption that no longer fits
  // is dropped.
  void Replay();
  // Bound bookings in conflict get another try (GPUs were freed), oldest first.
  void RetryConflicts();
  // Takes the bookings of `uids` on `node` out of the ledger for a trial; Restore puts them
  // back (in reverse order) and must follow before any other call.
  std::vector<PodRecord*> Evict(std::span<const std::string> uids, const std::string& node);
  void Restore(const std::vector<PodRecord*>& evicted);

  const PodRecord* Find(const std::string& uid) const;
  const std::unordered_map<std::string, PodRecord>& records() const { return pods_; }
  // The uids of assumed and binding bookings older than the TTL, sorted.
  std::vector<std::string> Overdue() const;
  BookingCounters counters() const { return counters_; }
  std::int64_t in_conflict() const { return in_conflict_; }

 private:
  void SetState(PodRecord& record, BookingState state);
  std::optional<PlaceFailure> TryPlace(PodRecord& record);
  void Unplace(PodRecord& record);
  void Drop(PodRecord& record, std::string why, bool conflict);
  void Release(PodRecord& record);
  void PlaceBound(PodRecord& record);
  void BookBound(PodRecord& record, const kube::Grant& grant);
  void Reconcile(PodRecord& record);
  void Seen(const kube::PodInfo& info);
  Transition Assumed(const kube::PodInfo& pod, const kube::Grant& grant);
  void Log(core::LogLevel level, std::string line) const;

  GrantLedger& ledger_;
  Options options_;
  std::unordered_map<std::string, PodRecord> pods_;  // by uid
  BookingCounters counters_;
  std::int64_t in_conflict_ = 0;  // records in kConflict
};

}  // namespace gpumux::sched
