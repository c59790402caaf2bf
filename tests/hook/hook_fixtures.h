// Reservation builders shared by the hook tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/hook/reservations.h"

namespace gpumux::hook::testing_fixtures {

// A running reservation since 2024-05-01T10:00:00Z, kept by `holder`.
inline Reservation Held(const std::string& container, std::vector<int> gpus, ProcessRef holder) {
  Reservation r;
  r.container = container;
  r.gpus = std::move(gpus);
  r.since = "2024-05-01T10:00:00Z";
  r.since_unix = 1714557600;
  r.state = "running";
  r.holder = holder;
  return r;
}

// Appends Held(container, gpus, <this test process>) to the ledger in `state_dir`.
inline void HoldForThisProcess(const std::string& state_dir, const std::string& container,
                               std::vector<int> gpus) {
  auto updated = ReservationStore(state_dir).Update([&](ReservationFile& f) -> core::Result<bool> {
    f.reservations.push_back(Held(container, gpus, CurrentProcess(::getpid())));
    return true;
  });
  ASSERT_TRUE(updated.has_value()) << updated.error().message;
}

// What containerd's shim shows when the runtime fails (runc.getLastRuntimeError): the "msg" of
// the last line of the runtime's JSON log whose "level" is "error"; "" when there is none.
// Every line must be JSON, as the shim's decoder requires.
inline std::string LastRuntimeError(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string msg;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(entry.is_discarded()) << log_path << ": not a JSON line: " << line;
    if (entry.is_discarded()) continue;
    if (!entry.is_object() || !entry.contains("level") || !entry.contains("msg")) continue;
    if (entry.at("level") == "error") msg = entry.at("msg").get<std::string>();
  }
  return msg;
}

// A fresh folder with a short path under /tmp, removed with its contents on destruction: unix
// socket paths must be shorter than 108 bytes, which test scratch folders are not.
class ShortDir {
 public:
  ShortDir() {
    std::string tmpl = "/tmp/gpumux-XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    path_ = tmpl;
  }
  ~ShortDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ShortDir(const ShortDir&) = delete;
  ShortDir& operator=(const ShortDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A unix socket file at `path` that accepts connections while the object lives (what a device
// plugin serves). Close() stops listening and leaves the file behind, as a killed server does.
class ListeningSocket {
 public:
  explicit ListeningSocket(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    EXPECT_LT(path.size(), sizeof addr.sun_path) << path;
    std::memcpy(addr.sun_path, path.c_str(), std::min(path.size() + 1, sizeof addr.sun_path));
    EXPECT_EQ(::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0)
        << path << ": " << std::strerror(errno);
    EXPECT_EQ(::listen(fd_, 16), 0) << std::strerror(errno);
  }
  ~ListeningSocket() { Close(); }
  ListeningSocket(const ListeningSocket&) = delete;
  ListeningSocket& operator=(const ListeningSocket&) = delete;
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace gpumux::hook::testing_fixtures
