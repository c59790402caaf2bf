#include "src/cli/metrics_listener.h"

#include <utility>

#include "gpumux/net/http_server.h"

namespace gpumux::cli {

struct MetricsListener::Impl {
  std::unique_ptr<net::HttpServer> server;
};

core::Result<std::unique_ptr<MetricsListener>> MetricsListener::Start(
    const std::string& host, int port, std::function<std::string()> render, bool reuse_port) {
  auto impl = std::make_unique<Impl>();
  net::ServerOptions o;
  o.name = "metrics listener";
  o.listen = {net::Endpoint::Tcp(host, port)};
  o.workers = 1;
  o.max_connections = 64;
  o.max_body_bytes = 4096;  // GETs only
  o.reuse_port = reuse_port;
  impl->server = std::make_unique<net::HttpServer>(std::move(o));
  impl->server->Route("/healthz", {"GET"}, net::Lane::kInline,
                      [](const net::Request&) { return net::Response::Text(200, "ok\n"); });
  impl->server->Route("/metrics", {"GET"}, net::Lane::kSide,
                      [render = std::move(render)](const net::Request&) {
                        net::Response r = net::Response::Text(200, render());
                        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
                        return r;
                      });
  if (auto started = impl->server->Start(); !started) {
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "--metrics-address: " + started.error().message);
  }
  return std::unique_ptr<MetricsListener>(new MetricsListener(std::move(impl)));
}

MetricsListener::MetricsListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsListener::~MetricsListener() { Stop(); }

void MetricsListener::Stop() { impl_->server->Stop(); }

int MetricsListener::port() const { return impl_->server->port(); }

}  // namespace gpumux::cli
