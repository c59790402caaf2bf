#include "gpumux/store/store.h"

#include <algorithm>
#include <string>
#include <vector>

#include "src/store/stores.h"

namespace gpumux::store {

core::Result<void> Store::Apply(std::span<const Change> changes) {
  for (const Change& c : changes) {
    auto done = c.value ? Put(c.key, *c.value) : Delete(c.key);
    if (!done) return done;
  }
  return {};
}

core::Result<std::unique_ptr<Store>> OpenStore(std::string_view url, const StoreOptions& options) {
  const std::string text(url);
  const auto bad = [&](const std::string& why) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "store '" + text + "': " + why +
                               " (expected etcd://HOST:PORT[,HOST:PORT], etcds://..., "
                               "file:///PATH or a path)");
  };
  if (text.rfind("file://", 0) == 0) {
    const std::string path = text.substr(7);
    if (path.empty() || path[0] != '/') return bad("a file:// URL needs an absolute path");
    return OpenFileStore(path);
  }
  const bool tls = text.rfind("etcds://", 0) == 0;
  if (text.rfind("etcd://", 0) == 0 || tls) {
    const std::string rest = text.substr(tls ? 8 : 7);
    std::vector<std::string> endpoints;
    std::size_t start = 0;
    while (start <= rest.size()) {
      const std::size_t comma = std::min(rest.find(',', start), rest.size());
      const std::string e = rest.substr(start, comma - start);
      const std::size_t colon = e.rfind(':');
      if (e.empty() || colon == std::string::npos || colon == 0 || colon + 1 == e.size() ||
          e.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
          e.find('/') != std::string::npos) {
        return bad("'" + e + "' is not HOST:PORT");
      }
      endpoints.push_back(e);
      start = comma + 1;
    }
    if (!tls && (!options.ca_file.empty() || !options.cert_file.empty())) {
      return bad("TLS files need an etcds:// URL");
    }
    if (options.cert_file.empty() != options.key_file.empty()) {
      return bad("a client certificate needs both the certificate and the key file");
    }
    if (!options.user.empty() && options.password_file.empty()) {
      return bad("an etcd user needs a password file");
    }
    if (options.timeout.count() <= 0) {
      return core::MakeError(core::ErrorCode::kInvalidArgument,
                             "store '" + text + "': the per-call timeout must be positive");
    }
    return OpenEtcdStore(endpoints, tls ? Transport::kTls : Transport::kPlain, options);
  }
  if (text.find("://") != std::string::npos) return bad("unknown scheme");
  if (text.empty()) return bad("empty");
  return OpenFileStore(text);
}

}  // namespace gpumux::store
