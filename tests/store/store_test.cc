// The store contract, run against both implementations: a real etcd (Debian's etcd-server,
// started here on free loopback ports with a temporary data folder, killed by PID) and the
// file store. Plus what only one of them does: etcd going away and coming back under the same
// store object, etcd with auth enabled; the file store's reopen, lock and bad files.
#include "gpumux/store/store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/testing/process.h"

namespace gpumux::store {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool HaveEtcd() { return std::system("command -v etcd >/dev/null 2>&1") == 0; }

// A real etcd on loopback, killed by PID when destroyed.
class EtcdProcess {
 public:
  explicit EtcdProcess(fs::path dir) : dir_(std::move(dir)), client_(FreePort()), peer_(FreePort()) {}
  ~EtcdProcess() { Stop(); }

  bool Start() {
    const std::string url = "http://127.0.0.1:" + std::to_string(client_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_);
    test::ProcessSpec spec;
    spec.argv = {"etcd", "--name", "t", "--data-dir", (dir_ / "data").string(),
                 "--listen-client-urls", url, "--advertise-client-urls", url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", "t=" + peer};
    spec.stdout_path = spec.stderr_path = (dir_ / "etcd.log").string();
    pid_ = test::StartProcess(spec);
    // Healthy once the client port accepts and a Range answers.
    auto store = OpenStore("etcd://127.0.0.1:" + std::to_string(client_));
    for (int k = 0; k < 200; ++k) {
      if (store && (*store)->Get("/probe")) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      test::WaitProcess(pid_);
      pid_ = -1;
    }
  }
  std::string url() const { return "etcd://127.0.0.1:" + std::to_string(client_); }
  std::string log() const { return test::ReadFileText(dir_ / "etcd.log"); }

 private:
  fs::path dir_;
  int client_, peer_;
  pid_t pid_ = -1;
};

fs::path TempDir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() /
                     ("gpumux-store-" + std::to_string(::getpid()) + "-" + tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// ---------------------------------------------------------------- the contract, both stores

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = TempDir(GetParam() + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    if (GetParam() == "etcd") {
      if (!HaveEtcd()) GTEST_SKIP() << "etcd (Debian etcd-server) is not installed";
      etcd_ = std::make_unique<EtcdProcess>(dir_);
      ASSERT_TRUE(etcd_->Start()) << etcd_->log();
      url_ = etcd_->url();
    } else {
      url_ = "file://" + (dir_ / "store.json").string();
    }
    auto s = OpenStore(url_);
    ASSERT_TRUE(s.has_value()) << s.error().message;
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    etcd_.reset();
    fs::remove_all(dir_);
  }

  fs::path dir_;
  std::string url_;
  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContract, PutGetListAndDeleteSeeTheSameKeys) {
  ASSERT_TRUE(store_->Put("/g/a/1", "one"));
  ASSERT_TRUE(store_->Put("/g/a/2", "two"));
  ASSERT_TRUE(store_->Put("/g/b", "bee"));
  ASSERT_TRUE(store_->Put("/g/a/1", "uno"));
  EXPECT_EQ(store_->Get("/g/a/1").value(), std::optional<std::string>("uno"));
  EXPECT_EQ(store_->Get("/g/none").value(), std::nullopt);
  auto listed = store_->List("/g/a/");
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, "/g/a/1");
  EXPECT_EQ((*listed)[0].value, "uno");
  EXPECT_EQ((*listed)[1].key, "/g/a/2");
  EXPECT_TRUE(store_->Delete("/g/a/2"));
  EXPECT_TRUE(store_->Delete("/g/never"));
  EXPECT_EQ(store_->List("/g/a/")->size(), 1u);
  EXPECT_EQ(store_->DeletePrefix("/g/").value(), 2);
  EXPECT_TRUE(store_->List("/g/")->empty());
}

TEST_P(StoreContract, ALeasedKeyLivesWhileKeptAliveAndGoesAfterItsTtl) {
  ASSERT_TRUE(store_->PutLeased("/g/alive", "me", 2s));
  for (int k = 0; k < 3; ++k) {
    std::this_thread::sleep_for(1s);
    ASSERT_TRUE(store_->KeepAlive());
  }
  EXPECT_EQ(store_->Get("/g/alive").value(), std::optional<std::string>("me"));
  std::this_thread::sleep_for(3500ms);  // no KeepAlive: etcd revokes it after the TTL
  EXPECT_EQ(store_->Get("/g/alive").value(), std::nullopt);
  // Renewing an expired lease brings the key back (a node that was cut off announces itself).
  ASSERT_TRUE(store_->KeepAlive());
  EXPECT_EQ(store_->Get("/g/alive").value(), std::optional<std::string>("me"));
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract, ::testing::Values("etcd", "file"),
                         [](const auto& p) { return p.param; });

// ---------------------------------------------------------------- etcd only

TEST(EtcdStore, FailsCleanlyWhileEtcdIsDownAndWorksAgainOnceItIsBack) {
  if (!HaveEtcd()) GTEST_SKIP() << "etcd (Debian etcd-server) is not installed";
  const fs::path dir = TempDir("restart");
  EtcdProcess etcd(dir);
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  StoreOptions o;
  o.timeout = 1000ms;
  auto store = OpenStore(etcd.url(), o);
  ASSERT_TRUE(store.has_value());
  ASSERT_TRUE((*store)->Put("/k", "before"));
  etcd.Stop();
  auto refused = (*store)->Put("/k", "while down");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, core::ErrorCode::kIo);
  EXPECT_NE(refused.error().message.find(etcd.url()), std::string::npos) << refused.error().message;
  ASSERT_TRUE(etcd.Start()) << etcd.log();  // same port, same data
  bool back = false;
  for (int k = 0; k < 100 && !back; ++k) {
    back = (*store)->Put("/k", "after").has_value();
    if (!back) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(back);
  EXPECT_EQ((*store)->Get("/k").value(), std::optional<std::string>("after"));
  fs::remove_all(dir);
}

TEST(EtcdStore, AStoreOfAnEtcdThatIsNotThereIsCreatedAndItsCallsFailWithKIo) {
  StoreOptions o;
  o.timeout = 300ms;
  auto store = OpenStore("etcd://127.0.0.1:" + std::to_string(FreePort()), o);
  ASSERT_TRUE(store.has_value());
  auto got = (*store)->Get("/x");
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, core::ErrorCode::kIo);
}

// ---------------------------------------------------------------- the file store only

TEST(FileStore, KeepsPermanentKeysAcrossAReopenButNotLeasedOnes) {
  const fs::path dir = TempDir("reopen");
  const std::string url = "file://" + (dir / "s.json").string();
  {
    auto s = OpenStore(url);
    ASSERT_TRUE(s.has_value()) << s.error().message;
    ASSERT_TRUE((*s)->Put("/a", "1"));
    ASSERT_TRUE((*s)->PutLeased("/alive", "x", 30s));
  }
  auto s = OpenStore(url);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ((*s)->Get("/a").value(), std::optional<std::string>("1"));
  EXPECT_EQ((*s)->Get("/alive").value(), std::nullopt);
  fs::remove_all(dir);
}

TEST(FileStore, ASecondOpenerIsRefusedWhileTheFirstHoldsIt) {
  const fs::path dir = TempDir("lock");
  const std::string url = "file://" + (dir / "s.json").string();
  auto first = OpenStore(url);
  ASSERT_TRUE(first.has_value());
  // flock locks belong to the open file description: a second open in this process conflicts
  // just as another process would.
  auto second = OpenStore(url);
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.error().message.find("in use by another process"), std::string::npos)
      << second.error().message;
  fs::remove_all(dir);
}

TEST(FileStore, AMalformedFileIsAnErrorNamingIt) {
  const fs::path dir = TempDir("bad");
  std::ofstream(dir / "s.json") << "{\"version\": 1, \"keys\": [1, 2]}";
  auto s = OpenStore("file://" + (dir / "s.json").string());
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find((dir / "s.json").string()), std::string::npos) << s.error().message;
  fs::remove_all(dir);
}

struct BadUrl {
  std::string name, url, part;
};
class StoreUrls : public ::testing::TestWithParam<BadUrl> {};
TEST_P(StoreUrls, AreRefusedWithTheReason) {
  StoreOptions o;
  if (GetParam().name == "UserWithoutPassword") o.user = "root";
  auto s = OpenStore(GetParam().url, o);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find(GetParam().part), std::string::npos) << s.error().message;
}
INSTANTIATE_TEST_SUITE_P(
    Store, StoreUrls,
    ::testing::Values(BadUrl{"NoPort", "etcd://127.0.0.1", "HOST:PORT"},
                      BadUrl{"EmptyEndpoint", "etcd://127.0.0.1:1,", "HOST:PORT"},
                      BadUrl{"RelativeFileUrl", "file://x.json", "absolute"},
                      BadUrl{"UnknownScheme", "redis://h:1", "unknown scheme"},
                      BadUrl{"UserWithoutPassword", "etcd://127.0.0.1:1", "password file"}),
    [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace gpumux::store
