#include "gpumux/net/tls.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <ctime>
#include <memory>

namespace gpumux::net {
namespace {

using core::ErrorCode;
using core::MakeError;

template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using PKey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;

bool IsIp(std::string_view name) {
  boost::system::error_code ec;
  (void)boost::asio::ip::make_address(std::string(name), ec);
  return !ec;
}

bool IsDnsName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t label = 0;
  for (const char c : name) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || (c == '*' && label == 0);
    if (!ok || ++label > 63) return false;
  }
  return label > 0;
}

PKey NewKey() { return PKey(EVP_EC_gen("P-256")); }

std::string Pem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return {};
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

std::string KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return {};
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

bool AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key`'s public half named `cn`, valid for `days` from an hour ago (clock
// skew), with a random 128-bit serial; signed later.
Cert NewCertificate(EVP_PKEY* key, const std::string& cn, int days) {
  Cert cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return nullptr;
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return nullptr;
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  const bool serial_ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  if (!serial_ok) return nullptr;
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  if (X509_set_pubkey(cert.get(), key) != 1) return nullptr;
  return cert;
}

Cert ReadCert(std::string_view pem) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return nullptr;
  return Cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

}  // namespace

core::Result<ServingCertificate> MakeServingCertificate(const CertificateRequest& request) {
  if (request.valid_days < 1 || request.valid_days > 36500) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "certificate validity must be 1..36500 days, not " + std::to_string(request.valid_days));
  }
  if (request.names.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "a serving certificate needs at least one name");
  }
  std::string sans;
  for (const std::string& name : request.names) {
    const bool ip = IsIp(name);
    if (!ip && !IsDnsName(name)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "\"" + name + "\" is neither a DNS name nor an IP address");
    }
    if (!sans.empty()) sans += ',';
    sans += ip ? "IP:" : "DNS:";
    sans += name;
  }
  const std::string cn = request.common_name.empty() ? request.names.front() : request.common_name;
  PKey ca_key = NewKey(), key = NewKey();
  if (!ca_key || !key)
    return MakeError(ErrorCode::kFailedPrecondition, "cannot make an ECDSA P-256 key");
  Cert ca = NewCertificate(ca_key.get(), "gpumux CA for " + cn, request.valid_days);
  Cert cert = NewCertificate(key.get(), cn, request.valid_days);
  if (!ca || !cert) return MakeError(ErrorCode::kFailedPrecondition, "cannot make a certificate");
  X509_set_issuer_name(ca.get(), X509_get_subject_name(ca.get()));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get()));
  const bool extensions =
      AddExtension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE") &&
      AddExtension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign,cRLSign") &&
      AddExtension(ca.get(), ca.get(), NID_subject_key_identifier, "hash") &&
      AddExtension(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE") &&
      AddExtension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature") &&
      AddExtension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth") &&
      AddExtension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always") &&
      AddExtension(cert.get(), ca.get(), NID_subject_alt_name, sans);
  if (!extensions)
    return MakeError(ErrorCode::kFailedPrecondition, "cannot set the certificate extensions");
  if (X509_sign(ca.get(), ca_key.get(), EVP_sha256()) == 0 ||
      X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0) {
    return MakeError(ErrorCode::kFailedPrecondition, "cannot sign the certificates");
  }
  ServingCertificate out{Pem(ca.get()), Pem(cert.get()), KeyPem(key.get())};
  if (out.ca_pem.empty() || out.cert_pem.empty() || out.key_pem.empty()) {
    return MakeError(ErrorCode::kFailedPrecondition, "cannot write the certificates as PEM");
  }
  return out;
}

core::Result<std::int64_t> CertificateNotAfter(std::string_view pem) {
  Cert cert = ReadCert(pem);
  if (!cert) return MakeError(ErrorCode::kInvalidArgument, "not a PEM certificate");
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &tm) != 1) {
    return MakeError(ErrorCode::kInvalidArgument, "the certificate's notAfter is unreadable");
  }
  return static_cast<std::int64_t>(timegm(&tm));
}

core::Result<bool> CertificateCovers(std::string_view pem, std::string_view name) {
  Cert cert = ReadCert(pem);
  if (!cert) return MakeError(ErrorCode::kInvalidArgument, "not a PEM certificate");
  const std::string n(name);
  if (IsIp(n)) return X509_check_ip_asc(cert.get(), n.c_str(), 0) == 1;
  return X509_check_host(cert.get(), n.data(), n.size(), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS,
                         nullptr) == 1;
}

std::vector<std::string> PemCertificates(std::string_view pem, std::size_t max) {
  std::vector<std::string> out;
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (bio && out.size() < max) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!cert) break;
    out.push_back(Pem(cert.get()));
  }
  ERR_clear_error();  // the end of the input reads as an error
  return out;
}

core::Result<void> CheckServingPair(const ServingCertificate& pair) {
  const std::vector<std::string> cas = PemCertificates(pair.ca_pem, kMaxBundleCertificates);
  Cert cert = ReadCert(pair.cert_pem);
  if (cas.empty() && !pair.ca_pem.empty())
    return MakeError(ErrorCode::kInvalidArgument, "the CA is not a PEM certificate");
  if (!cert) return MakeError(ErrorCode::kInvalidArgument, "the certificate is not PEM");
  Bio bio(BIO_new_mem_buf(pair.key_pem.data(), static_cast<int>(pair.key_pem.size())));
  PKey key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) return MakeError(ErrorCode::kInvalidArgument, "the key is not a PEM private key");
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return MakeError(ErrorCode::kInvalidArgument, "the key does not match the certificate");
  }
  for (const std::string& pem : cas) {
    Cert ca = ReadCert(pem);
    PKey ca_public(ca ? X509_get_pubkey(ca.get()) : nullptr);
    if (ca_public && X509_verify(cert.get(), ca_public.get()) == 1) return {};
  }
  if (cas.empty()) return {};
  return MakeError(ErrorCode::kInvalidArgument, "the CA did not sign the certificate");
}

}  // namespace gpumux::net
