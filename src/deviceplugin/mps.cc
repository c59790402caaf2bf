#include "gpumux/deviceplugin/mps.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

extern char** environ;

namespace gpumux::deviceplugin {
namespace {

using core::ErrorCode;
using core::MakeError;

constexpr auto kCommandTimeout = std::chrono::seconds(5);

// Spawns argv with `env`, stdin/stdout as given (-1: /dev/null), stderr to stdout. -1 on failure.
pid_t Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, int in,
            int out, int* error) {
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in >= 0) {
    posix_spawn_file_actions_adddup2(&fa, in, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  if (out >= 0) {
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, out, 2);
  }
  // Nothing else of the plugin's (gRPC and HTTP sockets) reaches a daemon that outlives calls.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  // A process group of its own: what is killed at a deadline is all of it, not just its top.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  *error = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  return *error == 0 ? pid : -1;
}

// Waits for `pid` at most `limit`; kills it and its process group after. The exit status, or
// -1 when killed.
int WaitFor(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

MpsDaemons::MpsDaemons(MpsOptions options, std::vector<std::string> uuids)
    : options_(std::move(options)) {
  for (std::string& u : uuids) {
    Gpu g;
    g.dir = options_.root + "/" + u;
    g.uuid = std::move(u);
    gpus_.push_back(std::move(g));
  }
}

MpsDaemons::~MpsDaemons() { Stop(); }

std::vector<std::string> MpsDaemons::Environment(const Gpu& g) const {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("CUDA_", 0) != 0) env.emplace_back(entry);
  }
  env.push_back("CUDA_VISIBLE_DEVICES=" + g.uuid);
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + g.dir + "/pipe");
  env.push_back("CUDA_MPS_LOG_DIRECTORY=" + g.dir + "/log");
  return env;
}

core::Result<void> MpsDaemons::Launch(Gpu& g) {
  std::error_code ec;
  for (const char* sub : {"pipe", "log", "shm"}) {
    std::filesystem::create_directories(g.dir + "/" + sub, ec);
    if (ec)
      return MakeError(ErrorCode::kIo, "cannot make " + g.dir + "/" + sub + ": " + ec.message());
    // Clients run as any user: the folders must let them in (MPS checks the socket's own mode).
    ::chmod((g.dir + "/" + sub).c_str(), sub == std::string("log") ? 0755 : 01777);
  }
  const std::string out_path = g.dir + "/log/daemon.out";
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int error = 0;
  const bool v3 = protocol_ == MpsProtocol::kNamespaces;
  g.pid = Spawn(v3 ? std::vector<std::string>{options_.control, "-f", "-p", "3"}
                   : std::vector<std::string>{options_.control, "-f"},
                Environment(g), -1, out, &error);
  if (out >= 0) ::close(out);
  if (g.pid < 0) {
    return MakeError(ErrorCode::kFailedPrecondition,
                     "cannot start " + options_.control + " -f: " + std::strerror(error));
  }
  options_.log.Info("MPS control daemon started",
                    {{"gpu", g.uuid}, {"pid", std::to_string(g.pid)}, {"pipe", g.dir + "/pipe"}});
  if (v3) {
    // The server of every namespace, once the daemon answers (it may take a moment to start).
    core::Result<std::string> made;
    for (int attempt = 0; attempt < 50; ++attempt) {
      made = Command(g, {"server", "create", options_.server});
      if (made) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!made) return tl::unexpected(made.error());
    std::filesystem::create_directories(g.dir + "/namespaces", ec);
  }
  return {};
}

core::Result<void> MpsDaemons::Start() {
  (void)Detect();
  std::lock_guard lock(mu_);
  for (Gpu& g : gpus_) {
    if (auto launched = Launch(g); !launched) {
      stopped_ = false;
      for (Gpu& other : gpus_) {
        if (other.pid > 0) {
          ::kill(other.pid, SIGKILL);
          ::waitpid(other.pid, nullptr, 0);
          other.pid = -1;
        }
      }
      return launched;
    }
  }
  return {};
}

int MpsDaemons::Check() {
  std::lock_guard lock(mu_);
  int restarted = 0;
  for (Gpu& g : gpus_) {
    int status = 0;
    if (stopped_ || g.pid <= 0 || ::waitpid(g.pid, &status, WNOHANG) != g.pid) continue;
    options_.log.Warn("MPS control daemon exited; starting it again",
                      {{"gpu", g.uuid}, {"status", std::to_string(status)}});
    g.pid = -1;
    if (auto launched = Launch(g); !launched) {
      options_.log.Error("cannot restart the MPS control daemon",
                         {{"gpu", g.uuid}, {"error", launched.error().message}});
      continue;
    }
    ++restarted;
    // The limits live in the daemon: tell the new one.
    if (protocol_ == MpsProtocol::kNamespaces) {
      RecreateNamespaces(g);
      continue;
    }
    const std::int64_t mem = std::exchange(g.mem_mib, 0);
    const int pct = std::exchange(g.thread_percent, 0);
    if (auto raised = Raise(g, mem, pct); !raised) {
      options_.log.Warn("cannot set the restarted MPS daemon's limits",
                        {{"gpu", g.uuid}, {"error", raised.error().message}});
    }
  }
  return restarted;
}

std::optional<MpsFolders> MpsDaemons::Folders(const std::string& uuid) {
  std::lock_guard lock(mu_);
  for (const Gpu& g : gpus_) {
    if (g.uuid == uuid && g.pid > 0 && !stopped_)
      return MpsFolders{g.dir + "/pipe", g.dir + "/shm"};
  }
  return std::nullopt;
}

core::Result<std::string> MpsDaemons::Run(const Gpu& g, const std::vector<std::string>& args,
                                          const std::string& input, const std::string& what,
                                          Deadline deadline) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return MakeError(ErrorCode::kIo, std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return MakeError(ErrorCode::kIo, std::strerror(errno));
  }
  int error = 0;
  const pid_t pid = Spawn(args, Environment(g), in[0], out[1], &error);
  ::close(in[0]);
  ::close(out[1]);
  if (pid > 0 && !input.empty()) (void)!::write(in[1], input.data(), input.size());
  ::close(in[1]);
  // The whole command, output and exit, within the deadline: a program that trickles or hangs
  // is killed then, not waited for read by read.
  std::string answer;
  char buf[512];
  pollfd p{out[0], POLLIN, 0};
  while (pid > 0 && answer.size() <= 65536) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  if (pid < 0)
    return MakeError(ErrorCode::kFailedPrecondition,
                     options_.control + ": " + std::strerror(error));
  const int status = WaitFor(pid, std::max(std::chrono::milliseconds(0),
                                           std::chrono::duration_cast<std::chrono::milliseconds>(
                                               deadline - std::chrono::steady_clock::now())));
  if (status != 0) {
    return MakeError(
        ErrorCode::kFailedPrecondition,
        "'" + what + "' to the MPS control daemon of " + g.uuid + " failed (" +
            (status < 0 ? std::string("timed out") : "exit " + std::to_string(status)) +
            "): " + answer.substr(0, 512));
  }
  return answer;
}

core::Result<std::string> MpsDaemons::Control(const Gpu& g, const std::string& command,
                                              Deadline deadline) {
  return Run(g, {options_.control}, command + "\n", command, deadline);
}

core::Result<std::string> MpsDaemons::Command(const Gpu& g, const std::vector<std::string>& args) {
  std::vector<std::string> argv{options_.control, "-p", "3"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string what;
  for (const std::string& a : args) what += (what.empty() ? "" : " ") + a;
  return Run(g, argv, "", what, std::chrono::steady_clock::now() + kCommandTimeout);
}

MpsProtocol MpsDaemons::Detect() {
  std::lock_guard lock(mu_);
  if (protocol_) return *protocol_;
  protocol_ = MpsProtocol::kLegacy;
  if (gpus_.empty()) return *protocol_;
  // "-p 3 -h" lists the modules of the v3 interface; a daemon without it refuses -p.
  auto help = Run(gpus_.front(), {options_.control, "-p", "3", "-h"}, "", "-p 3 -h",
                  std::chrono::steady_clock::now() + kCommandTimeout);
  if (help && help->find("namespace") != std::string::npos &&
      help->find("server") != std::string::npos) {
    protocol_ = MpsProtocol::kNamespaces;
  }
  options_.log.Info(
      "MPS control program",
      {{"program", options_.control},
       {"interface", *protocol_ == MpsProtocol::kNamespaces ? "v3 (namespaces)" : "v2 (legacy)"}});
  return *protocol_;
}

core::Result<void> MpsDaemons::Admit(const std::string& uuid, std::int64_t mem_mib,
                                     int thread_percent) {
  std::lock_guard lock(mu_);
  for (Gpu& g : gpus_) {
    if (g.uuid == uuid && g.pid > 0 && !stopped_) return Raise(g, mem_mib, thread_percent);
  }
  return {};
}

namespace {

// "c" and 16 hex digits of FNV-1a over "<owner>/<container>": a namespace name of MPS's
// alphabet ([a-z0-9_], at most 64), the same for the same container whenever it is asked.
std::string NamespaceOf(const std::string& owner, const std::string& container) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : owner + "/" + container) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  static const char* kHex = "0123456789abcdef";
  std::string out = "c";
  for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(h >> shift) & 0xf];
  return out;
}

}  // namespace

core::Result<std::optional<std::string>> MpsDaemons::AdmitContainer(const std::string& uuid,
                                                                    std::int64_t mem_mib,
                                                                    int thread_percent,
                                                                    const std::string& owner,
                                                                    const std::string& container) {
  if (Detect() == MpsProtocol::kLegacy) {
    if (auto raised = Admit(uuid, mem_mib, thread_percent); !raised) {
      return tl::unexpected(raised.error());
    }
    return std::optional<std::string>();
  }
  std::lock_guard lock(mu_);
  Gpu* gpu = nullptr;
  for (Gpu& g : gpus_) {
    if (g.uuid == uuid && g.pid > 0 && !stopped_) gpu = &g;
  }
  if (gpu == nullptr) return std::optional<std::string>();
  const std::string ns = NamespaceOf(owner, container);
  const std::string server = "--server=" + options_.server;
  const std::string folder = gpu->dir + "/pipe/" + options_.server + "/" + ns;
  if (!std::filesystem::exists(folder)) {
    if (auto made = Command(*gpu, {"namespace", "create", ns, server}); !made) {
      return tl::unexpected(made.error());
    }
  }
  std::vector<std::string> set = {"namespace", "set", ns, server};
  if (mem_mib > 0) set.push_back("--pinned-memory-limit=" + std::to_string(mem_mib) + "M");
  if (thread_percent > 0) {
    set.push_back("--active-thread-percentage=" + std::to_string(thread_percent));
  }
  if (set.size() > 4) {
    if (auto limited = Command(*gpu, set); !limited) return tl::unexpected(limited.error());
  }
  // Its owner, and its limits should the daemon have to be started again.
  std::ofstream(gpu->dir + "/namespaces/" + ns) << owner << "\n"
                                                << mem_mib << " " << thread_percent << "\n";
  options_.log.Info("MPS namespace for a container",
                    {{"gpu", uuid},
                     {"namespace", ns},
                     {"pod_uid", owner},
                     {"container", container},
                     {"pinned_mem_mib", std::to_string(mem_mib)},
                     {"active_thread_percentage", std::to_string(thread_percent)}});
  return std::optional<std::string>(folder);
}

void MpsDaemons::RecreateNamespaces(const Gpu& g) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(g.dir + "/namespaces", ec)) {
    std::ifstream in(entry.path());
    std::string owner;
    std::int64_t mem = 0;
    int pct = 0;
    std::getline(in, owner);
    in >> mem >> pct;
    const std::string ns = entry.path().filename().string();
    const std::string server = "--server=" + options_.server;
    std::vector<std::string> set = {"namespace", "set", ns, server};
    if (mem > 0) set.push_back("--pinned-memory-limit=" + std::to_string(mem) + "M");
    if (pct > 0) set.push_back("--active-thread-percentage=" + std::to_string(pct));
    auto made = Command(g, {"namespace", "create", ns, server});
    if (made && set.size() > 4) made = Command(g, set);
    if (!made) {
      options_.log.Warn("cannot recreate an MPS namespace in the restarted daemon",
                        {{"gpu", g.uuid}, {"namespace", ns}, {"error", made.error().message}});
    }
  }
}

std::vector<std::string> MpsDaemons::Maintain(const std::set<std::string>& live_pods) {
  std::vector<std::string> removed;
  std::lock_guard lock(mu_);
  if (protocol_ != MpsProtocol::kNamespaces || stopped_) return removed;
  for (Gpu& g : gpus_) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(g.dir + "/namespaces", ec)) {
      std::ifstream in(entry.path());
      std::string owner;
      std::getline(in, owner);
      if (live_pods.contains(owner) || g.pid <= 0) continue;
      const std::string ns = entry.path().filename().string();
      auto deleted =
          Command(g, {"namespace", "delete", ns, "--server=" + options_.server, "--force"});
      if (!deleted) {
        options_.log.Warn("cannot delete the MPS namespace of a pod that is gone",
                          {{"gpu", g.uuid}, {"namespace", ns}, {"error", deleted.error().message}});
        continue;
      }
      std::filesystem::remove(entry.path(), ec);
      removed.push_back(g.uuid + "/" + ns);
    }
  }
  return removed;
}

core::Result<void> MpsDaemons::Raise(Gpu& g, std::int64_t mem_mib, int thread_percent) {
  const bool mem = mem_mib > g.mem_mib, threads = thread_percent > g.thread_percent;
  if (!mem && !threads) return {};
  // Every command of one raise within one deadline: an Allocate waits for it.
  const Deadline deadline = std::chrono::steady_clock::now() + kCommandTimeout;
  auto servers = Control(g, "get_server_list", deadline);
  if (!servers) return tl::unexpected(servers.error());
  std::vector<std::string> pids, commands;
  for (std::size_t at = 0; at < servers->size();) {
    const std::size_t end = std::min(servers->find_first_of(" \n", at), servers->size());
    const std::string pid = servers->substr(at, end - at);
    if (!pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos) {
      pids.push_back(pid);
    }
    at = end + 1;
  }
  if (mem) {
    g.mem_mib = mem_mib;
    const std::string value = g.uuid + " " + std::to_string(mem_mib) + "M";
    commands.push_back("set_default_device_pinned_mem_limit " + value);
    for (const std::string& pid : pids) {
      commands.push_back("set_device_pinned_mem_limit " + pid + " " + value);
    }
  }
  if (threads) {
    g.thread_percent = thread_percent;
    const std::string value = std::to_string(thread_percent);
    commands.push_back("set_default_active_thread_percentage " + value);
    for (const std::string& pid : pids) {
      commands.push_back("set_active_thread_percentage " + pid + " " + value);
    }
  }
  for (const std::string& c : commands) {
    if (auto done = Control(g, c, deadline); !done) return tl::unexpected(done.error());
  }
  options_.log.Info("MPS limits raised",
                    {{"gpu", g.uuid},
                     {"pinned_mem_mib", std::to_string(g.mem_mib)},
                     {"active_thread_percentage", std::to_string(g.thread_percent)}});
  return {};
}

void MpsDaemons::Stop() {
  std::lock_guard lock(mu_);
  if (stopped_) return;
  stopped_ = true;
  // Every daemon is told to quit at once, and all of it (the quit commands, the daemons' exits)
  // has one deadline, whatever the number of GPUs: a kubelet gives the pod 30 s in all. What is
  // still running then is killed.
  const Deadline deadline = std::chrono::steady_clock::now() + kCommandTimeout;
  std::vector<std::thread> quitting;
  for (Gpu& g : gpus_) {
    if (g.pid <= 0) continue;
    quitting.emplace_back([this, &g, deadline] { (void)Control(g, "quit", deadline); });
  }
  for (std::thread& t : quitting) t.join();
  for (Gpu& g : gpus_) {
    if (g.pid <= 0) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (WaitFor(g.pid, std::max(left, std::chrono::milliseconds(0))) == -1) {
      options_.log.Warn("MPS control daemon killed (it did not quit in time)", {{"gpu", g.uuid}});
    }
    g.pid = -1;
  }
}

}  // namespace gpumux::deviceplugin
