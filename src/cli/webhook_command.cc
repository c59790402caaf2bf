// `gpumux webhook`: the mutating admission webhook (admission/webhook.h): pods written for
// NVIDIA's device plugin, HAMi, gpushare or KAI get gpumux's resources and scheduler. HTTPS with
// a certificate it makes and keeps in a Secret, whose CA it puts into the
// MutatingWebhookConfiguration. SIGINT/SIGTERM stop it.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/admission/webhook.h"
#include "gpumux/kube/api_client.h"
#include "gpumux/kube/objects.h"
#include "gpumux/net/process_metrics.h"
#include "src/cli/commands.h"
#include "src/cli/daemon_log.h"
#include "src/cli/daemon_support.h"
#include "src/cli/metrics_listener.h"
#include "src/cli/options.h"
#include "src/cli/settings.h"

namespace gpumux::cli {
namespace {

constexpr int kUsageError = 2;
constexpr int kRuntimeError = 1;

}  // namespace

CLI::App* AddWebhookCommand(CLI::App& app, WebhookCliOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "webhook",
      "Run the mutating admission webhook: workloads written for other GPU stacks run unchanged\n"
      "For pods the MutatingWebhookConfiguration sends (deploy/base/webhook/: opted-in "
      "namespaces or pods, GPU requests only), it translates nvidia.com/gpu (whole GPUs), "
      "HAMi's nvidia.com/gpumem and gpucores, gpushare's aliyun.com/gpu-mem and KAI's "
      "gpu-fraction annotation into gpumux.io/gpu, gpu-mem and gpu-milli, sets "
      "schedulerName, and records what it changed in the annotation gpumux.io/translated-from. "
      "Serves HTTPS on --listen (POST /mutate, GET /healthz, /readyz).");
  auto settings = std::make_shared<SettingsTable<WebhookCliOptions>>(*cmd, o);
  o.settings = settings;
  SettingsTable<WebhookCliOptions>& s = *settings;
  using O = WebhookCliOptions;
  s.Add("listen", &O::listen, "HOST:PORT of the HTTPS listener (in a pod: 0.0.0.0:9443)")
      ->capture_default_str();
  s.Add("tls-names", &O::tls_names,
        "Comma-separated DNS names and IPs the made certificate covers (the Service's name, or "
        "the address of clientConfig.url)")
      ->capture_default_str();
  s.Add("tls-secret", &O::tls_secret,
        "NAMESPACE/NAME of the Secret where the made certificate is kept, so that restarts and "
        "replicas serve the same one ('' = made at each start, kept in memory)")
      ->capture_default_str();
  s.AddPath("tls-cert-file", &O::tls_cert_file,
            "Serve this certificate (PEM chain; with --tls-key-file) instead of making one: it "
            "must not have expired and must cover --tls-names (in a cluster, or when given); "
            "the files are re-read every 2 s and a renewed pair served to new connections");
  s.AddPath("tls-key-file", &O::tls_key_file, "Its private key (PEM)");
  s.AddPath("tls-ca-file", &O::tls_ca_file,
            "The CA that signed --tls-cert-file, put into the configuration's caBundle (omit "
            "when something else, e.g. cert-manager's CA injector, sets it)");
  s.Add("tls-valid-days", &O::tls_valid_days, "Validity of a made certificate (1..36500)")
      ->capture_default_str();
  s.Add("configuration", &O::configuration,
        "The MutatingWebhookConfiguration whose caBundle the webhook keeps ('' = none)")
      ->capture_default_str();
  s.Add("ca-bundle-every-seconds", &O::ca_bundle_every_s,
        "How often the caBundle is checked and put back if changed (5..3600)")
      ->capture_default_str();
  s.Add("shutdown-delay-seconds", &O::shutdown_delay_s,
        "After SIGTERM, answer /readyz 503 but go on serving reviews this long before closing "
        "(0..60): the API server picks the webhook's endpoints itself, and a pod being replaced "
        "stays among them for a moment; a closed port then refuses the pod under "
        "failurePolicy: Fail")
      ->capture_default_str();
  s.Add("reuse-port", &O::reuse_port,
        "Share --listen's port (and --metrics-address's) with other webhook processes of this "
        "user (SO_REUSEPORT): replicas on the host network, the kernel spreading connections "
        "among them (a scrape then reaches one of them). After "
        "SIGTERM this one stops listening at once; set net.ipv4.tcp_migrate_req=1 so that the "
        "connections the kernel had queued for it go to the others");
  s.Add("gpu-mem-unit-mib", &O::gpu_mem_unit_mib,
        "MiB per gpumux.io/gpu-mem: the device plugins' and the extender's --gpu-mem-unit-mib")
      ->capture_default_str();
  s.Add("gpushare-mem-unit-mib", &O::gpushare_mem_unit_mib,
        "MiB per aliyun.com/gpu-mem (gpushare counts GiB unless configured in MiB: then 1)")
      ->capture_default_str();
  s.Add("fraction-gpu-memory-mib", &O::fraction_gpu_memory_mib,
        "The GPU memory of the pool's GPUs: a gpu-fraction F also reserves F of it (0: a "
        "fraction reserves compute only, gpumux.io/gpu-milli)")
      ->capture_default_str();
  s.Add("scheduler-name", &O::scheduler_name, "The schedulerName translated pods get")
      ->capture_default_str();
  s.AddPath("kubeconfig", &O::kubeconfig, "Reach the API server with this kubeconfig");
  s.Add("in-cluster", &O::in_cluster, "Reach the API server with the pod's service account");
  s.Add("context", &O::context, "kubeconfig context [default: current-context]; with --kubeconfig");
  s.Add("offline", &O::offline,
        "No API server: the certificate is made at start and kept in memory, no caBundle is "
        "set (for trying it; give the CA to your client yourself)");
  s.Add("max-connections", &O::max_connections, "Connections held open at most")
      ->capture_default_str();
  s.Add("metrics-address", &O::metrics_address,
        "HOST:PORT for plain-HTTP /metrics and /healthz (reviews by result, process "
        "metrics; port 0: any free port; 'off')")
      ->capture_default_str();
  AddLogSettings(*cmd, s, o, &O::log);
  s.AddConfigOption(&O::config);
  s.Add("check", &O::check,
        "Check the options and the files they name, print what would be served, exit 0 (2 "
        "when something is wrong), without listening or reaching the API server",
        "-");
  RecordGivenOptions(*cmd, o.given);
  cmd->footer(
      "\nExit status: 0 after SIGINT/SIGTERM, 2 for bad usage or input, 1 when it cannot serve "
      "(the port is taken, the Secret cannot be read or written).\n"
      "\nExamples:\n"
      "  gpumux webhook --in-cluster --listen 0.0.0.0:9443\n"
      "      in the Deployment of deploy/base/webhook/\n"
      "  gpumux webhook --offline --tls-names localhost,127.0.0.1 --log-level debug\n"
      "      try it: curl -k -d @review.json https://127.0.0.1:9443/mutate\n");
  return cmd;
}

namespace {

// The webhook's settings as the command line and file give them; "" or what is wrong.
std::string Translate(const WebhookCliOptions& o, admission::WebhookOptions& w,
                      admission::CertificateSource& c) {
  if (!ParseHostPort(o.listen, w.host, w.port))
    return "--listen must be HOST:PORT, not '" + o.listen + "'";
  const auto unit_ok = [](std::int64_t v) { return v >= 1 && v <= kube::kMaxGpuMemUnitMib; };
  if (!unit_ok(o.gpu_mem_unit_mib) || !unit_ok(o.gpushare_mem_unit_mib)) {
    return "--gpu-mem-unit-mib and --gpushare-mem-unit-mib must be 1.." +
           std::to_string(kube::kMaxGpuMemUnitMib);
  }
  if (o.fraction_gpu_memory_mib < 0 || o.fraction_gpu_memory_mib > (std::int64_t{1} << 30)) {
    return "--fraction-gpu-memory-mib must be 0..1073741824";
  }
  if (o.ca_bundle_every_s < 5 || o.ca_bundle_every_s > 3600) {
    return "--ca-bundle-every-seconds must be 5..3600";
  }
  if (o.shutdown_delay_s < 0 || o.shutdown_delay_s > 60) {
    return "--shutdown-delay-seconds must be 0..60";
  }
  if (o.tls_valid_days < 1 || o.tls_valid_days > 36500) return "--tls-valid-days must be 1..36500";
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return "--tls-cert-file and --tls-key-file go together";
  }
  if (!o.tls_ca_file.empty() && o.tls_cert_file.empty())
    return "--tls-ca-file needs --tls-cert-file";
  if (o.max_connections < 1 || o.max_connections > 65536)
    return "--max-connections must be 1..65536";
  w.translate.gpu_mem_unit_mib = o.gpu_mem_unit_mib;
  w.translate.gpushare_mem_unit_mib = o.gpushare_mem_unit_mib;
  w.translate.fraction_gpu_memory_mib = o.fraction_gpu_memory_mib;
  w.translate.scheduler_name = o.scheduler_name;
  w.configuration = o.configuration;
  w.ca_bundle_every = std::chrono::seconds(o.ca_bundle_every_s);
  w.max_connections = o.max_connections;
  w.reuse_port = o.reuse_port;
  c.cert_file = o.tls_cert_file;
  c.key_file = o.tls_key_file;
  c.ca_file = o.tls_ca_file;
  for (std::string& name : SplitCommas(o.tls_names)) {
    if (!name.empty()) c.names.push_back(std::move(name));
  }
  c.valid_days = o.tls_valid_days;
  // A renewal keeps the CAs trusted before it until every replica has followed (each reads the
  // Secret every --ca-bundle-every-seconds): an hour, or ten such periods.
  c.configuration = o.configuration;
  c.overlap = std::max(std::chrono::seconds(3600), 10 * std::chrono::seconds(o.ca_bundle_every_s));
  if (c.cert_file.empty() && c.names.empty()) return "--tls-names names nothing";
  // A file's certificate must cover the names given, or in a cluster the default Service name
  // (the API server verifies it); offline with the default, no name is asked of it.
  if (!c.cert_file.empty() && o.offline && !Given(o.given, "tls-names")) c.names.clear();
  if (!o.tls_secret.empty() && !o.offline) {
    const auto slash = o.tls_secret.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == o.tls_secret.size()) {
      return "--tls-secret must be NAMESPACE/NAME, not '" + o.tls_secret + "'";
    }
    c.secret_namespace = o.tls_secret.substr(0, slash);
    c.secret_name = o.tls_secret.substr(slash + 1);
  }
  // Re-read while serving: files when cert-manager renews them, the Secret when another replica
  // renewed it.
  w.reload_from = c;
  return {};
}

// Prometheus text: the reviews answered, by result.
std::string ReviewMetrics(const admission::Webhook::Counts& c) {
  std::string text =
      "# HELP gpumux_webhook_reviews_total AdmissionReviews answered, by result: translated "
      "(patched), unchanged, refused (the pod is not created), malformed (HTTP 400).\n"
      "# TYPE gpumux_webhook_reviews_total counter\n";
  for (const auto& [result, n] : {std::pair{"translated", c.translated},
                                  {"unchanged", c.unchanged},
                                  {"refused", c.refused},
                                  {"malformed", c.malformed}}) {
    text += "gpumux_webhook_reviews_total{result=\"" + std::string(result) + "\"} " +
            std::to_string(n) + "\n";
  }
  return text;
}

}  // namespace

int RunWebhook(const WebhookCliOptions& given, std::ostream& out, std::ostream& err) {
  const auto usage = [&err](const std::string& message) {
    err << "gpumux webhook: " << message << "\nRun 'gpumux webhook --help'.\n";
    return kUsageError;
  };
  WebhookCliOptions o = given;
  if (!o.config.empty()) {
    if (auto bad = o.settings->ApplyFile(o.config, o.given, o)) return usage(*bad);
  }
  const int sources = (o.kubeconfig.empty() ? 0 : 1) + (o.in_cluster ? 1 : 0) + (o.offline ? 1 : 0);
  if (sources != 1) return usage("give exactly one of --kubeconfig, --in-cluster and --offline");
  if (!o.context.empty() && o.kubeconfig.empty()) return usage("--context needs --kubeconfig");
  admission::WebhookOptions w;
  admission::CertificateSource certificate_source;
  if (std::string bad = Translate(o, w, certificate_source); !bad.empty()) return usage(bad);
  std::string metrics_host;
  int metrics_port = -1;
  if (!ParseHostPortOrOff(o.metrics_address, metrics_host, metrics_port)) {
    return usage("--metrics-address must be HOST:PORT or 'off', not '" + o.metrics_address + "'");
  }

  SignalBlock signals;
  signal(SIGPIPE, SIG_IGN);
  const core::Logger log = MakeDaemonLogger(err, "webhook", o.log);
  w.log = log;
  std::unique_ptr<kube::KubeApi> api;
  std::string source = "no API server (--offline)";
  if (!o.offline) {
    auto connected = ConnectDaemonApi(o.kubeconfig, o.context, o.in_cluster, o.check);
    if (!connected) return usage(connected.error().message);
    source = connected->Describe();
    api = std::move(connected->api);
  }
  if (o.check) {
    out << "gpumux webhook: --check: the options are valid; it would serve HTTPS on " << o.listen
        << " with " << source << "\n";
    return 0;
  }
  auto certificate = admission::ObtainCertificate(certificate_source, api.get(), log);
  if (!certificate) {
    log.Error("cannot start", {{"error", certificate.error().message}});
    return certificate.error().code == core::ErrorCode::kInvalidArgument ? kUsageError
                                                                         : kRuntimeError;
  }
  if (api == nullptr || certificate->ca_pem.empty()) w.configuration.clear();
  auto webhook = admission::Webhook::Start(w, std::move(*certificate), api.get());
  if (!webhook) {
    log.Error("cannot start", {{"error", webhook.error().message}});
    return kRuntimeError;
  }
  std::unique_ptr<MetricsListener> metrics;
  if (metrics_port >= 0) {
    admission::Webhook* served = webhook->get();
    auto listening = MetricsListener::Start(
        metrics_host, metrics_port,
        [served] { return ReviewMetrics(served->counts()) + net::ProcessMetricsText("webhook"); },
        w.reuse_port);
    if (!listening) {
      log.Error("cannot start", {{"error", listening.error().message}});
      return kRuntimeError;
    }
    metrics = std::move(*listening);
    log.Info("metrics listening",
             {{"address", metrics_host + ":" + std::to_string(metrics->port())}});
  }
  log.Info("serving", {{"address", w.host + ":" + std::to_string((*webhook)->port())},
                       {"source", source},
                       {"configuration", w.configuration},
                       {"scheduler_name", w.translate.scheduler_name},
                       {"gpu_mem_unit_mib", std::to_string(w.translate.gpu_mem_unit_mib)}});
  const int sig = signals.Wait();
  signals.Restore();
  log.Info("stopping (a second signal ends the process at once)",
           {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"},
            {"serving_for_s", std::to_string(o.shutdown_delay_s)}});
  (*webhook)->Drain();
  std::this_thread::sleep_for(std::chrono::seconds(o.shutdown_delay_s));
  if (metrics) metrics->Stop();
  (*webhook)->Stop();
  const auto counts = (*webhook)->counts();
  log.Info("stopped", {{"translated", std::to_string(counts.translated)},
                       {"refused", std::to_string(counts.refused)},
                       {"unchanged", std::to_string(counts.unchanged)},
                       {"malformed", std::to_string(counts.malformed)}});
  return 0;
}

}  // namespace gpumux::cli
