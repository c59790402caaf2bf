// One HTTP/1.1 exchange with a gpumux listener over TCP or a unix socket (Boost.Beast, like the
// server): for `gpumux call`, the tool that lets shell jobs and operators speak to the node
// coordinator's socket where no curl is at hand (a busybox image).
// Thread safety: a free function; each call opens and closes its own connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "gpumux/core/result.h"
#include "gpumux/net/http_server.h"

namespace gpumux::net {

struct ClientReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

struct CallOptions {
  std::chrono::milliseconds timeout{10000};  // connecting, sending and reading, each
  std::size_t max_body_bytes = std::size_t{64} << 20;
};

// Sends `method path` with `body` (application/json when not empty) to `to` and reads the
// whole reply. kIo errors name the endpoint and the system's reason (refused, no such socket,
// timed out, not HTTP).
core::Result<ClientReply> Call(const Endpoint& to, const std::string& method,
                               const std::string& path, const std::string& body,
                               const CallOptions& options = {});

}  // namespace gpumux::net
