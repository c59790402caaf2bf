#include "gpumux/net/process_metrics.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpumux::net {
namespace {

void Metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char line[256];
  std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
                name, value);
  out += line;
}

// Fields 3.. of /proc/self/stat (after the command in parentheses), 0-based from field 3.
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string text;
  std::getline(in, text);  // one line
  const auto close = text.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(text.substr(close + 1));
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double t = 0;
      in >> t;
      return t;
    }
    std::string skip;
    std::getline(in, skip);
  }
  return 0;
}

}  // namespace

std::string ProcessMetricsText(std::string_view component) {
  std::string out;
  out += "# HELP gpumux_build_info Always 1; the labels name the daemon and gpumux's version\n";
  out += "# TYPE gpumux_build_info gauge\n";
  out += "gpumux_build_info{component=\"" + std::string(component) + "\",version=\"" +
         GPUMUX_VERSION + "\"} 1\n";
  const std::vector<std::string> f = StatFields();  // f[0] is field 3 (state)
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (f.size() > 21 && tick > 0) {
    const double cpu = (std::stod(f[11]) + std::stod(f[12])) / tick;  // utime + stime
    Metric(out, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.", cpu);
    Metric(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
           std::stod(f[20]));
    Metric(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           std::stod(f[21]) * page);
    if (const double boot = BootTimeSeconds(); boot > 0) {
      Metric(out, "process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.",
             boot + std::stod(f[19]) / tick);
    }
    Metric(out, "process_threads", "gauge", "Number of OS threads in the process.",
           std::stod(f[17]));
  }
  std::error_code ec;
  std::size_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  if (!ec) {
    Metric(out, "process_open_fds", "gauge", "Number of open file descriptors.",
           static_cast<double>(fds));
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    Metric(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
           static_cast<double>(limit.rlim_cur));
  }
  return out;
}

std::optional<std::uint64_t> ProcessStartTime(std::int64_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[1024];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const std::string_view stat(text, static_cast<std::size_t>(n));
  const std::size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view rest = stat.substr(close + 1);
  for (int field = 3; field <= 22; ++field) {  // field 3 (the state) follows the command
    const std::size_t begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) return std::nullopt;
    rest = rest.substr(begin);
    const std::size_t end = std::min(rest.find(' '), rest.size());
    if (field == 22) {
      std::uint64_t value = 0;
      const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + end, value);
      if (ec != std::errc() || ptr != rest.data() + end) return std::nullopt;
      return value;
    }
    rest = rest.substr(end);
  }
  return std::nullopt;
}

}  // namespace gpumux::net
