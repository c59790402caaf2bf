// Kubeconfig (YAML) and in-cluster service-account configuration (see api_client.h).
#include <yaml-cpp/yaml.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpumux/io/read_file.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/base64.h"

namespace gpumux::kube {
namespace {

using core::ErrorCode;
using core::MakeError;
namespace fs = std::filesystem;

// A kubeconfig, a token, a certificate: small files. The largest real kubeconfigs (hundreds of
// clusters with inline certificates) are a few MB.
constexpr std::size_t kMaxCredentialFileBytes = std::size_t{16} << 20;

// The whole file through the one reader of input files, which refuses a folder, a FIFO, a
// missing or an over-size file naming the path ("<path>: is a directory (expected a file)");
// always ErrorCode::kIo here.
core::Result<std::string> ReadWholeFile(const std::string& path) {
  auto text = io::ReadInputFile(path, kMaxCredentialFileBytes);
  if (!text) return MakeError(ErrorCode::kIo, text.error().message);
  return text;
}

std::string Trim(std::string text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

// Reads one kubeconfig; every error names the file.
class KubeconfigReader {
 public:
  explicit KubeconfigReader(std::string path) : path_(std::move(path)) {
    folder_ = fs::path(path_).parent_path();
  }

  core::Result<ClientConfig> Load(std::string_view wanted_context) {
    auto text = ReadWholeFile(path_);
    if (!text) return MakeError(ErrorCode::kIo, "kubeconfig " + text.error().message);
    YAML::Node root;
    try {
      root = YAML::Load(*text);
    } catch (const YAML::Exception& e) {
      return Fail(ErrorCode::kInvalidArgument,
                  "invalid YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
    try {
      return Parse(root, wanted_context);
    } catch (const YAML::Exception& e) {
      return Fail(ErrorCode::kInvalidArgument, std::string("malformed: ") + e.what());
    }
  }

 private:
  tl::unexpected<core::Error> Fail(ErrorCode code, const std::string& message) const {
    return MakeError(code, "kubeconfig " + path_ + ": " + message);
  }

  // A scalar field of a map as a string; "" when absent; an error when not a scalar.
  core::Result<std::string> Scalar(const YAML::Node& map, const char* key,
                                   const std::string& where) const {
    const YAML::Node node = map[key];
    if (!node.IsDefined() || node.IsNull()) return std::string();
    if (!node.IsScalar())
      return Fail(ErrorCode::kInvalidArgument, where + "." + key + " is not a string");
    return node.as<std::string>();
  }

  // The entry named `name` in the list `list_key` (contexts, clusters, users); its `body_key`
  // (context, cluster, user) map.
  core::Result<YAML::Node> Named(const YAML::Node& root, const char* list_key, const char* body_key,
                                 const std::string& name) const {
    const YAML::Node list = root[list_key];
    std::vector<std::string> known;
    if (list.IsDefined() && !list.IsNull()) {
      if (!list.IsSequence()) {
        return Fail(ErrorCode::kInvalidArgument, std::string(list_key) + " is not a list");
      }
      for (const YAML::Node& entry : list) {
        if (!entry.IsMap()) continue;
        const YAML::Node entry_name = entry["name"];
        if (!entry_name.IsDefined() || !entry_name.IsScalar()) continue;
        const std::string this_name = entry_name.as<std::string>();
        if (this_name == name) {
          const YAML::Node body = entry[body_key];
          if (!body.IsDefined() || body.IsNull()) return YAML::Node(YAML::NodeType::Map);
          if (!body.IsMap()) {
            return Fail(ErrorCode::kInvalidArgument,
                        std::string(list_key) + "[\"" + name + "\"]." + body_key + " is not a map");
          }
          return body;
        }
        known.push_back(this_name);
      }
    }
    std::string known_text;
    for (const std::string& k : known) known_text += (known_text.empty() ? "" : ", ") + k;
    std::string singular(body_key);
    return Fail(ErrorCode::kNotFound,
                singular + " \"" + name + "\" not found in " + list_key +
                    (known.empty() ? " (there are none)" : " (known: " + known_text + ")"));
  }

  std::string Resolve(const std::string& file) const {
    fs::path p(file);
    if (p.is_relative()) p = folder_ / p;
    return p.lexically_normal().string();
  }

  // PEM from `<key>-data` (base64) or from the file `<key>`; "" when neither is set.
  core::Result<std::string> Pem(const YAML::Node& map, const std::string& key,
                                const std::string& where) const {
    auto data = Scalar(map, (key + "-data").c_str(), where);
    if (!data) return tl::unexpected(data.error());
    if (!data->empty()) {
      auto decoded = DecodeBase64(*data);
      if (!decoded) {
        return Fail(ErrorCode::kInvalidArgument, where + "." + key + "-data is not valid base64");
      }
      return *decoded;
    }
    auto file = Scalar(map, key.c_str(), where);
    if (!file) return tl::unexpected(file.error());
    if (file->empty()) return std::string();
    const std::string resolved = Resolve(*file);
    auto content = ReadWholeFile(resolved);
    if (!content) return Fail(ErrorCode::kIo, where + "." + key + ": " + content.error().message);
    return *content;
  }

  core::Result<ClientConfig> Parse(const YAML::Node& root, std::string_view wanted_context) {
    if (!root.IsMap())
      return Fail(ErrorCode::kInvalidArgument, "not a YAML map (is it a kubeconfig?)");
    ClientConfig config;
    auto context = ReadContext(root, wanted_context, config);
    if (!context) return tl::unexpected(context.error());
    if (auto cluster = ReadCluster(root, context->cluster, config); !cluster) {
      return tl::unexpected(cluster.error());
    }
    // A context without a user talks to the server anonymously.
    if (context->user.empty()) return config;
    if (auto user = ReadUser(root, context->user, config); !user) {
      return tl::unexpected(user.error());
    }
    return config;
  }

  // The names a context refers to.
  struct ContextRefs {
    std::string cluster;  // never ""
    std::string user;     // "" = anonymous
  };

  // Reads the context `wanted_context` (else the current-context): its namespace into `config`,
  // the names of its cluster and user returned.
  core::Result<ContextRefs> ReadContext(const YAML::Node& root, std::string_view wanted_context,
                                        ClientConfig& config) const {
    std::string context_name(wanted_context);
    if (context_name.empty()) {
      auto current = Scalar(root, "current-context", "");
      if (!current) return tl::unexpected(current.error());
      context_name = *current;
      if (context_name.empty()) {
        return Fail(ErrorCode::kInvalidArgument,
                    "no current-context is set and no context was given");
      }
    }
    auto context = Named(root, "contexts", "context", context_name);
    if (!context) return tl::unexpected(context.error());
    const std::string context_where = "contexts[\"" + context_name + "\"].context";
    auto cluster_name = Scalar(*context, "cluster", context_where);
    if (!cluster_name) return tl::unexpected(cluster_name.error());
    if (cluster_name->empty())
      return Fail(ErrorCode::kInvalidArgument, context_where + ".cluster is missing");
    auto user_name = Scalar(*context, "user", context_where);
    if (!user_name) return tl::unexpected(user_name.error());
    auto ns = Scalar(*context, "namespace", context_where);
    if (!ns) return tl::unexpected(ns.error());
    if (!ns->empty()) config.default_namespace = *ns;
    return ContextRefs{*cluster_name, *user_name};
  }

  // Reads the cluster `cluster_name` into `config`: the server's URL and how to trust it.
  core::Result<void> ReadCluster(const YAML::Node& root, const std::string& cluster_name,
                                 ClientConfig& config) const {
    auto cluster = Named(root, "clusters", "cluster", cluster_name);
    if (!cluster) return tl::unexpected(cluster.error());
    const std::string cluster_where = "clusters[\"" + cluster_name + "\"].cluster";
    auto server = Scalar(*cluster, "server", cluster_where);
    if (!server) return tl::unexpected(server.error());
    if (server->empty())
      return Fail(ErrorCode::kInvalidArgument, cluster_where + ".server is missing");
    if (server->rfind("https://", 0) != 0 && server->rfind("http://", 0) != 0) {
      return Fail(ErrorCode::kInvalidArgument,
                  cluster_where + ".server \"" + *server + "\" is not an http(s):// URL");
    }
    config.server = *server;
    // Settings the client cannot honour are refused rather than silently ignored.
    for (const char* unsupported : {"proxy-url", "tls-server-name"}) {
      if (const YAML::Node node = (*cluster)[unsupported]; node.IsDefined() && !node.IsNull()) {
        return Fail(ErrorCode::kInvalidArgument,
                    cluster_where + "." + unsupported + " is not supported by gpumux");
      }
    }
    auto ca = Pem(*cluster, "certificate-authority", cluster_where);
    if (!ca) return tl::unexpected(ca.error());
    config.ca_pem = *ca;
    if (const YAML::Node insecure = (*cluster)["insecure-skip-tls-verify"];
        insecure.IsDefined() && !insecure.IsNull()) {
      bool value = false;
      if (!insecure.IsScalar() || !YAML::convert<bool>::decode(insecure, value)) {
        return Fail(ErrorCode::kInvalidArgument,
                    cluster_where + ".insecure-skip-tls-verify is not true or false");
      }
      config.insecure_skip_tls_verify = value;
    }
    return {};
  }

  // Reads the user `user_name`'s credentials into `config`: a token (or token file) and a
  // client certificate with its key. Plugins and basic authentication are refused.
  core::Result<void> ReadUser(const YAML::Node& root, const std::string& user_name,
                              ClientConfig& config) const {
    auto user = Named(root, "users", "user", user_name);
    if (!user) return tl::unexpected(user.error());
    const std::string user_where = "users[\"" + user_name + "\"].user";
    for (const char* plugin : {"exec", "auth-provider"}) {
      if (const YAML::Node node = (*user)[plugin]; node.IsDefined() && !node.IsNull()) {
        return Fail(ErrorCode::kInvalidArgument,
                    user_where + " uses " + plugin +
                        " credentials, which are not supported: use a token or client certificate");
      }
    }
    for (const char* basic : {"username", "password"}) {
      if (const YAML::Node node = (*user)[basic]; node.IsDefined() && !node.IsNull()) {
        return Fail(ErrorCode::kInvalidArgument,
                    user_where + " uses basic authentication (" + basic +
                        "), which is not supported: use a token or client certificate");
      }
    }
    auto token = Scalar(*user, "token", user_where);
    if (!token) return tl::unexpected(token.error());
    config.bearer_token = *token;
    auto token_file = Scalar(*user, "tokenFile", user_where);
    if (!token_file) return tl::unexpected(token_file.error());
    if (!token_file->empty()) {
      config.token_file = Resolve(*token_file);
      if (auto read = ReadWholeFile(config.token_file); !read) {
        return Fail(ErrorCode::kIo, user_where + ".tokenFile: " + read.error().message);
      }
    }
    auto cert = Pem(*user, "client-certificate", user_where);
    if (!cert) return tl::unexpected(cert.error());
    auto key = Pem(*user, "client-key", user_where);
    if (!key) return tl::unexpected(key.error());
    if (cert->empty() != key->empty()) {
      return Fail(ErrorCode::kInvalidArgument,
                  user_where + (cert->empty() ? " has a client-key but no client-certificate"
                                              : " has a client-certificate but no client-key"));
    }
    config.client_cert_pem = *cert;
    config.client_key_pem = *key;
    return {};
  }

  std::string path_;
  fs::path folder_;
};

}  // namespace

core::Result<ClientConfig> LoadKubeconfig(const std::string& path, std::string_view context) {
  return KubeconfigReader(path).Load(context);
}

core::Result<ClientConfig> LoadInClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return MakeError(ErrorCode::kFailedPrecondition,
                     "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                     "are not set (not running in a pod?)");
  }
  const std::string port_text = port;
  if (port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5) {
    return MakeError(ErrorCode::kInvalidArgument, "in-cluster config: KUBERNETES_SERVICE_PORT \"" +
                                                      port_text + "\" is not a port");
  }
  std::string host_text = host;
  if (host_text.find(':') != std::string::npos && host_text.front() != '[') {
    host_text = "[" + host_text + "]";  // IPv6 literal
  }
  ClientConfig config;
  config.server = "https://" + host_text + ":" + port_text;

  const fs::path dir(sa_dir);
  config.token_file = (dir / "token").string();
  auto token = ReadWholeFile(config.token_file);
  if (!token) {
    return MakeError(ErrorCode::kIo,
                     "in-cluster config: the service account token " + token.error().message);
  }
  if (Trim(*token).empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "in-cluster config: the service account token " +
                                                      config.token_file + " is empty");
  }
  const std::string ca_path = (dir / "ca.crt").string();
  auto ca = ReadWholeFile(ca_path);
  if (!ca) {
    return MakeError(ErrorCode::kIo, "in-cluster config: the CA bundle " + ca.error().message);
  }
  config.ca_pem = *ca;
  if (auto ns = ReadWholeFile((dir / "namespace").string()); ns && !Trim(*ns).empty()) {
    config.default_namespace = Trim(*ns);
  }
  return config;
}

core::Result<KubeconfigChoice> FindKubeconfig(std::string_view flag,
                                              std::string_view kubeconfig_env,
                                              std::string_view home,
                                              std::string_view service_host) {
  if (!flag.empty()) return KubeconfigChoice{std::string(flag), false, "--kubeconfig"};
  std::vector<std::string> existing;
  std::size_t start = 0;
  while (start <= kubeconfig_env.size() && !kubeconfig_env.empty()) {
    std::size_t colon = kubeconfig_env.find(':', start);
    if (colon == std::string_view::npos) colon = kubeconfig_env.size();
    const std::string path(kubeconfig_env.substr(start, colon - start));
    std::error_code ec;
    if (!path.empty() && fs::exists(path, ec)) existing.push_back(path);
    start = colon + 1;
  }
  if (existing.size() > 1) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "$KUBECONFIG names " + std::to_string(existing.size()) + " files (" +
                         existing[0] + ", " + existing[1] + (existing.size() > 2 ? ", ..." : "") +
                         "): kubectl merges them, gpumux reads one; give --kubeconfig");
  }
  if (existing.size() == 1) return KubeconfigChoice{existing[0], false, "$KUBECONFIG"};
  if (!kubeconfig_env.empty()) {
    return MakeError(ErrorCode::kNotFound,
                     "$KUBECONFIG (" + std::string(kubeconfig_env) + ") names no file that exists");
  }
  if (!home.empty()) {
    const std::string path = (fs::path(home) / ".kube" / "config").string();
    std::error_code ec;
    if (fs::exists(path, ec)) return KubeconfigChoice{path, false, "~/.kube/config"};
  }
  if (!service_host.empty()) return KubeconfigChoice{"", true, "in-cluster"};
  return MakeError(ErrorCode::kNotFound,
                   "no kubeconfig: no --kubeconfig, no $KUBECONFIG, no " +
                       (home.empty() ? std::string("$HOME") : std::string(home)) +
                       "/.kube/config, and not in a pod (KUBERNETES_SERVICE_HOST unset)");
}

}  // namespace gpumux::kube
