#include "gpumux/kube/base64.h"

#include <openssl/evp.h>

#include <climits>
#include <cstddef>
#include <memory>

namespace gpumux::kube {

std::string EncodeBase64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),          // NOLINT
                                reinterpret_cast<const unsigned char*>(bytes.data()),  // NOLINT
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> DecodeBase64(std::string_view text) {
  std::string padded;
  padded.reserve(text.size() + 3);
  for (const char c : text) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') padded += c;
  }
  if (padded.find('=') == std::string::npos) padded.append((4 - padded.size() % 4) % 4, '=');
  if (padded.size() > static_cast<std::size_t>(INT_MAX / 2)) return std::nullopt;
  std::unique_ptr<EVP_ENCODE_CTX, void (*)(EVP_ENCODE_CTX*)> ctx(EVP_ENCODE_CTX_new(),
                                                                 EVP_ENCODE_CTX_free);
  if (!ctx) return std::nullopt;
  EVP_DecodeInit(ctx.get());
  std::string out(padded.size() / 4 * 3 + 3, '\0');
  auto* to = reinterpret_cast<unsigned char*>(out.data());  // NOLINT: OpenSSL's byte API
  int n = 0;
  int last = 0;
  if (EVP_DecodeUpdate(ctx.get(), to, &n,
                       reinterpret_cast<const unsigned char*>(padded.data()),  // NOLINT
                       static_cast<int>(padded.size())) < 0 ||
      EVP_DecodeFinal(ctx.get(), to + n, &last) < 0) {
    return std::nullopt;
  }
  out.resize(static_cast<std::size_t>(n + last));
  return out;
}

}  // namespace gpumux::kube
