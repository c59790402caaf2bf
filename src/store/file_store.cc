// The single-host store: every key in one JSON file, rewritten atomically (fsync'd) on each
// change, guarded by an exclusive flock on "<path>.lock" for the store's lifetime.
//   {"version": 1, "revision": 7, "keys": {"/gpumux/...": {"value": "...", "revision": 7}}}
// Leased keys live in memory only: they describe this process, which a reopen is not.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "gpumux/core/json.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/io/read_file.h"
#include "src/store/stores.h"

namespace gpumux::store {

namespace {

using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

class FileStore final : public Store {
 public:
  FileStore(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  ~FileStore() override {
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  }

  core::Result<void> Load() {
    auto text = io::ReadInputFile(path_);
    if (!text) {
      if (text.error().code == core::ErrorCode::kNotFound) return {};  // a new store
      return tl::unexpected(text.error());
    }
    auto parsed = core::ParseJson(*text, "");
    const auto bad = [&](const std::string& why) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             path_ + ": not a gpumux store file (" + why + ")");
    };
    if (!parsed) return bad(parsed.error().message);
    Json& doc = *parsed;
    if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_object()) {
      return bad("no \"keys\" object");
    }
    // Revisions count changes from 0: one near INT64_MAX (a file written by another program)
    // would overflow at the next change. 2^62 leaves room for more changes than any store
    // will see (a change a nanosecond for 146 years).
    constexpr std::int64_t kMaxRevision = std::int64_t{1} << 62;
    const auto integer = [](const Json& object, const char* name) -> std::optional<std::int64_t> {
      if (!object.contains(name)) return std::int64_t{0};
      // In the value's own JSON type: get<int64_t> would wrap one above INT64_MAX.
      return core::JsonIntIn(object[name], 0, kMaxRevision);
    };
    if (integer(doc, "version").value_or(0) != 1) return bad("\"version\" is not 1");
    const auto revision = integer(doc, "revision");
    if (!revision) return bad("\"revision\" is not an integer from 0 to 2^62");
    revision_ = *revision;
    for (const auto& [key, entry] : doc["keys"].items()) {
      if (!entry.is_object() || !entry.contains("value") || !entry["value"].is_string()) {
        return bad("key " + key + " has no string \"value\"");
      }
      const auto key_revision = integer(entry, "revision");
      if (!key_revision) {
        return bad("key " + key + " has a \"revision\" that is not an integer from 0 to 2^62");
      }
      kv_[key] = {entry["value"].get<std::string>(), *key_revision};
    }
    return {};
  }

  std::string Describe() const override { return "file://" + path_; }

  core::Result<void> Put(std::string_view key, std::string_view value) override {
    if (auto ok = CheckText(key, value); !ok) return ok;
    std::lock_guard lock(mu_);
    leased_.erase(std::string(key));
    auto it = kv_.find(key);
    if (it != kv_.end() && it->second.first == value) return {};
    kv_[std::string(key)] = {std::string(value), ++revision_};
    return Save();
  }

  core::Result<void> Apply(std::span<const Change> changes) override {
    for (const Change& c : changes) {
      if (auto ok = CheckText(c.key, c.value.value_or("")); !ok) return ok;
    }
    std::lock_guard lock(mu_);
    bool changed = false;
    for (const Change& c : changes) {
      leased_.erase(c.key);
      auto it = kv_.find(c.key);
      if (!c.value) {
        if (it == kv_.end()) continue;
        kv_.erase(it);
        ++revision_;
      } else if (it == kv_.end() || it->second.first != *c.value) {
        kv_[c.key] = {*c.value, ++revision_};
      } else {
        continue;
      }
      changed = true;
    }
    return changed ? Save() : core::Result<void>{};
  }

  core::Result<std::optional<std::string>> Get(std::string_view key) override {
    std::lock_guard lock(mu_);
    if (auto l = leased_.find(std::string(key)); l != leased_.end() && LeaseLive()) {
      return std::optional<std::string>(l->second.value);
    }
    auto it = kv_.find(key);
    if (it == kv_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second.first);
  }

  core::Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    std::map<std::string, KeyValue> out;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.rfind(prefix, 0) == 0;
         ++it) {
      out[it->first] = {it->first, it->second.first, it->second.second};
    }
    for (const auto& [key, l] : leased_) {
      if (LeaseLive() && key.rfind(prefix, 0) == 0) out[key] = {key, l.value, l.revision};
    }
    std::vector<KeyValue> list;
    list.reserve(out.size());
    for (auto& [key, kv] : out) list.push_back(std::move(kv));
    return list;
  }

  core::Result<void> Delete(std::string_view key) override {
    std::lock_guard lock(mu_);
    leased_.erase(std::string(key));
    auto it = kv_.find(key);
    if (it == kv_.end()) return {};
    kv_.erase(it);
    ++revision_;
    return Save();
  }

  core::Result<std::int64_t> DeletePrefix(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    std::int64_t n = 0;
    const bool live = LeaseLive();
    for (auto it = leased_.begin(); it != leased_.end();) {
      if (it->first.rfind(prefix, 0) == 0) {
        it = leased_.erase(it);
        if (live) ++n;
      } else {
        ++it;
      }
    }
    std::int64_t stored = 0;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.rfind(prefix, 0) == 0;) {
      it = kv_.erase(it);
      ++stored;
    }
    if (stored > 0) {
      ++revision_;
      if (auto saved = Save(); !saved) return tl::unexpected(saved.error());
    }
    return n + stored;
  }

  core::Result<void> PutLeased(std::string_view key, std::string_view value,
                               std::chrono::seconds ttl) override {
    if (ttl.count() < 1) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "a lease needs a TTL of at least 1 s");
    }
    if (auto ok = CheckText(key, value); !ok) return ok;
    std::lock_guard lock(mu_);
    next_ttl_ = ttl;
    if (!LeaseLive()) Regrant();
    leased_[std::string(key)] = {std::string(value), ++revision_};
    // The key is now leased: a permanent value of it must not reappear when the lease ends.
    if (auto it = kv_.find(key); it != kv_.end()) {
      kv_.erase(it);
      return Save();
    }
    return {};
  }

  core::Result<void> KeepAlive() override {
    std::lock_guard lock(mu_);
    if (LeaseLive()) {
      expiry_ = SteadyClock::now() + lease_ttl_;
    } else if (!leased_.empty()) {
      Regrant();  // expired: its keys come back, as the etcd store re-grants and re-writes them
    }
    return {};
  }

 private:
  struct Leased {
    std::string value;
    std::int64_t revision = 0;
  };

  // The file is JSON: keys and values must be UTF-8 (checked before anything changes, so that
  // Save cannot fail on them).
  core::Result<void> CheckText(std::string_view key, std::string_view value) const {
    for (const std::string_view text : {key, value}) {
      try {
        (void)Json(std::string(text)).dump();
      } catch (const Json::exception&) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               Describe() + ": keys and values of a file store must be UTF-8 text");
      }
    }
    return {};
  }

  // Leased keys are seen while the lease lives; an expired lease hides them until KeepAlive
  // or PutLeased grants a new one.
  bool LeaseLive() const { return SteadyClock::now() < expiry_; }
  void Regrant() {
    lease_ttl_ = next_ttl_;
    expiry_ = SteadyClock::now() + lease_ttl_;
  }

  core::Result<void> Save() {
    Json keys = Json::object();
    for (const auto& [key, entry] : kv_)
      keys[key] = {{"value", entry.first}, {"revision", entry.second}};
    Json doc{{"version", 1}, {"revision", revision_}, {"keys", keys}};
    return io::WriteFileAtomically(path_, doc.dump(1) + "\n");
  }

  std::string path_;
  int lock_fd_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::int64_t>, std::less<>> kv_;
  std::map<std::string, Leased> leased_;
  std::chrono::seconds lease_ttl_{0};  // of the current lease (as etcd fixes it at the grant)
  std::chrono::seconds next_ttl_{0};   // of the next one: the latest PutLeased's
  SteadyClock::time_point expiry_{};
  std::int64_t revision_ = 0;
};

}  // namespace

core::Result<std::unique_ptr<Store>> OpenFileStore(const std::string& path) {
  if (path.empty())
    return core::MakeError(core::ErrorCode::kInvalidArgument, "the store file path is empty");
  const std::string lock_path = path + ".lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return core::MakeError(core::ErrorCode::kIo,
                           "cannot open " + lock_path + ": " + std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    std::string holder;
    char buf[32] = {};
    if (::pread(fd, buf, sizeof buf - 1, 0) > 0) holder = std::string(" (pid ") + buf + ")";
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return core::MakeError(
          core::ErrorCode::kFailedPrecondition,
          path + " is in use by another process" + holder + ": one coordinator per store file");
    }
    return core::MakeError(core::ErrorCode::kIo,
                           "cannot lock " + lock_path + ": " + std::strerror(error));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  auto store = std::make_unique<FileStore>(path, fd);
  if (auto loaded = store->Load(); !loaded) return tl::unexpected(loaded.error());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace gpumux::store
