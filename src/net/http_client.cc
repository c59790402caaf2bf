#include "gpumux/net/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <functional>

namespace gpumux::net {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

tl::unexpected<core::Error> Failed(const Endpoint& to, const std::string& what) {
  return core::MakeError(core::ErrorCode::kIo, to.Describe() + ": " + what);
}

// Connects with `connect`, writes the request and reads the reply on `io`, all within the
// timeout (asynchronous operations and run_for: a blocking read would ignore a deadline).
template <typename Socket>
core::Result<ClientReply> Exchange(
    asio::io_context& io, Socket& socket,
    const std::function<void(std::function<void(error_code)>)>& connect, const Endpoint& to,
    http::request<http::string_body>& req, const CallOptions& options) {
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(options.max_body_bytes);
  std::string failed;  // the stage that failed and why
  bool done = false;
  connect([&](error_code ec) {
    if (ec) {
      failed = "cannot connect: " + ec.message();
      return;
    }
    http::async_write(socket, req, [&](error_code wec, std::size_t) {
      if (wec) {
        failed = "sending the request: " + wec.message();
        return;
      }
      http::async_read(socket, buffer, parser, [&](error_code rec, std::size_t) {
        if (rec) failed = "reading the reply: " + rec.message();
        done = !rec;
      });
    });
  });
  io.run_for(options.timeout);
  if (!failed.empty()) return Failed(to, failed);
  if (!done) {
    return Failed(to, "no reply within " + std::to_string(options.timeout.count()) + " ms");
  }
  ClientReply reply;
  const auto& res = parser.get();
  reply.status = static_cast<int>(res.result_int());
  reply.content_type = std::string(res[http::field::content_type]);
  reply.body = res.body();
  return reply;
}

}  // namespace

core::Result<ClientReply> Call(const Endpoint& to, const std::string& method,
                               const std::string& path, const std::string& body,
                               const CallOptions& options) {
  const http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    return core::MakeError(core::ErrorCode::kInvalidArgument,
                           "unknown HTTP method '" + method + "'");
  }
  http::request<http::string_body> req{verb, path, 11};
  req.set(http::field::host, to.kind == Endpoint::Kind::kUnix ? "localhost" : to.host);
  req.set(http::field::user_agent, "gpumux-call");
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.keep_alive(false);
  req.prepare_payload();
  asio::io_context io;
  if (to.kind == Endpoint::Kind::kUnix) {
    asio::local::stream_protocol::socket socket(io);
    const asio::local::stream_protocol::endpoint at(to.path);
    return Exchange(
        io, socket, [&](auto then) { socket.async_connect(at, then); }, to, req, options);
  }
  error_code ec;
  asio::ip::tcp::resolver resolver(io);
  const auto found = resolver.resolve(to.host, std::to_string(to.port), ec);
  if (ec) return Failed(to, "cannot resolve " + to.host + ": " + ec.message());
  asio::ip::tcp::socket socket(io);
  return Exchange(
      io, socket,
      [&](auto then) {
        asio::async_connect(socket, found,
                            [then](error_code e, const asio::ip::tcp::endpoint&) { then(e); });
      },
      to, req, options);
}

}  // namespace gpumux::net
