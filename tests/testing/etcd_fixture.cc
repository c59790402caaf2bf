#include "tests/testing/etcd_fixture.h"

#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/testing/process.h"

extern char** environ;

namespace gpumux::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto kHealthyWithin = 20s;

// Two distinct free loopback ports (both bound at once, then released for etcd to take).
core::Result<std::array<int, 2>> FreePorts() {
  std::array<int, 2> fds{-1, -1};
  std::array<int, 2> ports{0, 0};
  std::string failure;
  for (std::size_t k = 0; k < fds.size() && failure.empty(); ++k) {
    fds[k] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fds[k] < 0 || ::bind(fds[k], reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fds[k], reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      failure = std::strerror(errno);
    }
    ports[k] = ntohs(addr.sin_port);
  }
  for (const int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  if (!failure.empty())
    return core::MakeError(core::ErrorCode::kIo, "no free loopback port: " + failure);
  return ports;
}

bool EtcdInstalled() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t colon = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, colon - start) + "/etcd";
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    start = colon + 1;
  }
  return false;
}

// ETCD_* variables of our environment would be read by etcd as flags.
std::vector<std::string> EtcdVariables() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("ETCD_", 0) == 0) names.push_back(entry.substr(0, entry.find('=')));
  }
  return names;
}

std::string Tail(const std::string& text) {
  constexpr std::size_t kTail = 3000;
  return text.size() <= kTail ? text : "..." + text.substr(text.size() - kTail);
}

}  // namespace

EtcdProcess::EtcdProcess(fs::path dir, int client_port, int peer_port)
    : dir_(std::move(dir)), client_port_(client_port), peer_port_(peer_port) {}

EtcdProcess::~EtcdProcess() {
  Stop();
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

core::Result<std::unique_ptr<EtcdProcess>> EtcdProcess::Start() {
  if (!EtcdInstalled()) {
    return core::MakeError(core::ErrorCode::kNotFound,
                           "etcd is not installed (Debian: apt-get install etcd-server)");
  }
  std::string pattern = (fs::temp_directory_path() / "gpumux-etcd-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return core::MakeError(core::ErrorCode::kIo,
                           "mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  // A port freed by FreePorts can be taken by someone else before etcd binds it: try again
  // with new ports when that happens.
  core::Error last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto ports = FreePorts();
    if (!ports) return tl::unexpected(ports.error());
    std::unique_ptr<EtcdProcess> etcd(new EtcdProcess(fs::path(pattern), (*ports)[0], (*ports)[1]));
    etcd->starts_ = attempt;
    auto launched = etcd->Launch();
    if (launched) return etcd;
    last = launched.error();
    etcd->Stop();
    if (last.message.find("address already in use") == std::string::npos) break;
    std::error_code ignored;
    fs::remove_all(etcd->dir_ / "data", ignored);
    etcd->dir_.clear();  // the folder stays for the next attempt
  }
  std::error_code ignored;
  fs::remove_all(pattern, ignored);
  return tl::unexpected(last);
}

std::string EtcdProcess::url() const {
  std::string url = "etcd://127.0.0.1:";
  url += std::to_string(client_port_);
  return url;
}

std::string EtcdProcess::Log() const {
  std::string name = "etcd-";
  name += std::to_string(starts_);
  name += ".log";
  return ReadFileText(dir_ / name);
}

void EtcdProcess::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  WaitProcess(pid_);
  pid_ = -1;
}

core::Result<void> EtcdProcess::Restart() {
  Stop();
  ++starts_;
  return Launch();
}

core::Result<void> EtcdProcess::Launch() {
  std::string client = "http://127.0.0.1:";
  client += std::to_string(client_port_);
  std::string peer = "http://127.0.0.1:";
  peer += std::to_string(peer_port_);
  std::string log = "etcd-";
  log += std::to_string(starts_);
  log += ".log";
  ProcessSpec spec;
  spec.argv = {"etcd",
               "--name",
               "gpumux-test",
               "--data-dir",
               (dir_ / "data").string(),
               "--listen-client-urls",
               client,
               "--advertise-client-urls",
               client,
               "--listen-peer-urls",
               peer,
               "--initial-advertise-peer-urls",
               peer,
               "--initial-cluster",
               "gpumux-test=" + peer};
  spec.unset_env = EtcdVariables();
  spec.stdout_path = spec.stderr_path = (dir_ / log).string();
  pid_ = StartProcess(spec);
  if (pid_ <= 0) return core::MakeError(core::ErrorCode::kIo, "cannot start etcd");
  return WaitHealthy();
}

core::Result<void> EtcdProcess::WaitHealthy() {
  const auto deadline = std::chrono::steady_clock::now() + kHealthyWithin;
  httplib::Client client("127.0.0.1", client_port_);
  client.set_connection_timeout(0, 200'000);
  client.set_read_timeout(2, 0);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return core::MakeError(core::ErrorCode::kIo, "etcd exited while starting:\n" + Tail(Log()));
    }
    if (auto reply = client.Get("/health");
        reply && reply->status == 200 && reply->body.find("\"true\"") != std::string::npos) {
      return {};
    }
    std::this_thread::sleep_for(50ms);
  }
  return core::MakeError(core::ErrorCode::kIo, "etcd is not healthy after 20 s:\n" + Tail(Log()));
}

core::Result<void> EtcdProcess::EnableAuth(std::string_view root_password) {
  httplib::Client client("127.0.0.1", client_port_);
  client.set_read_timeout(5, 0);
  std::string password;
  for (const char c : root_password) {  // JSON string escaping for the few characters that need it
    if (c == '"' || c == '\\') password += '\\';
    password += c;
  }
  const std::pair<const char*, std::string> steps[] = {
      {"/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"" + password + "\"}"},
      {"/v3/auth/user/grant", R"({"user":"root","role":"root"})"},
      {"/v3/auth/enable", "{}"},
  };
  for (const auto& [path, body] : steps) {
    auto reply = client.Post(path, body, "application/json");
    if (!reply || reply->status != 200) {
      std::string why = reply ? std::to_string(reply->status) + " " + reply->body
                              : httplib::to_string(reply.error());
      return core::MakeError(core::ErrorCode::kIo, std::string("etcd ") + path + ": " + why);
    }
  }
  return {};
}

}  // namespace gpumux::test
