// The libcurl implementation of KubeApi (see api_client.h for the contract).
//
// Every call takes an easy handle from a small pool (curl_easy_reset keeps its live
// connections, so keep-alive works without curl's shared connection cache, which libcurl
// documents as unsafe across threads). Watches run on a private multi handle so that a stop
// request can wake curl_multi_poll at once.
#include "gpumux/kube/api_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "gpumux/core/json.h"

namespace gpumux::kube {
namespace {

using nlohmann::json;

constexpr std::size_t kErrorBodyExcerpt = 200;    // bytes of a non-Status error body kept
constexpr std::size_t kMaxErrorBody = 64 * 1024;  // bytes of an error body read at all
constexpr std::size_t kMaxWatchLine = 64u << 20;  // one watch event (a huge object) at most
constexpr std::size_t kMaxIdleHandles = 8;
constexpr long kWatchGraceSeconds = 30;  // after timeoutSeconds, before we end it
constexpr int kWatchPollMs = 1000;

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct EasyDeleter {
  void operator()(CURL* handle) const { curl_easy_cleanup(handle); }
};
using EasyHandle = std::unique_ptr<CURL, EasyDeleter>;

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using HeaderList = std::unique_ptr<curl_slist, SlistDeleter>;

struct MultiDeleter {
  void operator()(CURLM* multi) const { curl_multi_cleanup(multi); }
};
using MultiHandle = std::unique_ptr<CURLM, MultiDeleter>;

// Kubernetes' StatusReason for an HTTP status, for answers that carry no Status object.
std::string ReasonForStatus(long status) {
  switch (status) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return status >= 500 ? "InternalError" : "Unknown";
  }
}

std::string Excerpt(std::string_view body) {
  std::string out(body.substr(0, kErrorBodyExcerpt));
  if (body.size() > kErrorBodyExcerpt) out += "...";
  return out;
}

std::string StringField(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

// A non-2xx answer: the Status object's reason and message, or the body's first bytes.
ApiError HttpError(long status, std::string_view body, std::string_view what) {
  ApiError error;
  error.http_status = static_cast<int>(status);
  const auto decoded = core::ParseJson(body, "the answer");
  if (decoded && decoded->is_object() && StringField(*decoded, "kind") == "Status") {
    error.reason = StringField(*decoded, "reason");
    error.message = StringField(*decoded, "message");
  } else {
    error.message = Excerpt(body);
  }
  if (error.reason.empty()) error.reason = ReasonForStatus(status);
  if (error.message.empty()) error.message = std::string(what) + ": no message";
  return error;
}

ApiError TransportError(CURLcode code, const char* error_buffer, std::string_view what) {
  std::string detail = (error_buffer != nullptr && error_buffer[0] != '\0')
                           ? std::string(error_buffer)
                           : std::string(curl_easy_strerror(code));
  return ApiError{0, curl_easy_strerror(code), std::string(what) + ": " + detail};
}

ApiError LocalError(std::string reason, std::string message) {
  return ApiError{0, std::move(reason), std::move(message)};
}

std::string Dump(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string WithQuery(const std::string& path, std::string_view query) {
  std::string out = path;
  out += path.find('?') == std::string::npos ? '?' : '&';
  out += query;
  return out;
}

size_t AppendToString(char* data, size_t size, size_t count, void* user) {
  auto* out = static_cast<std::string*>(user);
  out->append(data, size * count);
  return size * count;
}

// What a watch's write callback needs.
struct WatchSink {
  CURL* easy = nullptr;
  const std::function<bool(WatchEvent&&)>* on_event = nullptr;
  std::string what;  // "watch <url>", for messages
  long status = 0;
  std::string pending;     // bytes after the last newline
  std::string error_body;  // of a non-2xx answer
  bool handler_stopped = false;
  std::optional<ApiError> bad_event;
  std::exception_ptr exception;

  // Decodes one line and hands it over; false ends the stream.
  bool Deliver(std::string_view line) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true;
    auto parsed = core::ParseJson(line, "the event");
    if (!parsed || !parsed->is_object() || !parsed->contains("type") ||
        !(*parsed)["type"].is_string()) {
      bad_event = ApiError{static_cast<int>(status), "InvalidWatchEvent",
                           what + ": undecodable watch event" +
                               (parsed ? std::string() : " (" + parsed.error().message + ")") +
                               ": " + Excerpt(line)};
      return false;
    }
    json& decoded = *parsed;
    WatchEvent event;
    event.type = decoded["type"].get<std::string>();
    if (auto it = decoded.find("object"); it != decoded.end()) event.object = std::move(*it);
    try {
      if (!(*on_event)(std::move(event))) {
        handler_stopped = true;
        return false;
      }
    } catch (...) {
      exception = std::current_exception();
      return false;
    }
    return true;
  }
};

size_t WatchWrite(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<WatchSink*>(user);
  const size_t n = size * count;
  if (sink->status == 0) curl_easy_getinfo(sink->easy, CURLINFO_RESPONSE_CODE, &sink->status);
  if (sink->status < 200 || sink->status >= 300) {
    if (sink->error_body.size() < kMaxErrorBody) {
      sink->error_body.append(data, std::min(n, kMaxErrorBody - sink->error_body.size()));
    }
    return n;
  }
  sink->pending.append(data, n);
  std::size_t start = 0;
  for (std::size_t newline = sink->pending.find('\n'); newline != std::string::npos;
       newline = sink->pending.find('\n', start)) {
    std::string_view line(sink->pending.data() + start, newline - start);
    start = newline + 1;
    if (!sink->Deliver(line)) return 0;  // aborts the transfer
  }
  sink->pending.erase(0, start);
  if (sink->pending.size() > kMaxWatchLine) {
    sink->bad_event = ApiError{static_cast<int>(sink->status), "InvalidWatchEvent",
                               sink->what + ": a watch event is longer than 64 MiB"};
    return 0;
  }
  return n;
}

// How a watch's transfer ended.
struct TransferEnd {
  bool finished = false;       // curl completed it (else stopped, or past the deadline)
  CURLcode result = CURLE_OK;  // curl's result, when finished
};

// Drives the transfer of `easy` (already added to `multi`) until curl completes it, `stop` is
// requested or, with a timeout, timeoutSeconds and a grace period have passed; `stop` wakes the
// poll at once. `easy` is removed from `multi` on every return. Error when curl's multi
// interface fails, named by `what`.
ApiResult<TransferEnd> RunTransfer(CURLM* multi, CURL* easy, const std::stop_token& stop,
                                   int timeout_seconds, const std::string& what) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds + kWatchGraceSeconds);
  TransferEnd end;
  std::stop_callback wake(stop, [multi] { curl_multi_wakeup(multi); });
  for (;;) {
    if (stop.stop_requested()) break;
    if (timeout_seconds > 0 && std::chrono::steady_clock::now() >= deadline) break;
    int running = 0;
    CURLMcode code = curl_multi_perform(multi, &running);
    if (code != CURLM_OK) {
      curl_multi_remove_handle(multi, easy);
      return tl::unexpected(LocalError("CurlMultiError", what + ": " + curl_multi_strerror(code)));
    }
    if (running == 0) {
      int left = 0;
      while (CURLMsg* message = curl_multi_info_read(multi, &left)) {
        if (message->msg == CURLMSG_DONE) end.result = message->data.result;
      }
      end.finished = true;
      break;
    }
    code = curl_multi_poll(multi, nullptr, 0, kWatchPollMs, nullptr);
    if (code != CURLM_OK) {
      curl_multi_remove_handle(multi, easy);
      return tl::unexpected(LocalError("CurlMultiError", what + ": " + curl_multi_strerror(code)));
    }
  }
  curl_multi_remove_handle(multi, easy);
  return end;
}

class CurlClient final : public KubeApi {
 public:
  explicit CurlClient(ClientConfig config) : config_(std::move(config)) {
    while (!config_.server.empty() && config_.server.back() == '/') config_.server.pop_back();
  }

  ApiResult<json> Get(const std::string& path) override {
    return DecodeJson(Perform("GET", path, nullptr, {}), "GET", path);
  }

  ApiResult<json> List(const std::string& path, int page_size) override {
    for (int attempt = 0;; ++attempt) {
      json items = json::array();
      json first;  // kind and apiVersion of the first page
      std::string resource_version;
      std::string token;
      bool restart = false;
      do {
        std::string query;
        if (page_size > 0) query = "limit=" + std::to_string(page_size);
        if (!token.empty()) {
          if (!query.empty()) query += '&';
          query += "continue=" + QueryEscape(token);
        }
        const std::string page_path = query.empty() ? path : WithQuery(path, query);
        auto page = DecodeJson(Perform("GET", page_path, nullptr, {}, RequestKind::kList), "GET",
                               page_path);
        if (!page) {
          if (page.error().http_status == 410 && !token.empty() && attempt == 0) {
            restart = true;  // the continue token expired: list again from the start, once
            break;
          }
          return tl::unexpected(page.error());
        }
        if (!page->is_object() || !page->contains("items") ||
            !((*page)["items"].is_array() || (*page)["items"].is_null())) {
          return tl::unexpected(ApiError{200, "InvalidResponse",
                                         "GET " + path + ": the answer is not a list (no items)"});
        }
        if (first.is_null()) {
          first = json::object();
          first["kind"] = StringField(*page, "kind");
          first["apiVersion"] = StringField(*page, "apiVersion");
        }
        if ((*page)["items"].is_array()) {
          for (auto& item : (*page)["items"]) items.push_back(std::move(item));
        }
        const json metadata = page->value("metadata", json::object());
        resource_version = metadata.is_object() ? StringField(metadata, "resourceVersion") : "";
        token = metadata.is_object() ? StringField(metadata, "continue") : "";
      } while (!token.empty());
      if (restart) continue;
      json out = json::object();
      out["kind"] = first["kind"];
      out["apiVersion"] = first["apiVersion"];
      out["metadata"] = json{{"resourceVersion", resource_version}};
      out["items"] = std::move(items);
      return out;
    }
  }

  ApiResult<json> Patch(const std::string& path, const json& body, PatchType type) override {
    const char* content_type = "application/merge-patch+json";
    if (type == PatchType::kJson) content_type = "application/json-patch+json";
    if (type == PatchType::kStrategicMerge) content_type = "application/strategic-merge-patch+json";
    const std::string text = Dump(body);
    return DecodeJson(Perform("PATCH", path, &text, content_type), "PATCH", path);
  }

  ApiResult<json> Post(const std::string& path, const json& body) override {
    const std::string text = Dump(body);
    return DecodeJson(Perform("POST", path, &text, "application/json"), "POST", path);
  }

  ApiResult<void> Watch(const std::string& path, const std::string& resource_version,
                        const std::function<bool(WatchEvent&&)>& on_event, std::stop_token stop,
                        int timeout_seconds) override {
    std::string query = "watch=1&allowWatchBookmarks=true";
    if (!resource_version.empty()) query += "&resourceVersion=" + QueryEscape(resource_version);
    if (timeout_seconds > 0) query += "&timeoutSeconds=" + std::to_string(timeout_seconds);
    const std::string target = WithQuery(path, query);
    const std::string url = config_.server + target;
    WatchSink sink;
    sink.on_event = &on_event;
    sink.what = "watch " + url;
    if (config_.server.empty()) {
      return tl::unexpected(LocalError("BadConfig", sink.what + ": no API server URL configured"));
    }

    char error_buffer[CURL_ERROR_SIZE] = {};
    HeaderList headers;  // declared before the handles: they must not outlive it
    EasyHandle easy(curl_easy_init());
    MultiHandle multi(curl_multi_init());
    if (!easy || !multi) return tl::unexpected(LocalError("OutOfMemory", "curl init failed"));
    sink.easy = easy.get();
    if (auto setup = Configure(easy.get(), "GET", url, nullptr, {}, headers, error_buffer,
                               RequestKind::kWatch);
        !setup) {
      return tl::unexpected(setup.error());
    }
    curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &WatchWrite);
    curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &sink);

    if (curl_multi_add_handle(multi.get(), easy.get()) != CURLM_OK) {
      return tl::unexpected(LocalError("OutOfMemory", "curl_multi_add_handle failed"));
    }
    // RunTransfer's stop callback is gone before the multi handle.
    auto transfer = RunTransfer(multi.get(), easy.get(), stop, timeout_seconds, sink.what);
    if (!transfer) return tl::unexpected(transfer.error());
    const auto [finished, result] = *transfer;

    if (sink.exception) std::rethrow_exception(sink.exception);
    if (sink.handler_stopped) return {};
    if (sink.bad_event) return tl::unexpected(*sink.bad_event);
    if (!finished) return {};  // stopped, or the server overran timeoutSeconds
    if (sink.status == 0) curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &sink.status);
    if (sink.status != 0 && (sink.status < 200 || sink.status >= 300)) {
      return tl::unexpected(HttpError(sink.status, sink.error_body, sink.what));
    }
    if (result != CURLE_OK) return tl::unexpected(TransportError(result, error_buffer, sink.what));
    // A last event without its newline (servers always send one, but be lenient).
    if (!sink.pending.empty()) {
      std::string last = std::move(sink.pending);
      sink.Deliver(last);
      if (sink.exception) std::rethrow_exception(sink.exception);
      if (sink.bad_event) return tl::unexpected(*sink.bad_event);
    }
    return {};
  }

 private:
  // kList asks for compression: lists can be megabytes. Single objects are small, and
  // compressing them costs more than it saves (the API server itself compresses only large
  // answers); watches stream.
  enum class RequestKind : std::uint8_t { kPlain, kList, kWatch };

  struct HttpAnswer {
    long status = 0;
    std::string body;
  };

  // The bearer token to send: the token file's content (re-read when it changed), else the
  // literal token; "" for none.
  ApiResult<std::string> BearerToken() {
    if (config_.token_file.empty()) return config_.bearer_token;
    std::lock_guard lock(token_mutex_);
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(config_.token_file, ec);
    std::error_code size_ec;
    const auto size = std::filesystem::file_size(config_.token_file, size_ec);
    if (!ec && !size_ec && (!token_loaded_ || mtime != token_mtime_ || size != token_size_)) {
      std::ifstream in(config_.token_file, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      if (in.good() || in.eof()) {
        std::string token = text.str();
        while (!token.empty() && (token.back() == '\n' || token.back() == '\r' ||
                                  token.back() == ' ' || token.back() == '\t')) {
          token.pop_back();
        }
        token_ = std::move(token);
        token_mtime_ = mtime;
        token_size_ = size;
        token_loaded_ = true;
      }
    }
    if (token_loaded_) return token_;
    if (!config_.bearer_token.empty()) return config_.bearer_token;
    return tl::unexpected(
        LocalError("TokenFile", "cannot read the token file " + config_.token_file +
                                    (ec ? ": " + ec.message() : std::string(": unreadable"))));
  }

  EasyHandle Acquire() {
    {
      std::lock_guard lock(pool_mutex_);
      if (!idle_.empty()) {
        EasyHandle handle = std::move(idle_.back());
        idle_.pop_back();
        curl_easy_reset(handle.get());  // keeps its live connections
        return handle;
      }
    }
    return EasyHandle(curl_easy_init());
  }

  void Release(EasyHandle handle) {
    std::lock_guard lock(pool_mutex_);
    if (idle_.size() < kMaxIdleHandles) idle_.push_back(std::move(handle));
  }

  // Sets every option of one request on `easy`. `headers` receives the header list (it must
  // outlive the transfer); `body` (may be null) must too.
  ApiResult<void> Configure(CURL* easy, const char* method, const std::string& url,
                            const std::string* body, std::string_view content_type,
                            HeaderList& headers, char* error_buffer, RequestKind kind) {
    auto token = BearerToken();
    if (!token) return tl::unexpected(token.error());

    std::vector<std::string> lines = {"Accept: application/json", "Expect:"};
    if (!token->empty()) lines.push_back("Authorization: Bearer " + *token);
    if (body != nullptr) lines.push_back("Content-Type: " + std::string(content_type));
    for (const std::string& line : lines) {
      curl_slist* next = curl_slist_append(headers.get(), line.c_str());
      if (next == nullptr) return tl::unexpected(LocalError("OutOfMemory", "curl_slist_append"));
      (void)headers.release();
      headers.reset(next);
    }

    const std::string what = std::string(method) + " " + url;
    auto check = [&](CURLcode code, const char* option) -> ApiResult<void> {
      if (code == CURLE_OK) return {};
      return tl::unexpected(LocalError(
          "ClientSetup", what + ": cannot set " + option + ": " + curl_easy_strerror(code)));
    };
    ApiResult<void> ok;
    auto set = [&](CURLcode code, const char* option) {
      if (ok) ok = check(code, option);
    };
    set(curl_easy_setopt(easy, CURLOPT_URL, url.c_str()), "URL");
    set(curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https"), "PROTOCOLS_STR");
    set(curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L), "NOSIGNAL");
    set(curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_buffer), "ERRORBUFFER");
    set(curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.get()), "HTTPHEADER");
    set(curl_easy_setopt(easy, CURLOPT_USERAGENT, config_.user_agent.c_str()), "USERAGENT");
    set(curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1)),
        "HTTP_VERSION");
    set(curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L), "TCP_KEEPALIVE");
    set(curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 30L), "TCP_KEEPIDLE");
    set(curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 10L), "TCP_KEEPINTVL");
    const long timeout_ms =
        static_cast<long>(std::max<std::int64_t>(1, config_.request_timeout.count()));
    set(curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms), "CONNECTTIMEOUT_MS");
    if (kind != RequestKind::kWatch) {
      set(curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms), "TIMEOUT_MS");
    }
    if (kind == RequestKind::kList) {
      set(curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, ""), "ACCEPT_ENCODING");
    }

    if (std::string_view(method) == "GET") {
      set(curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L), "HTTPGET");
    } else {
      set(curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method), "CUSTOMREQUEST");
      const std::size_t size = body != nullptr ? body->size() : 0;
      set(curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(size)),
          "POSTFIELDSIZE_LARGE");
      set(curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body != nullptr ? body->c_str() : ""),
          "POSTFIELDS");
    }

    if (config_.insecure_skip_tls_verify) {
      set(curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L), "SSL_VERIFYPEER");
      set(curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L), "SSL_VERIFYHOST");
    } else if (!config_.ca_pem.empty()) {
      curl_blob blob{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(),
                     CURL_BLOB_COPY};
      set(curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &blob), "CAINFO_BLOB");
    }
    if (!config_.client_cert_pem.empty()) {
      curl_blob cert{const_cast<char*>(config_.client_cert_pem.data()),
                     config_.client_cert_pem.size(), CURL_BLOB_COPY};
      set(curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &cert), "SSLCERT_BLOB");
      set(curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM"), "SSLCERTTYPE");
    }
    if (!config_.client_key_pem.empty()) {
      curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(),
                    CURL_BLOB_COPY};
      set(curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &key), "SSLKEY_BLOB");
      set(curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM"), "SSLKEYTYPE");
    }
    return ok;
  }

  ApiResult<HttpAnswer> Perform(const char* method, const std::string& path,
                                const std::string* body, std::string_view content_type,
                                RequestKind kind = RequestKind::kPlain) {
    const std::string url = config_.server + path;
    const std::string what = std::string(method) + " " + url;
    if (config_.server.empty()) {
      return tl::unexpected(LocalError("BadConfig", what + ": no API server URL configured"));
    }
    EasyHandle easy = Acquire();
    if (!easy) return tl::unexpected(LocalError("OutOfMemory", "curl_easy_init failed"));
    char error_buffer[CURL_ERROR_SIZE] = {};
    HeaderList headers;
    if (auto setup =
            Configure(easy.get(), method, url, body, content_type, headers, error_buffer, kind);
        !setup) {
      return tl::unexpected(setup.error());
    }
    HttpAnswer answer;
    curl_easy_setopt(easy.get(), CURLOPT_WRITEFUNCTION, &AppendToString);
    curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &answer.body);
    const CURLcode code = curl_easy_perform(easy.get());
    curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &answer.status);
    // The handle must not keep pointers to this call's buffers.
    curl_easy_setopt(easy.get(), CURLOPT_ERRORBUFFER, nullptr);
    curl_easy_setopt(easy.get(), CURLOPT_HTTPHEADER, nullptr);
    std::string error_text = error_buffer;
    Release(std::move(easy));
    if (code != CURLE_OK) return tl::unexpected(TransportError(code, error_text.c_str(), what));
    if (answer.status < 200 || answer.status >= 300) {
      return tl::unexpected(HttpError(answer.status, answer.body, what));
    }
    return answer;
  }

  static ApiResult<json> DecodeJson(ApiResult<HttpAnswer> answer, const char* method,
                                    const std::string& path) {
    if (!answer) return tl::unexpected(answer.error());
    if (answer->body.empty()) return json();
    auto decoded = core::ParseJson(answer->body, "the answer");
    if (!decoded) {
      return tl::unexpected(ApiError{static_cast<int>(answer->status), "InvalidResponse",
                                     std::string(method) + " " + path + ": " +
                                         decoded.error().message + ": " + Excerpt(answer->body)});
    }
    return std::move(*decoded);
  }

  ClientConfig config_;

  std::mutex token_mutex_;
  bool token_loaded_ = false;
  std::string token_;
  std::filesystem::file_time_type token_mtime_{};
  std::uintmax_t token_size_ = 0;

  std::mutex pool_mutex_;
  std::vector<EasyHandle> idle_;
};

}  // namespace

std::string ApiError::ToString() const {
  std::string out;
  if (http_status == 0) {
    out = "no answer from the API server";
    if (!reason.empty()) out += " (" + reason + ")";
  } else {
    out = "HTTP " + std::to_string(http_status);
    if (!reason.empty()) out += " " + reason;
  }
  if (!message.empty()) out += ": " + message;
  return out;
}

std::string QueryEscape(std::string_view value) {
  // libcurl's escaping: every byte but the unreserved A-Z a-z 0-9 - . _ ~ becomes %XX. Since
  // curl 7.82 the handle is not used (Debian 12 has 7.88).
  char* escaped = curl_easy_escape(nullptr, value.data(), static_cast<int>(value.size()));
  if (escaped == nullptr) return {};
  std::string out(escaped);
  curl_free(escaped);
  return out;
}

std::unique_ptr<KubeApi> MakeCurlClient(ClientConfig config) {
  InitCurlOnce();
  return std::make_unique<CurlClient>(std::move(config));
}

ApiResult<void> CreateBinding(KubeApi& api, const std::string& ns, const std::string& name,
                              const std::string& uid, const std::string& node,
                              const nlohmann::json& annotations) {
  nlohmann::json metadata = {{"name", name}, {"namespace", ns}};
  if (!uid.empty()) metadata["uid"] = uid;
  if (annotations.is_object() && !annotations.empty()) metadata["annotations"] = annotations;
  const nlohmann::json body = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata", std::move(metadata)},
      {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}},
  };
  auto answer = api.Post(
      "/api/v1/namespaces/" + QueryEscape(ns) + "/pods/" + QueryEscape(name) + "/binding", body);
  if (!answer) return tl::unexpected(answer.error());
  return {};
}

ApiResult<nlohmann::json> PatchPodAnnotations(KubeApi& api, const std::string& ns,
                                              const std::string& name, const std::string& uid,
                                              const nlohmann::json& annotations) {
  nlohmann::json metadata = {{"annotations", annotations}};
  if (!uid.empty()) metadata["uid"] = uid;
  return api.Patch("/api/v1/namespaces/" + QueryEscape(ns) + "/pods/" + QueryEscape(name),
                   nlohmann::json{{"metadata", std::move(metadata)}}, PatchType::kMerge);
}

}  // namespace gpumux::kube
