// The coordinator daemon over real sockets (loopback TCP and a unix socket), with a store that
// can be switched off: jobs are served while the store refuses, and the queued state reaches it
// when it is back.
#include "gpumux/coordinator/server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/policy/colocation_fixtures.h"
#include "tests/testing/process_usage.h"
#include "tests/testing/subprocess.h"

namespace gpumux::coordinator {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// A store in memory that refuses every call while `down` is set.
class SwitchableStore final : public store::Store {
 public:
  std::string Describe() const override { return "memory://test"; }
  core::Result<void> Put(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mu_);
    if (down) return Refused();
    kv_[std::string(key)] = std::string(value);
    return {};
  }
  core::Result<std::optional<std::string>> Get(std::string_view key) override {
    std::lock_guard lock(mu_);
    if (down) return Refused();
    auto it = kv_.find(std::string(key));
    if (it == kv_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  core::Result<std::vector<store::KeyValue>> List(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    if (down) return Refused();
    std::vector<store::KeyValue> out;
    for (const auto& [k, v] : kv_) {
      if (k.rfind(prefix, 0) == 0) out.push_back({k, v, 0});
    }
    return out;
  }
  core::Result<void> Delete(std::string_view key) override {
    std::lock_guard lock(mu_);
    if (down) return Refused();
    kv_.erase(std::string(key));
    return {};
  }
  core::Result<std::int64_t> DeletePrefix(std::string_view) override { return Refused(); }
  core::Result<void> PutLeased(std::string_view key, std::string_view value,
                               std::chrono::seconds) override {
    return Put(key, value);
  }
  core::Result<void> KeepAlive() override {
    std::lock_guard lock(mu_);
    if (down) return Refused();
    return {};
  }
  bool Has(const std::string& key) {
    std::lock_guard lock(mu_);
    return kv_.count(key) > 0;
  }
  std::atomic<bool> down{false};

 private:
  static tl::unexpected<core::Error> Refused() {
    return core::MakeError(core::ErrorCode::kIo, "memory://test: switched off");
  }
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
};

// One HTTP/1.1 request over a unix socket; the whole answer.
std::string UnixRequest(const std::string& path, const std::string& request) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  (void)!::write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

std::string UnixPost(const std::string& socket, const std::string& path, const std::string& body) {
  return UnixRequest(socket, "POST " + path +
                                 " HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                                 "application/json\r\nConnection: close\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body);
}

// A tuner whose sessions start only when the test opens the gate (or after 10 s, which the
// test then sees as a failure): a computation that takes as long as the test likes.
class GatedTuner final : public policy::Tuner {
 public:
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    int entered = 0;
    bool timed_out = false;
    void Open() {
      std::lock_guard lock(mu);
      open = true;
      cv.notify_all();
    }
    int Entered() {
      std::lock_guard lock(mu);
      return entered;
    }
  };
  explicit GatedTuner(std::shared_ptr<Gate> gate)
      : gate_(std::move(gate)), inner_(std::move(*policy::MakeTuner("joint"))) {}
  std::string_view name() const override { return "gated"; }
  std::unique_ptr<policy::TuningSession> Start(std::vector<policy::TuneJob> group,
                                               const policy::InterferenceModel& model,
                                               core::Rng& rng) override {
    {
      std::unique_lock lock(gate_->mu);
      ++gate_->entered;
      gate_->cv.notify_all();
      if (!gate_->cv.wait_for(lock, 10s, [&] { return gate_->open; })) gate_->timed_out = true;
    }
    return inner_->Start(std::move(group), model, rng);
  }

 private:
  std::shared_ptr<Gate> gate_;
  std::unique_ptr<policy::Tuner> inner_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::LinearClass a;
    a.name = "a";
    profile_ = test::MakeProfile({test::MakeClass(a)});
    dir_ = std::filesystem::temp_directory_path() /
           ("gpumux-coordinator-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start() {
    CoordinatorOptions o;
    o.node = "n1";
    o.window_steps = 2;
    if (gate_) o.make_tuner = [gate = gate_] { return std::make_unique<GatedTuner>(gate); };
    ServerOptions s;
    s.port = 0;
    s.socket_path = (dir_ / "c.sock").string();
    s.tick = 20ms;
    s.store_retry = 20ms;
    if (!proc_.empty()) s.proc = proc_;
    auto c = std::make_unique<Coordinator>(o, profile_, nullptr, nullptr, nullptr);
    auto started = Server::Start(s, std::move(c), &store_, [this](std::string_view line) {
      std::lock_guard lock(log_mu_);
      log_.emplace_back(line);
    });
    ASSERT_TRUE(started.has_value()) << started.error().message;
    server_ = std::move(*started);
  }

  httplib::Result Post(const std::string& path, const Json& body) {
    httplib::Client client("127.0.0.1", server_->port());
    return client.Post(path.c_str(), body.dump(), "application/json");
  }

  policy::WorkloadProfile profile_;
  std::filesystem::path dir_;
  SwitchableStore store_;
  std::unique_ptr<Server> server_;
  std::string proc_;                        // "" = the real /proc
  std::shared_ptr<GatedTuner::Gate> gate_;  // null = the joint tuner
  std::mutex log_mu_;
  std::vector<std::string> log_;
  int LogLinesWith(const std::string& text) {
    std::lock_guard lock(log_mu_);
    return static_cast<int>(std::count_if(log_.begin(), log_.end(), [&](const std::string& l) {
      return l.find(text) != std::string::npos;
    }));
  }
};

TEST_F(ServerTest, AJobRegistersOverTcpAndTheUnixSocketAndMetricsShowIt) {
  Start();
  auto r = Post("/v1/register",
                {{"job", "j0"}, {"class", "a"}, {"batch_size", 100}, {"gpus", {"GPU-0"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const std::string sock = (dir_ / "c.sock").string();
  std::string answer = UnixPost(sock, "/v1/register",
                                R"({"job":"j1","class":"a","batch_size":100,"gpus":["GPU-0"]})");
  EXPECT_NE(answer.find("200 OK"), std::string::npos) << answer;
  answer = UnixPost(sock, "/v1/report", R"({"job":"j1","steps":[[100,0.1],[100,0.1]]})");
  EXPECT_NE(answer.find("200 OK"), std::string::npos) << answer;
  EXPECT_NE(answer.find("batch_size"), std::string::npos) << answer;
  httplib::Client client("127.0.0.1", server_->port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find(
                "gpumux_coordinator_job_batch_size{class=\"a\",gpu=\"GPU-0\",job_id=\"j1\"}"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("gpumux_coordinator_requests_total"), std::string::npos);
  EXPECT_NE(metrics->body.find(
                "gpumux_coordinator_request_duration_seconds_count{path=\"/v1/report\"} 1"),
            std::string::npos)
      << metrics->body;
  auto state = client.Get("/v1/state");
  ASSERT_TRUE(state);
  EXPECT_EQ(Json::parse(state->body)["gpus"][0]["jobs"][1]["job"], "j1");
}

// The caller is read from the connection: this test process, seen through a fake /proc where
// its cgroup says it runs in a pod, is not root outside a container whatever its uid is.
TEST_F(ServerTest, AJobRegisteredOverTcpIsNotTheUnixCallersToReportFor) {
  const std::string pid = std::to_string(::getpid());
  std::filesystem::create_directories(dir_ / "proc" / pid);
  std::ofstream(dir_ / "proc" / pid / "cgroup")
      << "0::/kubepods/pod11111111-2222-3333-4444-555555555555/" << std::string(64, 'c') << "\n";
  proc_ = (dir_ / "proc").string();
  Start();
  auto r = Post("/v1/register",
                {{"job", "victim"}, {"class", "a"}, {"batch_size", 21}, {"gpus", {"GPU-0"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  server_->WaitForTuning();
  r = Post("/v1/report", {{"job", "victim"}, {"steps", Json::array({{21, 0.1}})}});
  ASSERT_TRUE(r);
  const std::string sock = (dir_ / "c.sock").string();
  std::string answer = UnixPost(
      sock, "/v1/register", R"({"job":"victim","class":"a","batch_size":4096,"gpus":["GPU-0"]})");
  EXPECT_NE(answer.find("HTTP/1.1 403"), std::string::npos) << answer;
  EXPECT_NE(answer.find("in pod 11111111-2222-3333-4444-555555555555 may act only for the jobs"),
            std::string::npos)
      << answer;
  answer = UnixPost(sock, "/v1/report", R"({"job":"victim","steps":[[21,0.1]]})");
  EXPECT_NE(answer.find("HTTP/1.1 403"), std::string::npos) << answer;
  auto report = Post("/v1/report", {{"job", "victim"}, {"steps", Json::array({{21, 0.1}})}});
  ASSERT_TRUE(report);
  EXPECT_EQ(Json::parse(report->body)["batch_size"], Json::parse(r->body)["batch_size"]);
  // Over the socket the pod sees none of the node's jobs; a 404's body is JSON.
  answer = UnixRequest(sock, "GET /v1/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(answer.find(R"("gpus":[])"), std::string::npos) << answer;
  answer = UnixRequest(sock, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(answer.find(R"({"error":)"), std::string::npos) << answer;
}

// shared/reliability-repros/coordinator-pid-reuse-impersonation: the caller was read from
// /proc/<pid>/cgroup at every request, and nothing tied the pid to the process that connected.
// A connection whose connector had exited became whoever took its pid next: here the fake /proc
// says the pid is now a process of the victim's pod. The connector's pidfd (or its start time)
// says it is gone, and the connection is refused; no reply names a host pid.
TEST_F(ServerTest, AConnectionWhoseConnectorHasExitedIsRefusedNotTakenForItsPidsNextOwner) {
  const std::string pod = "11111111-2222-3333-4444-555555555555";
  const auto fake_cgroup = [&](pid_t pid) {
    std::filesystem::create_directories(dir_ / "proc" / std::to_string(pid));
    std::ofstream(dir_ / "proc" / std::to_string(pid) / "cgroup")
        << "0::/kubepods/pod" << pod << "/" << std::string(64, 'c') << "\n";
  };
  fake_cgroup(::getpid());
  proc_ = (dir_ / "proc").string();
  Start();
  const std::string sock = (dir_ / "c.sock").string();
  std::string answer = UnixPost(sock, "/v1/register",
                                R"({"job":"victim","class":"a","batch_size":21,"gpus":["GPU-0"]})");
  ASSERT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;

  // A child connects the socket this process holds too, and exits.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c = 0;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
    ::_exit(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : 2);
  }
  fake_cgroup(child);  // what /proc will say of its pid once another process has it
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(go[0]);
  ::close(go[1]);

  const std::string leave = R"({"job":"victim"})";
  const std::string request =
      "POST /v1/leave HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
      std::to_string(leave.size()) + "\r\n\r\n" + leave;
  (void)!::write(fd, request.data(), request.size());
  answer.clear();
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) answer.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  EXPECT_NE(answer.find("HTTP/1.1 403"), std::string::npos) << answer;
  EXPECT_NE(answer.find("opened this connection has exited"), std::string::npos) << answer;
  EXPECT_EQ(answer.find(std::to_string(child)), std::string::npos) << "a host pid: " << answer;
  answer = UnixPost(sock, "/v1/report", R"({"job":"victim","steps":[[21,0.1]]})");
  EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << "the victim is still there";
}

TEST_F(ServerTest, JobsAreServedWhileTheStoreIsDownAndTheStateReachesItWhenItIsBack) {
  store_.down = true;
  Start();
  auto r = Post("/v1/register",
                {{"job", "j1"}, {"class", "a"}, {"batch_size", 100}, {"gpus", {"GPU-0"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto report = Post("/v1/report", {{"job", "j1"}, {"steps", Json::array({{100, 0.1}})}});
  ASSERT_TRUE(report);
  EXPECT_EQ(report->status, 200);
  EXPECT_GT(server_->store_pending(), 0u);
  store_.down = false;
  for (int k = 0; k < 200 && server_->store_pending() > 0; ++k) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_->store_pending(), 0u);
  EXPECT_TRUE(store_.Has("/gpumux/nodes/n1/jobs/j1"));
  EXPECT_TRUE(store_.Has("/gpumux/nodes/n1/gpus/GPU-0"));
}

// During an outage with nothing to write, the store was said to be "reachable again" every
// second (an empty write proved it) and the `up` gauge flapped.
TEST_F(ServerTest, AnOutageIsReportedOnceAndItsEndOnce) {
  store_.down = true;
  Start();
  std::this_thread::sleep_for(400ms);  // 20 retries of the liveness key
  EXPECT_EQ(LogLinesWith("reachable again"), 0);
  EXPECT_EQ(LogLinesWith("retrying; jobs are served meanwhile"), 1);
  EXPECT_NE(server_->RenderMetrics().find("\ngpumux_coordinator_store_up 0\n"), std::string::npos);
  store_.down = false;
  for (int k = 0; k < 200 && LogLinesWith("reachable again") == 0; ++k) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(LogLinesWith("reachable again"), 1);
}

// The SDK opens a connection per report: 24 jobs reporting once a second make 86,400 an hour.
// The coordinator once kept a thread per unix connection until exit and aborted after ~32,500.
TEST_F(ServerTest, FiftyThousandReportsOverTheSocketLeaveThreadsMapsAndMemoryFlat) {
  Start();
  const std::string sock = (dir_ / "c.sock").string();
  ASSERT_NE(UnixPost(sock, "/v1/register",
                     R"({"job":"j1","class":"a","batch_size":100,"gpus":["GPU-0"]})")
                .find("200 OK"),
            std::string::npos);
  const auto report = [&] {
    return UnixPost(sock, "/v1/report", R"({"job":"j1","steps":[[100,0.1]]})").find("200 OK") !=
           std::string::npos;
  };
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(report()) << i;  // warm up: allocator, pools
  const auto before = test::ProcessUsage::Now();
  const int connections = test::AddressSanitized() ? 10'000 : 50'000;
  for (int i = 0; i < connections; ++i) ASSERT_TRUE(report()) << i;
  const auto after = test::ProcessUsage::Now();
  EXPECT_EQ(after.threads, before.threads);
  EXPECT_LE(after.maps, before.maps + 4) << "memory maps grew";
  if (!test::AddressSanitized()) {  // ASan's quarantine holds the freed buffers on purpose
    EXPECT_LT(after.rss_kb - before.rss_kb, 4096) << "RSS grew from " << before.rss_kb << " kB";
  }
  std::printf(
      "soak: %d reports on the unix socket: threads %ld -> %ld, maps %ld -> %ld, "
      "RSS %ld -> %ld kB\n",
      connections, before.threads, after.threads, before.maps, after.maps, before.rss_kb,
      after.rss_kb);
}

// The issue's "no request waits behind a tuning computation": while the tuner is busy (here
// for as long as the test keeps its gate shut), every endpoint answers.
TEST_F(ServerTest, RequestsAreAnsweredWhileTheTunerIsComputing) {
  gate_ = std::make_shared<GatedTuner::Gate>();
  Start();
  auto r = Post("/v1/register",
                {{"job", "j0"}, {"class", "a"}, {"batch_size", 21}, {"gpus", {"GPU-0"}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["batch_size"], 21);  // no decision yet: its own batch
  EXPECT_EQ(Json::parse(r->body)["state"], "measuring");
  {
    std::unique_lock lock(gate_->mu);
    ASSERT_TRUE(gate_->cv.wait_for(lock, 10s, [&] { return gate_->entered == 1; }));
  }
  // The tuner is inside its computation for j0's GPU now.
  auto other = Post("/v1/register",
                    {{"job", "j1"}, {"class", "a"}, {"batch_size", 21}, {"gpus", {"GPU-1"}}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200) << other->body;
  auto report = Post("/v1/report", {{"job", "j0"}, {"steps", Json::array({{21, 0.1}})}});
  ASSERT_TRUE(report);
  EXPECT_EQ(report->status, 200) << report->body;
  httplib::Client client("127.0.0.1", server_->port());
  auto state = client.Get("/v1/state");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->status, 200);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("gpumux_coordinator_tuning_queued 1"), std::string::npos)
      << metrics->body;  // j1's GPU waits for the tuning thread
  EXPECT_EQ(gate_->Entered(), 1);
  gate_->Open();
  server_->WaitForTuning();
  EXPECT_FALSE(gate_->timed_out);  // every answer above came while the gate was shut
  EXPECT_EQ(gate_->Entered(), 2);
  report = Post("/v1/report", {{"job", "j0"}, {"steps", Json::array({{21, 0.1}})}});
  ASSERT_TRUE(report);
  EXPECT_NE(Json::parse(report->body)["batch_size"], 21) << report->body;  // decided and applied
  metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("gpumux_coordinator_tuning_duration_seconds_count 2"),
            std::string::npos)
      << metrics->body;
}

TEST_F(ServerTest, AStaleSocketFromAKilledRunIsReplaced) {
  {  // what kill -9 leaves: a bound socket file that nobody listens on
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", (dir_ / "c.sock").c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);  // NOLINT
    ::close(fd);
  }
  Start();
  EXPECT_NE(UnixRequest((dir_ / "c.sock").string(),
                        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .find("200 OK"),
            std::string::npos);
}

}  // namespace
}  // namespace gpumux::coordinator
