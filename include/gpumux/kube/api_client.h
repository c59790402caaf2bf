// A client of the Kubernetes API server: the REST subset gpumux uses (get, list, watch, patch,
// create), over HTTPS with a bearer token or a client certificate, from a kubeconfig or the
// in-cluster service account.
//
// KubeApi is the interface the daemons use (so tests can point them at an in-test API server
// on loopback); MakeCurlClient is the real implementation (libcurl + OpenSSL).
// Errors from the API server keep its HTTP status and the Status object's reason and message.
// Thread safety: every KubeApi method may be called from several threads at once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <string_view>
#include <tl/expected.hpp>

#include "gpumux/core/result.h"

namespace gpumux::kube {

struct ApiError {
  int http_status = 0;  // 0: no HTTP answer (connect/TLS/timeout); else the status code
  std::string reason;   // Status.reason ("Conflict", "NotFound", "Gone", ...) or curl's error
  std::string message;  // Status.message, or a description of the transport failure
  // e.g. "HTTP 409 Conflict: Operation cannot be fulfilled on pods \"p\": ..."
  std::string ToString() const;
};

template <typename T>
using ApiResult = tl::expected<T, ApiError>;

// Where and how to reach the API server.
struct ClientConfig {
  std::string server;           // "https://10.0.0.1:6443" or "http://127.0.0.1:8080"
  std::string bearer_token;     // literal token, or
  std::string token_file;       // a file re-read when it changes (service-account tokens rotate)
  std::string ca_pem;           // PEM of the CA bundle; empty = system CAs
  std::string client_cert_pem;  // PEM client certificate and key (mutual TLS)
  std::string client_key_pem;
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  std::chrono::milliseconds request_timeout{3000};  // for everything but watch streams
  std::string user_agent = "gpumux";
};

// Reads a kubeconfig (YAML): `current-context` (or `context` when given), its cluster's
// server / certificate-authority(-data) / insecure-skip-tls-verify, its user's token /
// tokenFile / client-certificate(-data) / client-key(-data). Relative file paths are resolved
// against the kubeconfig's folder. Errors name the file and the missing or bad field.
// Refused with a clear error: exec and auth-provider credential plugins, basic auth,
// a cluster's proxy-url and tls-server-name. One file only (no KUBECONFIG merging).
core::Result<ClientConfig> LoadKubeconfig(const std::string& path, std::string_view context = {});

// Where kubectl would find its configuration: `flag` (--kubeconfig) when given; else the one
// file of $KUBECONFIG that exists (several are refused: kubectl merges them, gpumux reads one
// file); else $HOME/.kube/config when it exists; else the in-cluster service account when
// $KUBERNETES_SERVICE_HOST is set. `how` says which ("--kubeconfig", "$KUBECONFIG",
// "~/.kube/config", "in-cluster"). The environment is passed in (tests), e.g.
// FindKubeconfig(flag, getenv("KUBECONFIG"), getenv("HOME"), getenv("KUBERNETES_SERVICE_HOST")).
struct KubeconfigChoice {
  std::string path;  // "" with in_cluster
  bool in_cluster = false;
  std::string how;
};
core::Result<KubeconfigChoice> FindKubeconfig(std::string_view flag,
                                              std::string_view kubeconfig_env,
                                              std::string_view home, std::string_view service_host);

// In-cluster: KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT and the service account's
// token, ca.crt and namespace under `sa_dir`.
core::Result<ClientConfig> LoadInClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

enum class PatchType {
  kMerge,           // application/merge-patch+json
  kJson,            // application/json-patch+json
  kStrategicMerge,  // application/strategic-merge-patch+json
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  nlohmann::json object;
};

class KubeApi {
 public:
  virtual ~KubeApi() = default;
  // GET `path` (e.g. "/api/v1/namespaces/ns/pods/p"), the decoded body.
  virtual ApiResult<nlohmann::json> Get(const std::string& path) = 0;
  // GET a list, following `continue` tokens (pages of `page_size`); returns one list object
  // with every item and the last page's metadata.resourceVersion.
  virtual ApiResult<nlohmann::json> List(const std::string& path, int page_size = 500) = 0;
  virtual ApiResult<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                                          PatchType type) = 0;
  virtual ApiResult<nlohmann::json> Post(const std::string& path, const nlohmann::json& body) = 0;
  // GET path?watch=1&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=T and calls
  // `on_event` for every event, in order, until the server ends the stream (success), the
  // handler returns false or `stop` is requested (success), or the transport fails (error).
  // An HTTP 410 answer is returned as an ApiError with http_status 410; an ERROR event is
  // passed to the handler like any other.
  virtual ApiResult<void> Watch(const std::string& path, const std::string& resource_version,
                                const std::function<bool(WatchEvent&&)>& on_event,
                                std::stop_token stop, int timeout_seconds = 300) = 0;
};

// The real client. Each call uses its own libcurl easy handle taken from a small pool (so
// connections are kept alive between calls); HTTP/1.1; compression (gzip) is asked for lists only.
// The token file, when set, is re-read whenever its modification time or size changes.
// A stop request interrupts a watch at once (curl_multi_wakeup), even on a silent stream;
// other calls are bounded by `request_timeout`. A watch whose server never ends it is
// ended (successfully) 30 s after its timeoutSeconds, so a dead peer cannot hang it forever.
std::unique_ptr<KubeApi> MakeCurlClient(ClientConfig config);

// Percent-encodes a query value or a path segment: RFC 3986 unreserved characters
// (A-Z a-z 0-9 - . _ ~) are kept, every other byte becomes %XX.
// e.g. QueryEscape("spec.nodeName=n 1") == "spec.nodeName%3Dn%201"
std::string QueryEscape(std::string_view value);

// POST /api/v1/namespaces/{ns}/pods/{name}/binding with target Node `node` (and the pod's uid
// as a precondition). `annotations` (an object, or null for none) go into the Binding's
// metadata: the API server merges them into the pod in the same write that sets
// spec.nodeName, so they land if and only if this Binding does (a pod already bound is 409).
ApiResult<void> CreateBinding(KubeApi& api, const std::string& ns, const std::string& name,
                              const std::string& uid, const std::string& node,
                              const nlohmann::json& annotations = nullptr);

// Merge-patches metadata.annotations of a pod; `uid` (when not empty) is a precondition: the
// API server answers 409 if the pod was replaced by another with the same name.
ApiResult<nlohmann::json> PatchPodAnnotations(KubeApi& api, const std::string& ns,
                                              const std::string& name, const std::string& uid,
                                              const nlohmann::json& annotations);

}  // namespace gpumux::kube
