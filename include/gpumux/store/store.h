// The durable state store behind the node coordinator (and read by the extender): a small
// key-value interface with two implementations.
//
//   etcd v3   "etcd://HOST:PORT" (or "etcds://" for TLS): one long-lived gRPC channel to
//             etcd's KV and Lease services (the project's own proto subset, proto/etcd/),
//             optional TLS (CA, client certificate) and user/password auth (a token from
//             Auth.Authenticate, sent as the "token" metadata and renewed when refused).
//   file      "file:///PATH" or a bare path: the whole store is one JSON file, rewritten with
//             io::WriteFileAtomically (fsync'd) on every change and kept in memory. One
//             process owns it at a time (an exclusive flock on "<PATH>.lock"); for a single host.
//
// Keys are plain byte strings; the coordinator's key layout is in docs/COORDINATOR.md. Values
// are JSON text by convention, never interpreted by the store.
//
// Liveness: PutLeased writes a key bound to this store object's lease, which lives `ttl` after
// the last KeepAlive (etcd: a real lease, granted on first use and re-granted after it expired;
// file: remembered with its expiry time, and dropped by List/Get once expired or when the
// store is reopened by another process). Other keys are permanent.
//
// Errors: kIo when the backend cannot be reached or refuses (the message names the endpoint
// and what etcd said); kInvalidArgument for a bad URL or option. A store never aborts on what
// the backend returns.
// Thread safety: every method may be called from any thread; calls are serialised internally.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::store {

struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t revision = 0;  // etcd: mod_revision; file: a counter of changes
};

class Store {
 public:
  virtual ~Store() = default;
  // "etcd://127.0.0.1:2379" or "file:///var/lib/gpumux/store.json": for logs and /inspect.
  virtual std::string Describe() const = 0;

  virtual core::Result<void> Put(std::string_view key, std::string_view value) = 0;
  // std::nullopt when the key does not exist.
  virtual core::Result<std::optional<std::string>> Get(std::string_view key) = 0;
  // Every key starting with `prefix`, in key order.
  virtual core::Result<std::vector<KeyValue>> List(std::string_view prefix) = 0;
  // Deleting a missing key is not an error.
  virtual core::Result<void> Delete(std::string_view key) = 0;
  // Every key starting with `prefix`; returns how many were deleted.
  virtual core::Result<std::int64_t> DeletePrefix(std::string_view prefix) = 0;

  // A key that disappears `ttl` after the last KeepAlive (or PutLeased) unless renewed.
  virtual core::Result<void> PutLeased(std::string_view key, std::string_view value,
                                       std::chrono::seconds ttl) = 0;
  // Renews this store's lease; re-creates it (and re-writes its keys) if it expired meanwhile.
  virtual core::Result<void> KeepAlive() = 0;
};

struct StoreOptions {
  // etcd only.
  std::string ca_file;         // PEM; with etcds:// (empty = the system's roots)
  std::string cert_file;       // client certificate (PEM), with key_file
  std::string key_file;
  std::string user;            // etcd auth (empty = none)
  std::string password_file;   // a file holding the password (never a flag value)
  std::chrono::milliseconds timeout{5000};  // per call
};

// "etcd://h:p[,h:p...]", "etcds://h:p", "file:///path" or a path. Connecting is lazy for etcd
// (a store whose etcd is down is created, and its calls fail with kIo until etcd is back);
// opening a file store reads the file now (an unreadable or malformed file is an error naming
// it; a missing one is an empty store) and takes its lock (an error names the holder's pid).
core::Result<std::unique_ptr<Store>> OpenStore(std::string_view url, const StoreOptions& options = {});

}  // namespace gpumux::store
