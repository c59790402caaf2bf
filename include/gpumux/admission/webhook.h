// `gpumux webhook`: the mutating admission webhook (translate.h) served over HTTPS by the one
// server (net/http_server.h), and the certificate it serves with.
//
// The certificate: either files the operator gives (cert-manager's, say), or one the webhook
// makes and keeps. Kept in a Secret (type kubernetes.io/tls, keys tls.crt, tls.key, ca.crt)
// so that a restarted or second replica serves the same one: read it; when it is absent, does
// not cover every name, does not pair, or expires within 30 days, make a new one and write it
// (created, or replaced with a resourceVersion precondition; a replica that loses the race reads
// the winner's). The CA then goes into every webhook of the MutatingWebhookConfiguration
// (`configuration`) as clientConfig.caBundle, and is put back there every `ca_bundle_every` if
// something (a re-install) changed it: the API server calls the webhook only over TLS it can
// verify, and no cert-manager is needed.
//
// Several replicas, and a renewal while they serve (docs/decisions.md, "The webhook's two
// replicas"). A renewal's ca.crt is a bundle: the new CA first, then the CAs trusted before it
// (the configuration's caBundle, the old ca.crt, the renewer's served CA), until the overlap it
// writes on the Secret (gpumux.io/previous-cas-until) ends; then any replica drops them. Every
// replica's keeper reads the Secret, renews it when it is absent or unusable, writes its ca.crt
// as the caBundle, and only then serves the Secret's pair when it differs: a certificate is
// served only once the API server trusts its CA, and the replicas that have not followed yet
// stay trusted through the overlap. A replica is ready (/readyz) once the caBundle is known to
// hold its CA.
//
// Who calls: anyone who can reach the port. Mutating is stateless (a review in, a patch out; no
// writes): a caller other than the API server learns only how gpumux would translate the pod it
// sent, and whether some node enforces shares (the nodes' enforcement.gpumux.io/ labels, which
// any client that may list nodes sees), so the listener needs no client authentication; it is
// bounded like every listener (connections, body size, deadlines).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpumux/admission/translate.h"
#include "gpumux/core/log.h"
#include "gpumux/core/result.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/net/tls.h"

namespace gpumux::admission {

struct CertificateSource {
  // Files: all three paths, or none (then the webhook makes its certificate).
  std::string cert_file, key_file, ca_file;   // ca_file may stay "" (no caBundle is patched)
  std::vector<std::string> names;             // DNS names and IPs the certificate must cover
  std::string secret_namespace, secret_name;  // where a made certificate is kept; "" = nowhere
  int valid_days = 3650;
  // Whose caBundle a renewal keeps trusting through the overlap ("" = none), and how long a
  // renewal's ca.crt also holds the CAs trusted before it.
  std::string configuration;
  std::chrono::seconds overlap{3600};
};

// The serving certificate per `source` (see the top of this file). `api` may be null only when
// no Secret is named. Error naming the file, the Secret or the API server's answer.
core::Result<net::ServingCertificate> ObtainCertificate(const CertificateSource& source,
                                                        kube::KubeApi* api,
                                                        const core::Logger& log);

// The certificate in `source`'s files, checked as a kept one is: it pairs with the key (and the
// CA), covers every name in `source.names`, and has not expired. Error (kInvalidArgument)
// naming the files and what is wrong, a missing file too. `expires_soon`, when given, is set
// when it ends within 30 days.
core::Result<net::ServingCertificate> ReadCertificateFiles(const CertificateSource& source,
                                                           bool* expires_soon = nullptr);
// The certificate kept in `source`'s Secret when it can serve `source.names` for 30 days more
// (its ca.crt pruned to one CA once a renewal's overlap has ended); else a new one written there
// (see the top), whose ca.crt also holds `served_ca` and the CAs trusted now. Error with the API
// server's answer when the Secret cannot be read or written.
core::Result<net::ServingCertificate> KeepSecretCertificate(const CertificateSource& source,
                                                            kube::KubeApi& api,
                                                            const core::Logger& log,
                                                            const std::string& served_ca);
// The warning for a certificate from `file` that ends within 30 days.
void WarnCertificateExpiresSoon(const core::Logger& log, const std::string& file,
                                const std::string& cert_pem);

// Sets clientConfig.caBundle of every webhook of MutatingWebhookConfiguration `name` to
// `ca_pem` where it differs (a JSON patch that first tests each webhook's name); returns how many
// changed. Error with the API server's answer (404 when the configuration is not installed).
kube::ApiResult<int> PatchCaBundle(kube::KubeApi& api, const std::string& name,
                                   const std::string& ca_pem);

struct WebhookOptions {
  std::string host = "127.0.0.1";
  int port = 9443;
  TranslateOptions translate;
  std::string configuration = "gpumux";  // whose caBundle to keep; "" = none
  std::chrono::milliseconds ca_bundle_every{60000};
  int max_connections = 256;
  int workers = 4;
  bool reuse_port =
      false;  // share the port with other replicas on a host's network (ServerOptions)
  // Warn (AdmissionReview warnings, which kubectl prints) when a translated share goes where no
  // node enforces its limits: one node list of limit 1 per selector term (needs `nodes list`).
  bool warn_unenforced = true;
  // Where the certificate came from, re-read while serving so that replicas and renewals
  // converge: files (cert-manager's Secret, mounted) every `reload_every`, a changed pair that
  // passes ReadCertificateFiles served to new connections (one that does not is logged and the
  // served one kept); a Secret (with `api`) by the keeper before every caBundle check, with
  // KeepSecretCertificate (see the top): a replica another one's renewal left behind serves the
  // Secret's pair once the caBundle holds its CA. Neither: nothing is re-read.
  CertificateSource reload_from;
  std::chrono::milliseconds reload_every{2000};
  core::Logger log;
};

class Webhook {
 public:
  // Serves POST /mutate (AdmissionReview v1), GET /healthz and /readyz with `certificate`;
  // keeps the caBundle when `api` is given and options.configuration is not "" (then /readyz
  // is 503 until the caBundle is known to hold the served certificate's CA, or the
  // configuration is not installed: nothing calls through it).
  static core::Result<std::unique_ptr<Webhook>> Start(WebhookOptions options,
                                                      net::ServingCertificate certificate,
                                                      kube::KubeApi* api);
  ~Webhook();
  Webhook(const Webhook&) = delete;
  Webhook& operator=(const Webhook&) = delete;
  int port() const;
  // From now on /readyz answers 503 (the pod leaves its Service's endpoints) while reviews are
  // still served, each connection closed after its reply (HttpServer::Drain), so that the API
  // server's next call opens a new connection to a replica that stays: the first step of a
  // graceful stop.
  void Drain();
  void Stop();
  // Reviews answered since Start: allowed unchanged, translated, refused, malformed (400).
  struct Counts {
    std::int64_t unchanged = 0, translated = 0, refused = 0, malformed = 0;
  };
  Counts counts() const;

  struct Impl;

 private:
  explicit Webhook(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumux::admission
