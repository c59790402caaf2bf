#include "tests/testing/fake_apiserver.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <system_error>

#include "tests/testing/process.h"

namespace gpumux::test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kDefaultWatchLength = std::chrono::hours(1);

// A peer that went away must not kill the test binary when the server writes to it.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] { std::signal(SIGPIPE, SIG_IGN); });
}

json Status(int code, const std::string& reason, const std::string& message) {
  return json{{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
              {"status", "Failure"}, {"message", message}, {"reason", reason},
              {"code", code}};
}

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void ReplyStatus(httplib::Response& res, int code, const std::string& reason,
                 const std::string& message) {
  Reply(res, code, Status(code, reason, message));
}

std::string Str(const json& object, std::initializer_list<const char*> path) {
  const json* node = &object;
  for (const char* key : path) {
    if (!node->is_object()) return {};
    auto it = node->find(key);
    if (it == node->end()) return {};
    node = &*it;
  }
  return node->is_string() ? node->get<std::string>() : std::string();
}

std::string Singular(const std::string& resource) {
  if (resource == "jobs") return "job";
  return resource == "pods" ? "pod" : "node";
}
std::string KindOf(const std::string& resource) {
  if (resource == "jobs") return "Job";
  return resource == "pods" ? "Pod" : "Node";
}
std::string ApiVersionOf(const std::string& resource) {
  return resource == "jobs" ? "batch/v1" : "v1";
}
// Pods and jobs live in a namespace; nodes do not.
bool Namespaced(const std::string& resource) { return resource == "pods" || resource == "jobs"; }

// A DNS-1123 subdomain, as Kubernetes requires of pod and job names: at most 253 characters of
// lowercase letters, digits, '-' and '.', starting and ending with a letter or digit.
bool IsDns1123Subdomain(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '.'; });
}

std::optional<std::int64_t> ParseInt(std::string_view text) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string> Split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end == std::string_view::npos ? text.npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

std::string TrimSpaces(std::string text) {
  const auto first = text.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(' ') - first + 1);
}

// One requirement of a field or label selector.
struct Requirement {
  enum class Op : std::uint8_t { kEquals, kNotEquals, kExists, kNotExists };
  std::string key;
  Op op = Op::kEquals;
  std::string value;
};

struct Selector {
  std::vector<Requirement> fields;
  std::vector<Requirement> labels;
};

std::optional<std::vector<Requirement>> ParseRequirements(const std::string& text,
                                                          bool allow_existence) {
  std::vector<Requirement> out;
  if (TrimSpaces(text).empty()) return out;
  for (std::string part : Split(text, ',')) {
    part = TrimSpaces(part);
    Requirement r;
    if (auto at = part.find("!="); at != std::string::npos) {
      r = {TrimSpaces(part.substr(0, at)), Requirement::Op::kNotEquals,
           TrimSpaces(part.substr(at + 2))};
    } else if (auto eq2 = part.find("=="); eq2 != std::string::npos) {
      r = {TrimSpaces(part.substr(0, eq2)), Requirement::Op::kEquals,
           TrimSpaces(part.substr(eq2 + 2))};
    } else if (auto eq = part.find('='); eq != std::string::npos) {
      r = {TrimSpaces(part.substr(0, eq)), Requirement::Op::kEquals,
           TrimSpaces(part.substr(eq + 1))};
    } else if (allow_existence && !part.empty() && part.find(' ') == std::string::npos) {
      if (part[0] == '!') {
        r = {part.substr(1), Requirement::Op::kNotExists, ""};
      } else {
        r = {part, Requirement::Op::kExists, ""};
      }
    } else {
      return std::nullopt;
    }
    if (r.key.empty()) return std::nullopt;
    out.push_back(std::move(r));
  }
  return out;
}

// A field of an object by dotted path ("spec.nodeName"); "" when absent.
std::string FieldValue(const json& object, const std::string& path) {
  const json* node = &object;
  for (const std::string& key : Split(path, '.')) {
    if (!node->is_object()) return {};
    auto it = node->find(key);
    if (it == node->end()) return {};
    node = &*it;
  }
  if (node->is_string()) return node->get<std::string>();
  if (node->is_null()) return {};
  return node->dump();
}

bool Matches(const Selector& selector, const json& object) {
  for (const Requirement& r : selector.fields) {
    const std::string value = FieldValue(object, r.key);
    if ((r.op == Requirement::Op::kEquals) != (value == r.value)) return false;
  }
  const json labels =
      object.is_object() && object.contains("metadata") && object["metadata"].is_object() &&
              object["metadata"].contains("labels") && object["metadata"]["labels"].is_object()
          ? object["metadata"]["labels"]
          : json::object();
  for (const Requirement& r : selector.labels) {
    auto it = labels.find(r.key);
    const bool present = it != labels.end() && it->is_string();
    const std::string value = present ? it->get<std::string>() : "";
    switch (r.op) {
      case Requirement::Op::kEquals:
        if (!present || value != r.value) return false;
        break;
      case Requirement::Op::kNotEquals:
        if (present && value == r.value) return false;
        break;
      case Requirement::Op::kExists:
        if (!present) return false;
        break;
      case Requirement::Op::kNotExists:
        if (present) return false;
        break;
    }
  }
  return true;
}

// The object as a list item: Kubernetes leaves kind and apiVersion out of list items.
json AsListItem(json object) {
  object.erase("kind");
  object.erase("apiVersion");
  return object;
}

std::string EventLine(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

std::string MediaType(const std::string& header) {
  std::string type = header.substr(0, header.find(';'));
  return TrimSpaces(type);
}

std::string ContinueToken(std::int64_t rv, const std::string& after_key) {
  return "rv:" + std::to_string(rv) + ";after:" + after_key;
}

bool ParseContinueToken(const std::string& token, std::int64_t& rv, std::string& after_key) {
  if (token.rfind("rv:", 0) != 0) return false;
  const auto separator = token.find(";after:");
  if (separator == std::string::npos) return false;
  auto parsed = ParseInt(std::string_view(token).substr(3, separator - 3));
  if (!parsed) return false;
  rv = *parsed;
  after_key = token.substr(separator + 7);
  return true;
}

}  // namespace

struct FakeApiServer::HistoryEntry {
  std::int64_t rv = 0;
  std::string resource;  // "pods" | "nodes"
  std::string type;      // ADDED | MODIFIED | DELETED
  json object;           // after the change (for DELETED: the object as deleted)
  json previous;         // before the change; null for ADDED
};

struct FakeApiServer::WatchStream {
  std::string resource;
  std::string ns;  // "" = every namespace
  Selector selector;
  std::size_t next = 0;  // index into history_ of the next entry to consider
  std::string initial;   // synthetic ADDED events still to send
  bool bookmarks = false;
  bool bookmark_pending = false;
  bool closed = false;
  std::optional<json> error_event;
  Clock::time_point deadline;

  bool Selects(const json& object) const {
    if (!ns.empty() && Str(object, {"metadata", "namespace"}) != ns) return false;
    return Matches(selector, object);
  }

  // The line this stream sends for `entry` ("" for none).
  std::string Line(const HistoryEntry& entry) const {
    if (entry.resource != resource) return {};
    const bool now = Selects(entry.object);
    const bool before = !entry.previous.is_null() && Selects(entry.previous);
    if (entry.type == "ADDED") return now ? EventLine("ADDED", entry.object) : "";
    if (entry.type == "DELETED") return before ? EventLine("DELETED", entry.object) : "";
    if (now && before) return EventLine("MODIFIED", entry.object);
    if (now) return EventLine("ADDED", entry.object);
    if (before) return EventLine("DELETED", entry.object);
    return {};
  }
};

struct FakeApiServer::Failure {
  std::string method;
  std::string substring;
  int status = 500;
  std::string reason;
  std::string message;
  int remaining = 1;
  std::optional<std::pair<std::string, std::string>> raw;  // content type, body
  bool after_applying = false;  // the request is carried out, then its answer replaced
};

struct FakeApiServer::Route {
  std::string resource;     // "pods" | "nodes" | "" (unknown)
  std::string ns;           // pods: the namespace ("" = every namespace for a collection)
  std::string name;         // "" for a collection
  std::string subresource;  // "binding" | ""
};

FakeApiServer::FakeApiServer(FakeApiServerOptions options) : options_(std::move(options)) {
  IgnoreSigpipeOnce();
  if (options_.tls != FakeTls::kNone) {
    if (!GenerateCertificates()) return;
    const std::string cert = (tls_.dir / "server.crt").string();
    const std::string key = (tls_.dir / "server.key").string();
    const std::string ca = (tls_.dir / "ca.crt").string();
    auto ssl = std::make_unique<httplib::SSLServer>(
        cert.c_str(), key.c_str(),
        options_.tls == FakeTls::kRequireClientCert ? ca.c_str() : nullptr);
    if (!ssl->is_valid()) {
      error_ = "cannot set up the TLS server with " + cert;
      return;
    }
    server_ = std::move(ssl);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  server_->new_task_queue = [] { return new httplib::ThreadPool(24); };
  server_->set_keep_alive_timeout(1);
  server_->set_tcp_nodelay(true);  // headers and body are separate writes: no Nagle delays
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Patch(".*", handler);
  server_->Put(".*", handler);
  server_->Delete(".*", handler);
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) {
    error_ = "cannot bind a port on 127.0.0.1";
    return;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() only works once the server runs: wait for it (microseconds).
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  while (!server_->is_running() && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!server_->is_running()) error_ = "the HTTP server did not start";
}

FakeApiServer::~FakeApiServer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& watch : watches_) watch->closed = true;
  }
  cv_.notify_all();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  if (!tls_.dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(tls_.dir, ec);
  }
}

std::string FakeApiServer::url() const {
  return std::string(options_.tls == FakeTls::kNone ? "http" : "https") +
         "://127.0.0.1:" + std::to_string(port_);
}

bool FakeApiServer::GenerateCertificates() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "gpumux-fake-apiserver-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    error_ = "mkdtemp failed";
    return false;
  }
  tls_.dir = pattern;
  const std::filesystem::path& dir = tls_.dir;
  const std::string log = (dir / "openssl.log").string();
  auto openssl = [&](std::vector<std::string> args) {
    ProcessSpec spec;
    spec.argv = {"openssl"};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.stdout_path = log;
    spec.stderr_path = log;
    spec.cwd = dir.string();
    if (RunProcess(spec).Exited(0)) return true;
    std::string command;
    for (const auto& a : spec.argv) command += a + " ";
    error_ = "`" + command + "` failed: " + ReadFileText(log);
    return false;
  };
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  const std::vector<std::string> ec_key = {"-newkey", "ec", "-pkeyopt",
                                           "ec_paramgen_curve:prime256v1", "-nodes"};
  auto make_ca = [&](const std::string& name) {
    std::vector<std::string> args = {"req",     "-x509",
                                     "-days",   "2",
                                     "-subj",   "/CN=" + name,
                                     "-keyout", name + ".key",
                                     "-out",    name + ".crt",
                                     "-addext", "basicConstraints=critical,CA:TRUE",
                                     "-addext", "keyUsage=critical,keyCertSign,cRLSign"};
    args.insert(args.begin() + 2, ec_key.begin(), ec_key.end());
    return openssl(args);
  };
  auto make_leaf = [&](const std::string& name, const std::string& subject, const std::string& ca,
                       const std::string& extensions, const std::string& serial) {
    write(name + ".ext", extensions);
    std::vector<std::string> request = {"req",         "-subj", subject,      "-keyout",
                                        name + ".key", "-out",  name + ".csr"};
    request.insert(request.begin() + 1, ec_key.begin(), ec_key.end());
    return openssl(request) && openssl({"x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt",
                                        "-CAkey", ca + ".key", "-set_serial", serial, "-days", "2",
                                        "-extfile", name + ".ext", "-out", name + ".crt"});
  };
  const bool made =
      make_ca("ca") && make_ca("other-ca") &&
      make_leaf("server", "/CN=127.0.0.1", "ca",
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
                "2") &&
      make_leaf("client", "/O=system:masters/CN=gpumux-test-client", "ca",
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=clientAuth\n",
                "3") &&
      make_leaf("other-client", "/CN=gpumux-test-other-client", "other-ca",
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=clientAuth\n",
                "4");
  if (!made) return false;
  tls_.ca_pem = ReadFileText(dir / "ca.crt");
  tls_.client_cert_pem = ReadFileText(dir / "client.crt");
  tls_.client_key_pem = ReadFileText(dir / "client.key");
  tls_.other_ca_pem = ReadFileText(dir / "other-ca.crt");
  tls_.other_client_cert_pem = ReadFileText(dir / "other-client.crt");
  tls_.other_client_key_pem = ReadFileText(dir / "other-client.key");
  return true;
}

// --- objects ---

std::string FakeApiServer::Key(const std::string& resource, const json& object) const {
  const std::string name = Str(object, {"metadata", "name"});
  if (Namespaced(resource)) return Str(object, {"metadata", "namespace"}) + "/" + name;
  return name;
}

std::string FakeApiServer::Store(const std::string& resource, json object, std::string_view type) {
  ++rv_;
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  const std::string key = Key(resource, object);
  auto& objects = objects_[resource];
  json previous;
  if (auto it = objects.find(key); it != objects.end()) previous = it->second;
  objects[key] = object;
  history_.push_back(
      HistoryEntry{rv_, resource, std::string(type), std::move(object), std::move(previous)});
  cv_.notify_all();
  return std::to_string(rv_);
}

std::string FakeApiServer::Remove(const std::string& resource, const std::string& key) {
  auto& objects = objects_[resource];
  auto it = objects.find(key);
  if (it == objects.end()) {
    ADD_FAILURE() << "FakeApiServer: delete of missing " << resource << " " << key;
    return {};
  }
  ++rv_;
  json previous = it->second;
  json object = std::move(it->second);
  objects.erase(it);
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  history_.push_back(
      HistoryEntry{rv_, resource, "DELETED", std::move(object), std::move(previous)});
  cv_.notify_all();
  return std::to_string(rv_);
}

namespace {

// Fills kind, apiVersion, namespace and uid; false (and a test failure) without a name.
bool Normalize(json& object, const std::string& resource, std::int64_t& next_uid) {
  if (!object.is_object() || Str(object, {"metadata", "name"}).empty()) {
    ADD_FAILURE() << "FakeApiServer: a " << Singular(resource)
                  << " needs metadata.name: " << object;
    return false;
  }
  object["kind"] = KindOf(resource);
  object["apiVersion"] = ApiVersionOf(resource);
  if (Namespaced(resource) && Str(object, {"metadata", "namespace"}).empty()) {
    object["metadata"]["namespace"] = "default";
  }
  if (Str(object, {"metadata", "uid"}).empty()) {
    char uid[40];
    std::snprintf(uid, sizeof uid, "00000000-0000-4000-8000-%012lld",
                  static_cast<long long>(next_uid++));
    object["metadata"]["uid"] = uid;
  }
  return true;
}

}  // namespace

std::string FakeApiServer::AddNode(json node) {
  std::lock_guard lock(mu_);
  if (!Normalize(node, "nodes", next_uid_)) return {};
  if (objects_["nodes"].count(Key("nodes", node)) != 0) {
    ADD_FAILURE() << "FakeApiServer: node " << Key("nodes", node) << " already exists";
    return {};
  }
  return Store("nodes", std::move(node), "ADDED");
}

std::string FakeApiServer::AddPod(json pod) {
  std::lock_guard lock(mu_);
  if (!Normalize(pod, "pods", next_uid_)) return {};
  if (objects_["pods"].count(Key("pods", pod)) != 0) {
    ADD_FAILURE() << "FakeApiServer: pod " << Key("pods", pod) << " already exists";
    return {};
  }
  return Store("pods", std::move(pod), "ADDED");
}

namespace {
template <typename Objects>
bool KeepUid(json& object, const Objects& objects, const std::string& key) {
  auto it = objects.find(key);
  if (it == objects.end()) {
    ADD_FAILURE() << "FakeApiServer: update of missing object " << key;
    return false;
  }
  if (Str(object, {"metadata", "uid"}).empty()) {
    object["metadata"]["uid"] = it->second["metadata"]["uid"];
  }
  return true;
}
}  // namespace

std::string FakeApiServer::UpdateNode(json node) {
  std::lock_guard lock(mu_);
  if (node.is_object() && node.contains("metadata") && node["metadata"].is_object() &&
      !KeepUid(node, objects_["nodes"], Key("nodes", node))) {
    return {};
  }
  if (!Normalize(node, "nodes", next_uid_)) return {};
  if (objects_["nodes"].count(Key("nodes", node)) == 0) {
    ADD_FAILURE() << "FakeApiServer: update of missing node " << Key("nodes", node);
    return {};
  }
  return Store("nodes", std::move(node), "MODIFIED");
}

std::string FakeApiServer::UpdatePod(json pod) {
  std::lock_guard lock(mu_);
  if (pod.is_object() && pod.contains("metadata") && pod["metadata"].is_object() &&
      Str(pod, {"metadata", "namespace"}).empty()) {
    pod["metadata"]["namespace"] = "default";
  }
  if (pod.is_object() && pod.contains("metadata") && pod["metadata"].is_object() &&
      !KeepUid(pod, objects_["pods"], Key("pods", pod))) {
    return {};
  }
  if (!Normalize(pod, "pods", next_uid_)) return {};
  return Store("pods", std::move(pod), "MODIFIED");
}

std::string FakeApiServer::DeleteNode(const std::string& name) {
  std::lock_guard lock(mu_);
  return Remove("nodes", name);
}

std::string FakeApiServer::DeletePod(const std::string& ns, const std::string& name) {
  std::lock_guard lock(mu_);
  return Remove("pods", ns + "/" + name);
}

std::optional<json> FakeApiServer::GetNode(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto resource = objects_.find("nodes");
  if (resource == objects_.end()) return std::nullopt;
  auto it = resource->second.find(name);
  if (it == resource->second.end()) return std::nullopt;
  return it->second;
}

std::optional<json> FakeApiServer::GetPod(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto resource = objects_.find("pods");
  if (resource == objects_.end()) return std::nullopt;
  auto it = resource->second.find(ns + "/" + name);
  if (it == resource->second.end()) return std::nullopt;
  return it->second;
}

std::optional<json> FakeApiServer::GetJob(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto resource = objects_.find("jobs");
  if (resource == objects_.end()) return std::nullopt;
  auto it = resource->second.find(ns + "/" + name);
  if (it == resource->second.end()) return std::nullopt;
  return it->second;
}

std::vector<json> FakeApiServer::Objects(const std::string& resource) const {
  std::lock_guard lock(mu_);
  std::vector<json> out;
  auto it = objects_.find(resource);
  if (it == objects_.end()) return out;
  for (const auto& [key, object] : it->second) out.push_back(object);
  return out;
}

std::int64_t FakeApiServer::creations() const {
  std::lock_guard lock(mu_);
  return creations_;
}

std::string FakeApiServer::resource_version() const {
  std::lock_guard lock(mu_);
  return std::to_string(rv_);
}

// --- failures, timing, watches ---

void FakeApiServer::FailNext(std::string method, std::string target_substring, int status,
                             std::string reason, std::string message, int times) {
  std::lock_guard lock(mu_);
  failures_.push_back(Failure{std::move(method),
                              std::move(target_substring),
                              status,
                              std::move(reason),
                              std::move(message),
                              times,
                              {}});
}

void FakeApiServer::FailNextAfterApplying(std::string method, std::string target_substring,
                                          int status, std::string reason, std::string message,
                                          int times) {
  std::lock_guard lock(mu_);
  Failure failure{std::move(method),
                  std::move(target_substring),
                  status,
                  std::move(reason),
                  std::move(message),
                  times,
                  {}};
  failure.after_applying = true;
  failures_.push_back(std::move(failure));
}

void FakeApiServer::FailNextWithBody(std::string method, std::string target_substring, int status,
                                     std::string content_type, std::string body, int times) {
  std::lock_guard lock(mu_);
  Failure failure{std::move(method), std::move(target_substring), status, "", "", times, {}};
  failure.raw = std::make_pair(std::move(content_type), std::move(body));
  failures_.push_back(std::move(failure));
}

void FakeApiServer::SetLatency(std::chrono::milliseconds latency) {
  std::lock_guard lock(mu_);
  latency_ = latency;
}

void FakeApiServer::SetBearerToken(std::string token) {
  std::lock_guard lock(mu_);
  options_.bearer_token = std::move(token);
}

void FakeApiServer::SetGoneMode(GoneMode mode) {
  std::lock_guard lock(mu_);
  options_.gone_mode = mode;
}

void FakeApiServer::Compact() {
  std::lock_guard lock(mu_);
  ++rv_;
  compacted_rv_ = rv_;
  if (options_.gone_mode == GoneMode::kErrorEvent) {
    for (auto& watch : watches_) {
      if (!watch->error_event) {
        watch->error_event =
            Status(410, "Expired", "The resourceVersion for the provided watch is too old.");
      }
    }
  }
  cv_.notify_all();
}

void FakeApiServer::CloseWatches() {
  std::lock_guard lock(mu_);
  for (auto& watch : watches_) watch->closed = true;
  cv_.notify_all();
}

void FakeApiServer::SendBookmarks() {
  std::lock_guard lock(mu_);
  for (auto& watch : watches_) {
    if (watch->bookmarks) watch->bookmark_pending = true;
  }
  cv_.notify_all();
}

// --- observations ---

std::int64_t FakeApiServer::requests(std::string_view kind) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(kind);
  return it == counts_.end() ? 0 : it->second;
}

std::int64_t FakeApiServer::total_requests() const {
  std::lock_guard lock(mu_);
  return total_;
}

std::int64_t FakeApiServer::bindings() const {
  std::lock_guard lock(mu_);
  return bindings_;
}

int FakeApiServer::open_watches() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(watches_.size());
}

std::vector<SeenRequest> FakeApiServer::seen() const {
  std::lock_guard lock(mu_);
  return seen_;
}

std::string FakeApiServer::last_watch_resource_version() const {
  std::lock_guard lock(mu_);
  return last_watch_rv_;
}

bool FakeApiServer::WaitForOpenWatches(int count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return static_cast<int>(watches_.size()) >= count; });
}

bool FakeApiServer::WaitForRequests(std::string_view kind, std::int64_t count,
                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    auto it = counts_.find(kind);
    return it != counts_.end() && it->second >= count;
  });
}

// --- serving ---

void FakeApiServer::Serve(std::string path, nlohmann::json object) {
  std::lock_guard lock(mu_);
  served_[std::move(path)] = std::move(object);
}

void FakeApiServer::Handle(const httplib::Request& req, httplib::Response& res) {
  // Route.
  Route route;
  {
    const std::vector<std::string> parts = Split(req.path, '/');
    // parts[0] is "" (the path starts with '/').
    const std::size_t n = parts.size();
    if (n >= 4 && parts[0].empty() && parts[1] == "api" && parts[2] == "v1") {
      if (parts[3] == "nodes" && n <= 5) {
        route.resource = "nodes";
        if (n == 5) route.name = parts[4];
      } else if (parts[3] == "pods" && n == 4) {
        route.resource = "pods";
      } else if (parts[3] == "namespaces" && n >= 6 && n <= 8 && parts[5] == "pods") {
        route.resource = "pods";
        route.ns = parts[4];
        if (n >= 7) route.name = parts[6];
        if (n == 8) route.subresource = parts[7];
      }
    } else if (n >= 5 && parts[0].empty() && parts[1] == "apis" && parts[2] == "batch" &&
               parts[3] == "v1") {
      if (parts[4] == "jobs" && n == 5) {
        route.resource = "jobs";
      } else if (parts[4] == "namespaces" && n >= 7 && n <= 8 && parts[6] == "jobs") {
        route.resource = "jobs";
        route.ns = parts[5];
        if (n == 8) route.name = parts[7];
      }
    }
  }
  const bool watch = req.get_param_value("watch") == "1" || req.get_param_value("watch") == "true";
  std::string kind = "other";
  if (!route.resource.empty()) {
    if (route.name.empty()) {
      if (req.method == "GET") kind = (watch ? "watch " : "list ") + route.resource;
      if (req.method == "POST" && !route.ns.empty()) kind = "create " + Singular(route.resource);
    } else if (route.subresource.empty()) {
      if (req.method == "GET") kind = "get " + Singular(route.resource);
      if (req.method == "PATCH") kind = "patch " + Singular(route.resource);
    } else if (route.subresource == "binding" && req.method == "POST") {
      kind = "create binding";
    }
  }

  std::optional<Failure> failure;
  {
    std::unique_lock lock(mu_);
    if (latency_.count() > 0) {
      cv_.wait_for(lock, latency_, [&] { return stopping_; });
    }
    if (stopping_) {
      ReplyStatus(res, 503, "ServiceUnavailable", "the server is shutting down");
      return;
    }
    ++total_;
    ++counts_[kind];
    seen_.push_back(SeenRequest{req.method, req.target, kind, req.get_header_value("Content-Type"),
                                req.get_header_value("User-Agent")});
    cv_.notify_all();
    if (!options_.bearer_token.empty() &&
        req.get_header_value("Authorization") != "Bearer " + options_.bearer_token) {
      ReplyStatus(res, 401, "Unauthorized", "Unauthorized");
      return;
    }
    for (auto it = failures_.begin(); it != failures_.end(); ++it) {
      if ((it->method == "*" || it->method == req.method) &&
          req.target.find(it->substring) != std::string::npos) {
        failure = *it;
        if (--it->remaining <= 0) failures_.erase(it);
        break;
      }
    }
  }
  if (failure && failure->raw) {
    res.status = failure->status;
    res.set_content(failure->raw->second, failure->raw->first);
    return;
  }
  if (failure && failure->after_applying) {
    if (kind.rfind("patch ", 0) == 0) HandlePatch(route, req, res);
    if (kind == "create binding") HandleBinding(route, req, res);
    if (kind.rfind("create ", 0) == 0 && kind != "create binding") HandleCreate(route, req, res);
    ReplyStatus(res, failure->status, failure->reason, failure->message);
    return;
  }
  if (failure) {
    ReplyStatus(res, failure->status, failure->reason, failure->message);
    return;
  }
  if (kind == "other") {
    std::lock_guard lock(mu_);
    if (auto it = served_.find(req.path); it != served_.end() && req.method == "GET") {
      res.status = 200;
      res.set_content(it->second.dump(), "application/json");
      return;
    }
    ReplyStatus(res, 404, "NotFound", "the server could not find the requested resource");
    return;
  }
  if (kind.rfind("watch ", 0) == 0) return HandleWatch(route, req, res);
  if (kind.rfind("list ", 0) == 0) return HandleList(route, req, res);
  if (kind.rfind("get ", 0) == 0) return HandleGet(route, res);
  if (kind.rfind("patch ", 0) == 0) return HandlePatch(route, req, res);
  if (kind == "create binding") return HandleBinding(route, req, res);
  return HandleCreate(route, req, res);
}

namespace {

std::optional<Selector> SelectorOf(const httplib::Request& req, std::string& error) {
  Selector selector;
  auto fields = ParseRequirements(req.get_param_value("fieldSelector"), false);
  if (!fields) {
    error = "unable to parse requirement: fieldSelector \"" + req.get_param_value("fieldSelector") +
            "\"";
    return std::nullopt;
  }
  auto labels = ParseRequirements(req.get_param_value("labelSelector"), true);
  if (!labels) {
    error = "unable to parse requirement: labelSelector \"" + req.get_param_value("labelSelector") +
            "\" (the fake supports =, ==, != and existence)";
    return std::nullopt;
  }
  selector.fields = std::move(*fields);
  selector.labels = std::move(*labels);
  return selector;
}

}  // namespace

void FakeApiServer::HandleList(const Route& route, const httplib::Request& req,
                               httplib::Response& res) {
  std::string error;
  auto selector = SelectorOf(req, error);
  if (!selector) return ReplyStatus(res, 400, "BadRequest", error);
  std::int64_t limit = 0;
  if (req.has_param("limit")) {
    auto parsed = ParseInt(req.get_param_value("limit"));
    if (!parsed || *parsed < 0) {
      return ReplyStatus(res, 400, "BadRequest",
                         "invalid limit \"" + req.get_param_value("limit") + "\"");
    }
    limit = *parsed;
  }
  std::lock_guard lock(mu_);
  std::int64_t list_rv = rv_;
  std::string after;
  if (const std::string token = req.get_param_value("continue"); !token.empty()) {
    if (!ParseContinueToken(token, list_rv, after)) {
      return ReplyStatus(res, 400, "BadRequest", "invalid continue token \"" + token + "\"");
    }
    if (list_rv < compacted_rv_) {
      return ReplyStatus(res, 410, "Expired",
                         "The provided continue parameter is too old to display a consistent "
                         "list result. You can start a new list without the continue parameter.");
    }
  }
  WatchStream filter;  // only for Selects
  filter.ns = route.ns;
  filter.selector = std::move(*selector);
  json items = json::array();
  std::string next_token;
  const auto& objects = objects_[route.resource];
  for (auto it = after.empty() ? objects.begin() : objects.upper_bound(after); it != objects.end();
       ++it) {
    if (!filter.Selects(it->second)) continue;
    if (limit > 0 && static_cast<std::int64_t>(items.size()) == limit) {
      next_token = ContinueToken(list_rv, Key(route.resource, items.back()));
      break;
    }
    items.push_back(AsListItem(it->second));
  }
  json metadata = {{"resourceVersion", std::to_string(list_rv)}};
  if (!next_token.empty()) metadata["continue"] = next_token;
  Reply(res, 200,
        json{{"kind", KindOf(route.resource) + "List"},
             {"apiVersion", "v1"},
             {"metadata", std::move(metadata)},
             {"items", std::move(items)}});
}

void FakeApiServer::HandleWatch(const Route& route, const httplib::Request& req,
                                httplib::Response& res) {
  std::string error;
  auto selector = SelectorOf(req, error);
  if (!selector) return ReplyStatus(res, 400, "BadRequest", error);
  auto stream = std::make_shared<WatchStream>();
  stream->resource = route.resource;
  stream->ns = route.ns;
  stream->selector = std::move(*selector);
  stream->bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  stream->deadline = Clock::now() + kDefaultWatchLength;
  if (req.has_param("timeoutSeconds")) {
    auto seconds = ParseInt(req.get_param_value("timeoutSeconds"));
    if (!seconds || *seconds < 0) {
      return ReplyStatus(
          res, 400, "BadRequest",
          "invalid timeoutSeconds \"" + req.get_param_value("timeoutSeconds") + "\"");
    }
    if (*seconds > 0) stream->deadline = Clock::now() + std::chrono::seconds(*seconds);
  }
  const std::string rv_text = req.get_param_value("resourceVersion");
  {
    std::lock_guard lock(mu_);
    last_watch_rv_ = rv_text;
    if (rv_text.empty() || rv_text == "0") {
      for (const auto& [key, object] : objects_[route.resource]) {
        if (stream->Selects(object)) stream->initial += EventLine("ADDED", object);
      }
      stream->next = history_.size();
    } else {
      auto rv = ParseInt(rv_text);
      if (!rv) {
        return ReplyStatus(res, 400, "BadRequest",
                           "invalid resourceVersion \"" + rv_text + "\": not a number");
      }
      if (*rv < compacted_rv_) {
        json gone = Status(
            410, "Expired",
            "too old resource version: " + rv_text + " (" + std::to_string(compacted_rv_) + ")");
        if (options_.gone_mode == GoneMode::kHttp410) return Reply(res, 410, gone);
        stream->error_event = std::move(gone);
        stream->next = history_.size();
      } else {
        stream->next = static_cast<std::size_t>(
            std::upper_bound(
                history_.begin(), history_.end(), *rv,
                [](std::int64_t value, const HistoryEntry& entry) { return value < entry.rv; }) -
            history_.begin());
      }
    }
    watches_.push_back(stream);
    cv_.notify_all();
  }
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json;stream=watch",
      [this, stream](std::size_t, httplib::DataSink& sink) -> bool {
        std::string out;
        bool finish = false;
        {
          std::unique_lock lock(mu_);
          auto ready = [&] {
            return stopping_ || stream->closed || stream->error_event.has_value() ||
                   stream->bookmark_pending || !stream->initial.empty() ||
                   stream->next < history_.size();
          };
          cv_.wait_until(lock, stream->deadline, ready);
          if (stopping_) return false;
          out = std::move(stream->initial);
          stream->initial.clear();
          for (; stream->next < history_.size(); ++stream->next) {
            out += stream->Line(history_[stream->next]);
          }
          if (stream->bookmark_pending) {
            stream->bookmark_pending = false;
            out += EventLine("BOOKMARK",
                             json{{"kind", KindOf(stream->resource)},
                                  {"apiVersion", "v1"},
                                  {"metadata", {{"resourceVersion", std::to_string(rv_)}}}});
          }
          if (stream->error_event) {
            out += EventLine("ERROR", *stream->error_event);
            finish = true;
          }
          if (stream->closed || Clock::now() >= stream->deadline) finish = true;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (finish) sink.done();
        return true;
      },
      [this, stream](bool) {
        std::lock_guard lock(mu_);
        watches_.erase(std::remove(watches_.begin(), watches_.end(), stream), watches_.end());
        cv_.notify_all();
      });
}

void FakeApiServer::HandleGet(const Route& route, httplib::Response& res) {
  std::lock_guard lock(mu_);
  const std::string key = Namespaced(route.resource) ? route.ns + "/" + route.name : route.name;
  const auto& objects = objects_[route.resource];
  auto it = objects.find(key);
  if (it == objects.end()) {
    return ReplyStatus(res, 404, "NotFound", route.resource + " \"" + route.name + "\" not found");
  }
  Reply(res, 200, it->second);
}

void FakeApiServer::HandlePatch(const Route& route, const httplib::Request& req,
                                httplib::Response& res) {
  const std::string media = MediaType(req.get_header_value("Content-Type"));
  const json patch = json::parse(req.body, nullptr, false);
  if (patch.is_discarded()) {
    return ReplyStatus(res, 400, "BadRequest", "the body of the patch is not JSON");
  }
  std::lock_guard lock(mu_);
  const std::string key = Namespaced(route.resource) ? route.ns + "/" + route.name : route.name;
  auto& objects = objects_[route.resource];
  auto it = objects.find(key);
  if (it == objects.end()) {
    return ReplyStatus(res, 404, "NotFound", route.resource + " \"" + route.name + "\" not found");
  }
  const json& current = it->second;
  const std::string conflict_prefix =
      "Operation cannot be fulfilled on " + route.resource + " \"" + route.name + "\": ";
  json patched = current;
  if (media == "application/merge-patch+json" ||
      media == "application/strategic-merge-patch+json") {
    if (!patch.is_object()) {
      return ReplyStatus(res, 400, "BadRequest", "a merge patch must be a JSON object");
    }
    const std::string uid = Str(patch, {"metadata", "uid"});
    if (!uid.empty() && uid != Str(current, {"metadata", "uid"})) {
      return ReplyStatus(res, 409, "Conflict",
                         conflict_prefix + "Precondition failed: UID in precondition: " + uid +
                             ", UID in object meta: " + Str(current, {"metadata", "uid"}));
    }
    const std::string rv = Str(patch, {"metadata", "resourceVersion"});
    if (!rv.empty() && rv != Str(current, {"metadata", "resourceVersion"})) {
      return ReplyStatus(res, 409, "Conflict",
                         conflict_prefix +
                             "the object has been modified; please apply your changes to the "
                             "latest version and try again");
    }
    patched.merge_patch(patch);
  } else if (media == "application/json-patch+json") {
    if (!patch.is_array()) {
      return ReplyStatus(res, 400, "BadRequest", "a JSON patch must be an array of operations");
    }
    try {
      patched = current.patch(patch);
    } catch (const json::exception& e) {
      return ReplyStatus(res, 422, "Invalid",
                         "the server rejected our request due to an error in our request: " +
                             std::string(e.what()));
    }
  } else {
    return ReplyStatus(res, 415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types "
                       "include: application/json-patch+json, application/merge-patch+json, "
                       "application/strategic-merge-patch+json");
  }
  for (const char* field : {"name", "namespace", "uid"}) {
    if (Str(patched, {"metadata", field}) != Str(current, {"metadata", field})) {
      return ReplyStatus(res, 422, "Invalid",
                         KindOf(route.resource) + " \"" + route.name + "\" is invalid: metadata." +
                             field + ": field is immutable");
    }
  }
  patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"];
  if (patched == current) return Reply(res, 200, current);
  Store(route.resource, patched, "MODIFIED");
  Reply(res, 200, objects_[route.resource][key]);
}

void FakeApiServer::HandleCreate(const Route& route, const httplib::Request& req,
                                 httplib::Response& res) {
  json object = json::parse(req.body, nullptr, false);
  const std::string kind = KindOf(route.resource);
  if (object.is_discarded() || !object.is_object()) {
    return ReplyStatus(res, 400, "BadRequest",
                       "the body of the request is not a JSON object of kind " + kind);
  }
  const std::string body_kind = Str(object, {"kind"});
  const std::string body_version = Str(object, {"apiVersion"});
  if ((!body_kind.empty() && body_kind != kind) ||
      (!body_version.empty() && body_version != ApiVersionOf(route.resource))) {
    return ReplyStatus(res, 400, "BadRequest",
                       "the object (" + body_version + ", Kind=" + body_kind +
                           ") does not match the resource (" + ApiVersionOf(route.resource) +
                           ", Kind=" + kind + ")");
  }
  if (!object.contains("metadata") || !object["metadata"].is_object()) {
    object["metadata"] = json::object();
  }
  json& metadata = object["metadata"];
  const std::string ns = Str(object, {"metadata", "namespace"});
  if (!ns.empty() && ns != route.ns) {
    return ReplyStatus(res, 400, "BadRequest",
                       "the namespace of the provided object does not match the namespace sent "
                       "on the request");
  }
  if (!Str(object, {"metadata", "resourceVersion"}).empty()) {
    return ReplyStatus(res, 400, "BadRequest",
                       "resourceVersion should not be set on objects to be created");
  }
  std::lock_guard lock(mu_);
  std::string name = Str(object, {"metadata", "name"});
  if (name.empty() && !Str(object, {"metadata", "generateName"}).empty()) {
    char suffix[8];
    std::snprintf(suffix, sizeof suffix, "%05lld", static_cast<long long>(next_uid_ % 100000));
    name = Str(object, {"metadata", "generateName"}) + suffix;
  }
  if (name.empty()) {
    return ReplyStatus(res, 422, "Invalid",
                       kind +
                           " \"\" is invalid: metadata.name: Required value: name or "
                           "generateName is required");
  }
  if (!IsDns1123Subdomain(name)) {
    return ReplyStatus(res, 422, "Invalid",
                       kind + " \"" + name + "\" is invalid: metadata.name: Invalid value: \"" +
                           name +
                           "\": a lowercase RFC 1123 subdomain must consist of lower case "
                           "alphanumeric characters, '-' or '.', and must start and end with an "
                           "alphanumeric character");
  }
  const json* spec = object.contains("spec") ? &object["spec"] : nullptr;
  const json* containers = spec == nullptr || !spec->is_object() ? nullptr
                           : route.resource == "pods"
                               ? (spec->contains("containers") ? &(*spec)["containers"] : nullptr)
                               : nullptr;
  if (route.resource == "pods" &&
      (containers == nullptr || !containers->is_array() || containers->empty())) {
    return ReplyStatus(res, 422, "Invalid",
                       kind + " \"" + name + "\" is invalid: spec.containers: Required value");
  }
  if (route.resource == "jobs" &&
      (spec == nullptr || !spec->is_object() || !spec->contains("template"))) {
    return ReplyStatus(res, 422, "Invalid",
                       kind + " \"" + name + "\" is invalid: spec.template: Required value");
  }
  metadata["name"] = name;
  metadata["namespace"] = route.ns;
  if (objects_[route.resource].count(route.ns + "/" + name) != 0) {
    json status = Status(409, "AlreadyExists", route.resource + " \"" + name + "\" already exists");
    status["details"] = {{"name", name}, {"kind", route.resource}};
    return Reply(res, 409, status);
  }
  object["kind"] = kind;
  object["apiVersion"] = ApiVersionOf(route.resource);
  char uid[40];
  std::snprintf(uid, sizeof uid, "00000000-0000-4000-8000-%012lld",
                static_cast<long long>(next_uid_++));
  metadata["uid"] = uid;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  metadata["creationTimestamp"] = stamp;
  if (route.resource == "pods") {
    object["status"] = {{"phase", "Pending"}, {"qosClass", "BestEffort"}};
  } else {
    object["status"] = json::object();
  }
  Store(route.resource, object, "ADDED");
  ++creations_;
  Reply(res, 201, objects_[route.resource][route.ns + "/" + name]);
}

void FakeApiServer::HandleBinding(const Route& route, const httplib::Request& req,
                                  httplib::Response& res) {
  const json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return ReplyStatus(res, 400, "BadRequest", "the body of the binding is not a JSON object");
  }
  const std::string node = Str(body, {"target", "name"});
  if (node.empty()) {
    return ReplyStatus(res, 400, "BadRequest",
                       "Binding \"" + route.name + "\" is invalid: target.name: Required value");
  }
  const std::string target_kind = Str(body, {"target", "kind"});
  if (!target_kind.empty() && target_kind != "Node") {
    return ReplyStatus(res, 400, "BadRequest",
                       "Binding \"" + route.name + "\" is invalid: target.kind: must be Node");
  }
  const std::string body_name = Str(body, {"metadata", "name"});
  if (!body_name.empty() && body_name != route.name) {
    return ReplyStatus(
        res, 400, "BadRequest",
        "the name of the binding (" + body_name + ") does not match the URL (" + route.name + ")");
  }
  std::lock_guard lock(mu_);
  auto& pods = objects_["pods"];
  auto it = pods.find(route.ns + "/" + route.name);
  if (it == pods.end()) {
    return ReplyStatus(res, 404, "NotFound", "pods \"" + route.name + "\" not found");
  }
  const std::string conflict_prefix =
      "Operation cannot be fulfilled on pods/binding \"" + route.name + "\": ";
  const std::string uid = Str(body, {"metadata", "uid"});
  const std::string pod_uid = Str(it->second, {"metadata", "uid"});
  if (!uid.empty() && uid != pod_uid) {
    return ReplyStatus(res, 409, "Conflict",
                       conflict_prefix + "Precondition failed: UID in precondition: " + uid +
                           ", UID in object meta: " + pod_uid);
  }
  if (const std::string bound = Str(it->second, {"spec", "nodeName"}); !bound.empty()) {
    return ReplyStatus(
        res, 409, "Conflict",
        conflict_prefix + "pod " + route.name + " is already assigned to node \"" + bound + "\"");
  }
  json pod = it->second;
  pod["spec"]["nodeName"] = node;
  // As the API server does: the Binding's annotations are merged into the pod in this write.
  if (const auto a = body.find("metadata"); a != body.end() && a->is_object()) {
    if (const auto an = a->find("annotations"); an != a->end() && an->is_object()) {
      for (const auto& [key, value] : an->items()) pod["metadata"]["annotations"][key] = value;
    }
  }
  Store("pods", std::move(pod), "MODIFIED");
  ++bindings_;
  Reply(res, 201,
        json{{"kind", "Status"},
             {"apiVersion", "v1"},
             {"metadata", json::object()},
             {"status", "Success"},
             {"code", 201}});
}

}  // namespace gpumux::test
