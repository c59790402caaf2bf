// The webhook's serving certificate: from files, or made and kept in a Secret (webhook.h).
#include <algorithm>
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
// How many CAs a renewal keeps trusting besides the new one.
constexpr std::size_t kMaxPrevious = 2;
// On the Secret while its ca.crt holds the CAs trusted before a renewal: until when (RFC 3339).
constexpr const char* kOverlapAnnotation = "gpumux.io/previous-cas-until";
constexpr const char* kOverlapPointer = "gpumux.io~1previous-cas-until";  // RFC 6901

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

std::string SecretPath(const CertificateSource& s) {
  return "/api/v1/namespaces/" + s.secret_namespace + "/secrets/" + s.secret_name;
}

std::string ConfigurationPath(const std::string& name) {
  return "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" + name;
}

net::CertificateRequest Request(const CertificateSource& s) {
  net::CertificateRequest request;
  request.common_name = s.names.empty() ? std::string() : s.names.front();
  request.names = s.names;
  request.valid_days = s.valid_days;
  return request;
}

// The CAs the API server trusts now for `configuration` (every webhook's caBundle). A read that
// fails counts as none: the renewal then keeps the others it knows.
std::string TrustedNow(kube::KubeApi& api, const std::string& configuration) {
  if (configuration.empty()) return {};
  auto config = api.Get(ConfigurationPath(configuration));
  if (!config) return {};
  std::string bundle;
  const json* hooks = kube::JsonChild(*config, "webhooks");
  for (std::size_t i = 0; hooks != nullptr && hooks->is_array() && i < hooks->size(); ++i) {
    const json* client = kube::JsonChild((*hooks)[i], "clientConfig");
    if (client == nullptr) continue;
    bundle += kube::DecodeBase64(kube::JsonString(*client, "caBundle")).value_or("");
  }
  return bundle;
}

// `fresh`, then the distinct unexpired certificates of `others` (at most kMaxPrevious).
std::string UnionBundle(const std::string& fresh, const std::vector<std::string>& others) {
  std::string bundle = fresh;
  std::vector<std::string> seen = net::PemCertificates(fresh);
  const std::size_t most = seen.size() + kMaxPrevious;
  const std::int64_t now = std::time(nullptr);
  for (const std::string& pems : others) {
    for (const std::string& pem : net::PemCertificates(pems)) {
      if (seen.size() >= most) return bundle;
      auto not_after = net::CertificateNotAfter(pem);
      if (!not_after || *not_after <= now) continue;
      if (std::find(seen.begin(), seen.end(), pem) != seen.end()) continue;
      seen.push_back(pem);
      bundle += pem;
    }
  }
  return bundle;
}

// A new pair written to the Secret (created when `secret` is null, else replaced under a
// resourceVersion precondition). Its ca.crt is the new CA and, until the overlap ends, the CAs
// trusted before: the configuration's caBundle, the Secret's old ca.crt and `served_ca`, since
// replicas that have not followed yet serve certificates those signed. nullopt when another
// writer won the race.
core::Result<std::optional<net::ServingCertificate>> Renew(const CertificateSource& s,
                                                           kube::KubeApi& api, const json* secret,
                                                           const std::string& served_ca) {
  auto made = net::MakeServingCertificate(Request(s));
  if (!made) return tl::unexpected(made.error());
  std::optional<net::ServingCertificate> old = secret ? FromSecret(*secret) : std::nullopt;
  made->ca_pem = UnionBundle(made->ca_pem, {TrustedNow(api, s.configuration),
                                            old ? old->ca_pem : std::string(), served_ca});
  json annotations = json::object();
  if (net::PemCertificates(made->ca_pem).size() > 1) {
    annotations[kOverlapAnnotation] = core::FormatRfc3339(std::time(nullptr) + s.overlap.count());
  }
  kube::ApiResult<json> written;
  if (secret == nullptr) {
    written = api.Post("/api/v1/namespaces/" + s.secret_namespace + "/secrets",
                       {{"apiVersion", "v1"},
                        {"kind", "Secret"},
                        {"type", "kubernetes.io/tls"},
                        {"metadata",
                         {{"name", s.secret_name},
                          {"namespace", s.secret_namespace},
                          {"labels", {{"app.kubernetes.io/name", "gpumux"}}},
                          {"annotations", annotations}}},
                        {"data", SecretData(*made)}});
  } else {
    const json& m = secret->value("metadata", json::object());
    written = api.Patch(
        SecretPath(s),
        json::array({{{"op", "test"},
                      {"path", "/metadata/resourceVersion"},
                      {"value", kube::JsonString(m, "resourceVersion")}},
                     {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", annotations}},
                     {{"op", "add"}, {"path", "/data"}, {"value", SecretData(*made)}}}),
        kube::PatchType::kJson);
  }
  if (written) return std::optional<net::ServingCertificate>(std::move(*made));
  const int status = written.error().http_status;
  if (status == 409 || status == 422) return std::optional<net::ServingCertificate>();
  return tl::unexpected(ApiFailure(
      "cannot write Secret " + s.secret_namespace + "/" + s.secret_name, written.error()));
}

// Once the overlap a renewal wrote has ended, ca.crt keeps only its first CA (the one that signed
// tls.crt): a replaced CA, its key perhaps leaked, stays trusted only as long as replicas need
// to follow. True when it dropped some; the API's error (409 or 422: the Secret changed).
kube::ApiResult<bool> PruneEndedOverlap(const CertificateSource& s, kube::KubeApi& api,
                                        const json& secret, net::ServingCertificate& kept) {
  const std::vector<std::string> cas = net::PemCertificates(kept.ca_pem);
  if (cas.size() < 2) return false;
  const json& m = secret.value("metadata", json::object());
  const json* annotations = kube::JsonChild(m, "annotations");
  auto ends = core::ParseRfc3339(
      annotations == nullptr ? std::string() : kube::JsonString(*annotations, kOverlapAnnotation));
  if (!ends || *ends > std::time(nullptr)) return false;  // not a renewal's, or not ended
  auto patched = api.Patch(
      SecretPath(s),
      json::array(
          {{{"op", "test"},
            {"path", "/metadata/resourceVersion"},
            {"value", kube::JsonString(m, "resourceVersion")}},
           {{"op", "add"}, {"path", "/data/ca.crt"}, {"value", kube::EncodeBase64(cas.front())}},
           {{"op", "remove"}, {"path", std::string("/metadata/annotations/") + kOverlapPointer}}}),
      kube::PatchType::kJson);
  if (!patched) return tl::unexpected(patched.error());
  kept.ca_pem = cas.front();
  return true;
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
  if (s.secret_name.empty() || api == nullptr) return net::MakeServingCertificate(Request(s));
  return KeepSecretCertificate(s, *api, log, "");
}

core::Result<net::ServingCertificate> KeepSecretCertificate(const CertificateSource& s,
                                                            kube::KubeApi& api,
                                                            const core::Logger& log,
                                                            const std::string& served_ca) {
  const std::string where = "Secret " + s.secret_namespace + "/" + s.secret_name;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto secret = api.Get(SecretPath(s));
    if (!secret && secret.error().http_status != 404) {
      return tl::unexpected(ApiFailure("cannot read " + where, secret.error()));
    }
    std::string why = "it does not exist";
    if (secret) {
      std::optional<net::ServingCertificate> kept = FromSecret(*secret);
      why = kept ? Unusable(*kept, s.names) : "it has no ca.crt, tls.crt and tls.key";
      if (why.empty()) {
        auto pruned = PruneEndedOverlap(s, api, *secret, *kept);
        if (!pruned && (pruned.error().http_status == 409 || pruned.error().http_status == 422)) {
          continue;  // changed meanwhile: read it again
        }
        if (!pruned) {
          log.Warn("cannot drop the previous CAs from the Secret; kept",
                   {{"secret", where}, {"error", pruned.error().ToString()}});
        } else if (*pruned) {
          log.Info("previous CAs dropped: the overlap ended", {{"secret", where}});
        }
        return *kept;
      }
    }
    auto made = Renew(s, api, secret ? &*secret : nullptr, served_ca);
    if (!made) return tl::unexpected(made.error());
    if (*made) {
      log.Info("serving certificate made",
               {{"secret", where},
                {"reason", why},
                {"trusted_cas", std::to_string(net::PemCertificates((*made)->ca_pem).size())}});
      return std::move(**made);
    }
    // Another replica wrote it first: read theirs.
  }
  return MakeError(ErrorCode::kUnavailable, where + " kept changing while it was written");
}

kube::ApiResult<int> PatchCaBundle(kube::KubeApi& api, const std::string& name,
                                   const std::string& ca_pem) {
  const std::string path = ConfigurationPath(name);
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
