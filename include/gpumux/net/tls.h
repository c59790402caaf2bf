// TLS certificates for the one server (http_server.h, ServerOptions::tls): a CA and a serving
// certificate made in-process, for a listener whose caller must be told which CA to trust.
// `gpumux webhook` is the user: the API server calls a mutating webhook over HTTPS only, and an
// install without cert-manager has no CA, so the webhook makes one and hands its certificate to
// the API server (the MutatingWebhookConfiguration's caBundle). OpenSSL (Debian's libssl-dev).
//
// Keys are ECDSA P-256 (what Go's TLS, the API server's client, prefers), certificates X.509 v3
// signed with SHA-256: the CA with basicConstraints CA:TRUE and keyUsage keyCertSign; the
// serving certificate with CA:FALSE, extendedKeyUsage serverAuth, and every name as a subject
// alternative name (Go ignores the common name), IP addresses as IP SANs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"

namespace gpumux::net {

struct CertificateRequest {
  std::string common_name;         // e.g. "gpumux-webhook.gpumux-system.svc"
  std::vector<std::string> names;  // DNS names and IP addresses ("127.0.0.1", "::1")
  int valid_days = 3650;           // 1..36500, for both the CA and the certificate
};

struct ServingCertificate {
  std::string ca_pem;    // the CA's certificate: what the caller trusts (caBundle)
  std::string cert_pem;  // the serving certificate
  std::string key_pem;   // its private key (PKCS#8 PEM)
};

// Error when a name is empty, not a DNS name or IP address, or valid_days is out of range.
core::Result<ServingCertificate> MakeServingCertificate(const CertificateRequest& request);

// The first certificate of `pem`: when it stops being valid (seconds since the epoch), and
// whether it covers `name` (a DNS SAN or an IP SAN equal to it). Errors when it is unreadable.
core::Result<std::int64_t> CertificateNotAfter(std::string_view pem);
core::Result<bool> CertificateCovers(std::string_view pem, std::string_view name);

// The certificates of a PEM bundle (a caBundle, a ca.crt holding a CA and its predecessor), each
// as PEM, in order; at most `max`, stopping at the first block that is not a certificate.
inline constexpr std::size_t kMaxBundleCertificates = 8;
std::vector<std::string> PemCertificates(std::string_view pem,
                                         std::size_t max = kMaxBundleCertificates);

// Whether `cert_pem` and `key_pem` make a usable serving pair (the key matches the certificate),
// and whether `ca_pem` (when not empty: a CA or a bundle, of which one must have) signed
// `cert_pem`. Error naming what is wrong.
core::Result<void> CheckServingPair(const ServingCertificate& pair);

}  // namespace gpumux::net
