// The etcd v3 store: one long-lived gRPC channel to etcd's KV, Lease and Auth services.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "etcd/rpc.grpc.pb.h"
#include "src/store/stores.h"

namespace gpumux::store {

namespace {

namespace pb = etcdserverpb;

// The first key after every key that starts with `prefix` (etcd's prefix range end); "\0"
// (every key) when the prefix is all 0xff bytes or empty.
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

core::Result<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return core::MakeError(core::ErrorCode::kInvalidArgument, std::string("cannot read the ") + what + " " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class EtcdStore final : public Store {
 public:
  EtcdStore(std::string describe, std::string target,
            std::shared_ptr<grpc::ChannelCredentials> creds, grpc::ChannelArguments args,
            StoreOptions options, std::string password)
      : describe_(std::move(describe)), target_(std::move(target)), creds_(std::move(creds)),
        args_(std::move(args)), options_(std::move(options)), password_(std::move(password)) {
    Connect();
  }

  ~EtcdStore() override {
    std::lock_guard lock(mu_);
    if (lease_id_ != 0) {
      // Our leased keys go at once instead of at the TTL (best effort, short deadline).
      pb::LeaseRevokeRequest req;
      req.set_id(lease_id_);
      pb::LeaseRevokeResponse resp;
      grpc::ClientContext ctx;
      Prepare(ctx, std::chrono::milliseconds(500));
      (void)lease_->LeaseRevoke(&ctx, req, &resp);
    }
  }

  std::string Describe() const override { return describe_; }

  core::Result<void> Put(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mu_);
    leased_.erase(std::string(key));
    return PutLocked(key, value, 0);
  }

  core::Result<std::optional<std::string>> Get(std::string_view key) override {
    std::lock_guard lock(mu_);
    pb::RangeRequest req;
    req.set_key(std::string(key));
    pb::RangeResponse resp;
    if (auto ok = Call("Range", [&](grpc::ClientContext& c) { return kv_->Range(&c, req, &resp); }); !ok) {
      return tl::unexpected(ok.error());
    }
    if (resp.kvs_size() == 0) return std::optional<std::string>();
    return std::optional<std::string>(resp.kvs(0).value());
  }

  core::Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    pb::RangeRequest req;
    req.set_key(prefix.empty() ? std::string(1, '\0') : std::string(prefix));
    req.set_range_end(PrefixEnd(prefix));
    req.set_sort_order(pb::RangeRequest::ASCEND);
    req.set_sort_target(pb::RangeRequest::KEY);
    pb::RangeResponse resp;
    if (auto ok = Call("Range", [&](grpc::ClientContext& c) { return kv_->Range(&c, req, &resp); }); !ok) {
      return tl::unexpected(ok.error());
    }
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
    return Call("DeleteRange", [&](grpc::ClientContext& c) { return kv_->DeleteRange(&c, req, &resp); });
  }

  core::Result<std::int64_t> DeletePrefix(std::string_view prefix) override {
    std::lock_guard lock(mu_);
    for (auto it = leased_.begin(); it != leased_.end();) {
      it = it->first.rfind(prefix, 0) == 0 ? leased_.erase(it) : std::next(it);
    }
    pb::DeleteRangeRequest req;
    req.set_key(prefix.empty() ? std::string(1, '\0') : std::string(prefix));
    req.set_range_end(PrefixEnd(prefix));
    pb::DeleteRangeResponse resp;
    if (auto ok = Call("DeleteRange", [&](grpc::ClientContext& c) { return kv_->DeleteRange(&c, req, &resp); }); !ok) {
      return tl::unexpected(ok.error());
    }
    return resp.deleted();
  }

  core::Result<void> PutLeased(std::string_view key, std::string_view value,
                               std::chrono::seconds ttl) override {
    if (ttl.count() < 1) {
      return core::MakeError(core::ErrorCode::kInvalidArgument, "a lease needs a TTL of at least 1 s");
    }
    std::lock_guard lock(mu_);
    ttl_ = ttl;
    leased_[std::string(key)] = std::string(value);
    if (lease_id_ == 0) {
      if (auto granted = Grant(); !granted) return granted;
    }
    auto put = PutLocked(key, value, lease_id_);
    if (!put && put.error().message.find("lease not found") != std::string::npos) {
      lease_id_ = 0;
      if (auto granted = Grant(); !granted) return granted;
      put = PutLocked(key, value, lease_id_);
    }
    return put;
  }

  core::Result<void> KeepAlive() override {
    std::lock_guard lock(mu_);
    if (lease_id_ == 0) return Regrant();
    grpc::ClientContext ctx;
    Prepare(ctx, options_.timeout);
    auto stream = lease_->LeaseKeepAlive(&ctx);
    pb::LeaseKeepAliveRequest req;
    req.set_id(lease_id_);
    pb::LeaseKeepAliveResponse resp;
    const bool exchanged = stream->Write(req) && stream->Read(&resp);
    stream->WritesDone();
    const grpc::Status status = stream->Finish();
    if (!exchanged || !status.ok()) {
      if (IsAuthError(status)) token_.clear();
      MaybeReconnect(status);
      return Failed("LeaseKeepAlive", status);
    }
    if (resp.ttl() <= 0) return Regrant();  // expired while we were away: keys are gone
    return {};
  }

 private:
  // A new channel. Used once at start, and again when calls fail while the channel is not
  // READY: gRPC's own reconnection can stay in its backoff for longer than an etcd restart
  // takes, and a fresh channel connects at once. Never more than once a second.
  void Connect() {
    channel_ = grpc::CreateCustomChannel(target_, creds_, args_);
    kv_ = pb::KV::NewStub(channel_);
    lease_ = pb::Lease::NewStub(channel_);
    auth_ = pb::Auth::NewStub(channel_);
    connected_at_ = std::chrono::steady_clock::now();
  }
  void MaybeReconnect(const grpc::Status& s) {
    const bool unreachable = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!unreachable || channel_->GetState(false) == GRPC_CHANNEL_READY) return;
    if (std::chrono::steady_clock::now() - connected_at_ < std::chrono::seconds(1)) return;
    token_.clear();
    Connect();
  }

  void Prepare(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) const {
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    if (!token_.empty()) ctx.AddMetadata("token", token_);
  }

  static bool IsAuthError(const grpc::Status& s) {
    return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
           s.error_message().find("invalid auth token") != std::string::npos;
  }

  tl::unexpected<core::Error> Failed(const char* call, const grpc::Status& s) const {
    return core::MakeError(core::ErrorCode::kIo, describe_ + ": " + call + " failed: " +
                                                     StatusName(s.error_code()) + ": " + s.error_message());
  }

  static std::string StatusName(grpc::StatusCode code) {
    switch (code) {
      case grpc::StatusCode::UNAVAILABLE: return "unavailable";
      case grpc::StatusCode::DEADLINE_EXCEEDED: return "deadline exceeded";
      case grpc::StatusCode::UNAUTHENTICATED: return "unauthenticated";
      case grpc::StatusCode::PERMISSION_DENIED: return "permission denied";
      case grpc::StatusCode::INVALID_ARGUMENT: return "invalid argument";
      case grpc::StatusCode::NOT_FOUND: return "not found";
      case grpc::StatusCode::FAILED_PRECONDITION: return "failed precondition";
      default: return "code " + std::to_string(static_cast<int>(code));
    }
  }

  core::Result<void> Authenticate() {
    if (options_.user.empty() || !token_.empty()) return {};
    pb::AuthenticateRequest req;
    req.set_name(options_.user);
    req.set_password(password_);
    pb::AuthenticateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options_.timeout);
    const grpc::Status s = auth_->Authenticate(&ctx, req, &resp);
    if (!s.ok()) {
      MaybeReconnect(s);
      return Failed("Authenticate", s);
    }
    token_ = resp.token();
    return {};
  }

  // One unary call with the deadline and the token; an auth failure re-authenticates and
  // retries once.
  template <typename F>
  core::Result<void> Call(const char* name, F&& call) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (auto ok = Authenticate(); !ok) return ok;
      grpc::ClientContext ctx;
      Prepare(ctx, options_.timeout);
      const grpc::Status s = call(ctx);
      if (s.ok()) return {};
      if (attempt == 0 && !options_.user.empty() && IsAuthError(s)) {
        token_.clear();
        continue;
      }
      MaybeReconnect(s);
      return Failed(name, s);
    }
    return {};
  }

  core::Result<void> PutLocked(std::string_view key, std::string_view value, std::int64_t lease) {
    pb::PutRequest req;
    req.set_key(std::string(key));
    req.set_value(std::string(value));
    req.set_lease(lease);
    pb::PutResponse resp;
    return Call("Put", [&](grpc::ClientContext& c) { return kv_->Put(&c, req, &resp); });
  }

  core::Result<void> Grant() {
    pb::LeaseGrantRequest req;
    req.set_ttl(ttl_.count());
    pb::LeaseGrantResponse resp;
    if (auto ok = Call("LeaseGrant", [&](grpc::ClientContext& c) { return lease_->LeaseGrant(&c, req, &resp); }); !ok) {
      return ok;
    }
    if (!resp.error().empty()) {
      return core::MakeError(core::ErrorCode::kIo, describe_ + ": LeaseGrant refused: " + resp.error());
    }
    lease_id_ = resp.id();
    return {};
  }

  // A new lease, and every leased key written again under it.
  core::Result<void> Regrant() {
    lease_id_ = 0;
    if (leased_.empty()) return {};
    if (auto granted = Grant(); !granted) return granted;
    for (const auto& [key, value] : leased_) {
      if (auto put = PutLocked(key, value, lease_id_); !put) return put;
    }
    return {};
  }

  std::string describe_;
  std::string target_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  grpc::ChannelArguments args_;
  std::shared_ptr<grpc::Channel> channel_;
  std::chrono::steady_clock::time_point connected_at_;
  StoreOptions options_;
  std::string password_;
  std::unique_ptr<pb::KV::Stub> kv_;
  std::unique_ptr<pb::Lease::Stub> lease_;
  std::unique_ptr<pb::Auth::Stub> auth_;
  std::mutex mu_;
  std::string token_;
  std::int64_t lease_id_ = 0;
  std::chrono::seconds ttl_{15};
  std::map<std::string, std::string> leased_;
};

bool IsIpv4(const std::string& host) {
  return !host.empty() && host.find_first_not_of("0123456789.") == std::string::npos;
}

}  // namespace

core::Result<std::unique_ptr<Store>> OpenEtcdStore(const std::vector<std::string>& endpoints,
                                                   bool tls, const StoreOptions& options) {
  std::string target;
  std::string joined;
  for (const auto& e : endpoints) joined += (joined.empty() ? "" : ",") + e;
  if (endpoints.size() == 1) {
    target = endpoints.front();
  } else {
    for (const auto& e : endpoints) {
      if (!IsIpv4(e.substr(0, e.rfind(':')))) {
        return core::MakeError(core::ErrorCode::kInvalidArgument,
                               "etcd endpoints: several endpoints must be IPv4 addresses (got " + e + ")");
      }
    }
    target = "ipv4:" + joined;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      auto ca = ReadFile(options.ca_file, "CA file");
      if (!ca) return tl::unexpected(ca.error());
      ssl.pem_root_certs = *ca;
    }
    if (!options.cert_file.empty()) {
      auto cert = ReadFile(options.cert_file, "client certificate");
      if (!cert) return tl::unexpected(cert.error());
      auto key = ReadFile(options.key_file, "client key");
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
    auto p = ReadFile(options.password_file, "password file");
    if (!p) return tl::unexpected(p.error());
    password = *p;
    while (!password.empty() && (password.back() == '\n' || password.back() == '\r')) password.pop_back();
  }
  grpc::ChannelArguments args;
  // After etcd comes back, reconnect within a second or two, not after gRPC's default 2 min.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  if (endpoints.size() > 1) args.SetLoadBalancingPolicyName("round_robin");
  return std::unique_ptr<Store>(std::make_unique<EtcdStore>(
      std::string(tls ? "etcds://" : "etcd://") + joined, target, std::move(creds), args, options,
      std::move(password)));
}

}  // namespace gpumux::store
