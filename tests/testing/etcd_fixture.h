// EtcdProcess: a real etcd (Debian's etcd-server 3.4, /usr/bin/etcd) for tests and benchmarks,
// a single member on free loopback ports (client and peer) with its data in a fresh temporary
// folder. Start() returns once etcd answers GET /health on the client port; Stop() kills it by
// PID (SIGKILL: the state on disk is what a crash leaves); Restart() starts it again on the same
// ports and data, so a client that kept its connection sees the same etcd come back. The
// destructor kills it and removes the folder.
//
// Health and the auth set-up go through etcd's HTTP side (/health and the JSON gateway), so
// this library needs no gRPC and tests the store only through the store's own client.
// Thread safety: none; use from the test's thread. Spawning uses fork + execve with everything
// prepared before fork, so it is safe in a process that already runs gRPC threads.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "gpumux/core/result.h"

namespace gpumux::test {

class EtcdProcess {
 public:
  // kNotFound when etcd is not installed (callers GTEST_SKIP with the message); kIo when it
  // does not become healthy within 20 s (the message holds the end of its log).
  static core::Result<std::unique_ptr<EtcdProcess>> Start();
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "etcd://127.0.0.1:PORT", for store::OpenStore.
  std::string url() const;
  int client_port() const { return client_port_; }
  // The temporary folder: data/ and one etcd-N.log per start.
  const std::filesystem::path& dir() const { return dir_; }
  // The log of the latest start.
  std::string Log() const;

  // Kills etcd (SIGKILL) and waits for it; does nothing when it is not running.
  void Stop();
  // Stop(), then start again on the same ports and data folder; returns once healthy.
  core::Result<void> Restart();

  // Adds user "root" with `root_password`, grants it the root role and enables auth (what
  // `etcdctl user add root; etcdctl auth enable` does), through the JSON gateway.
  core::Result<void> EnableAuth(std::string_view root_password);

 private:
  EtcdProcess(std::filesystem::path dir, int client_port, int peer_port);
  core::Result<void> Launch();
  core::Result<void> WaitHealthy();

  std::filesystem::path dir_;
  int client_port_;
  int peer_port_;
  pid_t pid_ = -1;
  int starts_ = 0;
};

}  // namespace gpumux::test
