// The gpumux.io/grant annotation: what the extender writes reads back equal, and what a pod's
// owner may have edited is refused by field rather than read as something else.
#include "gpumux/kube/grant.h"

#include <gtest/gtest.h>

#include <string>

namespace gpumux::kube {
namespace {

Grant TwoContainers() {
  Grant g;
  g.node = "n1";
  g.policy = "fgd";
  g.assumed_at = 1'800'000'000;
  ContainerGrant a;
  a.name = "a";
  a.gpus = {{0, "GPU-0"}, {63, "GPU-63"}};
  a.exclusive = true;
  a.gpu_milli = 1000;
  ContainerGrant b;
  b.name = "b";
  b.gpus = {{5, "GPU-5"}};
  b.gpu_milli = 250;
  b.gpu_mem_mib = 8192;
  b.milli_requested = true;
  g.containers = {a, b};
  return g;
}

TEST(Grant, WhatIsEncodedDecodesEqual) {
  const Grant g = TwoContainers();
  auto back = DecodeGrant(EncodeGrant(g));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, g);
}

// nlohmann's get<int> wraps 2^32 + 1 to 1: a version or an index that large was read as 1.
TEST(Grant, NumbersBeyondTheirRangeAreRefusedNotWrapped) {
  std::string text = EncodeGrant(TwoContainers());
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {replaced("\"version\":1", "\"version\":4294967297"),
            "version: unsupported (this build reads 1), got 4294967297"},
           {replaced("\"index\":5", "\"index\":4294967301"),
            "gpus[0].index: not an integer in 0..63, got 4294967301"},
           {replaced("\"index\":5", "\"index\":64"), "index: not an integer in 0..63, got 64"},
           {replaced("\"index\":5", "\"index\":-1"), "index: not an integer in 0..63, got -1"}}) {
    auto g = DecodeGrant(bad);
    ASSERT_FALSE(g) << bad;
    EXPECT_NE(g.error().message.find(why), std::string::npos) << g.error().message;
  }
}

}  // namespace
}  // namespace gpumux::kube
