// A TLS connection as Session<Socket> uses a socket (internal to net; included by
// http_server.cc only): reads and writes go through OpenSSL (Boost.Asio's ssl::stream);
// cancelling, shutting down and closing act on the TCP socket beneath. It has no async_wait:
// bytes the stream has already taken from the socket (a request that came in one segment with
// the client's last handshake message) are invisible to a wait on the socket, so a session
// waits for a TLS client's next request by reading it (Session::WaitForRequest).
#pragma once

#include <openssl/ssl.h>

#include <boost/asio/ssl.hpp>
#include <memory>
#include <utility>

#include "src/net/server_state.h"

namespace gpumux::net::detail {

class TlsSocket {
 public:
  using Stream = asio::ssl::stream<tcp::socket>;
  using executor_type = tcp::socket::executor_type;

  // Boost 1.74's ssl::stream cannot move: it lives on the heap so that a TlsSocket can. The
  // context stays while the stream does, though the server may serve new connections with
  // another (HttpServer::SetTls).
  TlsSocket(tcp::socket socket, std::shared_ptr<asio::ssl::context> context)
      : context_(std::move(context)),
        stream_(std::make_unique<Stream>(std::move(socket), *context_)) {}

  executor_type get_executor() { return stream_->next_layer().get_executor(); }

  template <class Buffers, class Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    return stream_->async_read_some(buffers, std::forward<Token>(token));
  }
  template <class Buffers, class Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    return stream_->async_write_some(buffers, std::forward<Token>(token));
  }
  template <class Handler>
  void async_handshake(Handler&& handler) {
    stream_->async_handshake(asio::ssl::stream_base::server, std::forward<Handler>(handler));
  }
  void cancel() {
    ErrorCode ignored;
    stream_->next_layer().cancel(ignored);
  }
  void shutdown(asio::socket_base::shutdown_type what, ErrorCode& ec) {
    stream_->next_layer().shutdown(what, ec);
  }
  void close(ErrorCode& ec) { stream_->next_layer().close(ec); }

 private:
  std::shared_ptr<asio::ssl::context> context_;
  std::unique_ptr<Stream> stream_;
};

// The server's TLS context from PEM strings; error naming what OpenSSL refused.
inline core::Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const TlsOptions& tls) {
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  ErrorCode ec;
  context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                           asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                       ec);
  if (!ec) context->use_certificate_chain(asio::buffer(tls.cert_chain_pem), ec);
  if (ec) {
    return MakeError(core::ErrorCode::kInvalidArgument, "TLS certificate chain: " + ec.message());
  }
  context->use_private_key(asio::buffer(tls.private_key_pem), asio::ssl::context::pem, ec);
  if (ec) return MakeError(core::ErrorCode::kInvalidArgument, "TLS private key: " + ec.message());
  if (::SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return MakeError(core::ErrorCode::kInvalidArgument,
                     "TLS private key does not match the certificate");
  }
  return context;
}

}  // namespace gpumux::net::detail
