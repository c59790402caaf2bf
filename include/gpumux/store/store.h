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
// Liveness: PutLeased writes a key bound to this store object's one lease, which ends `ttl`
// after it was granted or last renewed by KeepAlive (etcd: a real lease, granted on first use
// and granted again, with its keys written again, after it ended; destroying the store revokes
// it, so its keys go at once. file: an expiry time in memory; leased keys are hidden from
// Get/List once it passed, and are not kept when the store is reopened). Other keys are
// permanent.
//
// Cost: etcd, one round trip per call (one per leased key after a lease expired); file, reads
// from memory, and every change (or Apply's batch of changes) rewrites and fsyncs the file.
// Errors: kIo when the backend cannot be reached or refuses (the message names the endpoint
// and what etcd said) or the file cannot be written; kInvalidArgument for a bad URL or option
// or a malformed store file; kFailedPrecondition when another store holds the file. A store
// never aborts on what the backend returns.
// Thread safety: every method may be called from any thread; calls are serialised internally.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::store {

// One change of Apply: a value to put, or std::nullopt to delete the key.
struct Change {
  std::string key;
  std::optional<std::string> value;
};

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
  // Puts and deletes `changes` in order: file, in memory and then one rewrite and fsync for all
  // of them (a writer that coalesces its keys pays one fsync per batch, not per key); etcd, one
  // transaction per 128 changes (its --max-txn-ops; a key at most once in a batch). After an
  // error some changes may have been made: apply the batch again.
  virtual core::Result<void> Apply(std::span<const Change> changes);

  // Writes `key` under this store's lease. The lease is created with `ttl` by the first
  // PutLeased, and again by the first PutLeased or KeepAlive after it ended; a PutLeased does
  // not renew a live lease, and a new `ttl` applies from the next lease on (pass the same one).
  // etcd raises a TTL below its minimum (2 s by default) to that minimum. A key whose write
  // failed is remembered and written by the next KeepAlive that reaches the backend. A later
  // Put, Delete or DeletePrefix of the key takes it off the lease. ttl < 1 s: kInvalidArgument.
  virtual core::Result<void> PutLeased(std::string_view key, std::string_view value,
                                       std::chrono::seconds ttl) = 0;
  // Renews the lease for its TTL. If it had ended (its keys are gone), creates a new one and
  // writes every leased key again. Does nothing when this store has no leased keys.
  virtual core::Result<void> KeepAlive() = 0;
};

struct StoreOptions {
  // etcd only.
  std::string ca_file;    // PEM; with etcds:// (empty = the system's roots)
  std::string cert_file;  // client certificate (PEM), with key_file
  std::string key_file;
  std::string user;                         // etcd auth (empty = none)
  std::string password_file;                // a file holding the password (never a flag value)
  std::chrono::milliseconds timeout{5000};  // per call
};

// "etcd://h:p[,h:p...]", "etcds://h:p", "file:///path" or a path. Connecting is lazy for etcd
// (a store whose etcd is down is created, and its calls fail with kIo until etcd is back);
// opening a file store reads the file now (an unreadable or malformed file is an error naming
// it; a missing one is an empty store) and takes its lock (an error names the holder's pid).
core::Result<std::unique_ptr<Store>> OpenStore(std::string_view url,
                                               const StoreOptions& options = {});

}  // namespace gpumux::store
