#include "tests/testing/runc_bundle.h"

#include <unistd.h>

#include <fstream>

#include "tests/testing/fake_gpu_host.h"
#include "tests/testing/process.h"

namespace gpumux::test {
namespace {

namespace fs = std::filesystem;

std::string MakeBundleFrom(const nlohmann::json& spec, const fs::path& bundle,
                           const fs::path& busybox, const std::vector<std::string>& args,
                           const std::vector<std::string>& env);

struct Probe {
  std::string reason;
  nlohmann::json spec;
};

Probe RunProbe() {
  Probe p;
  if (!IsRoot()) {
    p.reason = "not root: runc needs root to run containers here";
    return p;
  }
  std::error_code ec;
  if (!fs::exists(kBusybox, ec)) {
    p.reason = std::string(kBusybox) + " is missing (install busybox-static)";
    return p;
  }
  std::string dir_template = (fs::temp_directory_path() / "gpumux-runc-probe-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) {
    p.reason = "cannot make a temporary folder for the runc probe";
    return p;
  }
  const fs::path dir = dir_template;
  const fs::path bundle = dir / "bundle";
  fs::create_directories(bundle, ec);
  const Captured spec =
      RunCaptured({.argv = {"runc", "spec"}, .cwd = bundle.string()}, dir, "spec");
  if (!spec.exit.Exited(0)) {
    p.reason = "`runc spec` failed (" + spec.err + "): is runc installed?";
    fs::remove_all(dir, ec);
    return p;
  }
  try {
    p.spec = nlohmann::json::parse(ReadFileText(bundle / "config.json"));
  } catch (const nlohmann::json::exception& e) {
    p.reason = std::string("`runc spec` wrote an unreadable config.json: ") + e.what();
    fs::remove_all(dir, ec);
    return p;
  }
  const std::string id = "gpumux-probe-" + std::to_string(::getpid());
  const std::string root = (dir / "runc-root").string();
  std::string made = MakeBundleFrom(p.spec, bundle, kBusybox, {"sh", "-c", "echo probe-ok"}, {});
  if (made.empty()) {
    const Captured run = RunCaptured(
        {.argv = {"runc", "--root", root, "run", "-b", bundle.string(), id}}, dir, "run");
    if (!run.exit.Exited(0) || run.out.find("probe-ok") == std::string::npos) {
      made = "runc cannot run a busybox container here: `runc run` gave exit " +
             std::to_string(run.exit.code) + ", stdout '" + run.out + "', stderr '" + run.err + "'";
    }
    RunProcess({.argv = {"runc", "--root", root, "delete", "--force", id}});
  }
  p.reason = made;
  fs::remove_all(dir, ec);
  return p;
}

const Probe& TheProbe() {
  static const Probe probe = RunProbe();
  return probe;
}

std::string MakeBundleFrom(const nlohmann::json& spec, const fs::path& bundle,
                           const fs::path& busybox, const std::vector<std::string>& args,
                           const std::vector<std::string>& env) {
  std::error_code ec;
  const fs::path bin = bundle / "rootfs" / "bin";
  fs::create_directories(bin, ec);
  if (ec) return bin.string() + ": " + ec.message();
  if (!fs::exists(bin / "busybox")) {
    fs::create_hard_link(busybox, bin / "busybox", ec);
    if (ec) {
      ec.clear();
      fs::copy_file(busybox, bin / "busybox", ec);
      if (ec) return "copy " + busybox.string() + ": " + ec.message();
    }
  }
  for (const char* applet : {"sh", "ls", "cat", "echo", "sleep", "env"}) {
    if (fs::is_symlink(bin / applet)) continue;
    fs::create_symlink("busybox", bin / applet, ec);
    if (ec) return (bin / applet).string() + ": " + ec.message();
  }
  if (!spec.is_object()) return "no runc spec template (runc is unavailable here)";
  nlohmann::json config = spec;
  config["process"]["terminal"] = false;
  config["process"]["args"] = args;
  for (const std::string& e : env) config["process"]["env"].push_back(e);
  std::ofstream out(bundle / "config.json", std::ios::trunc);
  out << config.dump(2) << "\n";
  if (!out) return (bundle / "config.json").string() + ": cannot write";
  return "";
}

}  // namespace

const std::string& RuncUnavailableReason() { return TheProbe().reason; }

const nlohmann::json& RuncSpecTemplate() { return TheProbe().spec; }

std::string MakeBusyboxBundle(const fs::path& bundle, const fs::path& busybox,
                              const std::vector<std::string>& args,
                              const std::vector<std::string>& env) {
  return MakeBundleFrom(RuncSpecTemplate(), bundle, busybox, args, env);
}

}  // namespace gpumux::test
