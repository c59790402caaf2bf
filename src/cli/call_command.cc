// gpumux call: one HTTP request to a gpumux listener, over a unix socket or TCP, for jobs
// written in shell and for operators in images without curl (the node coordinator's socket:
// docs/COORDINATOR.md).
#include <CLI/CLI.hpp>
#include <ostream>

#include "gpumux/io/read_file.h"
#include "gpumux/net/http_client.h"
#include "src/cli/commands.h"
#include "src/cli/daemon_support.h"

namespace gpumux::cli {

namespace {
constexpr int kUsageError = 2;
constexpr int kNoReply = 3;
}  // namespace

CLI::App* AddCallCommand(CLI::App& app, CallCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "call",
      "Send one HTTP request to a gpumux listener and print the reply's body\n"
      "For jobs and operators that talk to the node coordinator's unix socket from an image "
      "without curl. Exit status: 0 for a 2xx reply, 1 for any other reply (its status line "
      "on stderr), 3 when no reply came.");
  cmd->add_option("method", o.method, "HTTP method: GET, POST, ...")->required();
  cmd->add_option("path", o.path, "Request path, e.g. /v1/register")->required();
  cmd->add_option("--socket", o.socket, "Unix socket of the listener");
  cmd->add_option("--address", o.address,
                  "HOST:PORT of the listener [default: 127.0.0.1:9403 without --socket]");
  cmd->add_option("--data,-d", o.data, "Request body (JSON); @FILE reads it from FILE");
  cmd->add_option("--timeout", o.timeout_s, "Seconds to wait for the whole exchange")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  cmd->footer(
      "\nExamples:\n"
      "  gpumux call --socket /run/gpumux/coordinator.sock GET /v1/state\n"
      "  gpumux call --socket /run/gpumux/coordinator.sock POST /v1/register \\\n"
      "      -d '{\"job\": \"ns/pod/main\", \"class\": \"resnet\", \"batch_size\": 32}'\n");
  return cmd;
}

int RunCall(const CallCliOptions& o, std::ostream& out, std::ostream& err) {
  const auto usage = [&err](const std::string& message) {
    err << "gpumux call: " << message << "\nRun 'gpumux call --help'.\n";
    return kUsageError;
  };
  if (!o.socket.empty() && !o.address.empty()) return usage("give --socket or --address, not both");
  if (o.path.empty() || o.path[0] != '/') return usage("the path must start with '/'");
  net::Endpoint to = net::Endpoint::Unix(o.socket, 0);
  if (o.socket.empty()) {
    std::string host;
    int port = 0;
    const std::string address = o.address.empty() ? "127.0.0.1:9403" : o.address;
    if (!ParseHostPort(address, host, port)) {
      return usage("--address must be HOST:PORT, not '" + address + "'");
    }
    to = net::Endpoint::Tcp(host, port);
  }
  std::string body = o.data;
  if (!body.empty() && body[0] == '@') {
    auto read = io::ReadInputFile(body.substr(1), std::size_t{64} << 20);
    if (!read) return usage("--data: " + read.error().message);
    body = std::move(*read);
  }
  net::CallOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.timeout_s * 1000));
  auto reply = net::Call(to, o.method, o.path, body, options);
  if (!reply) {
    if (reply.error().code == core::ErrorCode::kInvalidArgument) {
      return usage(reply.error().message);
    }
    err << "gpumux call: " << reply.error().message << "\n";
    return kNoReply;
  }
  out << reply->body;
  if (!reply->body.empty() && reply->body.back() != '\n') out << "\n";
  if (reply->status >= 200 && reply->status < 300) return 0;
  err << "gpumux call: " << o.method << " " << o.path << ": HTTP " << reply->status << "\n";
  return 1;
}

}  // namespace gpumux::cli
