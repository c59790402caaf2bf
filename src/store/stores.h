// The two store implementations behind store::OpenStore (internal to the store module).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpumux/store/store.h"

namespace gpumux::store {

core::Result<std::unique_ptr<Store>> OpenFileStore(const std::string& path);

enum class Transport { kPlain, kTls };  // etcd:// or etcds://
// endpoints: "host:port" each, at least one; several must be IPv4 addresses.
core::Result<std::unique_ptr<Store>> OpenEtcdStore(const std::vector<std::string>& endpoints,
                                                   Transport transport,
                                                   const StoreOptions& options);

}  // namespace gpumux::store
