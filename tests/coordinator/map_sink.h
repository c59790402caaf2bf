// A StoreSink that keeps the coordinator's writes in a map (the store's view after a restart).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpumux/coordinator/coordinator.h"

namespace gpumux::test {

class MapSink final : public coordinator::StoreSink {
 public:
  void Write(std::string key, std::optional<std::string> value) override {
    if (value) {
      kv[key] = *value;
    } else {
      kv.erase(key);
    }
  }
  std::vector<std::pair<std::string, std::string>> Pairs() const { return {kv.begin(), kv.end()}; }
  std::map<std::string, std::string> kv;
};

}  // namespace gpumux::test
