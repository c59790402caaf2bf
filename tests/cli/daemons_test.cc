// The daemons as processes, as an operator runs them: every panel of the Grafana dashboard
// (deploy/monitoring/grafana-dashboard.json) names metrics that the real extender, device plugin
// and coordinator export on their --metrics-address listeners, and every daemon's
// --log-format json / --log-level output is what the README promises.
//
// Each daemon runs without a cluster: the extender with --offline-nodes, the device plugin with
// the fake backend, --offline and a fake kubelet (real gRPC on unix sockets), the coordinator
// with --backend none; all on loopback with ports the kernel picks, read back from their logs.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/fake_kubelet.h"
#include "tests/testing/process.h"

namespace gpumux {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

// --- PromQL: the metric names an expression reads ------------------------------------------------

// The metric names in a PromQL expression: identifiers that are not functions, aggregation or
// binary keywords, label names (in {...} and in by/without/on/ignoring/group_left/group_right
// lists), durations ([...]) or numbers. label_values(METRIC, LABEL) (a Grafana variable query)
// names METRIC.
std::set<std::string> MetricNames(std::string expr) {
  // label_values(metric, label) -> metric
  const std::regex label_values(R"(label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)[^)]*\))");
  expr = std::regex_replace(expr, label_values, "$1");
  std::string out;
  char quote = 0;
  int braces = 0;
  int brackets = 0;
  for (const char c : expr) {  // strings, {...} and [...] dropped
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '"' || c == '\'' || c == '`') {
      quote = c;
    } else if (c == '{') {
      ++braces;
    } else if (c == '}') {
      --braces;
    } else if (c == '[') {
      ++brackets;
    } else if (c == ']') {
      --brackets;
    } else if (braces == 0 && brackets == 0) {
      out += c;
    }
  }
  const std::regex grouping(R"(\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))");
  out = std::regex_replace(out, grouping, " ");
  static const std::set<std::string> kKeywords = {
      "by", "without", "on",     "ignoring", "group_left", "group_right", "bool", "and",
      "or", "unless",  "offset", "inf",      "nan",        "Inf",         "NaN"};
  std::set<std::string> names;
  const std::regex ident(R"([a-zA-Z_:][a-zA-Z0-9_:]*)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), ident); it != std::sregex_iterator();
       ++it) {
    const std::string name = it->str();
    const auto at = static_cast<std::size_t>(it->position());
    const std::size_t next = out.find_first_not_of(" \t\n", at + name.size());
    const bool call = next != std::string::npos && out[next] == '(';
    const bool in_number = at > 0 && (std::isdigit(static_cast<unsigned char>(out[at - 1])) != 0 ||
                                      out[at - 1] == '.');
    if (call || in_number || kKeywords.count(name) > 0 || name[0] == '$') continue;
    names.insert(name);
  }
  return names;
}

// shared/reliability-repros/coordinator-loopback-check-by-prefix: the coordinator's --listen must
// be a loopback address (TCP callers cannot be identified) unless --listen-beyond-loopback says
// otherwise; a host *name* that merely starts with "127." is not one.
TEST(CoordinatorListen, OnlyLoopbackAddressesPassWithoutListenBeyondLoopback) {
  const std::filesystem::path scratch = std::filesystem::temp_directory_path();
  const std::string store =
      "file://" + (scratch / ("listen-" + std::to_string(::getpid()) + ".json")).string();
  const std::vector<std::pair<std::string, int>> cases = {{"127.0.0.1:9403", 0},
                                                          {"127.10.0.1:9403", 0},
                                                          {"[::1]:9403", 0},
                                                          {"localhost:9403", 0},
                                                          {"0.0.0.0:9403", 2},
                                                          {"[::]:9403", 2},
                                                          {"127.attacker.example:9403", 2},
                                                          {"127.0.0.1.nip.io:9403", 2},
                                                          {"10.0.0.1:9403", 2}};
  int i = 0;
  for (const auto& [listen, code] : cases) {
    const auto run = test::RunCaptured(
        {.argv = {GPUMUX_BINARY, "coordinator", "--node", "n1", "--members", "jobs", "--backend",
                  "none", "--listen", listen, "--socket", "off", "--store", store, "--check"}},
        scratch, "listen-" + std::to_string(i++));
    EXPECT_TRUE(run.exit.Exited(code)) << listen << ": " << run.out << run.err;
    if (code == 2) {
      EXPECT_NE(run.err.find("is not a loopback address"), std::string::npos) << run.err;
    }
  }
}

TEST(MetricNames, FindsTheMetricsOfAnExpressionAndNothingElse) {
  const std::vector<std::pair<std::string, std::set<std::string>>> cases = {
      {R"(sum by (verb, code) (rate(gpumux_extender_requests_total[$__rate_interval])))",
       {"gpumux_extender_requests_total"}},
      {R"(histogram_quantile(0.99, sum by (verb, le) (rate(x_seconds_bucket{node=~"$node"}[5m]))))",
       {"x_seconds_bucket"}},
      {R"(sum(gpumux_device_plugin_gpus{health="Unhealthy", node=~"$node"}))",
       {"gpumux_device_plugin_gpus"}},
      {R"(sum(rate(a_total[1m])) * 60 + on(node) group_left(pod) b / ignoring (x) c == 1e3)",
       {"a_total", "b", "c"}},
      {R"(count by (state) (s{node=~"a|b"}) > bool 0 unless d offset 5m)", {"s", "d"}},
      {"label_values(gpumux_device_plugin_gpus, node)", {"gpumux_device_plugin_gpus"}},
      {"max without (instance) (m)", {"m"}},
  };
  for (const auto& [expr, want] : cases) EXPECT_EQ(MetricNames(expr), want) << expr;
}

// Metric names a Prometheus text page exports: every sample's name, plus, for a histogram or a
// summary declared by # TYPE, its _bucket, _sum and _count series and its own name.
std::set<std::string> Exported(const std::string& page) {
  std::set<std::string> names;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      names.insert(name);
      if (type == "histogram" || type == "summary") {
        for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(name + suffix);
      }
    } else if (!line.empty() && line[0] != '#') {
      names.insert(line.substr(0, line.find_first_of("{ ")));
    }
  }
  return names;
}

// --- the daemons ------------------------------------------------------------------------------

bool Eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

std::vector<std::string> LinesOf(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class DaemonsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/gpumux-daemons-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    scratch_ = dir;
  }
  void TearDown() override {
    for (const pid_t pid : running_) {
      ::kill(pid, SIGKILL);
      test::WaitProcess(pid);
    }
    std::error_code ec;
    fs::remove_all(scratch_, ec);
  }

  // Starts `gpumux args...` with stderr in `<tag>.err`.
  pid_t Start(const std::string& tag, const std::vector<std::string>& args) {
    test::ProcessSpec spec;
    spec.argv = {GPUMUX_BINARY};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.stderr_path = (scratch_ / (tag + ".err")).string();
    spec.stdout_path = (scratch_ / (tag + ".out")).string();
    spec.unset_env = {"KUBECONFIG", "NODE_NAME"};
    const pid_t pid = test::StartProcess(spec);
    if (pid > 0) running_.push_back(pid);
    return pid;
  }
  std::string Err(const std::string& tag) const {
    return test::ReadFileText(scratch_ / (tag + ".err"));
  }
  // SIGTERM, then the exit status (killed after 20 s).
  test::ProcessExit Stop(pid_t pid) {
    ::kill(pid, SIGTERM);
    int status = 0;
    bool exited = Eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; });
    running_.erase(std::remove(running_.begin(), running_.end(), pid), running_.end());
    test::ProcessExit e;
    if (!exited) {
      ::kill(pid, SIGKILL);
      return test::WaitProcess(pid);
    }
    if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    return e;
  }

  // The port after `marker` ("... on 127.0.0.1:") in the log of `tag`, text or JSON; 0 when it
  // does not appear within 20 s.
  int PortAfter(const std::string& tag, const std::string& marker) const {
    int port = 0;
    Eventually([&] {
      const std::string err = Err(tag);
      const std::size_t at = err.find(marker);
      if (at == std::string::npos) return false;
      port = std::atoi(err.c_str() + at + marker.size());
      return port > 0;
    });
    return port;
  }

  // The port in field `key` (127.0.0.1:PORT) of the first line whose message starts with `msg`,
  // in text (`msg key=...`) or JSON (`"msg":"msg...","key":"..."`) lines.
  int PortInField(const std::string& tag, const std::string& msg, const std::string& key) const {
    int port = 0;
    Eventually([&] {
      for (const std::string& line : LinesOf(Err(tag))) {
        if (line.find(": " + msg) == std::string::npos &&
            line.find("\"msg\":\"" + msg) == std::string::npos) {
          continue;
        }
        for (const std::string& marker :
             {" " + key + "=127.0.0.1:", "\"" + key + "\":\"127.0.0.1:"}) {
          const std::size_t at = line.find(marker);
          if (at != std::string::npos) port = std::atoi(line.c_str() + at + marker.size());
        }
        if (port > 0) return true;
      }
      return false;
    });
    return port;
  }

  fs::path Write(const std::string& name, const std::string& text) const {
    const fs::path path = scratch_ / name;
    std::ofstream(path) << text;
    return path;
  }

  struct Extender {
    pid_t pid = -1;
    int port = 0, metrics_port = 0;
  };
  Extender StartExtender(const std::string& tag, const std::vector<std::string>& more) {
    std::vector<std::string> args = {
        "extender",
        "--offline-nodes",
        std::string(GPUMUX_SOURCE_DIR) + "/examples/extender/nodes.json",
        "--listen",
        "127.0.0.1:0",
        "--metrics-address",
        "127.0.0.1:0"};
    args.insert(args.end(), more.begin(), more.end());
    Extender e;
    e.pid = Start(tag, args);
    e.port = PortAfter(tag, "listening on 127.0.0.1:");
    e.metrics_port = PortInField(tag, "metrics listening", "address");
    return e;
  }

  struct Plugin {
    pid_t pid = -1;
    int metrics_port = 0;
  };
  // The fake GPU file: one healthy GPU that had XID 13 (an application error), one unhealthy.
  Plugin StartPlugin(const std::string& tag, test::FakeKubelet& kubelet,
                     const std::vector<std::string>& more) {
    const fs::path gpus = Write(tag + "-gpus.csv",
                                "index,uuid,model,memory_mib,health,xids\n"
                                "0,GPU-m0,Tesla T4,15360,healthy,13\n"
                                "1,GPU-m1,Tesla T4,15360,unhealthy,\n");
    std::vector<std::string> args = {"device-plugin",
                                     "--node-name",
                                     "n1",
                                     "--backend",
                                     "fake",
                                     "--gpus-file",
                                     gpus.string(),
                                     "--kubelet-dir",
                                     kubelet.dir().string(),
                                     "--offline",
                                     "--metrics-address",
                                     "127.0.0.1:0",
                                     "--health-interval-ms",
                                     "100"};
    args.insert(args.end(), more.begin(), more.end());
    Plugin p;
    p.pid = Start(tag, args);
    p.metrics_port = PortInField(tag, "serving", "metrics_address");
    return p;
  }

  struct Coordinator {
    pid_t pid = -1;
    int port = 0, metrics_port = 0;
  };
  Coordinator StartCoordinator(const std::string& tag, const std::vector<std::string>& more) {
    std::vector<std::string> args = {
        "coordinator", "--node",      "n1",
        "--backend",   "none",        "--socket",
        "off",         "--profile",   "cpu-example",
        "--listen",    "127.0.0.1:0", "--metrics-address",
        "127.0.0.1:0", "--store",     "file://" + (scratch_ / (tag + ".json")).string()};
    args.insert(args.end(), more.begin(), more.end());
    Coordinator c;
    c.pid = Start(tag, args);
    c.port = PortInField(tag, "serving", "address");
    c.metrics_port = PortInField(tag, "metrics listening", "address");
    return c;
  }

  fs::path scratch_;
  std::vector<pid_t> running_;
};

// A loopback port that was free a moment ago (for a daemon whose log does not say its port).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::string Get(int port, const std::string& path, int* status = nullptr) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto res = client.Get(path);
  if (status != nullptr) *status = res ? res->status : -1;
  return res ? res->body : std::string();
}

int Post(int port, const std::string& path, const std::string& body) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto res = client.Post(path, body, "application/json");
  return res ? res->status : -1;
}

// What `promtool check metrics` (Prometheus 2.42) objects to, by the same rules: HELP for every
// family, snake_case names, counters and only counters ending in _total, no type or
// non-base unit in a name, and here also no label named job.
std::vector<std::string> MetricsLintProblems(const std::string& text) {
  std::vector<std::string> problems;
  std::set<std::string> helped;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, help;
      words >> name >> help;
      if (help.empty()) problems.push_back(name + ": empty HELP");
      helped.insert(name);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      if (helped.count(name) == 0) problems.push_back(name + ": no HELP");
      const bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
      if ((type == "counter") != total) problems.push_back(name + " is a " + type);
      if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
        problems.push_back(name + ": not snake_case");
      }
      std::istringstream parts(name);
      for (std::string part; std::getline(parts, part, '_');) {
        static const std::set<std::string> kBad = {
            "gauge",        "counter",     "histogram", "summary", "milliseconds",
            "microseconds", "nanoseconds", "minutes",   "hours",   "days",
            "kilobytes",    "megabytes",   "gigabytes", "sec",     "secs",
            "ms",           "us",          "ns",        "kb",      "mb",
            "gb",           "kib",         "mib",       "gib",     "percent"};
        if (kBad.count(part) > 0) problems.push_back(name + ": '" + part + "' in the name");
      }
    } else if (!line.empty() && line[0] != '#' &&
               (line.find("{job=\"") != std::string::npos ||
                line.find(",job=\"") != std::string::npos)) {
      problems.push_back("a series labelled job: " + line);
    }
  }
  return problems;
}

TEST(MetricsLint, CatchesWhatPromtoolWould) {
  const auto problems = MetricsLintProblems(
      "# HELP a_total x\n# TYPE a_total gauge\n# TYPE b counter\n"
      "# HELP c_ms x\n# TYPE c_ms gauge\n# HELP dE x\n# TYPE dE gauge\ne{job=\"j\"} 1\n");
  EXPECT_EQ(problems.size(), 6u) << ::testing::PrintToString(problems);
}

// Drives each daemon so that every metric family has a series (prometheus-cpp leaves out a
// family with none): the extender's four verbs (a bind offline fails: a failure reason), an
// Allocate the offline plugin refuses, a job registered and reporting to the coordinator.
TEST_F(DaemonsTest, EveryPanelOfTheDashboardNamesMetricsTheDaemonsExport) {
  const Extender extender = StartExtender("extender", {"--log-format", "json"});
  ASSERT_GT(extender.port, 0) << Err("extender");
  ASSERT_GT(extender.metrics_port, 0) << Err("extender");
  const std::string filter =
      test::ReadFileText(std::string(GPUMUX_SOURCE_DIR) + "/examples/extender/filter.json");
  EXPECT_EQ(Post(extender.port, "/gpumux/filter", filter), 200);
  EXPECT_EQ(Post(extender.port, "/gpumux/prioritize", filter), 200);
  Post(extender.port, "/gpumux/bind",
       R"({"PodName":"p","PodNamespace":"default","PodUID":"u1","Node":"gpu-node-0"})");
  Post(extender.port, "/gpumux/preempt", "{}");

  test::FakeKubelet kubelet;
  const Plugin plugin = StartPlugin("plugin", kubelet, {"--log-format", "json"});
  ASSERT_GT(plugin.metrics_port, 0) << Err("plugin");
  ASSERT_TRUE(kubelet.WaitRegistrations(3, 20s)) << Err("plugin");
  ASSERT_TRUE(kubelet.WaitDevices(
      "gpumux.io/gpu", [](const auto& d) { return d.size() == 2; }, 20s));
  v1beta1::AllocateResponse response;
  EXPECT_FALSE(kubelet.Allocate("gpumux.io/gpu", {{"GPU-m0"}}, &response).ok())
      << "offline, no pod holds the node lock";

  const Coordinator coordinator = StartCoordinator("coordinator", {"--log-format", "json"});
  ASSERT_GT(coordinator.port, 0) << Err("coordinator");
  ASSERT_GT(coordinator.metrics_port, 0) << Err("coordinator");
  for (const std::string job : {"default/a/main", "default/b/main"}) {
    EXPECT_EQ(Post(coordinator.port, "/v1/register",
                   json{{"job", job},
                        {"class", job[8] == 'a' ? "resnet" : "lstm"},
                        {"batch_size", 16},
                        {"gpus", {"GPU-m0"}}}
                       .dump()),
              200);
    EXPECT_EQ(Post(coordinator.port, "/v1/report",
                   json{{"job", job}, {"steps", {{16, 0.1}, {16, 0.11}}}}.dump()),
              200);
  }

  // Scraped from the --metrics-address listeners, as Prometheus does on the pod IP.
  std::map<std::string, std::set<std::string>> exported;
  exported["extender"] = Exported(Get(extender.metrics_port, "/metrics"));
  ASSERT_TRUE(Eventually([&] {
    exported["device plugin"] = Exported(Get(plugin.metrics_port, "/metrics"));
    const auto& e = exported["device plugin"];
    return e.count("gpumux_device_plugin_gpus") > 0 &&
           e.count("gpumux_device_plugin_xid_events_total") > 0 &&
           e.count("gpumux_device_plugin_allocate_total") > 0;
  })) << Get(plugin.metrics_port, "/metrics");
  exported["coordinator"] = Exported(Get(coordinator.metrics_port, "/metrics"));
  // Prometheus's conventions (issue 33): promtool check metrics where it is installed (Debian:
  // the prometheus package), and its rules here in any case; no series carries a label named
  // job (the scrape's own); every daemon says what it is and what it uses.
  const bool promtool = std::system("command -v promtool > /dev/null 2>&1") == 0;
  for (const int port : {extender.metrics_port, plugin.metrics_port, coordinator.metrics_port}) {
    const std::string text = Get(port, "/metrics");
    for (const std::string& problem : MetricsLintProblems(text)) {
      ADD_FAILURE() << "port " << port << ": " << problem;
    }
    if (promtool) {
      const std::filesystem::path scratch = std::filesystem::temp_directory_path();
      const test::Captured lint =
          test::RunCaptured(test::ProcessSpec{{"promtool", "check", "metrics"}}, scratch,
                            "gpumux-promtool-" + std::to_string(::getpid()), text);
      EXPECT_TRUE(lint.exit.Exited(0)) << lint.out << lint.err;
    }
    for (const char* name :
         {"gpumux_build_info", "process_resident_memory_bytes", "process_cpu_seconds_total",
          "process_open_fds", "process_start_time_seconds"}) {
      EXPECT_NE(text.find(std::string("\n") + name), std::string::npos) << port << ": " << name;
    }
  }
  std::set<std::string> all;
  for (const auto& [daemon, names] : exported) {
    EXPECT_FALSE(names.empty()) << daemon;
    all.insert(names.begin(), names.end());
  }

  // The second listener answers /metrics and /healthz, nothing else.
  for (const int port : {extender.metrics_port, coordinator.metrics_port}) {
    int status = 0;
    Get(port, "/healthz", &status);
    EXPECT_EQ(status, 200);
    Get(port, "/inspect", &status);
    EXPECT_EQ(status, 404) << "the extender's /inspect stays on --listen";
    Get(port, "/v1/state", &status);
    EXPECT_EQ(status, 404) << "the coordinator's job protocol stays on --listen";
  }

  const json dashboard =
      json::parse(test::ReadFileText(std::string(GPUMUX_SOURCE_DIR) +
                                     "/deploy/monitoring/grafana-dashboard.json"),
                  nullptr, false);
  ASSERT_FALSE(dashboard.is_discarded()) << "the dashboard is not JSON";
  std::vector<json> panels;
  for (const json& p : dashboard.at("panels")) {
    panels.push_back(p);
    for (const json& inner : p.value("panels", json::array())) panels.push_back(inner);
  }
  std::set<std::string> used;
  std::set<std::string> covered_daemons;
  int checked = 0;
  for (const json& p : panels) {
    if (p.value("type", "") == "row") continue;
    const std::string title = p.value("title", "?");
    ASSERT_TRUE(p.contains("targets") && !p["targets"].empty()) << title << ": no query";
    for (const json& target : p["targets"]) {
      const std::string expr = target.value("expr", "");
      const std::set<std::string> names = MetricNames(expr);
      EXPECT_FALSE(names.empty()) << title << ": a query that names no metric: " << expr;
      for (const std::string& name : names) {
        EXPECT_TRUE(all.count(name) > 0)
            << title << ": " << name << " is not exported by any daemon (query " << expr << ")";
        used.insert(name);
        for (const auto& [daemon, names_of] : exported) {
          if (names_of.count(name) > 0) covered_daemons.insert(daemon);
        }
      }
      ++checked;
    }
  }
  for (const json& variable : dashboard.at("templating").at("list")) {
    if (variable.value("type", "") != "query") continue;
    const json& q = variable.at("query");
    const std::string expr = q.is_string() ? q.get<std::string>() : q.value("query", "");
    for (const std::string& name : MetricNames(expr)) {
      EXPECT_TRUE(all.count(name) > 0) << "variable " << variable.value("name", "") << ": " << name;
    }
  }
  EXPECT_GE(checked, 30) << "the dashboard lost its panels";
  const std::string text = dashboard.dump();
  EXPECT_EQ(text.find("delta("), std::string::npos) << "gauges only; counters take increase()";
  EXPECT_EQ(text.find("deriv("), std::string::npos) << "gauges only; counters take rate()";
  EXPECT_EQ(covered_daemons, (std::set<std::string>{"extender", "device plugin", "coordinator"}));
  // The panels the issue names: extender latency per verb, placements, failures by reason;
  // device plugin allocations and health; coordinator jobs, batch sizes, slowdowns, tuning.
  for (const char* name :
       {"gpumux_extender_request_duration_seconds_bucket", "gpumux_extender_placements_total",
        "gpumux_extender_failures_total", "gpumux_device_plugin_allocate_total",
        "gpumux_device_plugin_gpus", "gpumux_coordinator_gpu_jobs",
        "gpumux_coordinator_job_batch_size", "gpumux_coordinator_job_slowdown",
        "gpumux_coordinator_gpu_tuning_sessions_total"}) {
    EXPECT_TRUE(used.count(name) > 0) << "no panel shows " << name;
  }
}

// Every line of every daemon started with --log-format json parses as one JSON object with
// time (RFC 3339, UTC, milliseconds), level, daemon and msg; --log-level debug adds the
// extender's per-request lines.
TEST_F(DaemonsTest, WithLogFormatJsonEveryDaemonWritesOneJsonObjectPerLine) {
  const std::vector<std::string> json_debug = {"--log-format", "json", "--log-level", "debug"};
  const Extender extender = StartExtender("extender", json_debug);
  ASSERT_GT(extender.port, 0) << Err("extender");
  const std::string filter =
      test::ReadFileText(std::string(GPUMUX_SOURCE_DIR) + "/examples/extender/filter.json");
  EXPECT_EQ(Post(extender.port, "/gpumux/filter", filter), 200);
  test::FakeKubelet kubelet;
  const Plugin plugin = StartPlugin("device-plugin", kubelet, json_debug);
  ASSERT_GT(plugin.metrics_port, 0) << Err("device-plugin");
  ASSERT_TRUE(kubelet.WaitRegistrations(3, 20s)) << Err("device-plugin");
  v1beta1::AllocateResponse response;
  kubelet.Allocate("gpumux.io/gpu", {{"GPU-m0"}}, &response);  // refused offline: a warn line
  const Coordinator coordinator = StartCoordinator("coordinator", json_debug);
  ASSERT_GT(coordinator.port, 0) << Err("coordinator");

  EXPECT_TRUE(Stop(extender.pid).Exited(0));
  EXPECT_TRUE(Stop(plugin.pid).Exited(0));
  EXPECT_TRUE(Stop(coordinator.pid).Exited(0));

  const std::regex rfc3339(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$)");
  const std::set<std::string> levels = {"debug", "info", "warn", "error"};
  std::map<std::string, std::vector<json>> logs;
  for (const std::string daemon : {"extender", "device-plugin", "coordinator"}) {
    const std::vector<std::string> lines = LinesOf(Err(daemon));
    ASSERT_GE(lines.size(), 3u) << daemon << ":\n" << Err(daemon);
    for (const std::string& line : lines) {
      const json j = json::parse(line, nullptr, false);
      ASSERT_TRUE(!j.is_discarded() && j.is_object()) << daemon << ": not a JSON object: " << line;
      EXPECT_TRUE(std::regex_match(j.value("time", ""), rfc3339)) << line;
      EXPECT_EQ(levels.count(j.value("level", "")), 1u) << line;
      EXPECT_EQ(j.value("daemon", ""), daemon) << line;
      EXPECT_TRUE(j.contains("msg") && j["msg"].is_string()) << line;
      logs[daemon].push_back(j);
    }
    EXPECT_EQ(logs[daemon].back().value("msg", ""), "stopped");
  }
  const auto has = [&logs](const std::string& daemon, const std::string& level,
                           const std::string& part) {
    for (const json& j : logs[daemon]) {
      if (j.value("level", "") == level && j.value("msg", "").find(part) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(has("extender", "debug", "POST /gpumux/filter 200")) << Err("extender");
  const auto field = [&logs](const std::string& daemon, const std::string& msg,
                             const std::string& key) {
    for (const json& j : logs[daemon]) {
      if (j.value("msg", "") == msg && j.contains(key)) return j[key].get<std::string>();
    }
    return std::string("(no such line)");
  };
  EXPECT_EQ(field("extender", "serving", "policy"), "fgd") << Err("extender");
  EXPECT_TRUE(has("device-plugin", "warn", "Allocate refused")) << Err("device-plugin");
  EXPECT_TRUE(has("device-plugin", "info", "XID 13 (application) on GPU-m0"))
      << Err("device-plugin");
  EXPECT_EQ(
      field("coordinator",
            "serving (callers on the socket identified by their pod, container or uid)", "node"),
      "n1")
      << Err("coordinator");
  EXPECT_EQ(field("device-plugin", "stopping (a second signal ends the process at once)", "signal"),
            "SIGTERM")
      << Err("device-plugin");
}

// Without the flags a daemon writes the text lines it always wrote; --log-level leaves out the
// levels below it.
TEST_F(DaemonsTest, TheDefaultIsTheTextLineAndTheLevelLeavesOutLowerLines) {
  const Extender text = StartExtender("text", {});
  ASSERT_GT(text.port, 0) << Err("text");
  const std::string filter =
      test::ReadFileText(std::string(GPUMUX_SOURCE_DIR) + "/examples/extender/filter.json");
  EXPECT_EQ(Post(text.port, "/gpumux/filter", filter), 200);
  EXPECT_TRUE(Stop(text.pid).Exited(0));
  const std::regex line(
      R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO |WARN |ERROR|DEBUG) gpumux extender: \S.*$)");
  const auto lines = LinesOf(Err("text"));
  ASSERT_GE(lines.size(), 3u);
  for (const std::string& l : lines) EXPECT_TRUE(std::regex_match(l, line)) << l;
  EXPECT_EQ(Err("text").find("POST /gpumux/filter"), std::string::npos)
      << "per-request lines are debug";

  // At warn, a clean start and stop writes nothing (the ports are not logged: pick one).
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const pid_t quiet =
      Start("warn", {"extender", "--offline-nodes",
                     std::string(GPUMUX_SOURCE_DIR) + "/examples/extender/nodes.json", "--listen",
                     "127.0.0.1:" + std::to_string(port), "--log-level", "warn"});
  ASSERT_TRUE(Eventually([&] {
    int status = 0;
    Get(port, "/readyz", &status);
    return status == 200;
  })) << Err("warn");
  EXPECT_EQ(Post(port, "/gpumux/filter", filter), 200);
  EXPECT_TRUE(Stop(quiet).Exited(0));
  EXPECT_EQ(Err("warn"), "");
}

// The extender's settings file has the same settings (flags given on the command line win).
TEST_F(DaemonsTest, TheExtenderSettingsFileSetsTheLogFormatLevelAndMetricsAddress) {
  const fs::path config =
      Write("extender.yaml", "logFormat: json\nlogLevel: debug\nmetricsAddress: 127.0.0.1:0\n");
  const Extender e = StartExtender("config", {"--config", config.string(), "--log-level", "info"});
  ASSERT_GT(e.metrics_port, 0) << Err("config");
  EXPECT_EQ(
      Post(e.port, "/gpumux/filter",
           test::ReadFileText(std::string(GPUMUX_SOURCE_DIR) + "/examples/extender/filter.json")),
      200);
  EXPECT_TRUE(Stop(e.pid).Exited(0));
  for (const std::string& line : LinesOf(Err("config"))) {
    const json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_NE(j.value("level", ""), "debug") << "--log-level info wins over the file: " << line;
  }
  const fs::path bad = Write("bad.yaml", "logLevel: loud\n");
  const test::Captured run = test::RunCaptured(
      {.argv = {GPUMUX_BINARY, "extender", "--config", bad.string(), "--check"}}, scratch_, "bad");
  EXPECT_TRUE(run.exit.Exited(2)) << run.err;
  EXPECT_NE(run.err.find("key 'logLevel': 'loud' is not a log level"), std::string::npos)
      << run.err;
}

// The device plugin and the coordinator read a settings file too, from the same table as their
// flags: a key sets what its flag sets, a relative path is relative to the file, the flag given
// wins, a value gets the flag's checks, and an unknown key lists every key.
TEST_F(DaemonsTest, TheDevicePluginAndCoordinatorSettingsFilesSetWhatTheirFlagsSet) {
  Write("gpus.csv", "index,uuid,model,memory_mib\n0,GPU-a,A100,40960\n1,GPU-b,A100,40960\n");
  const fs::path plugin = Write("plugin.yaml", "backend: fake\ngpusFile: gpus.csv\n");
  const auto check = [&](std::vector<std::string> argv, const std::string& name) {
    argv.insert(argv.begin(), GPUMUX_BINARY);
    argv.push_back("--check");
    return test::RunCaptured({.argv = argv}, "/", name);
  };
  test::Captured r = check(
      {"device-plugin", "--config", plugin.string(), "--offline", "--node-name", "n1"}, "plugin");
  EXPECT_TRUE(r.exit.Exited(0)) << r.err;
  EXPECT_NE((r.out + r.err).find("it would serve 2 GPUs from " + (scratch_ / "gpus.csv").string()),
            std::string::npos)
      << r.err;
  const fs::path coordinator =
      Write("coordinator.yaml", "tuner: iadeep\nsocket: \"off\"\nstore: file://" +
                                    (scratch_ / "state.json").string() + "\nbackend: none\n");
  r = check({"coordinator", "--config", coordinator.string()}, "coordinator");
  EXPECT_TRUE(r.exit.Exited(0)) << r.err;
  EXPECT_NE((r.out + r.err).find("with the iadeep tuner"), std::string::npos) << r.out << r.err;
  r = check({"coordinator", "--config", coordinator.string(), "--tuner", "joint"}, "wins");
  EXPECT_NE((r.out + r.err).find("with the joint tuner"), std::string::npos) << "the flag wins";
  r = check({"coordinator", "--config", Write("steps.yaml", "windowSteps: 0\n").string()}, "range");
  EXPECT_TRUE(r.exit.Exited(2)) << r.err;
  EXPECT_NE(r.err.find("key 'windowSteps': Value 0 not in range"), std::string::npos) << r.err;
  r = check({"device-plugin", "--config", Write("typo.yaml", "gpuFile: x\n").string()}, "typo");
  EXPECT_TRUE(r.exit.Exited(2)) << r.err;
  EXPECT_NE(r.err.find("unknown key 'gpuFile' (known: nodeName, backend, gpusFile"),
            std::string::npos)
      << r.err;
}

TEST_F(DaemonsTest, AtLevelErrorOnlyTheFailureIsWritten) {
  httplib::Server blocker;
  const int taken = blocker.bind_to_any_port("127.0.0.1");
  ASSERT_GT(taken, 0);
  const pid_t pid = Start("error", {"coordinator", "--node", "n1", "--backend", "none", "--socket",
                                    "off", "--listen", "127.0.0.1:" + std::to_string(taken),
                                    "--store", "file://" + (scratch_ / "c.json").string(),
                                    "--log-level", "error", "--log-format", "json"});
  int status = 0;
  ASSERT_TRUE(Eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }));
  running_.clear();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  const auto lines = LinesOf(Err("error"));
  ASSERT_EQ(lines.size(), 1u) << Err("error");
  const json j = json::parse(lines[0]);
  EXPECT_EQ(j.value("level", ""), "error");
  EXPECT_EQ(j.value("msg", ""), "cannot start") << lines[0];
  EXPECT_NE(j.value("error", "").find("cannot listen on 127.0.0.1:"), std::string::npos)
      << lines[0];
}

}  // namespace
}  // namespace gpumux
