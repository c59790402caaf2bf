#include "gpumux/hook/reservations.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "gpumux/core/cluster.h"
#include "gpumux/core/json.h"
#include "gpumux/core/json_text.h"
#include "gpumux/io/atomic_file.h"
#include "gpumux/io/fd.h"
#include "gpumux/io/read_file.h"

namespace gpumux::hook {
namespace {

using Json = nlohmann::ordered_json;

// Every fault is reported as "<path>: malformed reservation ledger: <what>".
core::Error Malformed(const std::string& path, const std::string& what) {
  return core::Error{core::ErrorCode::kInvalidArgument,
                     path + ": malformed reservation ledger: " + what};
}

// Reads one entry with checked accessors: a field of the wrong type or out of range is an
// error naming it (`where` names the entry), never an exception or a silent conversion.
class EntryReader {
 public:
  EntryReader(const Json& entry, std::string where) : entry_(entry), where_(std::move(where)) {}

  core::Result<std::string> String(const char* key, bool required) const {
    const auto it = entry_.find(key);
    if (it == entry_.end() || it->is_null()) {
      if (!required) return std::string();
      return tl::unexpected(Fault(key, "missing"));
    }
    if (!it->is_string()) return tl::unexpected(Fault(key, "is not a string"));
    return it->get<std::string>();
  }

  // An integer in [lo, hi] (both within int64).
  core::Result<std::int64_t> Int(const char* key, std::int64_t lo, std::int64_t hi) const {
    const auto it = entry_.find(key);
    if (it == entry_.end() || it->is_null()) return tl::unexpected(Fault(key, "missing"));
    auto v = core::JsonIntIn(*it, lo, hi);
    if (!v) return tl::unexpected(Fault(key, RangeText(lo, hi)));
    return *v;
  }

  // A non-negative integer, the whole uint64 range.
  core::Result<std::uint64_t> Unsigned(const char* key) const {
    const auto it = entry_.find(key);
    if (it == entry_.end() || it->is_null()) return tl::unexpected(Fault(key, "missing"));
    if (it->is_number_unsigned()) return it->get<std::uint64_t>();
    return tl::unexpected(Fault(key, "is not a non-negative integer"));
  }

  static std::string RangeText(std::int64_t lo, std::int64_t hi) {
    return "is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  }

  core::Error Fault(const std::string& key, const std::string& what) const {
    return core::Error{core::ErrorCode::kInvalidArgument, where_ + ": field '" + key + "' " + what};
  }

 private:
  const Json& entry_;
  std::string where_;
};

// "reservation 2 (container 'c1')" for messages: 1-based, the container when it is readable.
std::string EntryName(const Json& entry, std::size_t i) {
  std::string name = "reservation " + std::to_string(i + 1);
  const auto it = entry.is_object() ? entry.find("container") : entry.end();
  if (it != entry.end() && it->is_string() && !it->get<std::string>().empty()) {
    name += " (container '" + it->get<std::string>().substr(0, 128) + "')";
  }
  return name;
}

core::Result<Reservation> ParseEntry(const Json& entry, std::size_t i) {
  const std::string where = EntryName(entry, i);
  if (!entry.is_object()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument, where + ": not a JSON object");
  }
  const EntryReader r(entry, where);
  Reservation res;
  auto container = r.String("container", /*required=*/true);
  if (!container) return tl::unexpected(container.error());
  if (container->empty()) return tl::unexpected(r.Fault("container", "is empty"));
  res.container = std::move(*container);

  const auto gpus = entry.find("gpus");
  if (gpus == entry.end() || gpus->is_null()) return tl::unexpected(r.Fault("gpus", "missing"));
  if (!gpus->is_array()) return tl::unexpected(r.Fault("gpus", "is not a list"));
  if (gpus->empty()) return tl::unexpected(r.Fault("gpus", "is empty"));
  for (const Json& g : *gpus) {
    const auto index = core::JsonIntIn(g, 0, core::kMaxGpusPerNode - 1);
    if (!index) {
      return tl::unexpected(r.Fault("gpus", "names GPU " + g.dump() + ", not a GPU index 0.." +
                                                std::to_string(core::kMaxGpusPerNode - 1)));
    }
    const int gpu = static_cast<int>(*index);
    if (std::find(res.gpus.begin(), res.gpus.end(), gpu) != res.gpus.end()) {
      return tl::unexpected(r.Fault("gpus", "names GPU " + std::to_string(gpu) + " twice"));
    }
    res.gpus.push_back(gpu);
  }

  auto since = r.String("since", /*required=*/true);
  if (!since) return tl::unexpected(since.error());
  res.since = std::move(*since);
  auto since_unix = r.Int("since_unix", std::numeric_limits<std::int64_t>::min(),
                          std::numeric_limits<std::int64_t>::max());
  if (!since_unix) return tl::unexpected(since_unix.error());
  res.since_unix = *since_unix;
  auto state = r.String("state", /*required=*/true);
  if (!state) return tl::unexpected(state.error());
  res.state = std::move(*state);
  auto pid = r.Int("holder_pid", 0, kMaxPid);
  if (!pid) return tl::unexpected(pid.error());
  res.holder.pid = *pid;
  auto start_time = r.Unsigned("holder_start_time");
  if (!start_time) return tl::unexpected(start_time.error());
  res.holder.start_time = *start_time;
  // Fields added later: absent in older ledgers, but of their type when present.
  for (auto [key, field] :
       {std::pair{"holder_pid_ns", &res.holder_pid_ns}, std::pair{"pod_namespace", &res.pod.ns},
        std::pair{"pod_name", &res.pod.pod}, std::pair{"container_name", &res.pod.container}}) {
    auto value = r.String(key, /*required=*/false);
    if (!value) return tl::unexpected(value.error());
    *field = std::move(*value);
  }
  return res;
}

core::Result<ReservationFile> Parse(const std::string& text, const std::string& path) {
  ReservationFile f;
  if (text.empty()) return f;
  auto parsed = core::ParseJson<Json>(text, "");
  if (!parsed) return tl::unexpected(Malformed(path, parsed.error().message));
  const Json& j = *parsed;
  const auto list = j.is_object() ? j.find("reservations") : j.end();
  if (list == j.end() || !list->is_array()) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           path + ": not a gpumux reservation ledger (no 'reservations' list)");
  }
  if (const auto version = j.find("version"); version != j.end()) {
    if (core::JsonIntIn(*version, 1, 1) != std::optional<std::int64_t>(1)) {
      return tl::unexpected(Malformed(path, "field 'version' is " +
                                                core::JsonSummary(*version, 32) +
                                                ", not 1 (written by another gpumux version?)"));
    }
  }
  if (list->size() > kMaxReservations) {
    return tl::unexpected(Malformed(path, std::to_string(list->size()) +
                                              " reservations, more than the " +
                                              std::to_string(kMaxReservations) +
                                              " a ledger may hold (hook::kMaxReservations)"));
  }
  std::map<std::string, std::size_t> entry_of;  // container -> 1-based entry number
  for (std::size_t i = 0; i < list->size(); ++i) {
    auto res = ParseEntry((*list)[i], i);
    if (!res) return tl::unexpected(Malformed(path, res.error().message));
    if (const auto [it, fresh] = entry_of.emplace(res->container, i + 1); !fresh) {
      return tl::unexpected(Malformed(
          path, "reservation " + std::to_string(i + 1) + ": container '" + res->container +
                    "' is already reserved by reservation " + std::to_string(it->second)));
    }
    f.reservations.push_back(std::move(*res));
  }
  return f;
}

std::string Serialise(const ReservationFile& f) {
  Json j;
  j["version"] = 1;
  Json list = Json::array();
  for (const Reservation& r : f.reservations) {
    Json o;
    o["container"] = r.container;
    o["gpus"] = r.gpus;
    o["since"] = r.since;
    o["since_unix"] = r.since_unix;
    o["state"] = r.state;
    o["holder_pid"] = r.holder.pid;
    o["holder_start_time"] = r.holder.start_time;
    if (!r.holder_pid_ns.empty()) o["holder_pid_ns"] = r.holder_pid_ns;
    if (!r.pod.empty()) {
      o["pod_namespace"] = r.pod.ns;
      o["pod_name"] = r.pod.pod;
      o["container_name"] = r.pod.container;
    }
    list.push_back(o);
  }
  j["reservations"] = list;
  return j.dump(2) + "\n";
}

// The ledger's text; "" when there is none yet.
core::Result<std::string> ReadAll(const std::string& path) {
  auto text = io::ReadInputFile(path, kMaxLedgerBytes);
  if (!text && text.error().code == core::ErrorCode::kNotFound) return std::string();
  return text;
}

}  // namespace

ProcessRef CurrentProcess(std::int64_t pid) {
  ProcessRef p{pid, 0};
  if (pid <= 0 || pid > kMaxPid) return p;
  auto text = io::ReadInputFile("/proc/" + std::to_string(pid) + "/stat", std::size_t{1} << 16);
  if (!text) return p;
  const std::string line = text->substr(0, text->find('\n'));
  // Field 2 (comm) is in parentheses and may hold spaces: parse after the last ')'.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return p;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  // After comm: field 3 (state) ... field 22 (starttime) is the 20th token. A zombie ('Z') or
  // dead ('X') process has exited: it keeps nothing alive, even while nobody has reaped it.
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X")) return p;
    if (i == 22) p.start_time = std::strtoull(field.c_str(), nullptr, 10);
  }
  return p;
}

bool IsAlive(const ProcessRef& p) {
  if (p.pid <= 0 || p.start_time == 0) return false;
  const ProcessRef now = CurrentProcess(p.pid);
  return now.start_time == p.start_time;
}

std::string OwnPidNamespace() {
  char buf[64];
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string HolderName(const Reservation& r) {
  if (r.pod.empty()) return r.container;
  std::string name;
  for (const std::string* part : {&r.pod.ns, &r.pod.pod, &r.pod.container}) {
    if (part->empty()) continue;
    if (!name.empty()) name += '/';
    name += *part;
  }
  return name;
}

Liveness HolderLiveness(const Reservation& r) {
  if (!r.holder_pid_ns.empty() && r.holder_pid_ns != OwnPidNamespace()) return Liveness::kUnknown;
  return IsAlive(r.holder) ? Liveness::kAlive : Liveness::kGone;
}

ReservationStore::ReservationStore(std::string state_dir)
    : dir_(std::move(state_dir)),
      path_(dir_ + "/reservations.json"),
      lock_path_(dir_ + "/reservations.lock") {}

core::Result<ReservationFile> ReservationStore::Read() const {
  auto text = ReadAll(path_);
  if (!text) return tl::unexpected(text.error());
  return Parse(*text, path_);
}

core::Result<void> ReservationStore::ReadLocked(
    const std::function<void(const ReservationFile&)>& use) const {
  io::UniqueFd lock(::open(lock_path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (lock.get() < 0) {
    if (errno != ENOENT) return tl::unexpected(io::ErrnoError(lock_path_));
    // No lock file: no writer has ever started here (each creates it before writing).
    use(ReservationFile{});
    return {};
  }
  while (::flock(lock.get(), LOCK_SH) != 0) {
    if (errno != EINTR) return tl::unexpected(io::ErrnoError(lock_path_));
  }
  auto file = Read();
  if (!file) return tl::unexpected(file.error());
  use(*file);
  return {};
}

core::Result<void> ReservationStore::Update(
    const std::function<core::Result<bool>(ReservationFile&)>& change) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return core::MakeError(core::ErrorCode::kIo, dir_ + ": " + ec.message());
  io::UniqueFd lock(::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) return tl::unexpected(io::ErrnoError(lock_path_));
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return tl::unexpected(io::ErrnoError(lock_path_));
  }
  // The lock is released when `lock` closes, also if this process dies.
  auto text = ReadAll(path_);
  if (!text) return tl::unexpected(text.error());
  auto file = Parse(*text, path_);
  if (!file) return tl::unexpected(file.error());
  auto changed = change(*file);
  if (!changed) return tl::unexpected(changed.error());
  if (!*changed) return {};
  if (file->reservations.size() > kMaxReservations) {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           path_ + ": the ledger would hold " +
                               std::to_string(file->reservations.size()) +
                               " reservations, more than the " + std::to_string(kMaxReservations) +
                               " it may hold (hook::kMaxReservations)");
  }
  return io::WriteFileAtomically(path_, Serialise(*file));
}

}  // namespace gpumux::hook
