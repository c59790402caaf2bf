// The one HTTP server over real loopback TCP and unix sockets: routing and its JSON errors,
// deadlines, limits, work slots, the connection limit, peers known from the connection, stops,
// and a soak of many short connections that must leave threads, descriptors and memory flat.
// These assert what happens, not how fast: every wait is generous, for a loaded 2-core machine.
#include "gpumux/net/http_server.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/net/http_client.h"
#include "gpumux/net/process_metrics.h"
#include "tests/testing/process_usage.h"
#include "tests/testing/raw_http.h"
#include "tests/testing/subprocess.h"

namespace gpumux::net {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::RawConnection;
using test::RawExchange;
using test::Tricklers;

bool Eventually(const std::function<bool()>& done,
                std::chrono::milliseconds within = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

// This thread, as text (to tell which thread ran a handler).
std::string ThreadName() {
  std::ostringstream out;
  out << std::this_thread::get_id();
  return out.str();
}

struct Logged {
  std::mutex mu;
  std::vector<std::string> lines;
  void Add(std::string_view line) {
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  }
  bool Contains(std::string_view text) {
    std::lock_guard lock(mu);
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
};

// A gate a handler waits on until the test opens it: a request in flight for as long as the
// test wants.
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  bool WaitForWaiters(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ >= n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("net-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    gate_.Open();
    fs::remove_all(dir_);
  }

  // Builds and starts a server on a free loopback port with the test routes; `tweak` edits
  // the options first.
  void Start(const std::function<void(ServerOptions&)>& tweak = {}) {
    ServerOptions o;
    o.name = "test";
    o.listen = {Endpoint::Tcp("127.0.0.1", 0)};
    o.workers = 2;
    o.log = [this](std::string_view line) { log_.Add(line); };
    if (tweak) tweak(o);
    server_ = std::make_unique<HttpServer>(o);
    server_->Route("/healthz", {"GET"}, Lane::kInline,
                   [](const Request&) { return Response::Text(200, "ok\n"); });
    server_->Route("/echo", {"POST"}, Lane::kWorker, [](const Request& r) {
      return Response::Json(200, json{{"body", r.body}, {"query", r.query}}.dump());
    });
    server_->Route("/slow", {"POST"}, Lane::kWorker, [this](const Request&) {
      gate_.Wait();
      return Response::Json(200, "{}");
    });
    server_->Route("/compute", {"POST"}, Lane::kCompute, [](const Request& r) {
      return Response::Json(200, json{{"body", r.body}, {"thread", ThreadName()}}.dump());
    });
    server_->Route("/thread", {"GET"}, Lane::kInline, [](const Request&) {
      return Response::Json(200, json{{"thread", ThreadName()}}.dump());
    });
    server_->Route("/side", {"GET"}, Lane::kSide,
                   [](const Request&) { return Response::Text(200, "side\n"); });
    server_->Route("/throw", {"GET"}, Lane::kInline,
                   [](const Request&) -> Response { throw std::runtime_error("boom"); });
    server_->Route("/peer", {"GET"}, Lane::kInline, [](const Request& r) {
      return Response::Json(
          200, json{{"transport", r.peer.transport == Peer::Transport::kUnix ? "unix" : "tcp"},
                    {"pid", r.peer.pid},
                    {"uid", r.peer.uid},
                    {"describe", r.peer.Describe()}}
                   .dump());
    });
    auto started = server_->Start();
    ASSERT_TRUE(started.has_value()) << started.error().message;
  }

  httplib::Client Client() const {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_connection_timeout(std::chrono::seconds(5));
    client.set_read_timeout(std::chrono::seconds(10));
    return client;
  }

  fs::path dir_;
  Logged log_;
  Gate gate_;
  std::unique_ptr<HttpServer> server_;
};

void ExpectJsonError(const httplib::Result& r, int status, const std::string& key = "error") {
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, status) << r->body;
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains(key) && body[key].is_string()) << r->body;
  EXPECT_FALSE(body[key].get<std::string>().empty());
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
}

TEST_F(HttpServerTest, RoutesAnswerAndUnknownPathsAre404AndWrongMethods405WithJson) {
  Start();
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto echo = Client().Post("/echo?x=1", "hello", "text/plain");
  ASSERT_TRUE(echo);
  EXPECT_EQ(json::parse(echo->body), (json{{"body", "hello"}, {"query", "x=1"}}));
  auto side = Client().Get("/side");
  ASSERT_TRUE(side);
  EXPECT_EQ(side->body, "side\n");

  auto missing = Client().Get("/nope");
  ExpectJsonError(missing, 404);
  EXPECT_NE(missing->body.find("/healthz"), std::string::npos) << "names the endpoints";
  auto wrong = Client().Post("/healthz", "", "text/plain");
  ExpectJsonError(wrong, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "GET, HEAD");
  auto get_post = Client().Get("/echo");
  ExpectJsonError(get_post, 405);
  EXPECT_EQ(get_post->get_header_value("Allow"), "POST");
  EXPECT_TRUE(Eventually([&] { return log_.Contains("GET /nope 404"); }));
}

TEST_F(HttpServerTest, HeadIsAnsweredForGetRoutesWithTheLengthAndNoBody) {
  Start();
  const std::string reply = RawExchange(
      server_->port(), "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0U) << reply;
  EXPECT_NE(reply.find("Content-Length: 3"), std::string::npos) << reply;
  EXPECT_EQ(reply.substr(reply.find("\r\n\r\n") + 4), "") << "no body";
}

TEST_F(HttpServerTest, AHandlerThatThrowsIsA500NamingTheExceptionAndTheServerGoesOn) {
  Start([](ServerOptions& o) { o.error_key = "Error"; });
  auto r = Client().Get("/throw");
  ExpectJsonError(r, 500, "Error");
  EXPECT_NE(r->body.find("boom"), std::string::npos);
  EXPECT_TRUE(Eventually([&] { return log_.Contains("500"); }));
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(HttpServerTest, ASlowClientIsClosedWith408OnceItsRequestDeadlinePasses) {
  Start([](ServerOptions& o) { o.request_timeout = std::chrono::milliseconds(300); });
  RawConnection slow(server_->port());
  ASSERT_TRUE(slow.connected());
  const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(100000, 'a');
  bool closed = false;
  for (std::size_t k = 0; k < head.size() && !closed; ++k) {
    if (!slow.Send(head.substr(k, 1))) break;
    closed = slow.ClosedWithin(std::chrono::milliseconds(20));
  }
  closed = closed || slow.ClosedWithin(std::chrono::seconds(10));
  EXPECT_TRUE(closed) << "the slow connection was not closed";
  EXPECT_NE(slow.received().find("408"), std::string::npos) << slow.received();
  EXPECT_TRUE(Eventually([&] { return log_.Contains("did not arrive within 0.3 s"); }));
  EXPECT_GE(server_->dropped(Drop::kRequestTimeout), 1);
  RawConnection silent(server_->port());  // a connection that sends nothing is closed too
  ASSERT_TRUE(silent.connected());
  EXPECT_TRUE(silent.ClosedWithin(std::chrono::seconds(10)));
}

TEST_F(HttpServerTest, AKeepAliveConnectionServesRequestAfterRequestAndIsClosedWhenIdle) {
  Start([](ServerOptions& o) { o.keep_alive_timeout = std::chrono::milliseconds(300); });
  RawConnection c(server_->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(
      c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
  const std::string& got = c.received();
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0U) << got;
  EXPECT_NE(got.find("HTTP/1.1 200", 10), std::string::npos) << "the pipelined second request";
  EXPECT_EQ(server_->dropped(Drop::kRequestTimeout), 0) << "idle is not a failure";
}

// A graceful stop behind a Service: once draining, an idle keep-alive connection is closed at
// once, a connection that has sent nothing yet is left to send its request, and each reply says
// "Connection: close" and closes its connection, while requests are still served.
TEST_F(HttpServerTest, ADrainingServerClosesIdleConnectionsAndEachConnectionAfterItsReply) {
  Start();
  RawConnection idle(server_->port());
  RawConnection fresh(server_->port());
  ASSERT_TRUE(idle.connected() && fresh.connected());
  ASSERT_TRUE(idle.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(Eventually([&] { return server_->open_connections() == 2; }));
  ASSERT_FALSE(idle.ClosedWithin(std::chrono::milliseconds(200))) << "kept alive before";
  server_->Drain();
  EXPECT_TRUE(idle.ClosedWithin(std::chrono::seconds(5))) << "an idle connection stays open";
  EXPECT_EQ(idle.received().rfind("HTTP/1.1 200", 0), 0U) << idle.received();
  ASSERT_TRUE(fresh.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(fresh.ClosedWithin(std::chrono::seconds(5))) << "kept alive after its reply";
  EXPECT_EQ(fresh.received().rfind("HTTP/1.1 200", 0), 0U) << fresh.received();
  EXPECT_NE(fresh.received().find("Connection: close"), std::string::npos) << fresh.received();
  RawConnection late(server_->port());
  ASSERT_TRUE(late.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(late.ClosedWithin(std::chrono::seconds(5)));
  EXPECT_EQ(late.received().rfind("HTTP/1.1 200", 0), 0U) << "still serving: " << late.received();
}

// Replicas on one host port (reuse_port): both take connections; once one drains it stops
// listening, and every new connection goes to the other.
TEST(HttpServerReusePort, TwoServersShareAPortAndADrainingOneStopsTakingConnections) {
  const auto serve = [](const std::string& who, int port) {
    ServerOptions o;
    o.name = who;
    o.listen = {Endpoint::Tcp("127.0.0.1", port)};
    o.reuse_port = true;
    auto server = std::make_unique<HttpServer>(o);
    server->Route("/who", {"GET"}, Lane::kInline,
                  [who](const Request&) { return Response::Text(200, who); });
    EXPECT_TRUE(server->Start().has_value());
    return server;
  };
  auto a = serve("a", 0);
  auto b = serve("b", a->port());
  ASSERT_TRUE(b->running());
  ASSERT_EQ(b->port(), a->port());
  const auto who = [&] {
    httplib::Client client("127.0.0.1", a->port());
    auto got = client.Get("/who");
    return got ? got->body : httplib::to_string(got.error());
  };
  std::map<std::string, int> before, after;
  for (int i = 0; i < 64; ++i) ++before[who()];
  EXPECT_GT(before["a"], 0);
  EXPECT_GT(before["b"], 0);
  a->Drain();
  ASSERT_TRUE(Eventually([&] { return who() == "b"; }));
  for (int i = 0; i < 64; ++i) ++after[who()];
  EXPECT_EQ(after["b"], 64) << "a: " << after["a"];
  ServerOptions without;
  without.listen = {Endpoint::Tcp("127.0.0.1", b->port())};
  HttpServer plain(without);
  EXPECT_FALSE(plain.Start().has_value()) << "a server without reuse_port joined the port";
}

TEST_F(HttpServerTest, ProbesAreAnsweredWhileManyMoreSlowClientsThanWorkersTrickle) {
  Start([](ServerOptions& o) { o.request_timeout = std::chrono::seconds(60); });
  Tricklers slow(server_->port(), 24, std::chrono::milliseconds(100));
  ASSERT_EQ(slow.connected(), 24);
  ASSERT_TRUE(Eventually([&] { return server_->open_connections() >= 24; }));
  for (int i = 0; i < 5; ++i) {
    auto health = Client().Get("/healthz");
    ASSERT_TRUE(health) << httplib::to_string(health.error());
    EXPECT_EQ(health->status, 200);
    auto echo = Client().Post("/echo", "x", "text/plain");
    ASSERT_TRUE(echo);
    EXPECT_EQ(echo->status, 200);
  }
}

TEST_F(HttpServerTest, AtTheConnectionLimitTheLongestWaitingConnectionMakesRoom) {
  Start([](ServerOptions& o) {
    o.max_connections = 4;
    o.request_timeout = std::chrono::seconds(60);
  });
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (std::size_t i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server_->port()));
    ASSERT_TRUE(idle.back()->connected());
    ASSERT_TRUE(Eventually([&] { return server_->open_connections() == i + 1; }));
  }
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(idle[0]->ClosedWithin(std::chrono::seconds(10))) << "the oldest was not evicted";
  EXPECT_FALSE(idle[3]->ClosedWithin(std::chrono::milliseconds(200)));
  EXPECT_LE(server_->open_connections(), 4U);
  EXPECT_GE(server_->dropped(Drop::kEvicted), 1);
  EXPECT_TRUE(Eventually([&] { return log_.Contains("made room for a new connection"); }));
}

TEST_F(HttpServerTest, AConnectionBeingAnsweredIsNeverEvictedANewcomerGets503) {
  Start([](ServerOptions& o) { o.max_connections = 1; });
  std::thread slow([&] {
    auto r = Client().Post("/slow", "", "text/plain");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << r->body;
  });
  ASSERT_TRUE(gate_.WaitForWaiters(1));
  auto refused = Client().Get("/healthz");
  if (refused) {  // or the connection was reset before the 503 could be read
    EXPECT_EQ(refused->status, 503) << refused->body;
    EXPECT_NE(refused->body.find("too many connections"), std::string::npos) << refused->body;
  }
  gate_.Open();
  slow.join();
  EXPECT_GE(server_->dropped(Drop::kRefused), 1);
  EXPECT_TRUE(Eventually([&] {
    auto health = Client().Get("/healthz");
    return health && health->status == 200;
  }));
}

TEST_F(HttpServerTest, InlineAndSideRoutesTakeNoWorkSlotAndAWorkerRouteWaitsOnlySoLong) {
  Start([](ServerOptions& o) {
    o.workers = 1;
    o.request_timeout = std::chrono::milliseconds(300);
  });
  std::thread slow([&] { Client().Post("/slow", "", "text/plain"); });
  ASSERT_TRUE(gate_.WaitForWaiters(1));  // the only work slot is taken
  auto health = Client().Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto side = Client().Get("/side");
  ASSERT_TRUE(side);
  EXPECT_EQ(side->status, 200);
  auto echo = Client().Post("/echo", "x", "text/plain");
  ExpectJsonError(echo, 503);
  EXPECT_NE(echo->body.find("busy"), std::string::npos) << echo->body;
  gate_.Open();
  slow.join();
  auto again = Client().Post("/echo", "x", "text/plain");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << "the slot came back";
}

TEST_F(HttpServerTest, AComputeRouteRunsOnTheIoThreadButOnlyWithAWorkSlot) {
  Start([](ServerOptions& o) {
    o.workers = 1;
    o.request_timeout = std::chrono::milliseconds(300);
  });
  auto io = Client().Get("/thread");
  ASSERT_TRUE(io);
  auto compute = Client().Post("/compute", "x", "text/plain");
  ASSERT_TRUE(compute);
  ASSERT_EQ(compute->status, 200) << compute->body;
  EXPECT_EQ(json::parse(compute->body)["body"], "x");
  EXPECT_EQ(json::parse(compute->body)["thread"], json::parse(io->body)["thread"])
      << "no hop to a worker";
  std::thread slow([&] { Client().Post("/slow", "", "text/plain"); });
  ASSERT_TRUE(gate_.WaitForWaiters(1));  // the only work slot is taken
  ExpectJsonError(Client().Post("/compute", "x", "text/plain"), 503);
  gate_.Open();
  slow.join();
  auto again = Client().Post("/compute", "y", "text/plain");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << "the slot came back";
}

TEST_F(HttpServerTest, AnOversizedHeadIs431AndOversizedBodies413ChunkedOrDeclared) {
  Start([](ServerOptions& o) { o.max_body_bytes = 1000; });
  const std::string big_head =
      "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(200000, 'a') + "\r\n\r\n";
  EXPECT_EQ(RawExchange(server_->port(), big_head).rfind("HTTP/1.1 431", 0), 0U);
  std::string many = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 5000; ++i) many += "X-H" + std::to_string(i) + ": 0123456789\r\n";
  EXPECT_EQ(RawExchange(server_->port(), many + "\r\n").rfind("HTTP/1.1 431", 0), 0U);
  std::string chunked = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) chunked += "100\r\n" + std::string(256, ' ') + "\r\n";
  chunked += "0\r\n\r\n";
  const std::string reply = RawExchange(server_->port(), chunked);
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0U) << reply.substr(0, 200);
  RawConnection declared(server_->port());
  ASSERT_TRUE(
      declared.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n{"));
  EXPECT_TRUE(declared.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(declared.received().rfind("HTTP/1.1 413", 0), 0U) << declared.received();
  EXPECT_NE(declared.received().find("\"error\""), std::string::npos) << "a JSON body";
  EXPECT_GE(server_->dropped(Drop::kHeadTooLarge), 2);
  EXPECT_GE(server_->dropped(Drop::kBodyTooLarge), 2);
}

// shared/reliability-repros/http-chunk-extension-unbounded-memory: a chunked body's chunk-size
// line (its extension) and its trailer counted against neither the head's nor the body's limit,
// and the read buffer grew to hold them (300 MiB from one request). The connection is refused
// now once they pass the buffer's bound: well before 16 MiB has been taken from it.
TEST_F(HttpServerTest, AnEndlessChunkExtensionOrTrailerIsRefusedNotBuffered) {
  Start([](ServerOptions& o) { o.max_body_bytes = 4096; });
  const std::string head = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const std::string& start : {head + "1;a=", head + "1\r\nx\r\n0\r\nX-Trailer: "}) {
    RawConnection c(server_->port());
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send(start));
    const std::string piece(64 << 10, 'b');
    std::size_t sent = 0;
    while (sent < (std::size_t{16} << 20) && c.Send(piece)) sent += piece.size();
    EXPECT_LT(sent, std::size_t{16} << 20)
        << "the server kept reading: " << start.substr(head.size());
    EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
    EXPECT_EQ(c.received().rfind("HTTP/1.1 4", 0), 0U) << c.received().substr(0, 200);
  }
  EXPECT_EQ(Client().Get("/healthz")->status, 200) << "and it goes on serving";
}

// shared/reliability-repros/http-nonreading-clients-exhaust-connections: clients that pipeline
// many requests and never read the replies held every connection "being answered" (their writes
// blocked) until the write timeout: every newcomer, the kubelet's probe included, got 503. A
// reply that is not being read no longer protects its connection from eviction past a grace.
TEST_F(HttpServerTest, ClientsThatNeverReadTheirRepliesDoNotLockOutANewcomer) {
  Start([](ServerOptions& o) { o.max_connections = 4; });
  std::string pipelined;
  for (int i = 0; i < 200000; ++i) pipelined += "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  std::vector<int> holders;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    const int small = 4096;  // a receive buffer that the replies fill at once
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);  // NOLINT
    (void)::send(fd, pipelined.data(), pipelined.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    holders.push_back(fd);  // and never read
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  int ok = 0;
  for (int i = 0; i < 5; ++i) {
    auto r = Client().Get("/healthz");
    ok += r && r->status == 200;
  }
  for (int fd : holders) ::close(fd);
  EXPECT_EQ(ok, 5) << "probes answered while 4 clients hold unread replies ("
                   << server_->dropped(Drop::kRefused) << " refused)";
  EXPECT_GE(server_->dropped(Drop::kEvicted), 1);
}

// shared/reliability-repros/http-work-slot-starvation: a chunked body, or one over
// unslotted_body_bytes, was read while its request held a work slot, so four bodies trickling in
// a byte at a time held every slot and each legitimate request waited up to its deadline. A body
// is now read first and a slot taken only for the handler.
TEST_F(HttpServerTest, BodiesThatTrickleInHoldNoWorkSlot) {
  Start([](ServerOptions& o) {
    o.workers = 1;
    o.unslotted_body_bytes = 1024;
    o.request_timeout = std::chrono::seconds(30);
    o.min_body_rate = 0;  // this test is about slots, not the minimum rate
  });
  std::vector<std::unique_ptr<RawConnection>> tricklers;
  for (const std::string head :
       {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\nabc"}) {
    for (int i = 0; i < 2; ++i) {
      tricklers.push_back(std::make_unique<RawConnection>(server_->port()));
      ASSERT_TRUE(tricklers.back()->connected());
      ASSERT_TRUE(tricklers.back()->Send(head));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  auto echo = Client().Post("/echo", "x", "text/plain");
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(echo) << httplib::to_string(echo.error());
  EXPECT_EQ(echo->status, 200) << echo->body;
  EXPECT_LT(took, std::chrono::seconds(5)) << "it waited for a slot a trickling body held";
}

TEST_F(HttpServerTest, ABodySlowerThanTheMinimumRateIs408AndClosed) {
  Start([](ServerOptions& o) {
    o.request_timeout = std::chrono::seconds(60);
    o.min_body_rate = 1000;
    o.body_rate_grace = std::chrono::milliseconds(300);
  });
  RawConnection slow(server_->port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(slow.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"));
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int k = 0; k < 300 && !closed; ++k) {  // 10 bytes every 50 ms: 200 bytes/s
    if (!slow.Send(std::string(10, 'b'))) break;
    closed = slow.ClosedWithin(std::chrono::milliseconds(50));
  }
  closed = closed || slow.ClosedWithin(std::chrono::seconds(10));
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "dropped by the rate, not the 60 s deadline";
  EXPECT_EQ(slow.received().rfind("HTTP/1.1 408", 0), 0U) << slow.received();
  EXPECT_NE(slow.received().find("slower than 1000 bytes/s"), std::string::npos) << slow.received();
  EXPECT_TRUE(Eventually([&] { return log_.Contains("below the minimum of 1000 bytes/s"); }));
  EXPECT_EQ(Client().Post("/echo", std::string(5000, 'c'), "text/plain")->status, 200)
      << "a body that arrives at once is read";
}

// shared/reliability-repros/extender-bodies-exceed-memory-limit: the memory of large bodies was
// bounded by the work slots times max_body_bytes (16 x 64 MiB in the extender, twice its memory
// limit). Bodies over unslotted_body_bytes now hold their size from one byte budget until their
// reply is written; a body that does not fit waits, within its deadline, else 503.
TEST_F(HttpServerTest, LargeBodiesShareOneByteBudgetAndWaitForIt) {
  Start([](ServerOptions& o) {
    o.unslotted_body_bytes = 1024;
    o.max_body_bytes = 200000;
    o.body_budget_bytes = 300000;
    o.request_timeout = std::chrono::milliseconds(1500);
  });
  const std::string body(150000, 'b');
  std::thread slow([&] {  // holds 150,000 bytes of the budget while its handler waits
    auto r = Client().Post("/slow", body, "text/plain");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
  });
  ASSERT_TRUE(gate_.WaitForWaiters(1));
  EXPECT_EQ(Client().Post("/echo", std::string(100000, 'c'), "text/plain")->status, 200)
      << "100,000 more fit";
  // 160,000 do not: the request waits (its client for the go-ahead), then is refused.
  RawConnection refused(server_->port());
  ASSERT_TRUE(refused.connected());
  refused.Send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 160000\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_TRUE(refused.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(refused.received().rfind("HTTP/1.1 503", 0), 0U) << refused.received();
  EXPECT_NE(refused.received().find("300000 bytes of request bodies"), std::string::npos)
      << refused.received();
  // A chunked body takes the budget as it grows past unslotted_body_bytes (in steps, up to
  // max_body_bytes): past what is left, it waits too.
  RawConnection chunked(server_->port());
  ASSERT_TRUE(chunked.connected());
  std::string request = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 2; ++i) request += "1000\r\n" + std::string(4096, 'd') + "\r\n";
  request += "0\r\n\r\n";
  chunked.Send(request);
  EXPECT_TRUE(chunked.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(chunked.received().rfind("HTTP/1.1 503", 0), 0U) << chunked.received().substr(0, 200);
  gate_.Open();
  slow.join();
  EXPECT_EQ(Client().Post("/echo", body, "text/plain")->status, 200) << "the budget came back";
  RawConnection again(server_->port());
  ASSERT_TRUE(again.connected());
  again.Send(request);
  again.ClosedWithin(std::chrono::seconds(2));
  EXPECT_EQ(again.received().rfind("HTTP/1.1 200", 0), 0U) << again.received().substr(0, 200);
}

TEST_F(HttpServerTest, NotHttpIsA400AndTheConnectionClosed) {
  Start();
  const std::string reply = RawExchange(server_->port(), "HELLO\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0U) << reply;
  EXPECT_GE(server_->dropped(Drop::kBadRequest), 1);
}

TEST_F(HttpServerTest, ExpectContinueGetsTheGoAheadBeforeTheBody) {
  Start();
  RawConnection c(server_->port());
  ASSERT_TRUE(
      c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n"
             "Connection: close\r\n\r\n"));
  c.ClosedWithin(std::chrono::milliseconds(500));
  EXPECT_EQ(c.received().rfind("HTTP/1.1 100 Continue", 0), 0U) << c.received();
  ASSERT_TRUE(c.Send("hi"));
  EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_NE(c.received().find(R"("body":"hi")"), std::string::npos) << c.received();
}

TEST_F(HttpServerTest, AUnixSocketIsServedNativelyAndKnowsItsPeerFromTheKernel) {
  const std::string path = (dir_ / "s.sock").string();
  Start([&](ServerOptions& o) { o.listen.push_back(Endpoint::Unix(path, 0660)); });
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660U);
  EXPECT_EQ(server_->port(1), 0);
  RawConnection c(path);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  ASSERT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
  const json peer = json::parse(c.received().substr(c.received().find("\r\n\r\n") + 4));
  EXPECT_EQ(peer["transport"], "unix");
  EXPECT_EQ(peer["pid"], static_cast<std::int64_t>(::getpid()));
  EXPECT_EQ(peer["uid"], static_cast<std::int64_t>(::getuid()));
  // Over TCP there are no credentials to claim.
  auto tcp = Client().Get("/peer");
  ASSERT_TRUE(tcp);
  EXPECT_EQ(json::parse(tcp->body)["pid"], -1);
  server_.reset();
  EXPECT_FALSE(fs::exists(path)) << "the socket is removed at stop";
}

TEST_F(HttpServerTest, AStaleSocketIsReplacedButAFileIsNever) {
  const std::string path = (dir_ / "s.sock").string();
  {  // a socket file left by a process killed with -9: bound, never unlinked
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);  // NOLINT
    ::close(fd);
  }
  Start([&](ServerOptions& o) { o.listen = {Endpoint::Unix(path, 0600)}; });
  RawConnection c(path);
  EXPECT_TRUE(c.connected());
  server_.reset();
  std::ofstream(path) << "not a socket";
  ServerOptions o;
  o.listen = {Endpoint::Unix(path, 0600)};
  HttpServer server(o);
  auto started = server.Start();
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.error().message.find("is not a socket"), std::string::npos)
      << started.error().message;
  EXPECT_TRUE(fs::is_regular_file(path)) << "the file was left alone";
}

TEST_F(HttpServerTest, ASecondServerOnTheSamePortFailsToStartAndSaysWhy) {
  Start();
  ServerOptions o;
  o.listen = {Endpoint::Tcp("127.0.0.1", server_->port())};
  HttpServer second(o);
  auto started = second.Start();
  ASSERT_FALSE(started.has_value());
  EXPECT_NE(started.error().message.find("in use"), std::string::npos) << started.error().message;
  ServerOptions elsewhere;
  elsewhere.listen = {Endpoint::Tcp("10.255.255.1", 0)};
  HttpServer third(elsewhere);
  auto not_here = third.Start();
  ASSERT_FALSE(not_here.has_value());
  EXPECT_NE(not_here.error().message.find("not an address of this host"), std::string::npos)
      << not_here.error().message;
}

// Where the kernel gives no pidfd (before Linux 6.5), a unix peer is known by its pid and its
// start time: the start time is read past the command, whatever the command holds, and a pid
// whose process has gone has none.
TEST(ProcessStartTimeTest, NamesOneProcessWhateverItsCommandAndNoneOnceItHasGone) {
  const auto self = ProcessStartTime(::getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(ProcessStartTime(::getpid()), self);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "x) 1 2 (y");  // spaces and parentheses in the command
    char c = 0;
    ::_exit(::read(go[0], &c, 1) == 1 ? 0 : 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto started = ProcessStartTime(child);
  ASSERT_TRUE(started.has_value());
  EXPECT_GE(*started, *self);
  EXPECT_EQ(ProcessStartTime(child), started);
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(ProcessStartTime(child).has_value());
  ::close(go[0]);
  ::close(go[1]);
}

TEST(HttpServerOptionsTest, InvalidOptionsAreErrorsNamingTheOption) {
  struct Case {
    const char* name;
    std::function<void(ServerOptions&)> edit;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"no endpoint", [](ServerOptions& o) { o.listen.clear(); }, "nothing to listen on"},
      {"a port out of range", [](ServerOptions& o) { o.listen[0].port = 70000; }, "port 70000"},
      {"no worker", [](ServerOptions& o) { o.workers = 0; }, "worker"},
      {"no connection", [](ServerOptions& o) { o.max_connections = 0; }, "max_connections"},
      {"a zero timeout", [](ServerOptions& o) { o.write_timeout = {}; }, "write_timeout"},
      {"a budget smaller than a body",
       [](ServerOptions& o) {
         o.max_body_bytes = 2 << 20;
         o.body_budget_bytes = 1 << 20;
       },
       "body_budget_bytes"},
      {"a long socket path",
       [](ServerOptions& o) { o.listen = {Endpoint::Unix(std::string(200, 'a'), 0600)}; },
       "1 to 107"},
  };
  for (const Case& c : cases) {
    ServerOptions o;
    o.listen = {Endpoint::Tcp("127.0.0.1", 0)};
    c.edit(o);
    auto valid = ValidateOptions(o);
    ASSERT_FALSE(valid.has_value()) << c.name;
    EXPECT_NE(valid.error().message.find(c.says), std::string::npos)
        << c.name << ": " << valid.error().message;
  }
}

TEST_F(HttpServerTest, StopIsPromptWithIdleConnectionsAndLetsARequestInFlightFinish) {
  Start();
  RawConnection idle(server_->port());
  ASSERT_TRUE(idle.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));  // kept alive after
  std::atomic<int> status{0};
  std::thread slow([&] {
    auto r = Client().Post("/slow", "", "text/plain");
    if (r) status = r->status;
  });
  ASSERT_TRUE(gate_.WaitForWaiters(1));
  std::thread stopper([&] { server_->Stop(); });
  EXPECT_TRUE(idle.ClosedWithin(std::chrono::seconds(10))) << "the idle one is closed at once";
  gate_.Open();
  stopper.join();
  slow.join();
  EXPECT_EQ(status.load(), 200) << "the request in flight was answered";
  EXPECT_FALSE(server_->running());
}

// The coordinator's SDK opens a connection per report: 24 jobs reporting once a second make
// 86,400 an hour. The server must end every one of them without keeping anything.
TEST_F(HttpServerTest, ManyShortUnixConnectionsLeaveThreadsDescriptorsAndMemoryFlat) {
  const std::string path = (dir_ / "soak.sock").string();
  Start([&](ServerOptions& o) { o.listen.push_back(Endpoint::Unix(path, 0600)); });
  const auto one = [&] {
    RawConnection c(path);
    return c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") &&
           c.ClosedWithin(std::chrono::seconds(10)) && c.received().rfind("HTTP/1.1 200", 0) == 0;
  };
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(one()) << i;  // warm up: allocator, pools
  ASSERT_TRUE(Eventually([&] { return server_->open_connections() == 0; }));
  const auto before = test::ProcessUsage::Now();
  constexpr int kConnections = 20000;
  for (int i = 0; i < kConnections; ++i) ASSERT_TRUE(one()) << i;
  ASSERT_TRUE(Eventually([&] { return server_->open_connections() == 0; }));
  const auto after = test::ProcessUsage::Now();
  EXPECT_EQ(after.threads, before.threads) << kConnections << " connections";
  EXPECT_EQ(after.fds, before.fds);
  if (!test::AddressSanitized()) {  // ASan's quarantine holds the freed buffers on purpose
    EXPECT_LT(after.rss_kb - before.rss_kb, 4096) << "RSS grew from " << before.rss_kb << " kB";
  }
  std::printf("soak: %d unix connections: threads %ld -> %ld, fds %ld -> %ld, RSS %ld -> %ld kB\n",
              kConnections, before.threads, after.threads, before.fds, after.fds, before.rss_kb,
              after.rss_kb);
}

// The client of `gpumux call`: the same exchange over TCP and the unix socket, a reply that
// does not come within the timeout, and a socket nobody listens on.
TEST_F(HttpServerTest, CallSendsABodyOverTcpAndUnixAndGivesUpAtItsTimeout) {
  const std::string path = (dir_ / "call.sock").string();
  Start([&](ServerOptions& o) { o.listen.push_back(Endpoint::Unix(path, 0600)); });
  for (const Endpoint& to :
       {Endpoint::Tcp("127.0.0.1", server_->port()), Endpoint::Unix(path, 0)}) {
    auto r = Call(to, "POST", "/echo?x=1", R"({"a":1})");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["body"], R"({"a":1})") << to.Describe();
    auto missing = Call(to, "GET", "/nope", "");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    EXPECT_TRUE(json::parse(missing->body).contains("error"));
  }
  CallOptions quick;
  quick.timeout = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  auto slow = Call(Endpoint::Unix(path, 0), "POST", "/slow", "", quick);
  ASSERT_FALSE(slow);
  EXPECT_NE(slow.error().message.find("no reply within 300 ms"), std::string::npos)
      << slow.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  gate_.Open();
  auto nobody = Call(Endpoint::Unix((dir_ / "nobody.sock").string(), 0), "GET", "/", "");
  ASSERT_FALSE(nobody);
  EXPECT_NE(nobody.error().message.find("cannot connect"), std::string::npos);
  EXPECT_FALSE(Call(Endpoint::Unix(path, 0), "FROB", "/", ""));
}

}  // namespace
}  // namespace gpumux::net
