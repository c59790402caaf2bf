// Fuzz target: a kubeconfig (YAML), as `--kubeconfig` and $KUBECONFIG name it. Input: the file's
// text, read with the current context and with a named one. Files the kubeconfig refers to
// (certificate-authority, client-certificate, token-file) resolve against the scratch folder,
// which holds nothing else.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_support.h"
#include "gpumux/kube/api_client.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpumux;
  const std::string path = fuzz::WriteScratch("kubeconfig/config", fuzz::AsText(data, size));
  (void)kube::LoadKubeconfig(path);
  (void)kube::LoadKubeconfig(path, "ctx");
  return 0;
}
