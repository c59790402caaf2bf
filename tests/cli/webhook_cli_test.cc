// `gpumux webhook`'s command line: --check, and each bad setting named.
#include <gtest/gtest.h>

#include "tests/cli/cli_fixtures.h"

namespace gpumux::cli {
namespace {

TEST(WebhookCli, CheckSaysWhatItWouldServe) {
  const CliRun r = Gpumux({"webhook", "--offline", "--listen", "127.0.0.1:0", "--check"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("would serve HTTPS on 127.0.0.1:0 with no API server"), std::string::npos)
      << r.out;
}

TEST(WebhookCli, BadSettingsAreUsageErrorsNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"webhook", "--check"}, "exactly one of --kubeconfig, --in-cluster and --offline"},
      {{"webhook", "--offline", "--listen", "9443"}, "--listen must be HOST:PORT"},
      {{"webhook", "--offline", "--gpu-mem-unit-mib", "0"}, "--gpu-mem-unit-mib"},
      {{"webhook", "--offline", "--tls-cert-file", "/x.pem"}, "go together"},
      {{"webhook", "--offline", "--tls-names", ","}, "--tls-names names nothing"},
      {{"webhook", "--in-cluster", "--tls-secret", "no-slash", "--check"}, "NAMESPACE/NAME"},
      {{"webhook", "--offline", "--ca-bundle-every-seconds", "1"}, "5..3600"},
  };
  for (const auto& [args, want] : cases) {
    const CliRun r = Gpumux(args);
    EXPECT_EQ(r.code, 2) << args.back();
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
}

TEST(WebhookCli, ACertificateFileThatCannotBeReadStopsItWithUsageError) {
  const CliRun r = Gpumux({"webhook", "--offline", "--listen", "127.0.0.1:0", "--tls-cert-file",
                           "/nonexistent/tls.crt", "--tls-key-file", "/nonexistent/tls.key"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("/nonexistent/tls.crt"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gpumux::cli
