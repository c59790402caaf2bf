// The coordinator daemon over real sockets (loopback TCP and a unix socket), with a store that
// can be switched off: jobs are served while the store refuses, and the queued state reaches it
// when it is back.
#include "gpumux/coordinator/server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/policy/colocation_fixtures.h"

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
    ServerOptions s;
    s.port = 0;
    s.socket_path = (dir_ / "c.sock").string();
    s.tick = 20ms;
    s.store_retry = 20ms;
    auto c = std::make_unique<Coordinator>(o, profile_, nullptr, nullptr, nullptr);
    auto started = Server::Start(s, std::move(c), &store_, [](std::string_view) {});
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
};

TEST_F(ServerTest, AJobRegistersOverTcpAndTheUnixSocketAndMetricsShowIt) {
  Start();
  auto r = Post("/v1/register",
                {{"job", "j1"}, {"class", "a"}, {"batch_size", 100}, {"gpus", {"GPU-0"}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const std::string body = R"({"job":"j1","steps":[[100,0.1],[100,0.1]]})";
  const std::string answer = UnixRequest(
      (dir_ / "c.sock").string(),
      "POST /v1/report HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
      "Connection: close\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_NE(answer.find("200 OK"), std::string::npos) << answer;
  EXPECT_NE(answer.find("batch_size"), std::string::npos) << answer;
  httplib::Client client("127.0.0.1", server_->port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(
      metrics->body.find("gpumux_coordinator_job_batch_size{class=\"a\",gpu=\"GPU-0\",job=\"j1\"}"),
      std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("gpumux_coordinator_requests_total"), std::string::npos);
  auto state = client.Get("/v1/state");
  ASSERT_TRUE(state);
  EXPECT_EQ(Json::parse(state->body)["gpus"][0]["jobs"][0]["job"], "j1");
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
