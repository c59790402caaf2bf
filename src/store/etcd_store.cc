// The etcd v3 store: one long-lived gRPC channel to etcd's KV, Lease and Auth services, created
// with the store and never replaced. Calls fail fast (no wait_for_ready) while etcd cannot be
// reached; gRPC reconnects the channel by itself when etcd comes back, within about 2 s (the
// reconnection backoff is capped at 2 s, and WatchChannel keeps the attempts polled).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "etcd/rpc.grpc.pb.h"
#include "gpumux/io/read_file.h"
#include "src/store/stores.h"

namespace gpumux::store {

namespace {

namespace pb = etcdserverpb;

// etcd's default --max-txn-ops: the most requests one transaction may hold.
constexpr std::size_t kMaxTxnOps = 128;

// The first key after every key that starts with `prefix` (etcd's prefix range end); "\0"
// (with key "\0": every key) when the prefix is empty or all 0xff bytes.
std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = end.back();
    if (static_cast<unsigned char>(c) < 0xff) {
      c = static_cast<char>(static_cast<unsigned char>(c) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::string RangeStart(std::string_view prefix) {
  return prefix.empty() ? std::string(1, '\0') : std::string(prefix);
}

std::string StatusName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
      return "unavailable";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "deadline exceeded";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "unauthenticated";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "permission denied";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "invalid argument";
    case grpc::StatusCode::NOT_FOUND:
      return "not found";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "failed precondition";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "resource exhausted";
    default: {
      std::string name = "code ";
      name += std::to_string(static_cast<int>(code));
      return name;
    }
  }
}

// etcd 3.4 answers a stale or unknown token with UNAUTHENTICATED "etcdserver: invalid auth
// token" (simple tokens live in etcd's memory: a restart or their 5 min TTL ends them).
bool IsAuthError(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_message().find("invalid auth token") != std::string::npos;
}

// etcd revoked our lease (it expired while we were away).
bool IsLeaseNotFound(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::NOT_FOUND &&
         s.error_message().find("lease not found") != std::string::npos;
}

class EtcdStore final : public Store {
 public:
  EtcdStore(std::string describe, const std::string& target,
            const std::shared_ptr<grpc::ChannelCredentials>& creds,
            const grpc::ChannelArguments& args, StoreOptions options, std::string password)
      : describe_(std::move(describe)),
        options_(std::move(options)),
        password_(std::move(password)),
        channel_(grpc::CreateCustomChannel(target, creds, args)),
        kv_(pb::KV::NewStub(channel_)),
        lease_(pb::Lease::NewStub(channel_)),
        auth_(pb::Auth::NewStub(channel_)) {}

  ~EtcdStore() override {
    stopping_.store(true);
    if (watcher_.joinable()) watcher_.join();
    std::lock_guard lock(mu_);
    if (lease_id_ == 0) return;
    // Our leased keys go at once instead of at the TTL (best effort, short deadline).
    pb::LeaseRevokeRequest req;
    req.set_id(lease_id_);
    pb::LeaseRevokeResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx, std::min(options_.timeout, std::chrono::milliseconds(500)));
    (void)lease_->LeaseRevoke(&ctx, req, &resp);
  }

  std::string Describe() const override { return describe_; }

  core::Result<void> Put(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mu_);
    leased_.erase(std::string(key));
    const grpc::Status s = PutLocked(key, value, 0);
    if (!s.ok()) return tl::unexpected(Failed("Put", s));
    return {};
  }

  // One transaction per kMaxTxnOps changes (a batch's keys are distinct: the coordinator's
  // writer coalesces them), instead of a round trip per key.
  core::Result<void> Apply(std::span<const Change> changes) override {
    std::lock_guard lock(mu_);
    for (std::size_t at = 0; at < changes.size(); at += kMaxTxnOps) {
      pb::TxnRequest req;
      const std::size_t end = std::min(changes.size(), at + kMaxTxnOps);
      for (std::size_t k = at; k < end; ++k) {
        leased_.erase(changes[k].key);
        pb::RequestOp* op = req.add_success();
        if (changes[k].value) {
          op->mutable_request_put()->set_key(changes[k].key);
          op->mutable_request_put()->set_value(*changes[k].value);
        } else {
          op->mutable_request_delete_range()->set_key(changes[k].key);
        }
      }
      pb::TxnResponse resp;
      const grpc::Status s = Call([&](grpc::ClientContext& c) { return kv_->Txn(&c, req, &resp); });
      if (!s.ok()) return tl::unexpected(Failed("Txn", s));
    }
    return {};
  }

  core::Result<std::optional<std::string>> Get(std::string_view key) override {
    std::lock_guard lock(mu_);
    pb::RangeRequest req;
    req.set_key(std::string(key));
    pb::RangeResponse resp;
    const grpc::Status s = Call([&](grpc::ClientContext& c) { return kv_->Range(&c, req, &resp); });
    if (!s.ok()) return tl::unexpected(Failed("Range", s));
    if (resp.kvs_size() == 0) return std::optional<std::string>();
    return std::optional<std::string>(resp.kvs(0).value());
  }

  core::Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    pb::RangeRequest req;
    req.set_key(RangeStart(prefix));
    req.set_range_end(PrefixEnd(prefix));
    req.set_sort_order(pb::RangeRequest::ASCEND);
    req.set_sort_target(pb::RangeRequest::KEY);
    pb::RangeResponse resp;
    const grpc::Status s = Call([&](grpc::ClientContext& c) { return kv_->Range(&c, req, &resp); });
    if (!s.ok()) return tl::unexpected(Failed("Range", s));
    std::vector<KeyValue> out;
    out.reserve(static_cast<std::size_t>(resp.kvs_size()));
    for (const auto& kv : resp.kvs()) out.push_back({kv.key(), kv.value(), kv.mod_revision()});
    return out;
  }

  core::Result<void> Delete(std::string_view key) override {
    std::lock_guard lock(mu_);
    leased_.erase(std::string(key));
    pb::DeleteRangeRequest req;
    req.set_key(std::string(key));
    pb::DeleteRangeResponse resp;
    const grpc::Status s =
        Call([&](grpc::ClientContext& c) { return kv_->DeleteRange(&c, req, &resp); });
    if (!s.ok()) return tl::unexpected(Failed("DeleteRange", s));
    return {};
  }

  core::Result<std::int64_t> DeletePrefix(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    for (auto it = leased_.begin(); it != leased_.end();) {
      it = it->first.rfind(prefix, 0) == 0 ? leased_.erase(it) : std::next(it);
    }
    pb::DeleteRangeRequest req;
    req.set_key(RangeStart(prefix));
    req.set_range_end(PrefixEnd(prefix));
    pb::DeleteRangeResponse resp;
    const grpc::Status s =
        Call([&](grpc::ClientContext& c) { return kv_->DeleteRange(&c, req, &resp); });
    if (!s.ok()) return tl::unexpected(Failed("DeleteRange", s));
    return resp.deleted();
  }

  core::Result<void> PutLeased(std::string_view key, std::string_view value,
                               std::chrono::seconds ttl) override {
    if (ttl.count() < 1) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "a lease needs a TTL of at least 1 s");
    }
    std::lock_guard lock(mu_);
    ttl_ = ttl;
    // Remembered before it is written: if this fails, KeepAlive writes it once etcd answers.
    leased_[std::string(key)] = std::string(value);
    if (lease_id_ == 0) return Regrant();
    const grpc::Status s = PutLocked(key, value, lease_id_);
    if (IsLeaseNotFound(s)) return Regrant();
    if (!s.ok()) {
      leased_written_ = false;
      return tl::unexpected(Failed("Put", s));
    }
    return {};
  }

  core::Result<void> KeepAlive() override {
    std::lock_guard lock(mu_);
    if (lease_id_ == 0) return Regrant();
    pb::LeaseKeepAliveResponse resp;
    const grpc::Status s = Call([&](grpc::ClientContext& c) {
      // One request on a fresh stream, one reply, then close: a store calls KeepAlive every
      // few seconds, and a stream per call needs no reader thread and survives reconnects.
      auto stream = lease_->LeaseKeepAlive(&c);
      pb::LeaseKeepAliveRequest req;
      req.set_id(lease_id_);
      const bool answered = stream->Write(req) && stream->Read(&resp);
      stream->WritesDone();
      grpc::Status status = stream->Finish();
      if (status.ok() && !answered) {
        status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "the keep-alive stream closed without a reply");
      }
      return status;
    });
    if (!s.ok()) return tl::unexpected(Failed("LeaseKeepAlive", s));
    if (resp.ttl() <= 0) return Regrant();  // expired while we were away: its keys are gone
    if (!leased_written_) return WriteLeased();
    return {};
  }

 private:
  void Prepare(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) const {
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    if (!token_.empty()) ctx.AddMetadata("token", token_);
  }

  core::Error Failed(const char* call, const grpc::Status& s) const {
    std::string message = describe_;
    message += ": ";
    message += call;
    message += " failed: ";
    message += StatusName(s.error_code());
    message += ": ";
    message += s.error_message();
    return core::Error{core::ErrorCode::kIo, std::move(message)};
  }

  // A token for options_.user, unless there is one already (or no user).
  grpc::Status Authenticate() {
    if (options_.user.empty() || !token_.empty()) return grpc::Status::OK;
    pb::AuthenticateRequest req;
    req.set_name(options_.user);
    req.set_password(password_);
    pb::AuthenticateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options_.timeout);
    grpc::Status s = auth_->Authenticate(&ctx, req, &resp);
    if (!s.ok()) {
      return grpc::Status(s.error_code(),
                          "Authenticate as " + options_.user + ": " + s.error_message());
    }
    token_ = resp.token();
    return grpc::Status::OK;
  }

  // One call with the per-call deadline and the token; a refused token is renewed and the
  // call tried once more.
  template <typename F>
  grpc::Status Call(F&& call) {
    grpc::Status s;
    for (int attempt = 0; attempt < 2; ++attempt) {
      s = Authenticate();
      if (s.ok()) {
        grpc::ClientContext ctx;
        Prepare(ctx, options_.timeout);
        s = call(ctx);
        if (!s.ok() && !options_.user.empty() && IsAuthError(s)) {
          token_.clear();
          continue;
        }
      }
      break;
    }
    if (!s.ok() && channel_->GetState(false) != GRPC_CHANNEL_READY) WatchChannel();
    return s;
  }

  // Calls fail fast while etcd is unreachable, so no call waits on the channel, and gRPC
  // polls a connection attempt only when something waits on it (or from its backup poller,
  // every 5 s): a restarted etcd would be seen up to 10 s late. So after a failure a thread
  // waits on the channel's state, which polls it, until the channel is READY again; then it
  // ends. Called with mu_ held.
  void WatchChannel() {
    if (watching_.exchange(true)) return;
    if (watcher_.joinable()) watcher_.join();  // one that has just ended
    watcher_ = std::thread([this] {
      auto state = channel_->GetState(true);
      while (!stopping_.load() && state != GRPC_CHANNEL_READY) {
        channel_->WaitForStateChange(state, std::chrono::system_clock::now() + kWatchSlice);
        state = channel_->GetState(true);
      }
      watching_.store(false);
    });
  }

  grpc::Status PutLocked(std::string_view key, std::string_view value, std::int64_t lease) {
    pb::PutRequest req;
    req.set_key(std::string(key));
    req.set_value(std::string(value));
    req.set_lease(lease);
    pb::PutResponse resp;
    return Call([&](grpc::ClientContext& c) { return kv_->Put(&c, req, &resp); });
  }

  // A new lease (the old one, if any, is gone), and every leased key written under it.
  core::Result<void> Regrant() {
    lease_id_ = 0;
    if (leased_.empty()) return {};
    pb::LeaseGrantRequest req;
    req.set_ttl(ttl_.count());
    pb::LeaseGrantResponse resp;
    const grpc::Status s =
        Call([&](grpc::ClientContext& c) { return lease_->LeaseGrant(&c, req, &resp); });
    if (!s.ok()) return tl::unexpected(Failed("LeaseGrant", s));
    if (!resp.error().empty()) {
      return core::MakeError(core::ErrorCode::kIo,
                             describe_ + ": LeaseGrant refused: " + resp.error());
    }
    lease_id_ = resp.id();
    leased_written_ = false;
    return WriteLeased();
  }

  // Every leased key under lease_id_, which has just been granted or renewed (should etcd not
  // know it after all, the next KeepAlive grants another).
  core::Result<void> WriteLeased() {
    for (const auto& [key, value] : leased_) {
      const grpc::Status s = PutLocked(key, value, lease_id_);
      if (IsLeaseNotFound(s)) lease_id_ = 0;
      if (!s.ok()) return tl::unexpected(Failed("Put", s));
    }
    leased_written_ = true;
    return {};
  }

  const std::string describe_;
  const StoreOptions options_;
  const std::string password_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<pb::KV::Stub> kv_;
  const std::unique_ptr<pb::Lease::Stub> lease_;
  const std::unique_ptr<pb::Auth::Stub> auth_;

  std::mutex mu_;
  std::string token_;                          // empty: authenticate before the next call
  std::int64_t lease_id_ = 0;                  // 0: none granted (or it was lost)
  std::chrono::seconds ttl_{15};               // of the next lease granted
  std::map<std::string, std::string> leased_;  // what PutLeased wrote, to write again
  bool leased_written_ = true;                 // every key of leased_ is in etcd under lease_id_

  static constexpr std::chrono::milliseconds kWatchSlice{100};  // how long a destructor may wait
  std::thread watcher_;                                         // guarded by mu_
  std::atomic<bool> watching_{false};                           // watcher_ runs
  std::atomic<bool> stopping_{false};
};

bool IsIpv4(const std::string& host) {
  return !host.empty() && host.find_first_not_of("0123456789.") == std::string::npos;
}

core::Result<std::string> ReadOptionFile(const std::string& path, const char* what) {
  auto text = io::ReadInputFile(path, 1 << 20);
  if (!text) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           std::string("etcd ") + what + ": " + text.error().message);
  }
  return text;
}

}  // namespace

core::Result<std::unique_ptr<Store>> OpenEtcdStore(const std::vector<std::string>& endpoints,
                                                   Transport transport,
                                                   const StoreOptions& options) {
  if (endpoints.empty())
    return core::MakeError(core::ErrorCode::kInvalidArgument, "no etcd endpoint");
  std::string joined;
  for (const auto& e : endpoints) {
    if (!joined.empty()) joined += ',';
    joined += e;
  }
  // One endpoint: gRPC's default (DNS) resolver, so a host name works. Several: the ipv4:
  // resolver's address list, with round_robin over the members that are up.
  std::string target = endpoints.front();
  if (endpoints.size() > 1) {
    for (const auto& e : endpoints) {
      if (!IsIpv4(e.substr(0, e.rfind(':')))) {
        return core::MakeError(
            core::ErrorCode::kInvalidArgument,
            "etcd endpoints: several endpoints must be IPv4 addresses (got " + e + ")");
      }
    }
    target = "ipv4:" + joined;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (transport == Transport::kTls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      auto ca = ReadOptionFile(options.ca_file, "CA file");
      if (!ca) return tl::unexpected(ca.error());
      ssl.pem_root_certs = *ca;
    }
    if (!options.cert_file.empty()) {
      auto cert = ReadOptionFile(options.cert_file, "client certificate");
      if (!cert) return tl::unexpected(cert.error());
      auto key = ReadOptionFile(options.key_file, "client key");
      if (!key) return tl::unexpected(key.error());
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  std::string password;
  if (!options.user.empty()) {
    auto p = ReadOptionFile(options.password_file, "password file");
    if (!p) return tl::unexpected(p.error());
    password = *p;
    while (!password.empty() && (password.back() == '\n' || password.back() == '\r'))
      password.pop_back();
  }
  grpc::ChannelArguments args;
  // Back within about 2 s of etcd, not after gRPC's default backoff of up to 2 min.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // A connection that died without a FIN (etcd's host gone) is noticed within ~40 s of calls,
  // as Kubernetes' etcd client does (30 s keepalive, 10 s timeout; etcd allows one per 5 s).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  if (endpoints.size() > 1) args.SetLoadBalancingPolicyName("round_robin");
  const std::string scheme = transport == Transport::kTls ? "etcds://" : "etcd://";
  return std::unique_ptr<Store>(std::make_unique<EtcdStore>(scheme + joined, target, creds, args,
                                                            options, std::move(password)));
}

}  // namespace gpumux::store
