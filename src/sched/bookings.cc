#include "gpumux/sched/bookings.h"

#include <algorithm>

#include "gpumux/core/check.h"

namespace gpumux::sched {
namespace {

using State = BookingState;

bool ShareAGpu(const kube::Grant& a, const kube::Grant& b) {
  if (a.node != b.node) return false;
  for (const kube::ContainerGrant& x : a.containers) {
    for (const kube::GrantedGpu& g : x.gpus) {
      for (const kube::ContainerGrant& y : b.containers) {
        for (const kube::GrantedGpu& h : y.gpus) {
          if (g.index == h.index) return true;
        }
      }
    }
  }
  return false;
}

// Oldest booking first (uid breaking ties): the order bookings are replayed and retried in.
bool Older(const PodRecord* a, const PodRecord* b) {
  if (a->booked->assumed_at != b->booked->assumed_at) {
    return a->booked->assumed_at < b->booked->assumed_at;
  }
  return a->info.uid < b->info.uid;
}

}  // namespace

std::string GpusOf(const kube::Grant& grant) {
  std::vector<int> gpus;
  for (const kube::ContainerGrant& c : grant.containers) {
    for (const kube::GrantedGpu& g : c.gpus) gpus.push_back(g.index);
  }
  std::sort(gpus.begin(), gpus.end());
  gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
  std::string out = gpus.size() == 1 ? "GPU " : "GPUs ";
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(gpus[i]);
  }
  return out;
}

std::string_view BookingStateName(BookingState state) {
  switch (state) {
    case BookingState::kNone:
      return "none";
    case BookingState::kAssumed:
      return "assumed";
    case BookingState::kBinding:
      return "binding";
    case BookingState::kBound:
      return "bound";
    case BookingState::kConflict:
      return "conflict";
  }
  return "none";
}

Bookings::Bookings(GrantLedger& ledger, Options options)
    : ledger_(ledger), options_(std::move(options)) {}

void Bookings::Log(core::LogLevel level, std::string line) const {
  if (options_.log) options_.log(level, std::move(line));
}

Transition Bookings::Apply(const std::string& uid, const BookingEvent& event) {
  using Kind = BookingEvent::Kind;
  auto it = pods_.find(uid);
  Transition t;
  if (it != pods_.end()) t.from = it->second.state;
  switch (event.kind) {
    case Kind::kSeen:
      Seen(*event.pod);
      break;
    case Kind::kRemoved:
      if (it == pods_.end()) return t;
      Release(it->second);
      pods_.erase(it);
      return t;
    case Kind::kAssumed:
      return Assumed(*event.pod, *event.grant);
    case Kind::kBindingBegun:
      if (it == pods_.end() || it->second.booked != *event.grant || !it->second.in_ledger) {
        t.refused = true;
        return t;
      }
      if (it->second.state == State::kAssumed) SetState(it->second, State::kBinding);
      break;
    case Kind::kConfirmedBound:
      if (it == pods_.end()) return t;
      BookBound(it->second, *event.grant);
      break;
    case Kind::kForgotten:
      if (it == pods_.end() || it->second.booked != *event.grant) return t;
      if (it->second.state != State::kAssumed && it->second.state != State::kBinding) break;
      Release(it->second);
      break;
    case Kind::kExpired:
      if (it == pods_.end()) return t;
      // Releasing one may let a bound pod in conflict evict another: those are skipped.
      if (it->second.state != State::kAssumed && it->second.state != State::kBinding) {
        t.refused = true;
        return t;
      }
      Log(core::LogLevel::kWarn, "grant of pod " + it->second.info.Key() + " on " +
                                     it->second.booked->node + " (" +
                                     std::string(BookingStateName(it->second.state)) +
                                     ") expired: the pod was not seen bound within " +
                                     std::to_string(options_.grant_ttl_seconds) + " s");
      Release(it->second);
      break;
  }
  it = pods_.find(uid);
  if (it != pods_.end()) t.to = it->second.state;
  return t;
}

const PodRecord* Bookings::Find(const std::string& uid) const {
  auto it = pods_.find(uid);
  return it == pods_.end() ? nullptr : &it->second;
}

std::vector<std::string> Bookings::Overdue() const {
  const std::int64_t now = options_.clock();
  std::vector<std::string> old;
  for (const auto& [uid, record] : pods_) {
    if (record.state != State::kAssumed && record.state != State::kBinding) continue;
    if (now - record.booked->assumed_at <= options_.grant_ttl_seconds) continue;
    old.push_back(uid);
  }
  std::sort(old.begin(), old.end());
  return old;
}

void Bookings::SetState(PodRecord& record, State state) {
  if (record.state == State::kConflict) --in_conflict_;
  if (state == State::kConflict) ++in_conflict_;
  record.state = state;
}

std::optional<PlaceFailure> Bookings::TryPlace(PodRecord& record) {
  GPUMUX_CHECK(record.booked.has_value() && !record.in_ledger, "place a booked grant once");
  if (auto failed = ledger_.Place(record)) return failed;
  record.in_ledger = true;
  return std::nullopt;
}

void Bookings::Unplace(PodRecord& record) {
  if (!record.in_ledger) return;
  ledger_.Unplace(record);
  record.in_ledger = false;
}

// An assumed or binding booking that cannot stay (no longer fits, evicted): none.
void Bookings::Drop(PodRecord& record, std::string why, bool conflict) {
  record.released = std::move(record.booked);
  record.booked.reset();
  record.in_ledger = false;
  SetState(record, State::kNone);
  record.problem = std::move(why);
  if (conflict) ++counters_.grant_conflicts;
  Log(conflict ? core::LogLevel::kError : core::LogLevel::kWarn,
      "pod " + record.info.Key() + ": " + record.problem);
}

// Gives back whatever the record holds: none. Retries conflicts if GPUs were freed.
void Bookings::Release(PodRecord& record) {
  if (!record.booked) {
    SetState(record, State::kNone);
    return;
  }
  const bool freed = record.in_ledger;
  if (ledger_.built()) Unplace(record);
  record.in_ledger = false;
  record.released = std::move(record.booked);
  record.booked.reset();
  SetState(record, State::kNone);
  if (freed && ledger_.built()) RetryConflicts();
}

// record.booked is a grant the API server shows bound: into the ledger, evicting assumed and
// binding bookings of the same GPUs (youngest first) if that is what it takes; else conflict
// (counted and logged on entering it, when the grant overlaps another).
void Bookings::PlaceBound(PodRecord& record) {
  const State before = record.state;
  std::optional<PlaceFailure> failed = TryPlace(record);
  if (failed && failed->overlap) {
    std::vector<PodRecord*> rivals;
    for (auto& [uid, other] : pods_) {
      if (&other == &record || !other.in_ledger) continue;
      if (other.state != State::kAssumed && other.state != State::kBinding) continue;
      if (ShareAGpu(*other.booked, *record.booked)) rivals.push_back(&other);
    }
    std::sort(rivals.begin(), rivals.end(),
              [](const PodRecord* a, const PodRecord* b) { return Older(b, a); });
    std::vector<PodRecord*> evicted;
    for (PodRecord* rival : rivals) {
      Unplace(*rival);
      evicted.push_back(rival);
      failed = TryPlace(record);
      if (!failed) break;
    }
    if (failed) {  // evicting did not help: put them back as they were
      for (auto it = evicted.rbegin(); it != evicted.rend(); ++it) {
        GPUMUX_CHECK(!TryPlace(**it).has_value(), "an evicted booking goes back in place");
      }
    } else {
      for (PodRecord* rival : evicted) {
        Drop(*rival,
             "its " + std::string(BookingStateName(rival->state)) + " grant of " +
                 GpusOf(*rival->booked) + " on " + rival->booked->node + " gives way to pod " +
                 record.info.Key() +
                 ", seen bound there (a bound pod wins over a booking not seen bound)",
             true);
      }
    }
  }
  record.problem.clear();
  if (!failed) {
    SetState(record, State::kBound);
    if (before == State::kConflict) {
      Log(core::LogLevel::kInfo, "pod " + record.info.Key() + ": its bound grant on " +
                                     record.booked->node + " is in the ledger now");
    }
    return;
  }
  record.problem = "bound with a grant that is not in the ledger: " + failed->reason;
  SetState(record, State::kConflict);
  if (before != State::kConflict && failed->overlap) {
    ++counters_.grant_conflicts;
    Log(core::LogLevel::kError, "pod " + record.info.Key() + ": " + record.problem);
  }
}

void Bookings::RetryConflicts() {
  if (in_conflict_ == 0 || !ledger_.built()) return;
  std::vector<PodRecord*> waiting;
  for (auto& [uid, record] : pods_) {
    if (record.state == State::kConflict) waiting.push_back(&record);
  }
  std::sort(waiting.begin(), waiting.end(), Older);
  for (PodRecord* record : waiting) PlaceBound(*record);
}

void Bookings::Replay() {
  std::vector<PodRecord*> order;
  for (auto& [uid, record] : pods_) {
    record.in_ledger = false;
    if (record.booked) order.push_back(&record);
  }
  auto rank_of = [](State s) {
    switch (s) {
      case State::kBound:
        return 0;
      case State::kConflict:
        return 1;
      case State::kBinding:
        return 2;
      default:
        return 3;
    }
  };
  std::sort(order.begin(), order.end(), [&](const PodRecord* a, const PodRecord* b) {
    if (rank_of(a->state) != rank_of(b->state)) return rank_of(a->state) < rank_of(b->state);
    return Older(a, b);
  });
  for (PodRecord* record : order) {
    if (record->state == State::kBound || record->state == State::kConflict) {
      PlaceBound(*record);
    } else if (auto failed = TryPlace(*record); failed) {
      Drop(*record,
           "its " + std::string(BookingStateName(record->state)) + " grant on " +
               record->booked->node + " no longer fits: " + failed->reason,
           failed->overlap);
    }
  }
}

// The API server shows the pod bound with `grant` on grant.node: it holds that grant.
void Bookings::BookBound(PodRecord& record, const kube::Grant& grant) {
  if (record.booked == grant) {
    if (record.state == State::kAssumed || record.state == State::kBinding) {
      SetState(record, State::kBound);  // our own bind: already in the ledger
      record.problem.clear();
    }
    return;  // bound or conflict already
  }
  const bool freed = record.in_ledger;
  if (ledger_.built()) Unplace(record);
  record.in_ledger = false;
  record.booked = grant;
  record.problem.clear();
  SetState(record, State::kBound);
  if (!ledger_.built()) return;  // Replay places it
  PlaceBound(record);
  if (freed) RetryConflicts();
}

// What a pod seen from the API server holds (the kSeen rows of the table).
void Bookings::Reconcile(PodRecord& record) {
  const kube::PodInfo& p = record.info;
  if (p.finished()) {
    Release(record);
    return;
  }
  if (!p.node_name.empty()) {
    if (p.grant && p.grant->node == p.node_name) {
      BookBound(record, *p.grant);
      return;
    }
    if (p.grant) {
      std::string why = "bound to " + p.node_name + " but its grant names " + p.grant->node +
                        "; the grant is void";
      Release(record);
      if (record.problem != why) {
        record.problem = std::move(why);
        ++counters_.grant_conflicts;
        Log(core::LogLevel::kError, "pod " + p.Key() + " is " + record.problem);
      }
      return;
    }
    // Bound without a (readable) grant: bound by our bind whose annotation this view lacks, or
    // by something other than gpumux.
    if (record.state == State::kBound || record.state == State::kConflict) return;
    if ((record.state == State::kAssumed || record.state == State::kBinding) &&
        record.booked->node == p.node_name) {
      SetState(record, State::kBound);
      return;
    }
    Release(record);
    return;
  }
  // Pending. A nodeName is never unset, so after a bound view this one is stale; and an assumed
  // or binding booking is this extender's bind in flight (or of unknown outcome).
  if (record.state != State::kNone) return;
  if (!p.grant || (record.released && *record.released == *p.grant)) return;
  if (options_.clock() - p.grant->assumed_at > options_.grant_ttl_seconds) return;
  // A bind wrote this grant (before a restart, or another extender): held until its TTL.
  record.booked = *p.grant;
  record.problem.clear();
  SetState(record, State::kAssumed);
  if (!ledger_.built()) return;
  if (auto failed = TryPlace(record); failed) {
    Drop(record, "the grant annotation of this pending pod is not booked: " + failed->reason,
         false);
  }
}

void Bookings::Seen(const kube::PodInfo& info) {
  if (!info.grant_error.empty()) {
    auto seen = pods_.find(info.uid);
    if (seen == pods_.end() || seen->second.info.grant_error != info.grant_error) {
      ++counters_.unreadable_grants;
      Log(core::LogLevel::kWarn,
          "pod " + info.Key() + ": " + info.grant_error + "; the grant is ignored");
    }
  }
  auto it = pods_.find(info.uid);
  if (!info.wants_gpu() && !info.grant) {
    if (it != pods_.end()) {
      Release(it->second);
      pods_.erase(it);
    }
    return;
  }
  if (it == pods_.end()) it = pods_.emplace(info.uid, PodRecord{}).first;
  it->second.info = info;
  Reconcile(it->second);
}

// Bind's grant, computed on a built ledger with the pod's earlier assumed grant out of it
// (Evict): booked and placed, assumed.
Transition Bookings::Assumed(const kube::PodInfo& pod, const kube::Grant& grant) {
  auto existing = pods_.find(pod.uid);
  Transition t;
  const bool had_previous = existing != pods_.end() && existing->second.booked.has_value();
  if (existing != pods_.end()) t.from = existing->second.state;
  PodRecord& record = existing != pods_.end() ? existing->second
                                              : pods_.emplace(pod.uid, PodRecord{}).first->second;
  if (existing == pods_.end()) record.info = pod;
  GPUMUX_CHECK(!record.in_ledger, "bind's earlier booking was taken out of the ledger first");
  record.booked = grant;
  record.problem.clear();
  GPUMUX_CHECK(!TryPlace(record).has_value(), "the grant just computed is placeable");
  SetState(record, State::kAssumed);
  if (had_previous) RetryConflicts();
  t.to = State::kAssumed;
  return t;
}

std::vector<PodRecord*> Bookings::Evict(std::span<const std::string> uids,
                                        const std::string& node) {
  std::vector<PodRecord*> evicted;
  for (const std::string& uid : uids) {
    auto it = pods_.find(uid);
    if (it == pods_.end() || !it->second.in_ledger) continue;
    if (!node.empty() && it->second.booked->node != node) continue;
    Unplace(it->second);
    evicted.push_back(&it->second);
  }
  return evicted;
}

void Bookings::Restore(const std::vector<PodRecord*>& evicted) {
  for (auto it = evicted.rbegin(); it != evicted.rend(); ++it) {
    GPUMUX_CHECK(!TryPlace(**it).has_value(), "an evicted booking goes back in place");
  }
}

}  // namespace gpumux::sched
