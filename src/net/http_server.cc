#include "gpumux/net/http_server.h"

#include <sys/resource.h>

#include "src/net/server_state.h"
#include "src/net/session.h"
#include "src/net/tls_socket.h"

namespace gpumux::net {

// ---------------------------------------------------------------------------------------------
// Value types.

bool Peer::ConnectorGone() const {
  if (transport != Transport::kUnix || pid <= 0) return false;
  return process == nullptr || process->Gone(pid);
}

std::string Peer::Describe() const {
  if (transport == Transport::kUnix) {
    return "pid " + std::to_string(pid) + " (uid " + std::to_string(uid) + ") on " + address;
  }
  if (address.find(':') != std::string::npos) return "[" + address + "]:" + std::to_string(port);
  return address + ":" + std::to_string(port);
}

const std::string* Request::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

std::string Request::QueryValue(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const std::size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const std::size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string() : std::string(pair.substr(eq + 1));
    }
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return {};
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = kTextType;
  r.body = std::move(body);
  return r;
}

Endpoint Endpoint::Tcp(std::string host, int port) {
  Endpoint e;
  e.kind = Kind::kTcp;
  e.host = std::move(host);
  e.port = port;
  return e;
}

Endpoint Endpoint::Unix(std::string path, mode_t mode) {
  Endpoint e;
  e.kind = Kind::kUnix;
  e.path = std::move(path);
  e.mode = mode;
  return e;
}

std::string Endpoint::Describe() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

std::string_view DropName(Drop drop) {
  switch (drop) {
    case Drop::kRequestTimeout:
      return "request_timeout";
    case Drop::kHeadTooLarge:
      return "head_too_large";
    case Drop::kBodyTooLarge:
      return "body_too_large";
    case Drop::kBadRequest:
      return "bad_request";
    case Drop::kWriteTimeout:
      return "write_timeout";
    case Drop::kEvicted:
      return "evicted";
    case Drop::kRefused:
      return "refused";
  }
  return "unknown";
}

std::string ErrorJson(std::string_view key, std::string_view message) {
  return nlohmann::json{{key, message}}.dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

core::Result<void> ValidateOptions(const ServerOptions& o) {
  const auto bad = [](std::string message) {
    return MakeError(core::ErrorCode::kInvalidArgument, std::move(message));
  };
  if (o.listen.empty()) return bad("nothing to listen on");
  for (const Endpoint& e : o.listen) {
    if (e.kind == Endpoint::Kind::kTcp && (e.port < 0 || e.port > 65535)) {
      return bad("port " + std::to_string(e.port) + " is not in 0..65535");
    }
    if (e.kind == Endpoint::Kind::kUnix && (e.path.empty() || e.path.size() > 107)) {
      return bad("unix socket path \"" + e.path + "\" must have 1 to 107 characters");
    }
  }
  if (o.workers < 1) return bad("the server needs at least one worker");
  if (o.max_connections < 1 || o.max_connections > kMaxConnectionsLimit) {
    return bad("max_connections " + std::to_string(o.max_connections) + " is not in 1.." +
               std::to_string(kMaxConnectionsLimit));
  }
  if (o.max_head_bytes < 1024 || o.max_head_bytes > std::numeric_limits<std::uint32_t>::max()) {
    return bad("max_head_bytes must be at least 1024");
  }
  if (o.body_budget_bytes != 0 && o.body_budget_bytes < o.max_body_bytes) {
    return bad("body_budget_bytes " + std::to_string(o.body_budget_bytes) +
               " is less than max_body_bytes " + std::to_string(o.max_body_bytes) +
               ": a body of the largest size could never be read");
  }
  if (o.body_rate_grace < std::chrono::milliseconds::zero()) {
    return bad("body_rate_grace must not be negative");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, std::chrono::milliseconds>{"request_timeout", o.request_timeout},
        {"keep_alive_timeout", o.keep_alive_timeout},
        {"write_timeout", o.write_timeout}}) {
    if (value <= std::chrono::milliseconds::zero()) {
      return bad(std::string(name) + " must be positive");
    }
  }
  return {};
}

// A connection holds a socket, and on a unix socket a pidfd of its peer (PeerProcess): the soft
// limit on open files (often 1024 in a container) is raised toward the hard one so that
// max_connections of them fit beside the process's other files. Never lowered.
namespace {
void RaiseFileLimit(const ServerOptions& o) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t want = static_cast<rlim_t>(o.max_connections) * 2 + 256;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= want) return;
  const rlim_t raised = limit.rlim_max == RLIM_INFINITY ? want : std::min(want, limit.rlim_max);
  if (raised <= limit.rlim_cur) return;
  limit.rlim_cur = raised;
  (void)::setrlimit(RLIMIT_NOFILE, &limit);
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// The server's shared state. Members marked "I/O thread" are used on the I/O thread only.

template <class Socket>
void HttpServer::Impl::StartSession(Socket socket, Peer peer) {
  auto session = std::make_shared<Session<Socket>>(*this, std::move(socket), next_id++);
  session->peer = std::move(peer);
  session->Start();
}

template <class Socket>
void HttpServer::Impl::Accept(std::size_t index) {
  auto on_accept = [this, index](const ErrorCode& ec, Socket socket) {
    if (ec == asio::error::operation_aborted || stopping) return;
    if (!ec) {
      Peer peer;
      if constexpr (std::is_same_v<Socket, tcp::socket>) {
        ErrorCode ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        peer = PeerOf(socket);
      } else {
        peer = PeerOf(socket, options.listen[index].path);
      }
      if (!Admit(peer)) {
        RefuseConnection(socket, options);
      } else if constexpr (std::is_same_v<Socket, tcp::socket>) {
        if (tls_context) {
          StartSession(TlsSocket(std::move(socket), tls_context), std::move(peer));
        } else {
          StartSession(std::move(socket), std::move(peer));
        }
      } else {
        StartSession(std::move(socket), std::move(peer));
      }
    }
    // EMFILE and the like: keep accepting (the next accept may succeed once sockets close).
    Accept<Socket>(index);
  };
  if constexpr (std::is_same_v<Socket, tcp::socket>) {
    std::size_t tcp_index = 0;
    for (std::size_t i = 0; i < index; ++i) {
      tcp_index += options.listen[i].kind == Endpoint::Kind::kTcp ? 1U : 0U;
    }
    tcp_acceptors[tcp_index].async_accept(std::move(on_accept));
  } else {
    std::size_t unix_index = 0;
    for (std::size_t i = 0; i < index; ++i) {
      unix_index += options.listen[i].kind == Endpoint::Kind::kUnix ? 1U : 0U;
    }
    unix_acceptors[unix_index]->async_accept(std::move(on_accept));
  }
}

namespace {

std::string ListenError(const Endpoint& e, const ErrorCode& ec) {
  std::string reason = ec.message();
  if (ec == boost::system::errc::address_not_available) reason = "not an address of this host";
  return "cannot listen on " + e.Describe() + ": " + reason;
}

core::Result<tcp::endpoint> Resolve(asio::io_context& io, const Endpoint& e) {
  ErrorCode ec;
  const auto address = asio::ip::make_address(e.host, ec);
  if (!ec) return tcp::endpoint(address, static_cast<unsigned short>(e.port));
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(
      e.host, std::to_string(e.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return MakeError(core::ErrorCode::kFailedPrecondition,
                     "cannot listen on " + e.Describe() + ": cannot resolve \"" + e.host + "\"" +
                         (ec ? ": " + ec.message() : std::string()));
  }
  return results.begin()->endpoint();
}

}  // namespace

// ---------------------------------------------------------------------------------------------

core::Result<void> HttpServer::Impl::ListenTcp(const Endpoint& e) {
  auto where = Resolve(io, e);
  if (!where) return tl::unexpected(where.error());
  tcp::acceptor acceptor(io);
  ErrorCode ec;
  // SO_REUSEADDR only lets a restarted daemon bind while old connections linger in TIME_WAIT;
  // SO_REUSEPORT, which lets a second daemon share the port, only when asked (reuse_port).
  using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
  if (acceptor.open(where->protocol(), ec) ||
      acceptor.set_option(asio::socket_base::reuse_address(true), ec) ||
      (options.reuse_port && acceptor.set_option(ReusePort(true), ec)) ||
      acceptor.bind(*where, ec) || acceptor.listen(asio::socket_base::max_listen_connections, ec)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, ListenError(e, ec));
  }
  ports.push_back(acceptor.local_endpoint().port());
  tcp_acceptors.push_back(std::move(acceptor));
  return {};
}

core::Result<void> HttpServer::Impl::ListenUnix(const Endpoint& e) {
  struct stat st {};
  if (::lstat(e.path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return MakeError(
          core::ErrorCode::kFailedPrecondition,
          "cannot listen on " + e.Describe() + ": the path exists and is not a socket");
    }
    ::unlink(e.path.c_str());  // a stale socket of an earlier run
  }
  auto acceptor = std::make_unique<unix_socket::acceptor>(io);
  ErrorCode ec;
  if (acceptor->open(unix_socket(), ec) || acceptor->bind(unix_socket::endpoint(e.path), ec)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, ListenError(e, ec));
  }
  socket_files.push_back(e.path);
  // The mode is set before anyone can connect (listen), so no peer slips in under a wider one.
  if (::chmod(e.path.c_str(), e.mode) != 0) {
    const int error = errno;
    return MakeError(core::ErrorCode::kFailedPrecondition,
                     "cannot set the mode of " + e.path + ": " + std::strerror(error));
  }
  if (acceptor->listen(asio::socket_base::max_listen_connections, ec)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, ListenError(e, ec));
  }
  ports.push_back(0);
  unix_acceptors.push_back(std::move(acceptor));
  return {};
}

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(std::string path, std::vector<std::string> methods, Lane lane,
                       Handler handler) {
  impl_->routes[std::move(path)] = RouteEntry{std::move(methods), lane, std::move(handler)};
}

void HttpServer::SetEndpointsText(std::string text) { impl_->endpoints_text = std::move(text); }

core::Result<void> HttpServer::Start() {
  Impl& m = *impl_;
  if (m.start_called.exchange(true)) {
    return MakeError(core::ErrorCode::kFailedPrecondition, m.options.name + " was started before");
  }
  if (auto valid = ValidateOptions(m.options); !valid) return valid;
  RaiseFileLimit(m.options);
  if (m.options.tls) {
    auto context = MakeTlsContext(*m.options.tls);
    if (!context) return tl::unexpected(context.error());
    m.tls_context = std::move(*context);
  }
  for (const Endpoint& e : m.options.listen) {
    auto listening = e.kind == Endpoint::Kind::kTcp ? m.ListenTcp(e) : m.ListenUnix(e);
    if (!listening) {  // nothing is left listening
      m.tcp_acceptors.clear();
      m.unix_acceptors.clear();
      for (const std::string& path : m.socket_files) ::unlink(path.c_str());
      m.socket_files.clear();
      return listening;
    }
  }
  for (std::size_t i = 0; i < m.options.listen.size(); ++i) {
    if (m.options.listen[i].kind == Endpoint::Kind::kTcp) {
      m.Accept<tcp::socket>(i);
    } else {
      m.Accept<unix_socket::socket>(i);
    }
  }
  m.ScheduleTrim();
  m.keep_running.emplace(m.io.get_executor());
  m.workers.emplace(static_cast<std::size_t>(m.options.workers));
  m.side.emplace(1);
  m.io_thread = std::thread([&m] { m.io.run(); });
  m.started = true;
  return {};
}

void HttpServer::Drain() {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  asio::post(m.io, [&m] { m.BeginDrain(); });
}

void HttpServer::Stop(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  if (!m.started || m.stopped.exchange(true)) return;
  asio::post(m.io, [&m] { m.BeginStop(); });
  const auto give_up = Clock::now() + grace;
  while (m.open > 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  asio::post(m.io, [&m] {
    m.CloseAll();
    m.keep_running.reset();
    m.io.stop();
  });
  m.io_thread.join();
  m.workers->join();
  m.side->join();
  for (const std::string& path : m.socket_files) ::unlink(path.c_str());
}

bool HttpServer::running() const { return impl_->started && !impl_->stopped; }

int HttpServer::port(std::size_t index) const {
  if (index < impl_->ports.size()) return impl_->ports[index];
  return index < impl_->options.listen.size() ? impl_->options.listen[index].port : 0;
}

std::size_t HttpServer::open_connections() const { return impl_->open; }

std::int64_t HttpServer::dropped(Drop drop) const {
  return impl_->drops[static_cast<std::size_t>(drop)];
}

const ServerOptions& HttpServer::options() const { return impl_->options; }

core::Result<void> HttpServer::SetTls(const TlsOptions& tls) {
  Impl& m = *impl_;
  if (!m.options.tls) {
    return MakeError(core::ErrorCode::kFailedPrecondition, m.options.name + " serves no TLS");
  }
  auto context = MakeTlsContext(tls);
  if (!context) return tl::unexpected(context.error());
  if (!m.started || m.stopped) {
    return MakeError(core::ErrorCode::kFailedPrecondition, m.options.name + " is not serving");
  }
  // On the I/O thread, which alone reads it.
  asio::post(m.io,
             [&m, context = std::move(*context)]() mutable { m.tls_context = std::move(context); });
  return {};
}

}  // namespace gpumux::net
