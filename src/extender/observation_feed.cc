#include "gpumux/extender/observation_feed.h"

#include <utility>
#include <vector>

#include "gpumux/core/plural.h"

namespace gpumux::extender {
namespace {

bool IsEtcd(std::string_view url) {
  return url.rfind("etcd://", 0) == 0 || url.rfind("etcds://", 0) == 0;
}

}  // namespace

ObservationFeed::ObservationFeed(ObservationFeedOptions options,
                                 std::shared_ptr<const policy::WorkloadProfile> base,
                                 sched::ClusterState& state)
    : options_(std::move(options)), base_(std::move(base)), state_(state) {}

ObservationFeed::~ObservationFeed() { Stop(); }

core::Result<std::vector<store::KeyValue>> ObservationFeed::List() {
  const std::string prefix = options_.prefix + "observations/";
  if (IsEtcd(options_.url)) {
    if (kept_ == nullptr) {
      auto opened = store::OpenStore(options_.url, options_.store);
      if (!opened) return tl::unexpected(opened.error());
      kept_ = std::move(*opened);
    }
    return kept_->List(prefix);
  }
  auto opened = store::OpenStore(options_.url, options_.store);
  if (!opened) return tl::unexpected(opened.error());
  return (*opened)->List(prefix);  // closed (and its lock released) on return
}

core::Result<void> ObservationFeed::ReadOnce() {
  std::lock_guard read_lock(read_mu_);
  const core::Logger& log = options_.log;
  auto listed = List();
  if (!listed) {
    state_.CountObservationReadFailure();
    std::string previous;
    {
      std::lock_guard lock(status_mu_);
      ++status_.reads;
      ++status_.failed_reads;
      previous = status_.ok || status_.reads == 1 ? std::string() : status_.error;
      status_.ok = false;
      status_.error = listed.error().message;
    }
    // Said once per distinct error, not every period.
    if (previous != listed.error().message) {
      log.Warn("cannot read observations; keeping the profile in use",
               {{"url", options_.url},
                {"error", listed.error().message},
                {"observed_sets", std::to_string(status().summary.observed_sets())}});
    }
    return tl::unexpected(listed.error());
  }
  std::string text;
  for (const store::KeyValue& kv : *listed) {
    text += kv.key;
    text += '\0';
    text += kv.value;
    text += '\0';
  }
  bool recovered = false;
  {
    std::lock_guard lock(status_mu_);
    ++status_.reads;
    recovered = !status_.ok && status_.reads > 1;
    status_.ok = true;
    status_.error.clear();
  }
  if (recovered) log.Info("reading observations again", {{"url", options_.url}});
  if (applied_ && text == *applied_) return {};

  std::vector<policy::Observation> observations;
  std::size_t unreadable = 0;
  for (const store::KeyValue& kv : *listed) {
    auto o = policy::ParseObservation(kv.value, "key " + kv.key);
    if (!o) {
      if (unreadable < policy::kMaxSkippedReasons) {
        log.Warn("skipping an observation", {{"error", o.error().message}});
      }
      ++unreadable;
      continue;
    }
    if (observations.size() == policy::kMaxObservations) break;
    observations.push_back(std::move(*o));
  }
  policy::ObservationSummary summary;
  auto profile = std::make_shared<const policy::WorkloadProfile>(
      policy::WithObservations(*base_, observations, &summary, options_.observations));
  if (auto ok = profile->Validate(); !ok) {
    // WithObservations keeps a valid profile valid; a failure here is a defect, not input.
    log.Error("observations made an invalid profile; keeping the profile in use",
              {{"url", options_.url}, {"error", ok.error().message}});
    return tl::unexpected(ok.error());
  }
  const std::size_t sets = summary.observed_sets();
  state_.SetProfile(std::move(profile), sets);
  applied_ = std::move(text);
  log.Info("observations applied", {{"url", options_.url},
                                    {"summary", summary.Describe()},
                                    {"unreadable_keys", std::to_string(unreadable)}});
  for (const std::string& why : summary.skipped) log.Warn("observation skipped", {{"why", why}});
  std::lock_guard lock(status_mu_);
  status_.summary = std::move(summary);
  status_.unreadable_keys = unreadable;
  ++status_.swaps;
  return {};
}

void ObservationFeed::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] {
    std::unique_lock lock(stop_mu_);
    while (!stopping_) {
      lock.unlock();
      (void)ReadOnce();
      lock.lock();
      stop_cv_.wait_for(lock, options_.every, [this] { return stopping_; });
    }
  });
}

void ObservationFeed::Stop() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

FeedStatus ObservationFeed::status() const {
  std::lock_guard lock(status_mu_);
  return status_;
}

}  // namespace gpumux::extender
