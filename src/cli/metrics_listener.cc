#include "src/cli/metrics_listener.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

namespace gpumux::cli {

struct MetricsListener::Impl {
  httplib::Server http;
  std::thread thread;
  int port = 0;
  bool stopped = false;
};

core::Result<std::unique_ptr<MetricsListener>> MetricsListener::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  auto impl = std::make_unique<Impl>();
  httplib::Server& http = impl->http;
  http.set_keep_alive_max_count(1);  // scrapes: no idle connections to wait for at Stop
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  http.Get("/metrics",
           [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
             res.set_content(render(), "text/plain; version=0.0.4");
           });
  errno = 0;
  bool bound = false;
  if (port == 0) {
    impl->port = http.bind_to_any_port(host);
    bound = impl->port > 0;
  } else {
    impl->port = port;
    bound = http.bind_to_port(host, port);
  }
  if (!bound) {
    const int error = errno;
    return core::MakeError(core::ErrorCode::kFailedPrecondition,
                           "--metrics-address: cannot listen on " + host + ":" +
                               std::to_string(port) +
                               (error != 0 ? std::string(": ") + std::strerror(error) : ""));
  }
  impl->thread = std::thread([&http] { http.listen_after_bind(); });
  while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<MetricsListener>(new MetricsListener(std::move(impl)));
}

MetricsListener::MetricsListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsListener::~MetricsListener() { Stop(); }

void MetricsListener::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsListener::port() const { return impl_->port; }

}  // namespace gpumux::cli
