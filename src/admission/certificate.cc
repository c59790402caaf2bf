// The webhook's serving certificate: from files, or made and kept in a Secret (webhook.h).
#include <ctime>
#include <utility>

#include "gpumux/admission/webhook.h"
#include "gpumux/core/time.h"
#include "gpumux/io/read_file.h"
#include "gpumux/kube/base64.h"
#include "gpumux/kube/objects.h"

namespace gpumux::admission {
namespace {

using core::ErrorCode;
using core::MakeError;
using nlohmann::json;

// A certificate closer than this to its end is replaced.
constexpr std::int64_t kRenewBeforeSeconds = std::int64_t{30} * 86400;
constexpr std::size_t kMaxPemBytes = std::size_t{1} << 20;

// "" when `c` can serve `names` for 30 days more; else why not.
std::string Unusable(const net::ServingCertificate& c, const std::vector<std::string>& names) {
  if (auto pair = net::CheckServingPair(c); !pair) return pair.error().message;
  for (const std::string& name : names) {
    auto covers = net::CertificateCovers(c.cert_pem, name);
    if (!covers || !*covers) return "it does not cover " + name;
  }
  auto not_after = net::CertificateNotAfter(c.cert_pem);
  if (!not_after || *not_after - std::time(nullptr) < kRenewBeforeSeconds) {
    return "it expires within 30 days";
  }
  return {};
}

std::optional<net::ServingCertificate> FromSecret(const json& secret) {
  const json* data = kube::JsonChild(secret, "data");
  if (data == nullptr) return std::nullopt;
  auto field = [&](const char* key) {
    return kube::DecodeBase64(kube::JsonString(*data, key)).value_or("");
  };
  net::ServingCertificate c{field("ca.crt"), field("tls.crt"), field("tls.key")};
  if (c.ca_pem.empty() || c.cert_pem.empty() || c.key_pem.empty()) return std::nullopt;
  return c;
}

json SecretData(const net::ServingCertificate& c) {
  return {{"ca.crt", kube::EncodeBase64(c.ca_pem)},
          {"tls.crt", kube::EncodeBase64(c.cert_pem)},
          {"tls.key", kube::EncodeBase64(c.key_pem)}};
}

core::Error ApiFailure(const std::string& what, const kube::ApiError& e) {
  return core::Error{e.http_status == 0 ? ErrorCode::kUnavailable : ErrorCode::kFailedPrecondition,
                     what + ": " + e.ToString()};
}

}  // namespace

void WarnCertificateExpiresSoon(const core::Logger& log, const std::string& file,
                                const std::string& pem) {
  auto not_after = net::CertificateNotAfter(pem);
  log.Warn(
      "the serving certificate expires within 30 days: renew it (the webhook re-reads "
      "its files)",
      {{"file", file}, {"not_after", not_after ? core::FormatRfc3339(*not_after) : "?"}});
}

core::Result<net::ServingCertificate> ReadCertificateFiles(const CertificateSource& s,
                                                           bool* expires_soon) {
  net::ServingCertificate c;
  for (auto [path, out] : {std::pair{&s.cert_file, &c.cert_pem}, std::pair{&s.key_file, &c.key_pem},
                           std::pair{&s.ca_file, &c.ca_pem}}) {
    if (path->empty()) continue;
    auto text = io::ReadInputFile(*path, kMaxPemBytes);
    // A missing or unreadable file is the operator's to fix, like a bad one.
    if (!text) return MakeError(ErrorCode::kInvalidArgument, text.error().message);
    *out = std::move(*text);
  }
  const auto bad = [&](const std::string& why) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        s.cert_file + ", " + s.key_file + (s.ca_file.empty() ? "" : ", " + s.ca_file) + ": " + why);
  };
  if (auto pair = net::CheckServingPair(c); !pair) return bad(pair.error().message);
  auto not_after = net::CertificateNotAfter(c.cert_pem);
  if (!not_after) return bad(not_after.error().message);
  const std::int64_t now = std::time(nullptr);
  if (*not_after <= now) {
    return bad("the certificate expired at " + core::FormatRfc3339(*not_after) +
               " (every TLS client would refuse it)");
  }
  for (const std::string& name : s.names) {
    auto covers = net::CertificateCovers(c.cert_pem, name);
    if (!covers || !*covers) return bad("the certificate does not cover " + name);
  }
  if (expires_soon != nullptr) *expires_soon = *not_after - now < kRenewBeforeSeconds;
  return c;
}

core::Result<net::ServingCertificate> ObtainCertificate(const CertificateSource& s,
                                                        kube::KubeApi* api,
                                                        const core::Logger& log) {
  if (!s.cert_file.empty() || !s.key_file.empty()) {
    bool soon = false;
    auto files = ReadCertificateFiles(s, &soon);
    if (files && soon) WarnCertificateExpiresSoon(log, s.cert_file, files->cert_pem);
    return files;
  }
  net::CertificateRequest request;
  request.common_name = s.names.empty() ? std::string() : s.names.front();
  request.names = s.names;
  request.valid_days = s.valid_days;
  if (s.secret_name.empty() || api == nullptr) return net::MakeServingCertificate(request);

  const std::string collection = "/api/v1/namespaces/" + s.secret_namespace + "/secrets";
  const std::string path = collection + "/" + s.secret_name;
  const std::string where = "Secret " + s.secret_namespace + "/" + s.secret_name;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto secret = api->Get(path);
    if (!secret && secret.error().http_status != 404) {
      return tl::unexpected(ApiFailure("cannot read " + where, secret.error()));
    }
    std::string why = "it does not exist";
    if (secret) {
      auto kept = FromSecret(*secret);
      why = kept ? Unusable(*kept, s.names) : "it has no ca.crt, tls.crt and tls.key";
      if (why.empty()) {
        log.Info("serving certificate read", {{"secret", where}});
        return *kept;
      }
    }
    auto made = net::MakeServingCertificate(request);
    if (!made) return made;
    kube::ApiResult<json> written;
    if (!secret) {
      written = api->Post(collection, {{"apiVersion", "v1"},
                                       {"kind", "Secret"},
                                       {"type", "kubernetes.io/tls"},
                                       {"metadata",
                                        {{"name", s.secret_name},
                                         {"namespace", s.secret_namespace},
                                         {"labels", {{"app.kubernetes.io/name", "gpumux"}}}}},
                                       {"data", SecretData(*made)}});
    } else {
      const std::string version =
          kube::JsonString(secret->value("metadata", json::object()), "resourceVersion");
      written = api->Patch(
          path,
          json::array({{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", version}},
                       {{"op", "add"}, {"path", "/data"}, {"value", SecretData(*made)}}}),
          kube::PatchType::kJson);
    }
    if (written) {
      log.Info("serving certificate made", {{"secret", where}, {"reason", why}});
      return made;
    }
    const int status = written.error().http_status;
    if (status != 409 && status != 422) {
      return tl::unexpected(ApiFailure("cannot write " + where, written.error()));
    }
    // Another replica wrote it first: read theirs.
  }
  return MakeError(ErrorCode::kUnavailable, where + " kept changing while it was written");
}

core::Result<std::optional<net::ServingCertificate>> ReadCertificateSecret(
    const CertificateSource& s, kube::KubeApi& api) {
  const std::string where = "Secret " + s.secret_namespace + "/" + s.secret_name;
  auto secret = api.Get("/api/v1/namespaces/" + s.secret_namespace + "/secrets/" + s.secret_name);
  if (!secret) {
    if (secret.error().http_status == 404) return std::nullopt;
    return tl::unexpected(ApiFailure("cannot read " + where, secret.error()));
  }
  auto kept = FromSecret(*secret);
  if (!kept || !Unusable(*kept, s.names).empty()) return std::nullopt;
  return kept;
}

kube::ApiResult<int> PatchCaBundle(kube::KubeApi& api, const std::string& name,
                                   const std::string& ca_pem) {
  const std::string path =
      "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" + name;
  auto config = api.Get(path);
  if (!config) return tl::unexpected(config.error());
  const std::string bundle = kube::EncodeBase64(ca_pem);
  json patch = json::array();
  const json* hooks = kube::JsonChild(*config, "webhooks");
  for (std::size_t i = 0; hooks != nullptr && hooks->is_array() && i < hooks->size(); ++i) {
    const json& hook = (*hooks)[i];
    const json* client = kube::JsonChild(hook, "clientConfig");
    if (client != nullptr && kube::JsonString(*client, "caBundle") == bundle) continue;
    const std::string at = "/webhooks/" + std::to_string(i);
    patch.push_back(
        {{"op", "test"}, {"path", at + "/name"}, {"value", kube::JsonString(hook, "name")}});
    patch.push_back({{"op", "add"}, {"path", at + "/clientConfig/caBundle"}, {"value", bundle}});
  }
  if (patch.empty()) return 0;
  auto patched = api.Patch(path, patch, kube::PatchType::kJson);
  if (!patched) return tl::unexpected(patched.error());
  return static_cast<int>(patch.size() / 2);
}

}  // namespace gpumux::admission
