// Base64 as the Kubernetes API writes bytes (Secret data, caBundle, kubeconfig *-data, an
// AdmissionReview's patch): RFC 4648, standard alphabet, padded.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpumux::kube {

std::string EncodeBase64(std::string_view bytes);

// Whitespace is skipped; a last group left unpadded is accepted (Go's StdEncoding insists on
// the padding; gpumux has always accepted it left out); nullopt when it is not base64.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace gpumux::kube
