// The store contract, run against both implementations: a real etcd (Debian's etcd-server,
// tests/testing/etcd_fixture.h) and the file store. Then what only one of them does: etcd
// going away and coming back under the same store object, etcd with auth enabled, several
// endpoints; the file store's reopen, lock and bad files; and the URLs OpenStore refuses.
#include "gpumux/store/store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/testing/etcd_fixture.h"

namespace gpumux::store {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Value = std::optional<std::string>;

// A fresh temporary folder, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "gpumux-store-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A loopback port that refuses connections while this object lives (bound, not listening).
class RefusingPort {
 public:
  RefusingPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~RefusingPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  std::string endpoint() const {
    std::string e = "127.0.0.1:";
    e += std::to_string(port_);
    return e;
  }

 private:
  int fd_;
  int port_ = 0;
};

// Starts etcd into *etcd; skips the test when etcd is not installed (then *etcd stays empty).
void StartEtcd(std::unique_ptr<test::EtcdProcess>* etcd) {
  auto started = test::EtcdProcess::Start();
  if (!started && started.error().code == core::ErrorCode::kNotFound)
    GTEST_SKIP() << started.error().message;
  ASSERT_TRUE(started.has_value()) << started.error().message;
  *etcd = std::move(*started);
}

// Calls `call` until it succeeds or `within` has passed; the last result.
template <typename F>
auto Eventually(F&& call, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  auto result = call();
  while (!result && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    result = call();
  }
  return result;
}

// ---------------------------------------------------------------- the contract, both stores

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "etcd") {
      StartEtcd(&etcd_);
      if (!etcd_) return;
      url_ = etcd_->url();
    } else {
      url_ = "file://" + (dir_.path() / "store.json").string();
    }
    auto s = OpenStore(url_);
    ASSERT_TRUE(s.has_value()) << s.error().message;
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    etcd_.reset();
  }

  ScratchDir dir_;
  std::unique_ptr<test::EtcdProcess> etcd_;
  std::string url_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContract, PutGetListAndDeleteSeeTheSameKeys) {
  ASSERT_TRUE(store_->Put("/g/a/1", "one"));
  ASSERT_TRUE(store_->Put("/g/a/2", "two"));
  ASSERT_TRUE(store_->Put("/g/b", "bee"));
  ASSERT_TRUE(store_->Put("/g/a/1", "uno"));
  ASSERT_TRUE(store_->Put("/h", "outside"));
  EXPECT_EQ(store_->Get("/g/a/1").value(), Value("uno"));
  EXPECT_EQ(store_->Get("/g/none").value(), std::nullopt);

  auto listed = store_->List("/g/a/");
  ASSERT_TRUE(listed.has_value()) << listed.error().message;
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, "/g/a/1");
  EXPECT_EQ((*listed)[0].value, "uno");
  EXPECT_EQ((*listed)[1].key, "/g/a/2");
  EXPECT_GT((*listed)[0].revision, (*listed)[1].revision) << "/g/a/1 changed last";
  EXPECT_EQ(store_->List("")->size(), 4u);

  EXPECT_TRUE(store_->Delete("/g/a/2"));
  EXPECT_TRUE(store_->Delete("/g/never"));
  EXPECT_EQ(store_->List("/g/a/")->size(), 1u);
  EXPECT_EQ(store_->DeletePrefix("/g/").value(), 2);
  EXPECT_TRUE(store_->List("/g/")->empty());
  EXPECT_EQ(store_->Get("/h").value(), Value("outside"));
}

TEST_P(StoreContract, ApplyPutsAndDeletesABatchLargerThanOneEtcdTransaction) {
  ASSERT_TRUE(store_->Put("/g/old", "x"));
  std::vector<Change> batch = {{"/g/old", std::nullopt}, {"/g/never", std::nullopt}};
  for (int i = 0; i < 300; ++i) batch.push_back({"/g/k" + std::to_string(1000 + i), "v"});
  ASSERT_TRUE(store_->Apply(batch));
  auto listed = store_->List("/g/");
  ASSERT_TRUE(listed.has_value()) << listed.error().message;
  ASSERT_EQ(listed->size(), 300u);
  EXPECT_EQ(listed->front().key, "/g/k1000");
  EXPECT_EQ(store_->Get("/g/old").value(), std::nullopt);
  EXPECT_TRUE(store_->Apply({}));
}

TEST_P(StoreContract, LeasedKeysLiveWhileKeptAliveGoAfterTheTtlAndComeBackWithTheNextKeepAlive) {
  ASSERT_TRUE(store_->Put("/g/permanent", "p"));
  ASSERT_TRUE(store_->Put("/g/was-permanent", "old"));
  ASSERT_TRUE(store_->PutLeased("/g/alive", "me", 2s));
  ASSERT_TRUE(store_->PutLeased("/g/was-permanent", "leased", 2s));
  for (int k = 0; k < 3; ++k) {  // 3 s: longer than the TTL
    std::this_thread::sleep_for(1s);
    ASSERT_TRUE(store_->KeepAlive());
  }
  EXPECT_EQ(store_->Get("/g/alive").value(), Value("me"));
  EXPECT_EQ(store_->List("/g/")->size(), 3u);

  std::this_thread::sleep_for(3500ms);  // no KeepAlive: etcd revokes the lease after the TTL
  EXPECT_EQ(store_->Get("/g/alive").value(), std::nullopt);
  EXPECT_EQ(store_->Get("/g/was-permanent").value(), std::nullopt);
  EXPECT_EQ(store_->Get("/g/permanent").value(), Value("p"));
  EXPECT_EQ(store_->List("/g/")->size(), 1u);

  // Renewing an expired lease writes its keys again (a node that was cut off announces itself).
  ASSERT_TRUE(store_->KeepAlive());
  EXPECT_EQ(store_->Get("/g/alive").value(), Value("me"));
  EXPECT_EQ(store_->Get("/g/was-permanent").value(), Value("leased"));
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract, ::testing::Values("etcd", "file"),
                         [](const auto& p) { return p.param; });

// ---------------------------------------------------------------- etcd only

TEST(EtcdStore, FailsWithKIoWhileEtcdIsDownAndWorksAgainWhenItComesBack) {
  std::unique_ptr<test::EtcdProcess> started;
  StartEtcd(&started);
  if (!started) return;
  test::EtcdProcess& etcd = *started;
  StoreOptions o;
  o.timeout = 1000ms;
  auto opened = OpenStore(etcd.url(), o);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  Store& store = **opened;
  ASSERT_TRUE(store.Put("/k", "before"));
  ASSERT_TRUE(store.PutLeased("/node", "up", 10s));

  etcd.Stop();
  auto refused = store.Put("/k", "while down");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, core::ErrorCode::kIo);
  EXPECT_NE(refused.error().message.find(etcd.url()), std::string::npos) << refused.error().message;
  EXPECT_EQ(store.Get("/k").error().code, core::ErrorCode::kIo);
  EXPECT_EQ(store.KeepAlive().error().code, core::ErrorCode::kIo);
  auto late = OpenStore(etcd.url(), o);  // opened while etcd is down: it connects later
  ASSERT_TRUE(late.has_value()) << late.error().message;
  EXPECT_EQ((*late)->Get("/k").error().code, core::ErrorCode::kIo);

  auto restarted = etcd.Restart();  // same ports, same data
  ASSERT_TRUE(restarted.has_value()) << restarted.error().message;
  auto back = Eventually([&] { return store.Put("/k", "after"); }, 10s);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(store.Get("/k").value(), Value("after"));
  auto read = Eventually([&] { return (*late)->Get("/k"); }, 10s);
  ASSERT_TRUE(read.has_value()) << read.error().message;
  EXPECT_EQ(*read, Value("after"));
  // etcd keeps leases across its restart (and restarts their TTL), so the lease is still ours.
  EXPECT_TRUE(store.KeepAlive());
  EXPECT_EQ(store.Get("/node").value(), Value("up"));
}

TEST(EtcdStore, OpensWhileEtcdIsNotThereAndItsCallsFailWithKIoNamingTheEndpoint) {
  RefusingPort port;
  StoreOptions o;
  o.timeout = 300ms;
  auto store = OpenStore("etcd://" + port.endpoint(), o);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  auto got = (*store)->Get("/x");
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, core::ErrorCode::kIo);
  EXPECT_NE(got.error().message.find(port.endpoint()), std::string::npos) << got.error().message;
}

TEST(EtcdStore, AuthenticatesWithThePasswordFileAndAgainWhenARestartedEtcdForgotTheToken) {
  std::unique_ptr<test::EtcdProcess> started;
  StartEtcd(&started);
  if (!started) return;
  test::EtcdProcess& etcd = *started;
  auto enabled = etcd.EnableAuth("s3cret pw");
  ASSERT_TRUE(enabled.has_value()) << enabled.error().message;
  std::ofstream(etcd.dir() / "password") << "s3cret pw\n";
  std::ofstream(etcd.dir() / "wrong") << "guess\n";
  StoreOptions o;
  o.timeout = 1000ms;
  o.user = "root";
  o.password_file = (etcd.dir() / "password").string();
  auto opened = OpenStore(etcd.url(), o);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  Store& store = **opened;
  ASSERT_TRUE(store.Put("/k", "v"));
  ASSERT_TRUE(store.PutLeased("/node", "up", 10s));
  EXPECT_EQ(store.Get("/k").value(), Value("v"));

  auto anonymous = OpenStore(etcd.url());
  ASSERT_TRUE(anonymous.has_value());
  EXPECT_EQ((*anonymous)->Get("/k").error().code, core::ErrorCode::kIo);
  o.password_file = (etcd.dir() / "wrong").string();
  auto guessing = OpenStore(etcd.url(), o);
  ASSERT_TRUE(guessing.has_value());
  auto refused = (*guessing)->Get("/k");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("Authenticate as root"), std::string::npos)
      << refused.error().message;

  // etcd's simple tokens live in its memory: after a restart ours is refused, and the store
  // authenticates again and repeats the call.
  auto restarted = etcd.Restart();
  ASSERT_TRUE(restarted.has_value()) << restarted.error().message;
  auto back = Eventually([&] { return store.Put("/k", "after"); }, 10s);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(store.Get("/k").value(), Value("after"));
  EXPECT_TRUE(store.KeepAlive());
}

TEST(EtcdStore, WithSeveralEndpointsUsesTheOneThatIsUp) {
  std::unique_ptr<test::EtcdProcess> started;
  StartEtcd(&started);
  if (!started) return;
  test::EtcdProcess& etcd = *started;
  RefusingPort down;
  const std::string live = etcd.url().substr(std::string("etcd://").size());
  auto opened = OpenStore("etcd://" + down.endpoint() + "," + live);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  EXPECT_EQ((*opened)->Describe(), "etcd://" + down.endpoint() + "," + live);
  for (int k = 0; k < 4; ++k) {  // round robin would reach a dead member within 4 calls
    ASSERT_TRUE((*opened)->Put("/k", std::to_string(k)));
  }
  EXPECT_EQ((*opened)->Get("/k").value(), Value("3"));
}

// ---------------------------------------------------------------- the file store only

TEST(FileStore, KeepsPermanentKeysAcrossAReopenButNotLeasedOnes) {
  ScratchDir dir;
  const std::string url = "file://" + (dir.path() / "s.json").string();
  {
    auto s = OpenStore(url);
    ASSERT_TRUE(s.has_value()) << s.error().message;
    ASSERT_TRUE((*s)->Put("/a", "1"));
    ASSERT_TRUE((*s)->PutLeased("/alive", "x", 30s));
  }
  auto s = OpenStore(url);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ((*s)->Get("/a").value(), Value("1"));
  EXPECT_EQ((*s)->Get("/alive").value(), std::nullopt);
}

TEST(FileStore, AnAppliedBatchIsOnDiskAndABadKeyRefusesAllOfIt) {
  ScratchDir dir;
  const std::string url = "file://" + (dir.path() / "s.json").string();
  {
    auto s = OpenStore(url);
    ASSERT_TRUE(s.has_value()) << s.error().message;
    std::vector<Change> batch;
    for (int i = 0; i < 100; ++i) batch.push_back({"/k/" + std::to_string(i), "v"});
    ASSERT_TRUE((*s)->Apply(batch));
    const std::vector<Change> bad = {{"/k/x", "y"}, {std::string("/k/\xff"), "z"}};
    EXPECT_FALSE((*s)->Apply(bad));
    EXPECT_EQ((*s)->Get("/k/x").value(), std::nullopt) << "checked before any change";
  }
  auto s = OpenStore(url);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ((*s)->List("/k/")->size(), 100u);
}

TEST(FileStore, RefusesASecondOpenerNamingTheFileAndTheHolder) {
  ScratchDir dir;
  const std::string path = (dir.path() / "s.json").string();
  auto first = OpenStore(path);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  // flock locks belong to the open file description: a second open in this process conflicts
  // just as another process would.
  auto second = OpenStore(path);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, core::ErrorCode::kFailedPrecondition);
  EXPECT_NE(second.error().message.find(path + " is in use"), std::string::npos)
      << second.error().message;
  EXPECT_NE(second.error().message.find("pid " + std::to_string(::getpid())), std::string::npos)
      << second.error().message;
  first->reset();
  EXPECT_TRUE(OpenStore(path).has_value()) << "the lock goes with the store";
}

TEST(FileStore, AMalformedFileIsAnErrorNamingIt) {
  ScratchDir dir;
  const fs::path path = dir.path() / "s.json";
  // A revision near INT64_MAX overflowed at the next change (UB); one above it wrapped.
  for (const char* text :
       {"{\"version\": 1, \"keys\": [1, 2]}", "not json", "{\"keys\": {}}",
        "{\"version\": 1, \"revision\": 9223372036854775807, \"keys\": {}}",
        "{\"version\": 1, \"revision\": 18446744073709551615, \"keys\": {}}",
        "{\"version\": 1, \"keys\": {\"/k\": {\"value\": \"v\", \"revision\": -1}}}"}) {
    std::ofstream(path) << text;
    auto s = OpenStore("file://" + path.string());
    ASSERT_FALSE(s.has_value()) << text;
    EXPECT_NE(s.error().message.find(path.string()), std::string::npos) << s.error().message;
  }
  // Through core::ParseJson: a value nested 100,000 deep is refused before it is parsed.
  std::ofstream(path) << "{\"version\": 1, \"keys\": {\"/k\": {\"value\": "
                      << std::string(100000, '[') << std::string(100000, ']') << "}}}";
  auto s = OpenStore("file://" + path.string());
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("nested deeper than 128 levels"), std::string::npos)
      << s.error().message;
}

TEST(FileStore, RefusesKeysAndValuesThatAreNotUtf8AndKeepsWorking) {
  ScratchDir dir;
  auto s = OpenStore((dir.path() / "s.json").string());
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ((*s)->Put("/k", "\xff\xfe").error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_EQ((*s)->PutLeased("/\xc3", "v", 5s).error().code, core::ErrorCode::kInvalidArgument);
  ASSERT_TRUE((*s)->Put("/k", "caf\xc3\xa9"));
  EXPECT_EQ((*s)->Get("/k").value(), Value("caf\xc3\xa9"));
}

// ---------------------------------------------------------------- OpenStore's arguments

struct BadArguments {
  std::string name, url;
  StoreOptions options;
  std::string part;  // of the message
};
class StoreArguments : public ::testing::TestWithParam<BadArguments> {};
TEST_P(StoreArguments, AreRefusedWithTheReason) {
  auto s = OpenStore(GetParam().url, GetParam().options);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find(GetParam().part), std::string::npos) << s.error().message;
}
StoreOptions WithUser() {
  StoreOptions o;
  o.user = "root";
  return o;
}
StoreOptions WithPasswordFile(std::string path) {
  StoreOptions o = WithUser();
  o.password_file = std::move(path);
  return o;
}
StoreOptions WithTimeout(std::chrono::milliseconds t) {
  StoreOptions o;
  o.timeout = t;
  return o;
}
INSTANTIATE_TEST_SUITE_P(
    Store, StoreArguments,
    ::testing::Values(
        BadArguments{"NoPort", "etcd://127.0.0.1", {}, "HOST:PORT"},
        BadArguments{"EmptyEndpoint", "etcd://127.0.0.1:1,", {}, "HOST:PORT"},
        BadArguments{"HostNamesAmongSeveralEndpoints", "etcd://a:1,b:2", {}, "IPv4"},
        BadArguments{"RelativeFileUrl", "file://x.json", {}, "absolute"},
        BadArguments{"UnknownScheme", "redis://h:1", {}, "unknown scheme"},
        BadArguments{"UserWithoutPasswordFile", "etcd://127.0.0.1:1", WithUser(), "password file"},
        BadArguments{"MissingPasswordFile", "etcd://127.0.0.1:1",
                     WithPasswordFile("/nonexistent/gpumux-pw"), "/nonexistent/gpumux-pw"},
        BadArguments{"ZeroTimeout", "etcd://127.0.0.1:1", WithTimeout(0ms), "timeout"}),
    [](const auto& p) { return p.param.name; });

}  // namespace
}  // namespace gpumux::store
