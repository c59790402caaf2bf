// gpumux_extender_flood: does the extender survive hostile and unlucky clients, and keep
// answering its probes while they come?
//
// Starts the real ExtenderServer in-process on loopback (or, with --gpumux BIN, the binary:
// `BIN extender --offline-nodes ...` as a child) with --nodes offline nodes, then for
// --duration seconds runs all of these at once, each bounded:
//   - --clients keep-alive clients sending valid filter and prioritize requests back to back
//     (NodeNames of every node, a pod asking for one GPU), as kube-scheduler does;
//   - --malformed clients cycling through broken requests, each on a new connection:
//     truncated JSON, wrong types, Nodes without items beside NodeNames, 150,000 node names,
//     a repeated node, a bind whose pod name is a path, a wrong Content-Type, a Content-Length
//     over the body limit, a chunked body over it, garbage request lines, a 200 KB header
//     line, 5,000 headers, an unknown path;
//   - --slow connections that trickle a request head one byte every --trickle-ms (more of them
//     than the server has threads), each reopened when the server closes it;
//   - a GET /healthz every --probe-ms on a new connection (as the kubelet probes), answered
//     within 2 s or counted as failed.
// Every --report-every seconds it prints the RSS (VmRSS of /proc/self/status in-process: the
// clients' buffers are included; of the child with --gpumux), the valid requests and probes
// answered so far and the slowest probe of the interval. At the end: valid throughput and
// p50/p99 latency, /healthz p50/p99/max and failures, the replies per HTTP status for every
// kind of client, and RSS before, during (max of each half of the run) and after the load, so
// one can see it level off. The goals: no crash, /healthz within 100 ms, RSS levelling off.
// Exit status 1 when the server could not start or died; the goals are printed, not enforced
// (a loaded machine would fail them for reasons of its own).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_nodes.h"
#include "gpumux/extender/extender.h"
#include "gpumux/extender/extender_server.h"
#include "gpumux/sched/cluster_state.h"

namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace fs = std::filesystem;
namespace extender = gpumux::extender;
namespace sched = gpumux::sched;

constexpr std::int64_t kNow = 1'800'000'000;
constexpr milliseconds kProbeTimeout{2000};
constexpr milliseconds kValidTimeout{5000};
constexpr milliseconds kMalformedTimeout{3000};

struct Options {
  double duration_s = 20;
  int nodes = 300;
  int threads = 4;
  int clients = 4;
  int malformed = 2;
  int slow = 32;
  int trickle_ms = 200;
  int probe_ms = 100;
  double report_every_s = 2;
  int max_connections = 0;          // 0: the server's default
  int request_read_timeout_ms = 0;  // 0: the server's default
  std::string gpumux;               // run this binary instead of the in-process server
  std::vector<std::string> only;    // malformed kinds to send (empty: all)
};

double Millis(SteadyClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// VmRSS of /proc/<pid>/status in MiB ("self" for this process); -1 when unreadable.
double RssMib(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// A small HTTP/1.1 client over a non-blocking socket, every step bounded by a deadline.

enum class Outcome : std::uint8_t { kReply, kClosed, kTimeout, kConnectFailed };

struct Reply {
  Outcome outcome = Outcome::kClosed;
  int status = 0;
  bool close = false;  // the server said Connection: close
  std::string body;
};

std::string Label(const Reply& r) {
  switch (r.outcome) {
    case Outcome::kReply:
      return std::to_string(r.status);
    case Outcome::kClosed:
      return "closed";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kConnectFailed:
      return "no-connect";
  }
  return "?";
}

class Conn {
 public:
  Conn() = default;
  ~Conn() { Close(); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool Open(int port, SteadyClock::time_point deadline) {
    Close();
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0)
      return true;  // NOLINT
    if (errno != EINPROGRESS || Wait(POLLOUT, deadline) <= 0) {
      Close();
      return false;
    }
    int error = 0;
    socklen_t len = sizeof error;
    if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      Close();
      return false;
    }
    return true;
  }
  bool open() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    buffer_.clear();
  }

  // False when the peer closed or the deadline passed first.
  bool Send(std::string_view data, SteadyClock::time_point deadline) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (Wait(POLLOUT, deadline) <= 0) return false;
    }
    return true;
  }

  // One reply (head and Content-Length body, or everything until the close).
  Reply Read(SteadyClock::time_point deadline) {
    Reply r;
    std::size_t head_end = std::string::npos;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      const int got = Receive(deadline);
      if (got <= 0) {
        r.outcome = got == 0 ? Outcome::kClosed : Outcome::kTimeout;
        return r;
      }
    }
    const std::string head = buffer_.substr(0, head_end + 4);
    buffer_.erase(0, head_end + 4);
    if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12) return r;  // not HTTP: closed
    r.status = std::atoi(head.c_str() + 9);
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    r.close = lower.find("\r\nconnection: close") != std::string::npos;
    const std::size_t at = lower.find("\r\ncontent-length:");
    if (at == std::string::npos) {
      while (Receive(deadline) > 0) {
      }
      r.body = std::move(buffer_);
      buffer_.clear();
      r.outcome = Outcome::kReply;
      r.close = true;
      return r;
    }
    const auto length =
        static_cast<std::size_t>(std::strtoull(lower.c_str() + at + 17, nullptr, 10));
    while (buffer_.size() < length) {
      const int got = Receive(deadline);
      if (got <= 0) {
        r.outcome = got == 0 ? Outcome::kClosed : Outcome::kTimeout;
        return r;
      }
    }
    r.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    r.outcome = Outcome::kReply;
    return r;
  }

  // Without waiting: -1 nothing, 0 closed by the peer, 1 bytes arrived (kept).
  int Peek() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) buffer_.append(buf, static_cast<std::size_t>(n));
    if (n > 0) return 1;
    if (n == 0) return 0;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : 0;
  }
  const std::string& buffered() const { return buffer_; }

 private:
  int Wait(short events, SteadyClock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::ceil<milliseconds>(deadline - SteadyClock::now()).count();
      if (left <= 0) return 0;
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 60'000)));
      if (r != 0 && !(r < 0 && errno == EINTR)) return r;
    }
  }
  // 1: bytes arrived; 0: closed; -1: deadline.
  int Receive(SteadyClock::time_point deadline) {
    for (;;) {
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        buffer_.append(buf, static_cast<std::size_t>(n));
        return 1;
      }
      if (n == 0) return 0;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 0;
      if (Wait(POLLIN, deadline) <= 0) return -1;
    }
  }

  int fd_ = -1;
  std::string buffer_;
};

// ---------------------------------------------------------------------------------------------
// Counting.

struct Stats {
  std::mutex mu;
  std::map<std::string, std::map<std::string, std::int64_t>> replies;  // kind -> label -> n
  std::vector<double> valid_ms, probe_ms;
  std::atomic<std::int64_t> valid_ok{0}, probes{0}, probes_failed{0};
  std::atomic<std::int64_t> interval_probe_max_us{0};

  void Count(const std::string& kind, const std::string& label) {
    std::lock_guard lock(mu);
    ++replies[kind][label];
  }
  void Valid(double ms) {
    ++valid_ok;
    std::lock_guard lock(mu);
    valid_ms.push_back(ms);
  }
  void Probe(bool ok, double ms) {
    ++probes;
    if (!ok) ++probes_failed;
    const auto us = static_cast<std::int64_t>(ms * 1000);
    std::int64_t seen = interval_probe_max_us.load();
    while (us > seen && !interval_probe_max_us.compare_exchange_weak(seen, us)) {
    }
    std::lock_guard lock(mu);
    probe_ms.push_back(ms);
  }
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// ---------------------------------------------------------------------------------------------
// The requests.

std::string Request(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& content_type = "application/json",
                    const std::string& extra_headers = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: flood\r\n";
  if (!content_type.empty()) r += "Content-Type: " + content_type + "\r\n";
  r += extra_headers;
  if (!body.empty() || method == "POST")
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  r += "\r\n";
  r += body;
  return r;
}

std::string Names(int from, int count) {
  std::string out;
  for (int i = from; i < from + count; ++i) {
    if (i > from) out += ',';
    out += '"';
    out += gpumux::bench::NodeName(i);
    out += '"';
  }
  return out;
}

struct Malformed {
  std::string name;
  std::string bytes;  // sent whole on a new connection
};

std::vector<Malformed> MalformedRequests(const std::string& pod, int nodes) {
  const std::string names = "[" + Names(0, nodes) + "]";
  const std::string valid = R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":)" + names + "}";
  std::vector<Malformed> m;
  m.push_back(
      {"truncated-json", Request("POST", "/gpumux/filter", valid.substr(0, valid.size() / 2))});
  m.push_back({"wrong-types",
               Request("POST", "/gpumux/filter", R"({"Pod":5,"NodeNames":"gpu-node-00001"})")});
  m.push_back({"nodes-without-items",
               Request("POST", "/gpumux/filter",
                       R"({"Pod":)" + pod + R"(,"Nodes":{},"NodeNames":["gpu-node-00000"]})")});
  m.push_back({"150000-names",
               Request("POST", "/gpumux/prioritize",
                       R"({"Pod":)" + pod + R"(,"NodeNames":[)" + Names(0, 150000) + "]}")});
  m.push_back(
      {"repeated-node",
       Request("POST", "/gpumux/filter",
               R"({"Pod":)" + pod + R"(,"NodeNames":["gpu-node-00000","gpu-node-00000"]})")});
  m.push_back(
      {"bind-path-injection",
       Request(
           "POST", "/gpumux/bind",
           R"({"PodName":"../../nodes/x","PodNamespace":"default","PodUID":"u","Node":"gpu-node-00000"})")});
  m.push_back({"wrong-content-type", Request("POST", "/gpumux/filter", valid, "text/plain")});
  m.push_back({"content-length-over-limit",
               "POST /gpumux/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: 1000000000\r\n\r\n" +
                   std::string(4096, ' ')});
  {
    // 65 MiB in 1 MiB chunks: over the default 64 MiB limit (which httplib 0.11 does not apply
    // to chunked bodies).
    std::string chunked =
        "POST /gpumux/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n";
    const std::string chunk = "100000\r\n" + std::string(1 << 20, ' ') + "\r\n";
    for (int i = 0; i < 65; ++i) chunked += chunk;
    chunked += "0\r\n\r\n";
    m.push_back({"chunked-over-limit", std::move(chunked)});
  }
  m.push_back({"tls-hello", std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) +
                                std::string(500, '\x01') + "\r\n\r\n"});
  m.push_back({"garbage-line", "THIS IS NOT HTTP\r\n\r\n"});
  m.push_back({"200KB-header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                   std::string(200000, 'a') + "\r\n\r\n"});
  {
    std::string many = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 5000; ++i) many += "X-H" + std::to_string(i) + ": 0123456789\r\n";
    m.push_back({"5000-headers", many + "\r\n"});
  }
  m.push_back({"unknown-path", Request("GET", "/nope", "", "")});
  return m;
}

// ---------------------------------------------------------------------------------------------
// The server under test: in-process, or the binary as a child.

class Target {
 public:
  virtual ~Target() = default;
  virtual int port() const = 0;
  virtual double Rss() const = 0;
  virtual bool alive() = 0;
  virtual std::string Describe() const = 0;
  virtual std::int64_t log_lines() = 0;
};

class InProcess final : public Target {
 public:
  static std::unique_ptr<InProcess> Start(const Options& o, const std::vector<json>& nodes,
                                          std::string* error) {
    auto t = std::unique_ptr<InProcess>(new InProcess());
    sched::ClusterStateOptions state_options;
    state_options.policy = "best-fit";
    auto created = sched::ClusterState::Create(std::move(state_options), [] { return kNow; });
    if (!created) {
      *error = created.error().message;
      return nullptr;
    }
    t->state_ = std::move(*created);
    t->state_->SetNodes(nodes);
    t->state_->SetPods({});
    t->state_->MarkSynced();
    t->extender_ = std::make_unique<extender::Extender>(*t->state_, nullptr);
    extender::ExtenderServerOptions so;
    so.threads = o.threads;
    if (o.max_connections > 0) so.max_connections = o.max_connections;
    if (o.request_read_timeout_ms > 0)
      so.request_read_timeout = milliseconds(o.request_read_timeout_ms);
    so.slow_request = std::chrono::hours(1);
    InProcess* self = t.get();
    so.log = [self](std::string_view) { ++self->log_lines_; };
    t->server_ = std::make_unique<extender::ExtenderServer>(*t->extender_, *t->state_, so);
    if (auto started = t->server_->Start(); !started) {
      *error = started.error().message;
      return nullptr;
    }
    t->describe_ =
        "in-process ExtenderServer, " + std::to_string(o.threads) + " threads" +
        (o.max_connections > 0 ? ", max " + std::to_string(o.max_connections) + " connections"
                               : "");
    return t;
  }
  int port() const override { return server_->port(); }
  double Rss() const override { return RssMib("self"); }
  bool alive() override { return server_->running(); }
  std::string Describe() const override { return describe_; }
  std::int64_t log_lines() override { return log_lines_.load(); }

 private:
  InProcess() = default;
  std::unique_ptr<sched::ClusterState> state_;
  std::unique_ptr<extender::Extender> extender_;
  std::unique_ptr<extender::ExtenderServer> server_;
  std::atomic<std::int64_t> log_lines_{0};
  std::string describe_;
};

class Child final : public Target {
 public:
  static std::unique_ptr<Child> Start(const Options& o, const std::vector<json>& nodes,
                                      std::string* error) {
    auto t = std::unique_ptr<Child>(new Child());
    char pattern[] = "/tmp/gpumux-flood-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      *error = "mkdtemp failed";
      return nullptr;
    }
    t->dir_ = pattern;
    const fs::path nodes_file = t->dir_ / "nodes.json";
    std::ofstream(nodes_file) << json{{"items", nodes}}.dump();
    t->log_ = t->dir_ / "extender.log";
    std::vector<std::string> args = {o.gpumux,          "extender",
                                     "--offline-nodes", nodes_file.string(),
                                     "--listen",        "127.0.0.1:0",
                                     "--policy",        "best-fit",
                                     "--threads",       std::to_string(o.threads)};
    if (o.max_connections > 0) {
      args.insert(args.end(), {"--max-connections", std::to_string(o.max_connections)});
    }
    if (o.request_read_timeout_ms > 0) {
      args.insert(args.end(),
                  {"--request-read-timeout-ms", std::to_string(o.request_read_timeout_ms)});
    }
    t->pid_ = ::fork();
    if (t->pid_ == 0) {
      const int fd = ::open(t->log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    if (t->pid_ < 0) {
      *error = "fork failed";
      return nullptr;
    }
    const auto give_up = SteadyClock::now() + std::chrono::seconds(30);
    while (SteadyClock::now() < give_up && t->alive()) {
      std::ifstream in(t->log_);
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      const std::string marker = "listening on 127.0.0.1:";
      if (const std::size_t at = s.find(marker); at != std::string::npos) {
        t->port_ = std::atoi(s.c_str() + at + marker.size());
        if (t->port_ > 0) break;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    if (t->port_ <= 0) {
      *error = "the extender did not start (see " + t->log_.string() + ")";
      return nullptr;
    }
    t->describe_ = o.gpumux + " (pid " + std::to_string(t->pid_) + "), " +
                   std::to_string(o.threads) + " threads";
    return t;
  }
  ~Child() override {
    if (pid_ > 0 && alive()) {
      stopping_ = true;
      ::kill(pid_, SIGTERM);
      for (int i = 0; i < 200 && alive(); ++i) std::this_thread::sleep_for(milliseconds(25));
      if (alive()) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  int port() const override { return port_; }
  double Rss() const override { return RssMib(std::to_string(pid_)); }
  bool alive() override {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      if (!stopping_) {
        std::fprintf(stderr, "the extender exited: %s %d\n",
                     WIFSIGNALED(status) ? "signal" : "status",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      }
      return false;
    }
    return true;
  }
  std::string Describe() const override { return describe_; }
  std::int64_t log_lines() override {
    std::ifstream in(log_);
    return static_cast<std::int64_t>(
        std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
  }

 private:
  Child() = default;
  fs::path dir_, log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
  bool stopping_ = false;
  std::string describe_;
};

// ---------------------------------------------------------------------------------------------
// The load.

struct Load {
  const Options& o;
  int port;
  Stats& stats;
  std::atomic<bool>& stop;
  std::string filter_request, prioritize_request;
  std::vector<Malformed> malformed;

  void ValidClient() {
    Conn c;
    for (std::uint64_t i = 0; !stop; ++i) {
      const auto start = SteadyClock::now();
      const auto deadline = start + kValidTimeout;
      if (!c.open() && !c.Open(port, deadline)) {
        stats.Count("valid", "no-connect");
        std::this_thread::sleep_for(milliseconds(10));
        continue;
      }
      const std::string& request = i % 2 == 0 ? filter_request : prioritize_request;
      Reply r;
      if (c.Send(request, deadline)) {
        r = c.Read(deadline);
      } else {
        r.outcome = SteadyClock::now() >= deadline ? Outcome::kTimeout : Outcome::kClosed;
      }
      stats.Count("valid", Label(r));
      if (r.outcome == Outcome::kReply && r.status == 200)
        stats.Valid(Millis(SteadyClock::now() - start));
      if (r.outcome != Outcome::kReply || r.close) c.Close();
    }
  }

  void MalformedClient(std::size_t offset) {
    for (std::size_t i = offset; !stop; ++i) {
      const Malformed& m = malformed[i % malformed.size()];
      const auto deadline = SteadyClock::now() + kMalformedTimeout;
      Conn c;
      Reply r;
      if (!c.Open(port, deadline)) {
        r.outcome = Outcome::kConnectFailed;
      } else if (!c.Send(m.bytes, deadline)) {
        // The server may answer and close before the whole request is sent (413, 431).
        r = c.Read(deadline);
      } else {
        r = c.Read(deadline);
      }
      stats.Count("malformed " + m.name, Label(r));
    }
  }

  void SlowClients() {
    const std::string head =
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(1 << 20, 'a');
    std::vector<std::unique_ptr<Conn>> conns;
    std::vector<std::size_t> sent;
    for (int i = 0; i < o.slow; ++i) {
      conns.push_back(std::make_unique<Conn>());
      sent.push_back(0);
    }
    while (!stop) {
      const auto tick = SteadyClock::now();
      for (std::size_t i = 0; i < conns.size(); ++i) {
        Conn& c = *conns[i];
        if (!c.open()) {
          if (!c.Open(port, tick + milliseconds(500))) {
            stats.Count("slow", "no-connect");
            continue;
          }
          sent[i] = 0;
          stats.Count("slow", "opened");
        }
        const int peek = c.Peek();
        bool closed = peek == 0;
        if (!closed)
          closed = !c.Send(head.substr(sent[i]++ % head.size(), 1), tick + milliseconds(50));
        if (closed || peek == 1) {
          // The server answered (408) and/or closed it: count what it said, open another.
          const std::string& got = c.buffered();
          stats.Count("slow", got.rfind("HTTP/1.1 ", 0) == 0 ? "closed with " + got.substr(9, 3)
                                                             : "closed");
          c.Close();
        }
      }
      std::this_thread::sleep_until(tick + milliseconds(o.trickle_ms));
    }
  }

  void Prober() {
    const std::string probe = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    auto next = SteadyClock::now();
    while (!stop) {
      const auto start = SteadyClock::now();
      const auto deadline = start + kProbeTimeout;
      Conn c;
      Reply r;
      if (!c.Open(port, deadline)) {
        r.outcome = SteadyClock::now() >= deadline ? Outcome::kTimeout : Outcome::kConnectFailed;
      } else if (c.Send(probe, deadline)) {
        r = c.Read(deadline);
      }
      const bool ok = r.outcome == Outcome::kReply && r.status == 200;
      stats.Count("probe /healthz", Label(r));
      stats.Probe(ok, Millis(SteadyClock::now() - start));
      next += milliseconds(o.probe_ms);
      std::this_thread::sleep_until(std::max(next, SteadyClock::now()));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "gpumux_extender_flood: the extender under a bounded flood of valid, malformed and slow "
      "clients, with a /healthz probe every --probe-ms; prints throughput, latencies, replies "
      "per status and RSS over time"};
  app.add_option("--duration", o.duration_s, "Seconds of load")->capture_default_str();
  app.add_option("--nodes", o.nodes, "Offline nodes (each named in the valid requests)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "The server's --threads")->capture_default_str();
  app.add_option("--clients", o.clients, "Keep-alive clients sending valid requests")
      ->capture_default_str();
  app.add_option("--malformed", o.malformed, "Clients sending malformed requests")
      ->capture_default_str();
  app.add_option("--slow", o.slow, "Connections trickling a request head")->capture_default_str();
  app.add_option("--trickle-ms", o.trickle_ms, "One byte per slow connection every this many ms")
      ->capture_default_str();
  app.add_option("--probe-ms", o.probe_ms, "A /healthz probe every this many ms")
      ->capture_default_str();
  app.add_option("--report-every", o.report_every_s, "Seconds between progress lines")
      ->capture_default_str();
  app.add_option("--max-connections", o.max_connections,
                 "The server's --max-connections (0: its default)");
  app.add_option("--request-read-timeout-ms", o.request_read_timeout_ms,
                 "The server's --request-read-timeout-ms (0: its default)");
  app.add_option("--only", o.only,
                 "Send only these kinds of malformed requests (names as in the summary)");
  app.add_option("--gpumux", o.gpumux,
                 "Run this gpumux binary ('extender --offline-nodes') instead of the in-process "
                 "server (e.g. an older build, for a before/after comparison)");
  CLI11_PARSE(app, argc, argv);
  if (o.duration_s <= 0 || o.nodes < 1 || o.threads < 1 || o.clients < 0 || o.malformed < 0 ||
      o.slow < 0 || o.trickle_ms < 1 || o.probe_ms < 1 || o.report_every_s <= 0) {
    std::fprintf(stderr, "every count and duration must be positive\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);

  std::vector<json> nodes;
  for (int i = 0; i < o.nodes; ++i) {
    nodes.push_back(gpumux::bench::CompactNodeObject(i, 8));
  }
  std::string error;
  std::unique_ptr<Target> target;
  if (o.gpumux.empty()) {
    target = InProcess::Start(o, nodes, &error);
  } else {
    target = Child::Start(o, nodes, &error);
  }
  if (!target) {
    std::fprintf(stderr, "cannot start the extender: %s\n", error.c_str());
    return 1;
  }
  const std::string pod =
      json{{"metadata", {{"name", "flood"}, {"namespace", "default"}, {"uid", "uid-flood"}}},
           {"spec",
            {{"containers",
              {{{"name", "main"}, {"resources", {{"limits", {{"gpumux.io/gpu", "1"}}}}}}}}}}}
          .dump();
  const std::string names = "[" + Names(0, o.nodes) + "]";
  const std::string args = R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":)" + names + "}";

  std::printf("gpumux_extender_flood: %s on 127.0.0.1:%d, %d offline nodes\n",
              target->Describe().c_str(), target->port(), o.nodes);
  std::printf(
      "load for %.0f s: %d keep-alive clients (valid filter/prioritize), %d malformed, %d "
      "slow connections (1 byte per %d ms), a /healthz probe every %d ms\n",
      o.duration_s, o.clients, o.malformed, o.slow, o.trickle_ms, o.probe_ms);
  std::this_thread::sleep_for(milliseconds(300));
  const double rss_before = target->Rss();
  std::printf("RSS before the load: %.1f MiB\n\n", rss_before);
  std::printf("%7s %9s %10s %8s %9s %10s\n", "t (s)", "RSS MiB", "valid ok", "probes", "failed",
              "max probe");

  Stats stats;
  std::atomic<bool> stop{false};
  Load load{o,
            target->port(),
            stats,
            stop,
            Request("POST", "/gpumux/filter", args),
            Request("POST", "/gpumux/prioritize", args),
            MalformedRequests(pod, std::min(o.nodes, 50))};
  if (!o.only.empty()) {
    std::erase_if(load.malformed, [&](const Malformed& m) {
      return std::find(o.only.begin(), o.only.end(), m.name) == o.only.end();
    });
    if (load.malformed.empty()) {
      std::fprintf(stderr, "--only names no kind of malformed request\n");
      return 2;
    }
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < o.clients; ++i) threads.emplace_back([&] { load.ValidClient(); });
  for (int i = 0; i < o.malformed; ++i) {
    threads.emplace_back([&, i] { load.MalformedClient(static_cast<std::size_t>(i) * 5); });
  }
  if (o.slow > 0) threads.emplace_back([&] { load.SlowClients(); });
  threads.emplace_back([&] { load.Prober(); });

  const auto start = SteadyClock::now();
  const auto end = start + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double>(o.duration_s));
  double rss_max_first = 0, rss_max_second = 0;
  bool died = false;
  for (auto next = start + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double>(o.report_every_s));
       ; next += std::chrono::duration_cast<SteadyClock::duration>(
             std::chrono::duration<double>(o.report_every_s))) {
    std::this_thread::sleep_until(std::min(next, end));
    const double t = std::chrono::duration<double>(SteadyClock::now() - start).count();
    const double rss = target->Rss();
    (t <= o.duration_s / 2 ? rss_max_first : rss_max_second) =
        std::max(t <= o.duration_s / 2 ? rss_max_first : rss_max_second, rss);
    const double max_probe = static_cast<double>(stats.interval_probe_max_us.exchange(0)) / 1000.0;
    std::printf("%7.1f %9.1f %10lld %8lld %9lld %8.1f ms\n", t, rss,
                static_cast<long long>(stats.valid_ok.load()),
                static_cast<long long>(stats.probes.load()),
                static_cast<long long>(stats.probes_failed.load()), max_probe);
    std::fflush(stdout);
    if (!target->alive()) {
      died = true;
      break;
    }
    if (SteadyClock::now() >= end) break;
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  std::this_thread::sleep_for(milliseconds(2500));  // the server trims its heap once idle 1 s
  const bool alive = !died && target->alive();
  const double rss_after = target->Rss();

  std::printf(
      "\nvalid requests: %lld answered 200 in %.1f s = %.0f/s; latency p50 %.2f ms, p99 %.2f ms\n",
      static_cast<long long>(stats.valid_ok.load()), seconds,
      static_cast<double>(stats.valid_ok.load()) / seconds, Percentile(stats.valid_ms, 0.5),
      Percentile(stats.valid_ms, 0.99));
  const double probe_max =
      stats.probe_ms.empty() ? 0 : *std::max_element(stats.probe_ms.begin(), stats.probe_ms.end());
  std::printf(
      "/healthz: %lld probes, %lld failed (no 200 within %lld ms); latency p50 %.2f ms, "
      "p99 %.2f ms, max %.2f ms\n",
      static_cast<long long>(stats.probes.load()),
      static_cast<long long>(stats.probes_failed.load()),
      static_cast<long long>(kProbeTimeout.count()), Percentile(stats.probe_ms, 0.5),
      Percentile(stats.probe_ms, 0.99), probe_max);
  std::printf("replies by kind of client (HTTP status, or closed/timeout without one):\n");
  for (const auto& [kind, labels] : stats.replies) {
    std::string line;
    for (const auto& [label, n] : labels) {
      line += (line.empty() ? "" : ", ") + label + " x" + std::to_string(n);
    }
    std::printf("  %-34s %s\n", kind.c_str(), line.c_str());
  }
  std::printf(
      "RSS: before %.1f MiB, max in the first half %.1f MiB, in the second half %.1f MiB, "
      "2.5 s after %.1f MiB\n",
      rss_before, rss_max_first, rss_max_second, rss_after);
  std::printf("log lines written by the extender: %lld\n",
              static_cast<long long>(target->log_lines()));
  std::printf(
      "\ngoals: the extender %s; /healthz max %.1f ms (%s 100 ms), %lld probes failed; "
      "RSS %s\n",
      alive ? "is alive" : "DIED", probe_max, probe_max <= 100 ? "within" : "OVER",
      static_cast<long long>(stats.probes_failed.load()),
      rss_max_second <= rss_max_first * 1.25 + 32
          ? "levels off (the second half's max within 25% + 32 MiB of the first's)"
          : "GREW in the second half");
  return alive ? 0 : 1;
}
