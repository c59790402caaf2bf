// The webhook's certificate kept in a Secret, its CA put into the MutatingWebhookConfiguration
// (against an in-memory API), and the HTTPS server answering AdmissionReviews.
#include "gpumux/admission/webhook.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "gpumux/core/time.h"
#include "gpumux/kube/base64.h"
#include "tests/testing/kube_fixtures.h"

namespace gpumux::admission {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The API server's part: objects by path; GET, POST to a collection, JSON patches (RFC 6902,
// with test), 404/409/422 as the API server answers them.
class MapApi : public kube::KubeApi {
 public:
  std::map<std::string, json> objects;
  int posts = 0, patches = 0;
  std::atomic<bool> refuse_config_patches{false};  // 403, as without RBAC for the configuration

  void Erase(const std::string& path) {
    std::lock_guard lock(mu_);
    objects.erase(path);
  }

  kube::ApiResult<json> Get(const std::string& path) override {
    std::lock_guard lock(mu_);
    auto it = objects.find(path);
    if (it == objects.end()) return tl::unexpected(kube::ApiError{404, "NotFound", path});
    return it->second;
  }
  kube::ApiResult<json> List(const std::string&, int) override { return json::object(); }
  kube::ApiResult<json> Patch(const std::string& path, const json& body, kube::PatchType) override {
    if (refuse_config_patches && path.find("mutatingwebhookconfigurations") != std::string::npos) {
      return tl::unexpected(kube::ApiError{403, "Forbidden", path});
    }
    std::lock_guard lock(mu_);
    auto it = objects.find(path);
    if (it == objects.end()) return tl::unexpected(kube::ApiError{404, "NotFound", path});
    try {
      it->second = it->second.patch(body);
    } catch (const json::exception& e) {
      return tl::unexpected(kube::ApiError{422, "Invalid", e.what()});
    }
    ++patches;
    it->second["metadata"]["resourceVersion"] = std::to_string(++version_);
    return it->second;
  }
  kube::ApiResult<json> Post(const std::string& path, const json& body) override {
    std::lock_guard lock(mu_);
    const std::string at = path + "/" + body["metadata"]["name"].get<std::string>();
    if (objects.count(at) != 0) return tl::unexpected(kube::ApiError{409, "AlreadyExists", at});
    ++posts;
    objects[at] = body;
    objects[at]["metadata"]["resourceVersion"] = std::to_string(++version_);
    return objects[at];
  }
  kube::ApiResult<void> Watch(const std::string&, const std::string&,
                              const std::function<bool(kube::WatchEvent&&)>&, std::stop_token,
                              int) override {
    return {};
  }

 private:
  std::mutex mu_;
  int version_ = 1;
};

constexpr const char* kSecret = "/api/v1/namespaces/gpumux-system/secrets/gpumux-webhook-tls";
constexpr const char* kConfig =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpumux";

// The configuration "gpumux" with one webhook and no caBundle yet.
json OneWebhookConfiguration() {
  return {{"metadata", {{"name", "gpumux"}}},
          {"webhooks", {{{"name", "pods.webhook.gpumux.io"}, {"clientConfig", json::object()}}}}};
}

CertificateSource Source(std::vector<std::string> names = {"gpumux-webhook.gpumux-system.svc"}) {
  CertificateSource s;
  s.names = std::move(names);
  s.secret_namespace = "gpumux-system";
  s.secret_name = "gpumux-webhook-tls";
  return s;
}

TEST(WebhookCertificate, IsMadeOnceAndKeptInASecretThatARestartReads) {
  MapApi api;
  auto first = ObtainCertificate(Source(), &api, nullptr);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  ASSERT_EQ(api.posts, 1);
  const json& secret = api.objects.at(kSecret);
  EXPECT_EQ(secret["type"], "kubernetes.io/tls");
  EXPECT_EQ(kube::DecodeBase64(secret["data"]["tls.crt"].get<std::string>()), first->cert_pem);
  auto again = ObtainCertificate(Source(), &api, nullptr);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->cert_pem, first->cert_pem);
  EXPECT_EQ(api.posts, 1);
  EXPECT_EQ(api.patches, 0);
}

TEST(WebhookCertificate, ASecretThatDoesNotCoverANewNameIsReplaced) {
  MapApi api;
  auto first = ObtainCertificate(Source(), &api, nullptr);
  ASSERT_TRUE(first.has_value());
  auto wider =
      ObtainCertificate(Source({"gpumux-webhook.gpumux-system.svc", "127.0.0.1"}), &api, nullptr);
  ASSERT_TRUE(wider.has_value()) << wider.error().message;
  EXPECT_NE(wider->cert_pem, first->cert_pem);
  EXPECT_TRUE(net::CertificateCovers(wider->cert_pem, "127.0.0.1").value());
  EXPECT_EQ(api.patches, 1);
  EXPECT_EQ(kube::DecodeBase64(api.objects.at(kSecret)["data"]["tls.crt"].get<std::string>()),
            wider->cert_pem);
}

TEST(WebhookCertificate, FilesThatDoNotPairAreRefusedNamingThem) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("webhook-" + std::to_string(getpid()));
  fs::create_directories(dir);
  net::CertificateRequest r;
  r.names = {"a.example"};
  const auto a = net::MakeServingCertificate(r).value(), b = net::MakeServingCertificate(r).value();
  std::ofstream(dir / "tls.crt") << a.cert_pem;
  std::ofstream(dir / "tls.key") << b.key_pem;
  CertificateSource s;
  s.cert_file = (dir / "tls.crt").string();
  s.key_file = (dir / "tls.key").string();
  auto got = ObtainCertificate(s, nullptr, nullptr);
  ASSERT_FALSE(got.has_value());
  EXPECT_NE(got.error().message.find("tls.key"), std::string::npos);
  EXPECT_NE(got.error().message.find("does not match"), std::string::npos);
  std::ofstream(dir / "tls.key") << a.key_pem;
  EXPECT_TRUE(ObtainCertificate(s, nullptr, nullptr).has_value());
  fs::remove_all(dir);
}

// shared/reliability-repros/webhook-cert-files-unchecked-unreloaded: files were checked only for
// pairing. They are checked as a kept certificate is (names, expiry; an expired one is refused
// in webhook_cert_files_unchecked_unreloaded, which makes one with openssl), and a missing file
// is bad input like a bad one.
TEST(WebhookCertificate, FilesMustCoverTheNamesAndAMissingOneIsBadInput) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("webhook-n-" + std::to_string(getpid()));
  fs::create_directories(dir);
  net::CertificateRequest r;
  r.names = {"a.example"};
  r.valid_days = 10;
  const auto a = net::MakeServingCertificate(r).value();
  std::ofstream(dir / "tls.crt") << a.cert_pem;
  std::ofstream(dir / "tls.key") << a.key_pem;
  CertificateSource s;
  s.cert_file = (dir / "tls.crt").string();
  s.key_file = (dir / "tls.key").string();
  s.names = {"a.example"};
  bool soon = false;
  ASSERT_TRUE(ReadCertificateFiles(s, &soon).has_value());
  EXPECT_TRUE(soon) << "10 days left";
  s.names = {"a.example", "b.example"};
  auto uncovered = ReadCertificateFiles(s);
  ASSERT_FALSE(uncovered.has_value());
  EXPECT_NE(uncovered.error().message.find("does not cover b.example"), std::string::npos)
      << uncovered.error().message;
  s.key_file = (dir / "nope.key").string();
  auto missing = ReadCertificateFiles(s);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, core::ErrorCode::kInvalidArgument);
  EXPECT_NE(missing.error().message.find("nope.key"), std::string::npos);
  fs::remove_all(dir);
}

// cert-manager renews a certificate at two thirds of its life and rewrites the mounted files:
// the webhook serves the new pair to new connections within seconds, and keeps the old one
// while the files do not pair (a half-written update).
TEST(WebhookServer, ServesARenewedCertificateFromItsFilesAndKeepsTheOldWhileTheyDoNotPair) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("webhook-r-" + std::to_string(getpid()));
  fs::create_directories(dir);
  net::CertificateRequest r;
  r.names = {"127.0.0.1"};
  const auto a = net::MakeServingCertificate(r).value(), b = net::MakeServingCertificate(r).value();
  const auto write = [&](const std::string& cert, const std::string& key) {
    std::ofstream(dir / "tls.crt.new") << cert;
    std::ofstream(dir / "tls.key.new") << key;
    fs::rename(dir / "tls.crt.new", dir / "tls.crt");
    fs::rename(dir / "tls.key.new", dir / "tls.key");
  };
  write(a.cert_pem, a.key_pem);
  std::ofstream(dir / "a-ca.pem") << a.ca_pem;
  std::ofstream(dir / "b-ca.pem") << b.ca_pem;
  WebhookOptions o;
  o.port = 0;
  o.reload_from.cert_file = (dir / "tls.crt").string();
  o.reload_from.key_file = (dir / "tls.key").string();
  o.reload_every = std::chrono::milliseconds(100);
  auto webhook = Webhook::Start(o, a, nullptr);
  ASSERT_TRUE(webhook.has_value()) << webhook.error().message;
  const auto served_by = [&](const char* ca) {
    httplib::SSLClient client("127.0.0.1", (*webhook)->port());
    client.set_ca_cert_path((dir / ca).c_str());
    client.enable_server_certificate_verification(true);
    auto health = client.Get("/healthz");
    return health && health->status == 200;
  };
  EXPECT_TRUE(served_by("a-ca.pem"));
  write(b.cert_pem, a.key_pem);  // half-way: the old key
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(served_by("a-ca.pem")) << "a pair that does not match is not served";
  write(b.cert_pem, b.key_pem);
  bool renewed = false;
  for (int i = 0; i < 100 && !renewed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    renewed = served_by("b-ca.pem");
  }
  EXPECT_TRUE(renewed) << "the renewed certificate was not served within 10 s";
  (*webhook)->Stop();
  fs::remove_all(dir);
}

// Two replicas serve the Secret's certificate. When one renews it (a restart within 30 days of
// its end), the other serves the new pair at its next caBundle check and puts the Secret's CA
// into the configuration, not its own: the two keepers no longer overwrite each other's CA.
TEST(WebhookServer, AReplicaServesTheCertificateAnotherRenewedInTheSecret) {
  MapApi api;
  api.objects[kConfig] = OneWebhookConfiguration();
  CertificateSource source = Source({"127.0.0.1"});
  const auto first = ObtainCertificate(source, &api, nullptr).value();
  WebhookOptions o;
  o.port = 0;
  o.ca_bundle_every = std::chrono::milliseconds(100);
  o.reload_from = source;
  auto webhook = Webhook::Start(o, first, &api);
  ASSERT_TRUE(webhook.has_value()) << webhook.error().message;
  const auto bundle = [&] {
    return api.Get(kConfig).value()["webhooks"][0]["clientConfig"].value("caBundle", "");
  };
  ASSERT_TRUE(
      kube::testing::Eventually([&] { return bundle() == kube::EncodeBase64(first.ca_pem); }));

  // The other replica's renewal, as ObtainCertificate writes it.
  net::CertificateRequest r;
  r.names = {"127.0.0.1"};
  const auto renewed = net::MakeServingCertificate(r).value();
  ASSERT_TRUE(api.Patch(kSecret,
                        json::array({{{"op", "add"},
                                      {"path", "/data"},
                                      {"value",
                                       {{"ca.crt", kube::EncodeBase64(renewed.ca_pem)},
                                        {"tls.crt", kube::EncodeBase64(renewed.cert_pem)},
                                        {"tls.key", kube::EncodeBase64(renewed.key_pem)}}}}}),
                        kube::PatchType::kJson)
                  .has_value());
  const fs::path ca =
      fs::path(::testing::TempDir()) / ("webhook-renewed-" + std::to_string(getpid()));
  std::ofstream(ca) << renewed.ca_pem;
  const auto serves_renewed = [&] {
    httplib::SSLClient client("127.0.0.1", (*webhook)->port());
    client.set_ca_cert_path(ca.c_str());
    client.enable_server_certificate_verification(true);
    auto health = client.Get("/healthz");
    return health && health->status == 200;
  };
  EXPECT_TRUE(kube::testing::Eventually(serves_renewed)) << "the renewed pair is not served";
  EXPECT_TRUE(kube::testing::Eventually([&] {
    return bundle() == kube::EncodeBase64(renewed.ca_pem);
  })) << "the keeper put its own CA back";
  (*webhook)->Stop();
  fs::remove(ca);
}

// A graceful stop's first step: /readyz says 503 (the pod leaves the Service's endpoints, which
// the API server reads to call it) while reviews are still answered.
TEST(WebhookServer, ADrainingWebhookIsNotReadyButStillAnswersReviews) {
  net::CertificateRequest r;
  r.names = {"127.0.0.1"};
  const auto cert = net::MakeServingCertificate(r).value();
  WebhookOptions o;
  o.port = 0;
  auto webhook = Webhook::Start(o, cert, nullptr);
  ASSERT_TRUE(webhook.has_value()) << webhook.error().message;
  httplib::SSLClient client("127.0.0.1", (*webhook)->port());
  client.enable_server_certificate_verification(false);
  EXPECT_EQ(client.Get("/readyz")->status, 200);
  (*webhook)->Drain();
  EXPECT_EQ(client.Get("/readyz")->status, 503);
  EXPECT_EQ(client.Get("/healthz")->status, 200) << "alive: the kubelet must not restart it";
  json review = {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}};
  review["request"] = {{"uid", "u-1"}, {"operation", "CREATE"}};
  review["request"]["object"]["spec"]["containers"] = json::array({{{"name", "c"}}});
  auto answer = client.Post("/mutate", review.dump(), "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200) << answer->body;
  (*webhook)->Stop();
}

// A renewal while replicas serve: the new ca.crt holds the new CA first and the CAs trusted
// before (the configuration's caBundle), until the overlap written on the Secret ends; then the
// next replica to read it keeps only the new CA.
TEST(WebhookCertificate, ARenewalKeepsTrustingThePreviousCaUntilItsOverlapEnds) {
  MapApi api;
  api.objects[kConfig] = OneWebhookConfiguration();
  CertificateSource source = Source();
  source.configuration = "gpumux";
  const auto first = ObtainCertificate(source, &api, nullptr).value();
  ASSERT_EQ(net::PemCertificates(first.ca_pem).size(), 1U);
  ASSERT_EQ(PatchCaBundle(api, "gpumux", first.ca_pem).value(), 1);

  source.names.push_back("127.0.0.1");  // the Secret no longer covers every name: renewed
  const auto renewed = ObtainCertificate(source, &api, nullptr).value();
  const auto cas = net::PemCertificates(renewed.ca_pem);
  ASSERT_EQ(cas.size(), 2U) << "the previous CA is not kept";
  EXPECT_EQ(cas[1], net::PemCertificates(first.ca_pem)[0]);
  EXPECT_TRUE(net::CheckServingPair(renewed).has_value()) << "the first CA signed it";
  EXPECT_TRUE(net::CheckServingPair({cas[1], first.cert_pem, first.key_pem}).has_value());
  const json& annotations = api.objects.at(kSecret)["metadata"]["annotations"];
  const auto until = core::ParseRfc3339(annotations.value("gpumux.io/previous-cas-until", ""));
  ASSERT_TRUE(until.has_value()) << annotations.dump();
  EXPECT_NEAR(static_cast<double>(*until - std::time(nullptr)), 3600.0, 60.0);

  // Within the overlap, replicas read both CAs.
  EXPECT_EQ(ObtainCertificate(source, &api, nullptr).value().ca_pem, renewed.ca_pem);
  // Once it has ended, only the new one.
  api.objects[kSecret]["metadata"]["annotations"]["gpumux.io/previous-cas-until"] =
      core::FormatRfc3339(std::time(nullptr) - 1);
  const auto pruned = ObtainCertificate(source, &api, nullptr).value();
  EXPECT_EQ(pruned.ca_pem, cas[0]);
  EXPECT_EQ(pruned.cert_pem, renewed.cert_pem);
  EXPECT_EQ(kube::DecodeBase64(api.objects.at(kSecret)["data"]["ca.crt"].get<std::string>()),
            cas[0]);
  EXPECT_FALSE(
      api.objects.at(kSecret)["metadata"]["annotations"].contains("gpumux.io/previous-cas-until"));
}

bool ServesTrustedBy(int port, const std::string& bundle_pem, const fs::path& file) {
  std::ofstream(file, std::ios::trunc) << bundle_pem;
  httplib::SSLClient client("127.0.0.1", port);
  client.set_ca_cert_path(file.c_str());
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(2);
  auto health = client.Get("/healthz");
  return health && health->status == 200;
}

std::string BundleOf(MapApi& api) {
  const std::string b64 =
      api.Get(kConfig).value()["webhooks"][0]["clientConfig"].value("caBundle", "");
  return kube::DecodeBase64(b64).value_or("");
}

// A replica is ready only once the caBundle is known to hold its CA: while the configuration
// cannot be written, /readyz is 503 (the pod stays out of the Service) though reviews are served.
TEST(WebhookServer, IsReadyOnlyOnceTheCaBundleHoldsItsCa) {
  MapApi api;
  api.objects[kConfig] = OneWebhookConfiguration();
  CertificateSource source = Source({"127.0.0.1"});
  source.configuration = "gpumux";
  const auto first = ObtainCertificate(source, &api, nullptr).value();
  api.refuse_config_patches = true;
  WebhookOptions o;
  o.port = 0;
  o.reload_every = std::chrono::milliseconds(100);
  o.reload_from = source;
  auto webhook = Webhook::Start(o, first, &api);
  ASSERT_TRUE(webhook.has_value()) << webhook.error().message;
  httplib::SSLClient client("127.0.0.1", (*webhook)->port());
  client.enable_server_certificate_verification(false);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(client.Get("/readyz")->status, 503);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(client.Get("/healthz")->status, 200);
  api.refuse_config_patches = false;
  EXPECT_TRUE(kube::testing::Eventually([&] { return client.Get("/readyz")->status == 200; }));
  EXPECT_EQ(BundleOf(api), first.ca_pem);
  (*webhook)->Stop();
}

// Without the configuration installed nothing calls through it: ready, and the keeper goes on
// checking (every reload_every) so that a configuration installed later gets the CA.
TEST(WebhookServer, IsReadyWhileTheConfigurationIsNotInstalledAndSetsItsCaOnceItIs) {
  MapApi api;
  CertificateSource source = Source({"127.0.0.1"});
  const auto first = ObtainCertificate(source, &api, nullptr).value();
  WebhookOptions o;
  o.port = 0;
  o.reload_every = std::chrono::milliseconds(100);
  o.reload_from = source;
  auto webhook = Webhook::Start(o, first, &api);
  ASSERT_TRUE(webhook.has_value()) << webhook.error().message;
  httplib::SSLClient client("127.0.0.1", (*webhook)->port());
  client.enable_server_certificate_verification(false);
  EXPECT_TRUE(kube::testing::Eventually([&] { return client.Get("/readyz")->status == 200; }));
  api.Post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
           OneWebhookConfiguration());
  EXPECT_TRUE(kube::testing::Eventually([&] { return BundleOf(api) == first.ca_pem; }));
  (*webhook)->Stop();
}

// Two replicas serve; the Secret is deleted (an operator rotating a key that leaked): the first
// keeper to see it renews. Through the hand-over, a client that trusts what the caBundle holds
// at that moment (the API server) verifies both replicas every time; both end on the new pair.
TEST(WebhookServer, TwoReplicasStayTrustedWhileOneRenewsTheDeletedSecret) {
  MapApi api;
  api.objects[kConfig] = OneWebhookConfiguration();
  CertificateSource source = Source({"127.0.0.1"});
  source.configuration = "gpumux";
  const auto first = ObtainCertificate(source, &api, nullptr).value();
  const auto start = [&](std::chrono::milliseconds every) {
    WebhookOptions o;
    o.port = 0;
    o.ca_bundle_every = every;
    o.reload_every = std::chrono::milliseconds(300);
    o.reload_from = source;
    return std::move(Webhook::Start(o, first, &api).value());
  };
  auto quick = start(std::chrono::milliseconds(300));
  auto slow = start(std::chrono::milliseconds(1500));
  const fs::path file =
      fs::path(::testing::TempDir()) / ("webhook-bundle-" + std::to_string(getpid()));
  ASSERT_TRUE(kube::testing::Eventually([&] { return BundleOf(api) == first.ca_pem; }));

  api.Erase(kSecret);
  int refused = 0, calls = 0;
  std::string renewed_ca;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    for (Webhook* replica : {quick.get(), slow.get()}) {
      ++calls;
      if (!ServesTrustedBy(replica->port(), BundleOf(api), file)) ++refused;
    }
    auto secret = api.Get(kSecret);
    if (secret && renewed_ca.empty()) {
      renewed_ca = kube::DecodeBase64((*secret)["data"]["ca.crt"].get<std::string>()).value();
    }
    const std::string only_new =
        renewed_ca.empty() ? std::string() : net::PemCertificates(renewed_ca)[0];
    if (!only_new.empty() && ServesTrustedBy(quick->port(), only_new, file) &&
        ServesTrustedBy(slow->port(), only_new, file)) {
      break;  // both serve the renewed pair
    }
  }
  EXPECT_EQ(refused, 0) << "of " << calls << " calls";
  ASSERT_FALSE(renewed_ca.empty()) << "no replica renewed the Secret";
  EXPECT_EQ(net::PemCertificates(renewed_ca).size(), 2U) << "the old CA is not kept";
  EXPECT_EQ(BundleOf(api), renewed_ca);
  const std::string only_new = net::PemCertificates(renewed_ca)[0];
  EXPECT_TRUE(ServesTrustedBy(quick->port(), only_new, file));
  EXPECT_TRUE(ServesTrustedBy(slow->port(), only_new, file)) << "the slow replica did not follow";
  quick->Stop();
  slow->Stop();
  fs::remove(file);
}

TEST(WebhookCaBundle, EveryWebhookGetsTheCaOnceAndAChangedOneIsPutBack) {
  MapApi api;
  api.objects[kConfig] = {
      {"metadata", {{"name", "gpumux"}}},
      {"webhooks",
       {{{"name", "namespaces.webhook.gpumux.io"}, {"clientConfig", json::object()}},
        {{"name", "pods.webhook.gpumux.io"}, {"clientConfig", {{"caBundle", "old"}}}}}}};
  auto patched = PatchCaBundle(api, "gpumux", "PEM");
  ASSERT_TRUE(patched.has_value()) << patched.error().ToString();
  EXPECT_EQ(*patched, 2);
  for (const json& hook : api.objects[kConfig]["webhooks"]) {
    EXPECT_EQ(hook["clientConfig"]["caBundle"], kube::EncodeBase64("PEM"));
  }
  EXPECT_EQ(PatchCaBundle(api, "gpumux", "PEM").value(), 0);
  api.objects[kConfig]["webhooks"][1]["clientConfig"]["caBundle"] = "";
  EXPECT_EQ(PatchCaBundle(api, "gpumux", "PEM").value(), 1);
  EXPECT_EQ(PatchCaBundle(api, "absent", "PEM").error().http_status, 404);
}

TEST(WebhookServer, AnswersReviewsOverHttpsAndKeepsTheCaBundle) {
  MapApi api;
  api.objects[kConfig] = OneWebhookConfiguration();
  net::CertificateRequest r;
  r.names = {"127.0.0.1"};
  const auto cert = net::MakeServingCertificate(r).value();
  WebhookOptions o;
  o.port = 0;
  auto webhook = Webhook::Start(o, cert, &api);
  ASSERT_TRUE(webhook.has_value()) << webhook.error().message;
  const fs::path ca = fs::path(::testing::TempDir()) / ("webhook-ca-" + std::to_string(getpid()));
  std::ofstream(ca) << cert.ca_pem;
  httplib::SSLClient client("127.0.0.1", (*webhook)->port());
  client.set_ca_cert_path(ca.c_str());
  client.enable_server_certificate_verification(true);
  json container = {{"name", "c"}};
  container["resources"]["limits"]["nvidia.com/gpu"] = "1";
  json review = {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}};
  review["request"] = {{"uid", "u-9"}, {"operation", "CREATE"}};
  review["request"]["kind"] = {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}};
  review["request"]["object"]["metadata"]["name"] = "p";
  review["request"]["object"]["spec"]["containers"] = json::array({container});
  auto answer = client.Post("/mutate", review.dump(), "application/json");
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200);
  const json body = json::parse(answer->body);
  EXPECT_EQ(body["response"]["uid"], "u-9");
  EXPECT_EQ(body["response"]["patchType"], "JSONPatch");
  // What a caller other than the API server may send: no metadata, a namespace that is a number.
  json odd = review;
  odd["request"]["namespace"] = 5;
  odd["request"]["object"].erase("metadata");
  auto answered = client.Post("/mutate", odd.dump(), "application/json");
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->status, 200) << answered->body;
  auto bad = client.Post("/mutate", "{}", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  // Through core::ParseJson: a value nested 100,000 deep is refused before it is parsed (it
  // crashed the webhook: the repro webhook-extender-deep-json-crash).
  json deep_review = review;
  deep_review["request"]["object"]["spec"]["containers"][0]["resources"]["claims"] = "@";
  std::string deep_text = deep_review.dump();
  deep_text.replace(deep_text.find("\"@\""), 3,
                    std::string(100000, '[') + std::string(100000, ']'));
  auto deep = client.Post("/mutate", deep_text, "application/json");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->status, 400);
  EXPECT_NE(deep->body.find("the AdmissionReview: nested deeper than 128 levels"),
            std::string::npos)
      << deep->body;
  EXPECT_EQ(client.Get("/healthz")->status, 200);
  const auto counts = (*webhook)->counts();
  EXPECT_EQ(counts.translated, 2);
  EXPECT_EQ(counts.malformed, 2);
  (*webhook)->Stop();
  EXPECT_EQ(api.objects[kConfig]["webhooks"][0]["clientConfig"]["caBundle"],
            kube::EncodeBase64(cert.ca_pem));
  fs::remove(ca);
}

}  // namespace
}  // namespace gpumux::admission
