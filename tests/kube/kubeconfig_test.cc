// LoadKubeconfig and LoadInClusterConfig: files written to a temporary folder per test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gpumux/kube/api_client.h"
#include "tests/testing/fake_apiserver.h"

namespace gpumux::kube {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the test temp dir, removed at the end of the test.
class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           (std::string("kubeconfig_") + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return path.string();
  }

  fs::path dir_;
};

// "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n" and friends, base64.
constexpr const char* kCaPem = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
constexpr const char* kCaData =
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";

std::string TwoContexts(const std::string& user_block) {
  return std::string(R"(apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context:
    cluster: dev-cluster
    user: dev-user
    namespace: team-a
- name: prod
  context:
    cluster: prod-cluster
    user: dev-user
clusters:
- name: dev-cluster
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: )") +
         kCaData + R"(
- name: prod-cluster
  cluster:
    server: https://prod.example:443/
    insecure-skip-tls-verify: true
users:
- name: dev-user
  user:
)" + user_block;
}

TEST_F(KubeconfigTest, CurrentContextGivesServerCaTokenAndNamespace) {
  const std::string path = Write("config", TwoContexts("    token: abc123\n"));
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, kCaPem);
  EXPECT_EQ(config->bearer_token, "abc123");
  EXPECT_EQ(config->default_namespace, "team-a");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST_F(KubeconfigTest, AnExplicitContextWinsOverTheCurrentOne) {
  const std::string path = Write("config", TwoContexts("    token: abc123\n"));
  auto config = LoadKubeconfig(path, "prod");
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->server, "https://prod.example:443/");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->ca_pem, "");
  EXPECT_EQ(config->default_namespace, "default");
}

TEST_F(KubeconfigTest, AMissingContextIsAnErrorNamingItAndTheKnownOnes) {
  const std::string path = Write("config", TwoContexts("    token: abc123\n"));
  auto config = LoadKubeconfig(path, "staging");
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(
      config.error().message,
      "kubeconfig " + path + ": context \"staging\" not found in contexts (known: dev, prod)");
}

TEST_F(KubeconfigTest, TokenFileIsResolvedAgainstTheKubeconfigFolderAndKeptForRereading) {
  Write("secrets/token", "tok\n");
  const std::string path = Write("config", TwoContexts("    tokenFile: secrets/token\n"));
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->token_file, (dir_ / "secrets/token").string());
  EXPECT_EQ(config->bearer_token, "");
}

TEST_F(KubeconfigTest, AMissingTokenFileIsAnErrorNamingTheFieldAndFile) {
  const std::string path = Write("config", TwoContexts("    tokenFile: nope\n"));
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(config.error().message.find("users[\"dev-user\"].user.tokenFile: " +
                                        (dir_ / "nope").string() + ": no such file"),
            std::string::npos)
      << config.error().message;
}

TEST_F(KubeconfigTest, ClientCertificateAndKeyDataAreDecoded) {
  // "CERT\n" and "KEY\n" without padding and with padding.
  const std::string path = Write("config", TwoContexts("    client-certificate-data: Q0VSVAo=\n"
                                                       "    client-key-data: S0VZCg\n"));
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->client_cert_pem, "CERT\n");
  EXPECT_EQ(config->client_key_pem, "KEY\n");
}

TEST_F(KubeconfigTest, ClientCertificateFilesAreReadFromRelativeAndAbsolutePaths) {
  Write("pki/client.crt", "CERT FILE");
  const std::string key = Write("elsewhere/client.key", "KEY FILE");
  Write("pki/ca.crt", "CA FILE");
  std::string text = TwoContexts(
      "    client-certificate: pki/client.crt\n"
      "    client-key: " +
      key + "\n");
  const std::string data_line = std::string("certificate-authority-data: ") + kCaData;
  text.replace(text.find(data_line), data_line.size(), "certificate-authority: ./pki/ca.crt");
  const std::string path = Write("config", text);
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->client_cert_pem, "CERT FILE");
  EXPECT_EQ(config->client_key_pem, "KEY FILE");
  EXPECT_EQ(config->ca_pem, "CA FILE");
}

struct BadKubeconfigCase {
  std::string name;
  std::string user_block;
  std::string message_part;
};

class KubeconfigRejects : public KubeconfigTest,
                          public ::testing::WithParamInterface<BadKubeconfigCase> {};

TEST_P(KubeconfigRejects, WithAMessageNamingTheFileAndField) {
  const std::string path = Write("config", TwoContexts(GetParam().user_block));
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().message.rfind("kubeconfig " + path + ": ", 0), 0u)
      << config.error().message;
  EXPECT_NE(config.error().message.find(GetParam().message_part), std::string::npos)
      << config.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Kubeconfig, KubeconfigRejects,
    ::testing::Values(
        BadKubeconfigCase{"ExecCredentialPlugins",
                          "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
                          "      command: aws\n",
                          "users[\"dev-user\"].user uses exec credentials, which are not "
                          "supported: use a token or client certificate"},
        BadKubeconfigCase{"AuthProviders", "    auth-provider:\n      name: gcp\n",
                          "uses auth-provider credentials, which are not supported"},
        BadKubeconfigCase{"BasicAuthentication", "    username: admin\n    password: x\n",
                          "basic authentication"},
        BadKubeconfigCase{"InvalidBase64",
                          "    client-certificate-data: 'Q0VSVAo*'\n"
                          "    client-key-data: S0VZCg==\n",
                          "users[\"dev-user\"].user.client-certificate-data is not valid base64"},
        BadKubeconfigCase{"WrongBase64Padding",
                          "    client-certificate-data: Q0VSVAo==\n"
                          "    client-key-data: S0VZCg==\n",
                          "client-certificate-data is not valid base64"},
        BadKubeconfigCase{"ACertificateWithoutKey", "    client-certificate-data: Q0VSVAo=\n",
                          "has a client-certificate but no client-key"},
        BadKubeconfigCase{"AMissingCertificateFile",
                          "    client-certificate: missing.crt\n"
                          "    client-key-data: S0VZCg==\n",
                          "client-certificate: "}),
    [](const auto& test_case) { return test_case.param.name; });

TEST_F(KubeconfigTest, MalformedYamlIsAnErrorNamingTheFileAndLine) {
  const std::string path = Write("config", "apiVersion: v1\nclusters:\n  - name: [unclosed\n");
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().message.rfind("kubeconfig " + path + ": invalid YAML at line ", 0), 0u)
      << config.error().message;
}

TEST_F(KubeconfigTest, AMissingFileIsAnIoErrorNamingIt) {
  const std::string path = (dir_ / "absent").string();
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().code, core::ErrorCode::kIo);
  EXPECT_EQ(config.error().message, "kubeconfig " + path + ": no such file");
}

TEST_F(KubeconfigTest, AFolderWhereAFileBelongsIsAnErrorNamingIt) {
  // The kubeconfig itself, and a file it names.
  std::filesystem::create_directories(dir_ / "folder");
  const std::string folder = (dir_ / "folder").string();
  auto config = LoadKubeconfig(folder);
  ASSERT_FALSE(config.has_value());
  EXPECT_EQ(config.error().code, core::ErrorCode::kIo);
  EXPECT_EQ(config.error().message, "kubeconfig " + folder + ": is a directory (expected a file)");
  const std::string path = Write("config", TwoContexts("    tokenFile: folder\n"));
  config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(config.error().message.find("tokenFile: " + folder + ": is a directory"),
            std::string::npos)
      << config.error().message;
}

TEST_F(KubeconfigTest, NoCurrentContextAndNoneGivenIsAnError) {
  std::string text = TwoContexts("    token: t\n");
  text.replace(text.find("current-context: dev\n"), 21, "");
  const std::string path = Write("config", text);
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(config.error().message.find("no current-context"), std::string::npos);
}

TEST_F(KubeconfigTest, AServerThatIsNotAnHttpUrlIsAnError) {
  std::string text = TwoContexts("    token: t\n");
  text.replace(text.find("https://10.0.0.1:6443"), 21, "10.0.0.1:6443");
  const std::string path = Write("config", text);
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(
      config.error().message.find(
          "clusters[\"dev-cluster\"].cluster.server \"10.0.0.1:6443\" is not an http(s):// URL"),
      std::string::npos)
      << config.error().message;
}

TEST_F(KubeconfigTest, AProxyUrlIsRefusedRatherThanIgnored) {
  std::string text = TwoContexts("    token: t\n");
  text.replace(text.find("    server: https://10.0.0.1:6443\n"), 0,
               "    proxy-url: http://proxy:3128\n");
  const std::string path = Write("config", text);
  auto config = LoadKubeconfig(path);
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(
      config.error().message.find("clusters[\"dev-cluster\"].cluster.proxy-url is not supported"),
      std::string::npos)
      << config.error().message;
}

// A kubeconfig with the fake's CA and client certificate as data reaches the fake over
// mutual TLS.
TEST_F(KubeconfigTest, AKubeconfigWithCertificateDataTalksToAMutualTlsServer) {
  test::FakeApiServer server(test::FakeApiServerOptions::Tls(test::FakeTls::kRequireClientCert));
  ASSERT_TRUE(server.ok()) << server.error();
  server.AddNode({{"metadata", {{"name", "n1"}}}});
  const fs::path pki = server.tls().dir;
  const std::string path = Write("config",
                                 "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                                 "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                                 "clusters: [{name: k, cluster: {server: '" +
                                     server.url() +
                                     "', "
                                     "certificate-authority: '" +
                                     (pki / "ca.crt").string() +
                                     "'}}]\n"
                                     "users: [{name: u, user: {client-certificate: '" +
                                     (pki / "client.crt").string() + "', client-key: '" +
                                     (pki / "client.key").string() + "'}}]\n");
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.has_value()) << config.error().message;
  auto node = MakeCurlClient(*config)->Get("/api/v1/nodes/n1");
  EXPECT_TRUE(node.has_value()) << node.error().ToString();
}

// --- in-cluster ---

// Sets the service host/port variables for one test and restores them after.
class KubeconfigInCluster : public KubeconfigTest {
 protected:
  void SetUp() override {
    KubeconfigTest::SetUp();
    for (const char* name : {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name,
                          value != nullptr ? std::optional<std::string>(value) : std::nullopt);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
    KubeconfigTest::TearDown();
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(KubeconfigInCluster, ReadsTheServiceAccountFolderAndEnvironment) {
  Write("sa/token", "service-account-token\n");
  Write("sa/ca.crt", kCaPem);
  Write("sa/namespace", "gpumux-system\n");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto config = LoadInClusterConfig((dir_ / "sa").string());
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token_file, (dir_ / "sa" / "token").string());
  EXPECT_EQ(config->bearer_token, "");  // read (and re-read) from token_file by the client
  EXPECT_EQ(config->ca_pem, kCaPem);
  EXPECT_EQ(config->default_namespace, "gpumux-system");
}

TEST_F(KubeconfigInCluster, AnIpv6ServiceHostIsBracketed) {
  Write("sa/token", "t");
  Write("sa/ca.crt", kCaPem);
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto config = LoadInClusterConfig((dir_ / "sa").string());
  ASSERT_TRUE(config.has_value()) << config.error().message;
  EXPECT_EQ(config->server, "https://[fd00:10:96::1]:443");
  EXPECT_EQ(config->default_namespace, "default");
}

TEST_F(KubeconfigInCluster, OutsideAPodIsAClearError) {
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  auto config = LoadInClusterConfig((dir_ / "sa").string());
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(config.error().message.find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

TEST_F(KubeconfigInCluster, AMissingTokenIsAnErrorNamingTheFile) {
  Write("sa/ca.crt", kCaPem);
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto config = LoadInClusterConfig((dir_ / "sa").string());
  ASSERT_FALSE(config.has_value());
  EXPECT_NE(config.error().message.find((dir_ / "sa" / "token").string()), std::string::npos)
      << config.error().message;
}

// Where kubectl looks: --kubeconfig, $KUBECONFIG, ~/.kube/config, the pod's service account.
TEST(FindKubeconfig, LooksWhereKubectlLooksInKubectlsOrder) {
  const fs::path dir = fs::temp_directory_path() / "gpumux-find-kubeconfig";
  fs::create_directories(dir / "home" / ".kube");
  std::ofstream(dir / "home" / ".kube" / "config") << "x";
  std::ofstream(dir / "a") << "x";
  std::ofstream(dir / "b") << "x";
  const std::string home = (dir / "home").string();
  const std::string a = (dir / "a").string();
  const std::string b = (dir / "b").string();

  auto flag = FindKubeconfig("given", a, home, "10.0.0.1");
  ASSERT_TRUE(flag);
  EXPECT_EQ(flag->path, "given");
  EXPECT_EQ(flag->how, "--kubeconfig");
  // $KUBECONFIG: the one of its files that exists.
  auto env = FindKubeconfig("", (dir / "missing").string() + ":" + a, home, "");
  ASSERT_TRUE(env);
  EXPECT_EQ(env->path, a);
  EXPECT_EQ(env->how, "$KUBECONFIG");
  auto two = FindKubeconfig("", a + ":" + b, home, "");
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().message.find("kubectl merges them, gpumux reads one"), std::string::npos);
  auto none = FindKubeconfig("", (dir / "missing").string(), home, "");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("names no file that exists"), std::string::npos);
  // Then ~/.kube/config, then the service account.
  auto home_config = FindKubeconfig("", "", home, "10.0.0.1");
  ASSERT_TRUE(home_config);
  EXPECT_EQ(home_config->how, "~/.kube/config");
  EXPECT_EQ(home_config->path, (dir / "home" / ".kube" / "config").string());
  auto in_cluster = FindKubeconfig("", "", (dir / "nohome").string(), "10.0.0.1");
  ASSERT_TRUE(in_cluster);
  EXPECT_TRUE(in_cluster->in_cluster);
  auto nothing = FindKubeconfig("", "", (dir / "nohome").string(), "");
  ASSERT_FALSE(nothing);
  EXPECT_NE(nothing.error().message.find("no kubeconfig"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpumux::kube
