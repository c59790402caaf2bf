// FakeApiServer: an in-test Kubernetes API server on 127.0.0.1 (a free port), serving the REST
// subset gpumux uses from in-memory objects, over HTTP or HTTPS (optionally requiring a client
// certificate) and optionally requiring a bearer token.
//
// REST subset (JSON only):
//   GET   /api/v1/nodes, /api/v1/pods, /api/v1/namespaces/{ns}/pods    list: limit/continue
//         paging, metadata.resourceVersion; fieldSelector and labelSelector with =, ==, !=
//         (and a bare label key) are honoured
//   GET   ...?watch=1&resourceVersion=RV[&timeoutSeconds=T][&allowWatchBookmarks=true]
//         chunked newline-delimited events: the history after RV (RV "" or "0": ADDED for every
//         object now), then new events as they happen, until timeoutSeconds, CloseWatches(),
//         or the server stops. With a selector, an object moving in (out) of the selection is
//         sent as ADDED (DELETED), as Kubernetes does.
//   GET   /api/v1/nodes/{name}, /api/v1/namespaces/{ns}/pods/{name}
//   PATCH the same two: application/merge-patch+json (RFC 7386; strategic-merge is read as
//         a merge patch), application/json-patch+json (RFC 6902). metadata.uid or
//         metadata.resourceVersion in a merge patch that differ from the object's: 409.
//         A patch that changes nothing does not bump the resourceVersion.
//   POST  /api/v1/namespaces/{ns}/pods/{name}/binding: sets spec.nodeName and merges the
//         Binding's metadata.annotations into the pod, in one change (409 when already bound
//         or on a uid mismatch, 404 when the pod is absent), 201 with a Status.
//   POST  /api/v1/namespaces/{ns}/pods, /apis/batch/v1/namespaces/{ns}/jobs: create. 201 with
//         the object as stored (uid, creationTimestamp, resourceVersion, namespace; a pod gets
//         status.phase Pending); metadata.generateName is honoured. Errors as the API server
//         words them: 409 AlreadyExists (with details), 422 Invalid (no name, a name that is
//         not a DNS-1123 subdomain, a pod without containers, a job without a template), 400
//         BadRequest (not a JSON object, another kind or apiVersion, another namespace than
//         the URL's, a resourceVersion set).
//   GET   /apis/batch/v1/jobs, /apis/batch/v1/namespaces/{ns}/jobs[/{name}] and their watches,
//         like pods. No controller runs: a test plays the job controller (AddPod).
// Every change bumps one global resourceVersion (a decimal string on the wire) and appends
// to a history that watches replay. Errors are real Status objects:
//   {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"...",
//    "reason":"Conflict","code":409}
// Compact() makes every resourceVersion up to now too old: a watch from one is refused with
// 410 Gone/Expired, as an HTTP 410 answer or as an ERROR event (GoneMode); in kErrorEvent mode
// open watches also get that ERROR event and end.
//
// Thread safety: every method may be called from any thread while requests are served.
// The destructor ends open watches and stops the server; destroy clients that keep
// connections open (and stop reflectors) first, or it waits for their keep-alive (1 s).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace gpumux::test {

enum class FakeTls : std::uint8_t {
  kNone,               // plain HTTP
  kServerCert,         // HTTPS with a server certificate signed by the test CA
  kRequireClientCert,  // and clients must present a certificate signed by the test CA
};

// How a watch from a compacted resourceVersion is refused.
enum class GoneMode : std::uint8_t {
  kHttp410,     // HTTP 410 with a Status (reason Expired)
  kErrorEvent,  // HTTP 200, then one ERROR event with that Status, then the stream ends
};

struct FakeApiServerOptions {
  FakeTls tls = FakeTls::kNone;
  std::string bearer_token;  // when not empty, every request must carry it (else 401)
  GoneMode gone_mode = GoneMode::kHttp410;

  // One-line setups: FakeApiServer server(FakeApiServerOptions::Tls(FakeTls::kServerCert));
  static FakeApiServerOptions Tls(FakeTls mode) {
    FakeApiServerOptions options;
    options.tls = mode;
    return options;
  }
  static FakeApiServerOptions Token(std::string token) {
    FakeApiServerOptions options;
    options.bearer_token = std::move(token);
    return options;
  }
  static FakeApiServerOptions Gone(GoneMode mode) {
    FakeApiServerOptions options;
    options.gone_mode = mode;
    return options;
  }
};

// Certificates generated (with the openssl CLI) for an HTTPS fake, all PEM.
struct FakeTlsMaterial {
  std::string ca_pem;           // the CA that signed the server and client certificates
  std::string client_cert_pem;  // CN=gpumux-test-client, O=system:masters
  std::string client_key_pem;
  std::string other_ca_pem;           // an unrelated CA (the server is not signed by it)
  std::string other_client_cert_pem;  // a client certificate signed by the unrelated CA
  std::string other_client_key_pem;
  std::filesystem::path dir;  // where the files are (ca.crt, client.crt, ...)
};

// One request as the fake saw it.
struct SeenRequest {
  std::string method;
  std::string target;  // path and query as sent
  std::string kind;    // "list pods", "watch nodes", "get pod", "patch pod", "create pod", ...
  std::string content_type;
  std::string user_agent;
};

class FakeApiServer {
 public:
  explicit FakeApiServer(FakeApiServerOptions options = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // False (with the reason in error()) when the server could not start.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  std::string url() const;  // "http://127.0.0.1:PORT" or "https://..."
  int port() const { return port_; }
  const FakeTlsMaterial& tls() const { return tls_; }

  // --- objects (each returns the new resourceVersion; "" and a test failure on misuse) ---
  // Add: the object must be new; metadata.uid is filled in when absent, namespace defaults
  // to "default" (pods); kind and apiVersion are filled in.
  std::string AddNode(nlohmann::json node);
  std::string AddPod(nlohmann::json pod);
  // Replace an existing object (its uid is kept when the new one has none).
  std::string UpdateNode(nlohmann::json node);
  std::string UpdatePod(nlohmann::json pod);
  std::string DeleteNode(const std::string& name);
  std::string DeletePod(const std::string& ns, const std::string& name);
  std::optional<nlohmann::json> GetNode(const std::string& name) const;
  std::optional<nlohmann::json> GetPod(const std::string& ns, const std::string& name) const;
  std::optional<nlohmann::json> GetJob(const std::string& ns, const std::string& name) const;
  // Any other object, answered as it is to a GET of exactly `path` (e.g. a Deployment or a
  // ConfigMap that a client reads); not listed, watched or changed.
  void Serve(std::string path, nlohmann::json object);
  // Every object of "pods", "nodes" or "jobs", in key order (namespace/name).
  std::vector<nlohmann::json> Objects(const std::string& resource) const;
  std::string resource_version() const;

  // --- failures and timing ---
  // Answers the next `times` requests whose method equals `method` ("*" for any) and whose
  // target (path + query) contains `target_substring` with a Status of `status`.
  void FailNext(std::string method, std::string target_substring, int status, std::string reason,
                std::string message, int times = 1);
  // Like FailNext, but the request (a patch, binding or create) is carried out first: what a
  // client sees when the answer to a change that was applied is lost (a timeout, a 5xx from a
  // proxy).
  void FailNextAfterApplying(std::string method, std::string target_substring, int status,
                             std::string reason, std::string message, int times = 1);
  // Like FailNext, with a raw body (e.g. HTML from a proxy) instead of a Status.
  void FailNextWithBody(std::string method, std::string target_substring, int status,
                        std::string content_type, std::string body, int times = 1);
  // Every request waits this long before it is handled (0: none).
  void SetLatency(std::chrono::milliseconds latency);
  void SetBearerToken(std::string token);
  void SetGoneMode(GoneMode mode);
  // Everything before now becomes too old to watch from (see the header comment). Also bumps
  // the resourceVersion (as a change elsewhere in the cluster would), so that a list after
  // the compaction returns a version that can be watched.
  void Compact();
  // Ends every open watch cleanly (as an API server shutting down does).
  void CloseWatches();
  // Sends a BOOKMARK with the current resourceVersion on every open watch that allows them.
  void SendBookmarks();

  // --- observations ---
  std::int64_t requests(std::string_view kind) const;  // by SeenRequest::kind
  std::int64_t total_requests() const;
  std::int64_t bindings() const;   // successful bindings
  std::int64_t creations() const;  // successful creates (POST of a pod or job)
  int open_watches() const;
  std::vector<SeenRequest> seen() const;
  // The resourceVersion parameter of the latest watch request ("" if none).
  std::string last_watch_resource_version() const;
  // Waits until at least `count` watches are open; false on timeout.
  bool WaitForOpenWatches(int count, std::chrono::milliseconds timeout) const;
  // Waits until `requests(kind)` reaches `count`; false on timeout.
  bool WaitForRequests(std::string_view kind, std::int64_t count,
                       std::chrono::milliseconds timeout) const;

 private:
  struct HistoryEntry;
  struct WatchStream;
  struct Failure;
  struct Route;

  bool GenerateCertificates();
  void Handle(const httplib::Request& req, httplib::Response& res);
  void HandleList(const Route& route, const httplib::Request& req, httplib::Response& res);
  void HandleWatch(const Route& route, const httplib::Request& req, httplib::Response& res);
  void HandleGet(const Route& route, httplib::Response& res);
  void HandlePatch(const Route& route, const httplib::Request& req, httplib::Response& res);
  void HandleBinding(const Route& route, const httplib::Request& req, httplib::Response& res);
  void HandleCreate(const Route& route, const httplib::Request& req, httplib::Response& res);

  // Callers hold mu_.
  std::string Store(const std::string& resource, nlohmann::json object, std::string_view type);
  std::string Remove(const std::string& resource, const std::string& key);
  std::string Key(const std::string& resource, const nlohmann::json& object) const;

  FakeApiServerOptions options_;
  std::string error_;
  FakeTlsMaterial tls_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // history, watches, stopping_, counters
  bool stopping_ = false;
  std::int64_t rv_ = 1;
  std::int64_t compacted_rv_ = 0;  // watches from an RV below this are gone
  std::int64_t next_uid_ = 1;
  std::map<std::string, std::map<std::string, nlohmann::json>> objects_;  // resource -> key -> obj
  std::map<std::string, nlohmann::json> served_;                          // Serve(): path -> obj
  std::vector<HistoryEntry> history_;
  std::vector<std::shared_ptr<WatchStream>> watches_;
  std::vector<Failure> failures_;
  std::chrono::milliseconds latency_{0};
  std::map<std::string, std::int64_t, std::less<>> counts_;
  std::int64_t total_ = 0;
  std::int64_t bindings_ = 0;
  std::int64_t creations_ = 0;
  std::vector<SeenRequest> seen_;
  std::string last_watch_rv_;
};

}  // namespace gpumux::test
