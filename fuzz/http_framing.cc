// Fuzz target: the framing of the one HTTP server (net/http_server.h) under every listener. The
// input is what a client sends on one connection: request heads, bodies by Content-Length or
// chunked (chunk lines with extensions, trailers), pipelined requests, "Expect: 100-continue",
// bytes that are not HTTP. One server runs for the whole process, on a unix socket, with small
// limits so that inputs reach them (a 1 KiB head, 4 KiB bodies, a 6 KiB body budget, bodies over
// 512 bytes under it), and routes on every lane. Each input goes through a fresh connection
// whose write side is then shut; the server's answer is read until it closes. A finding, beyond
// the sanitizers': a reply that is not an HTTP/1.1 status line, a server that no longer answers
// a probe on a fresh connection, or an input that holds the connection past its deadline.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz/fuzz_support.h"
#include "gpumux/net/http_server.h"

namespace {

using namespace gpumux;

std::string SocketPath() { return fuzz::ScratchDir() + "/http.sock"; }

net::HttpServer& Server() {
  static std::unique_ptr<net::HttpServer> server = [] {
    net::ServerOptions o;
    o.name = "fuzz";
    o.listen = {net::Endpoint::Unix(SocketPath(), 0600)};
    o.workers = 2;
    o.max_connections = 64;
    o.max_head_bytes = 1024;
    o.max_body_bytes = 4096;
    o.unslotted_body_bytes = 512;
    o.body_budget_bytes = 6144;
    o.request_timeout = std::chrono::milliseconds(2000);
    o.keep_alive_timeout = std::chrono::milliseconds(2000);
    o.write_timeout = std::chrono::milliseconds(2000);
    auto s = std::make_unique<net::HttpServer>(o);
    s->Route("/healthz", {"GET"}, net::Lane::kInline,
             [](const net::Request&) { return net::Response::Text(200, "ok\n"); });
    s->Route("/echo", {"POST", "PUT"}, net::Lane::kWorker, [](const net::Request& r) {
      return net::Response::Text(200, std::to_string(r.body.size()) + " " + r.query + "\n");
    });
    s->Route("/compute", {"POST"}, net::Lane::kCompute,
             [](const net::Request& r) { return net::Response::Text(200, r.body.substr(0, 16)); });
    s->Route("/side", {"GET"}, net::Lane::kSide, [](const net::Request& r) {
      const std::string* host = r.Header("Host");
      return net::Response::Text(200, host == nullptr ? "-" : *host);
    });
    if (auto started = s->Start(); !started) {
      std::fprintf(stderr, "fuzz_http_framing: %s\n", started.error().message.c_str());
      std::abort();
    }
    return s;
  }();
  return *server;
}

int Connect() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", SocketPath().c_str());
  if (fd < 0 ||
      ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {  // NOLINT
    std::fprintf(stderr, "fuzz_http_framing: cannot connect to the server\n");
    std::abort();
  }
  return fd;
}

// Sends `bytes` (as much as the server takes before it closes), shuts the write side and
// returns what came back before the server closed; aborts past `limit`.
std::string Exchange(std::string_view bytes, std::chrono::milliseconds limit) {
  const int fd = Connect();
  std::string reply;
  const auto until = std::chrono::steady_clock::now() + limit;
  std::size_t sent = 0;
  bool shut = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::fprintf(stderr, "fuzz_http_framing: the connection was held past %lld ms\n",
                   static_cast<long long>(limit.count()));
      std::abort();
    }
    if (sent == bytes.size() && !shut) {
      ::shutdown(fd, SHUT_WR);
      shut = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (shut ? 0 : POLLOUT)), 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    if ((p.revents & POLLOUT) != 0 && !shut) {
      const ssize_t n =
          ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
      } else {
        sent = bytes.size();  // the server closed its side: nothing more is read
      }
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      char buf[8192];
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) break;
      if (n > 0) reply.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return reply;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  net::HttpServer& server = Server();
  // Deadlines are 2 s per request; a connection of many pipelined requests may take several.
  const std::string reply = Exchange(fuzz::AsText(data, size), std::chrono::seconds(30));
  if (!reply.empty() && reply.rfind("HTTP/1.1 ", 0) != 0 && reply.rfind("HTTP/1.0 ", 0) != 0) {
    std::fprintf(stderr, "fuzz_http_framing: a reply that is not HTTP: %.80s\n", reply.c_str());
    std::abort();
  }
  const std::string probe = Exchange(
      "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", std::chrono::seconds(10));
  if (probe.rfind("HTTP/1.1 200", 0) != 0 || !server.running()) {
    std::fprintf(stderr, "fuzz_http_framing: the probe after the input got: %.80s\n",
                 probe.c_str());
    std::abort();
  }
  return 0;
}
