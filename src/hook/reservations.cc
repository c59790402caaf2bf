#include "gpumux/hook/reservations.h"

#include "gpumux/io/atomic_file.h"
#include "gpumux/io/fd.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace gpumux::hook {
namespace {

using Json = nlohmann::ordered_json;

// A string field that ledgers written before it was added do not have.
std::string OptionalString(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

core::Result<ReservationFile> Parse(const std::string& text, const std::string& path) {
  ReservationFile f;
  if (text.empty()) return f;
  try {
    const Json j = Json::parse(text);
    if (!j.is_object() || !j.contains("reservations") || !j["reservations"].is_array()) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             path + ": not a gpumux reservation ledger (no 'reservations' list)");
    }
    for (const Json& r : j["reservations"]) {
      Reservation res;
      res.container = r.at("container").get<std::string>();
      res.gpus = r.at("gpus").get<std::vector<int>>();
      res.since = r.at("since").get<std::string>();
      res.since_unix = r.at("since_unix").get<std::int64_t>();
      res.state = r.at("state").get<std::string>();
      res.holder.pid = r.at("holder_pid").get<std::int64_t>();
      res.holder.start_time = r.at("holder_start_time").get<std::uint64_t>();
      // Fields added later: absent in older ledgers.
      res.holder_pid_ns = OptionalString(r, "holder_pid_ns");
      res.pod.ns = OptionalString(r, "pod_namespace");
      res.pod.pod = OptionalString(r, "pod_name");
      res.pod.container = OptionalString(r, "container_name");
      f.reservations.push_back(std::move(res));
    }
  } catch (const nlohmann::json::exception& e) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           path + ": malformed reservation ledger: " + e.what());
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

core::Result<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::string();
    return tl::unexpected(io::ErrnoError(path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ProcessRef CurrentProcess(std::int64_t pid) {
  ProcessRef p{pid, 0};
  if (pid <= 0) return p;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return p;
  // Field 2 (comm) is in parentheses and may hold spaces: parse after the last ')'.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return p;
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
  return io::WriteFileAtomically(path_, Serialise(*file));
}

}  // namespace gpumux::hook
