// Fuzz target: what a container runtime hands gpumux on a node: the OCI state (the hook's
// stdin), the bundle's config.json, and the reservation ledger left by earlier containers.
// Input: one byte choosing the path, then state JSON, "--8<--", config.json, "--8<--",
// reservations.json (an empty part: no such file).
//   even: `gpumux hook createRuntime` (RunHook) with the state on stdin
//   odd:  `gpumux oci-runtime create --bundle B c1` (RunOciRuntime), whose runtime does not
//         exist, so that it grants, edits config.json, fails to exec and releases
// The host has two GPUs (a GPU file); the state's pid is replaced by one that does not exist and
// its bundle by the scratch bundle, so that no device node is ever created on this machine (the
// raw state still goes through ParseState).
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "gpumux/hook/oci.h"
#include "src/cli/commands.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  if (size < 1) return 0;
  static const cli::HostOptions host = [] {
    ::setenv("GPUMUX_RUNTIME", "/nonexistent/gpumux-fuzz-runtime", 1);
    ::setenv("GPUMUX_DEVICE_PLUGIN_DIR", (fuzz::ScratchDir() + "/no-device-plugin").c_str(), 1);
    cli::HostOptions o;
    o.state_dir = fuzz::ScratchDir() + "/state";
    o.dev_dir = fuzz::ScratchDir() + "/dev";
    o.gpus_file = fuzz::WriteScratch("gpus.csv",
                                     "index,uuid,model,memory_mib,device\n"
                                     "0,GPU-a,T4,15360,/dev/null\n"
                                     "1,GPU-b,T4,15360,/dev/zero\n");
    ::mkdir(o.dev_dir.c_str(), 0755);
    return o;
  }();
  static const std::int64_t kNoSuchPid = [] {
    struct stat st {};
    return ::stat("/proc/4000000", &st) == 0 ? std::int64_t{0} : std::int64_t{4000000};
  }();
  const std::vector<std::string> parts = fuzz::SplitParts(fuzz::AsText(data + 1, size - 1), 3);
  fuzz::RemoveScratch("state");
  fuzz::RemoveScratch("bundle");
  ::mkdir(host.state_dir.c_str(), 0755);
  const std::string bundle = fuzz::ScratchDir() + "/bundle";
  fuzz::WriteScratch("bundle/config.json", parts[1]);
  if (!parts[2].empty()) fuzz::WriteScratch("state/reservations.json", parts[2]);

  std::ostringstream out, err;
  if (data[0] % 2 == 0) {
    std::istringstream raw(parts[0]);
    (void)hook::ParseState(raw);
    nlohmann::json state = nlohmann::json::parse(parts[0], nullptr, false);
    if (!state.is_object()) state = nlohmann::json::object();
    if (state.contains("pid")) state["pid"] = kNoSuchPid;
    state["bundle"] = bundle;
    std::istringstream in(state.dump());
    (void)cli::RunHook(host, "createRuntime", in, out, err);
  } else {
    (void)cli::RunOciRuntime(host, {"create", "--bundle", bundle, "c1"}, err);
  }
  return 0;
}
