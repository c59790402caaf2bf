// `gpumux webhook`'s server: POST /mutate on the one HTTP server over TLS, and the caBundle
// keeper (webhook.h).
#include "gpumux/admission/webhook.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "gpumux/core/json.h"
#include "gpumux/core/time.h"
#include "gpumux/kube/objects.h"
#include "gpumux/net/http_server.h"

namespace gpumux::admission {

using nlohmann::json;

struct Webhook::Impl {
  WebhookOptions options;
  net::ServingCertificate certificate;
  kube::KubeApi* api = nullptr;
  std::unique_ptr<net::HttpServer> server;
  std::atomic<std::int64_t> unchanged{0}, translated{0}, refused{0}, malformed{0};
  std::atomic<bool> draining{false};
  // Whether the caBundle is known to hold the served CA (true from the start without a keeper).
  std::atomic<bool> ready{true};
  std::thread keeper, reloader;
  std::mutex mu;  // guards certificate (the reloader replaces it) and stopping
  std::condition_variable cv;
  bool stopping = false;

  // Whether some node matches `q` (a list of limit 1), within the review's time: the API
  // server waits `timeoutSeconds` (5 s by default) for the whole review, so after `deadline`
  // (or a failed call) the answer is "cannot tell" and no warning is given.
  std::optional<bool> AnyNode(const NodeQuery& q, std::chrono::steady_clock::time_point deadline) {
    if (api == nullptr || std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::string path = "/api/v1/nodes?limit=1&labelSelector=" + kube::QueryEscape(q.label_selector);
    if (!q.field_selector.empty()) path += "&fieldSelector=" + kube::QueryEscape(q.field_selector);
    auto list = api->Get(path);
    if (!list) {
      options.log.Warn("cannot tell which nodes enforce shares (no warning given)",
                       {{"error", list.error().ToString()}});
      return std::nullopt;
    }
    const json* items = kube::JsonChild(*list, "items");
    return items != nullptr && items->is_array() && !items->empty();
  }

  net::Response Mutate(const net::Request& request) {
    auto parsed = core::ParseJson(request.body, "the AdmissionReview");
    if (!parsed) {
      ++malformed;
      return net::Response::Json(400, json{{"error", parsed.error().message}}.dump());
    }
    const json& body = *parsed;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    NodeFinder find;
    if (api != nullptr && options.warn_unenforced) {
      find = [this, deadline](const NodeQuery& q) { return AnyNode(q, deadline); };
    }
    auto answer = Review(body, options.translate, find);
    if (!answer) {
      ++malformed;
      return net::Response::Json(400, json{{"error", answer.error().message}}.dump());
    }
    const json& response = (*answer)["response"];
    if (!response.value("allowed", true)) {
      ++refused;
      options.log.Info("refused", {{"uid", response.value("uid", "")},
                                   {"reason", response["status"].value("message", "")}});
    } else if (response.contains("patch")) {
      ++translated;
      // What the caller sent may lack any of these (Review needs only request.uid and object).
      const json* review = kube::JsonChild(body, "request");
      const json* object = review == nullptr ? nullptr : kube::JsonChild(*review, "object");
      const json* metadata = object == nullptr ? nullptr : kube::JsonChild(*object, "metadata");
      options.log.Debug(
          "translated",
          {{"uid", response.value("uid", "")},
           {"namespace", review == nullptr ? "" : kube::JsonString(*review, "namespace")},
           {"name", metadata == nullptr ? "" : kube::JsonString(*metadata, "name")}});
    } else {
      ++unchanged;
    }
    return net::Response::Json(200, answer->dump());
  }

  // Keeps the Secret, the caBundle and the served pair in step now, then every ca_bundle_every
  // once the caBundle is known to hold the served CA (every reload_every until then) until Stop.
  void KeepCaBundle() {
    std::string last_error;
    std::unique_lock lock(mu);
    while (!stopping) {
      lock.unlock();
      std::string error;
      const bool confirmed = KeepOnce(error);
      if (!error.empty() && error != last_error) {
        options.log.Warn("cannot keep the certificate and the caBundle",
                         {{"configuration", options.configuration}, {"error", error}});
      }
      last_error = error;
      lock.lock();
      cv.wait_for(lock, confirmed ? options.ca_bundle_every : options.reload_every,
                  [this] { return stopping; });
    }
  }

  // One pass (webhook.h, the top): the Secret's pair (renewed there when it must be), its CA
  // written as the caBundle, and that pair served once a pass finds the caBundle already
  // holding its CA. True when it does; `error` says what failed.
  bool KeepOnce(std::string& error) {
    net::ServingCertificate want;
    {
      std::lock_guard lock(mu);
      want = certificate;
    }
    const CertificateSource& s = options.reload_from;
    if (!s.secret_name.empty() && s.cert_file.empty()) {
      auto kept = KeepSecretCertificate(s, *api, options.log, want.ca_pem);
      if (!kept) {
        // The caBundle is left as it is: another replica may serve a newer pair.
        error = kept.error().message + " (serving the certificate read before)";
        return false;
      }
      want = std::move(*kept);
    }
    auto patched = PatchCaBundle(*api, options.configuration, want.ca_pem);
    if (!patched) {
      // Not installed: nothing calls through it, so this replica may serve; checked again soon.
      if (patched.error().http_status == 404) ready = true;
      error = "cannot set the caBundle: " + patched.error().ToString();
      return false;
    }
    if (*patched > 0) {
      options.log.Info("caBundle set",
                       {{"configuration", options.configuration},
                        {"webhooks", std::to_string(*patched)},
                        {"cas", std::to_string(net::PemCertificates(want.ca_pem).size())}});
      // The API server reads the configuration from a watch: its view lags. The pair whose CA
      // was just written is served, and this replica called ready, only once a later pass finds
      // the caBundle still holding it.
      return false;
    }
    std::lock_guard lock(mu);
    if (want.cert_pem != certificate.cert_pem || want.key_pem != certificate.key_pem) {
      if (auto set = server->SetTls({want.cert_pem, want.key_pem}); !set) {
        error = "the Secret's certificate cannot be served; the one read before is: " +
                set.error().message;
        return false;
      }
      options.log.Info("serving the Secret's certificate",
                       {{"secret", s.secret_namespace + "/" + s.secret_name}});
    }
    certificate = std::move(want);
    ready = true;
    return true;
  }

  // Re-reads the certificate files every reload_every until Stop (webhook.h): cert-manager
  // renews at two thirds of a certificate's life and updates the mounted Secret; served once,
  // the old one would be served until it expired (and every review then refused).
  void ReloadCertificate() {
    const CertificateSource& files = options.reload_from;
    std::string last_error;
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, options.reload_every, [this] { return stopping; })) {
      lock.unlock();
      bool soon = false;
      auto read = ReadCertificateFiles(files, &soon);
      lock.lock();
      if (!read) {
        // Mid-update (a new certificate, the old key) or broken: the served one stays.
        if (read.error().message != last_error) {
          options.log.Warn("the certificate files cannot be served; the one read before is",
                           {{"error", read.error().message}});
        }
        last_error = read.error().message;
        continue;
      }
      last_error.clear();
      if (read->cert_pem == certificate.cert_pem && read->key_pem == certificate.key_pem &&
          read->ca_pem == certificate.ca_pem) {
        continue;
      }
      if (auto set = server->SetTls({read->cert_pem, read->key_pem}); !set) {
        options.log.Warn("the re-read certificate cannot be served; the one read before is",
                         {{"error", set.error().message}});
        continue;
      }
      certificate = std::move(*read);
      auto not_after = net::CertificateNotAfter(certificate.cert_pem);
      options.log.Info("serving certificate re-read",
                       {{"file", files.cert_file},
                        {"not_after", not_after ? core::FormatRfc3339(*not_after) : "?"}});
      if (soon) WarnCertificateExpiresSoon(options.log, files.cert_file, certificate.cert_pem);
    }
  }
};

Webhook::Webhook(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Webhook::~Webhook() { Stop(); }

core::Result<std::unique_ptr<Webhook>> Webhook::Start(WebhookOptions options,
                                                      net::ServingCertificate certificate,
                                                      kube::KubeApi* api) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->certificate = std::move(certificate);
  impl->api = api;
  const WebhookOptions& o = impl->options;
  net::ServerOptions server;
  server.name = "webhook";
  server.listen = {net::Endpoint::Tcp(o.host, o.port)};
  server.tls = net::TlsOptions{impl->certificate.cert_pem, impl->certificate.key_pem};
  server.max_connections = o.max_connections;
  server.reuse_port = o.reuse_port;
  server.workers = o.workers;
  // The API server sends one pod per review: a pod object is at most ~1.5 MiB (etcd's limit).
  server.max_body_bytes = std::size_t{3} << 20;
  server.log = o.log;
  impl->server = std::make_unique<net::HttpServer>(server);
  Impl* m = impl.get();
  // On a worker, not the I/O thread: a review's translation must not hold up the probes.
  impl->server->Route("/mutate", {"POST"}, net::Lane::kWorker,
                      [m](const net::Request& r) { return m->Mutate(r); });
  impl->server->Route("/healthz", {"GET"}, net::Lane::kInline,
                      [](const net::Request&) { return net::Response::Text(200, "ok\n"); });
  impl->server->Route("/readyz", {"GET"}, net::Lane::kInline, [m](const net::Request&) {
    if (m->draining) return net::Response::Text(503, "stopping\n");
    if (!m->ready) {
      return net::Response::Text(503, "the caBundle does not hold this certificate's CA yet\n");
    }
    return net::Response::Text(200, "ok\n");
  });
  impl->server->SetEndpointsText("POST /mutate; GET /healthz, /readyz");
  const bool keeps =
      api != nullptr && !o.configuration.empty() && !impl->certificate.ca_pem.empty();
  impl->ready = !keeps;
  if (auto started = impl->server->Start(); !started) return tl::unexpected(started.error());
  if (keeps) {
    impl->keeper = std::thread([m] { m->KeepCaBundle(); });
  }
  if (!o.reload_from.cert_file.empty()) {
    impl->reloader = std::thread([m] { m->ReloadCertificate(); });
  }
  return std::unique_ptr<Webhook>(new Webhook(std::move(impl)));
}

int Webhook::port() const { return impl_->server->port(); }

void Webhook::Drain() {
  impl_->draining = true;
  impl_->server->Drain();
}

void Webhook::Stop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->keeper.joinable()) impl_->keeper.join();
  if (impl_->reloader.joinable()) impl_->reloader.join();
  impl_->server->Stop(std::chrono::seconds(5));
}

Webhook::Counts Webhook::counts() const {
  return {impl_->unchanged, impl_->translated, impl_->refused, impl_->malformed};
}

}  // namespace gpumux::admission
