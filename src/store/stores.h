// The two store implementations behind store::OpenStore (internal to the store module).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpumux/store/store.h"

namespace gpumux::store {

core::Result<std::unique_ptr<Store>> OpenFileStore(const std::string& path);
// endpoints: "host:port" each; tls: etcds://.
core::Result<std::unique_ptr<Store>> OpenEtcdStore(const std::vector<std::string>& endpoints,
                                                   bool tls, const StoreOptions& options);

}  // namespace gpumux::store
