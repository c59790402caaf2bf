// Raw HTTP clients for the tests of servers: a connection that sends exactly the bytes a test
// gives it (TCP or a unix socket), a one-shot exchange, and trickling slow clients.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace gpumux::test {

// Sends `request` as is on a new connection and returns everything the server answers until
// it closes the connection.
inline std::string RawExchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "socket() failed";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&  // NOLINT
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

// A raw loopback connection to the server, closed when it goes out of scope.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr),
                                       sizeof addr) == 0;  // NOLINT
  }
  // A connection to a unix socket.
  explicit RawConnection(const std::string& path) : fd_(::socket(AF_UNIX, SOCK_STREAM, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr),
                                       sizeof addr) == 0;  // NOLINT
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  bool Send(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads what has arrived within `wait`; true once the server has closed the connection.
  bool ClosedWithin(std::chrono::milliseconds wait) {
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;  // EOF, or reset
      received_.append(buf, static_cast<std::size_t>(n));
    }
  }
  const std::string& received() const { return received_; }

 private:
  int fd_;
  bool connected_ = false;
  std::string received_;
};

// Clients that trickle a request head one byte at a time, on a thread of their own, until
// stopped (the slowloris). A connection the server closes stays closed.
class Tricklers {
 public:
  Tricklers(int port, int count, std::chrono::milliseconds every) {
    for (int i = 0; i < count; ++i) connections_.push_back(std::make_unique<RawConnection>(port));
    thread_ = std::thread([this, every] {
      const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(100000, 'a');
      for (std::size_t k = 0; !stop_; ++k) {
        for (auto& c : connections_) c->Send(head.substr(k % head.size(), 1));
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, every, [this] { return stop_.load(); });
      }
    });
  }
  ~Tricklers() {
    stop_ = true;
    cv_.notify_all();
    thread_.join();
  }
  int connected() const {
    return static_cast<int>(std::count_if(connections_.begin(), connections_.end(),
                                          [](const auto& c) { return c->connected(); }));
  }

 private:
  std::vector<std::unique_ptr<RawConnection>> connections_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace gpumux::test
