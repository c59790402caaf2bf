#!/usr/bin/env bash
# gpumux's end-to-end suite on a real single-node Kubernetes v1.32 (../shared/k8s-rig: real
# kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, containerd, runc).
#   tests/e2e/run.sh [GPUMUX_BINARY] [-- e2e.py options]
# Installs gpumux as a user would, kubectl apply -k on deploy/overlays/monitoring (through an
# overlay with the few rig-specific patches of tests/e2e/README.md: the rig has no service network,
# no token controller and no GPUs), runs every scenario, and checks after each that no GPU's
# grants exceed its capacity.
# Exit: 0 when every scenario passed or when the rig is not built here (it says so); 1 when a
# scenario failed; 2 when the rig could not be started.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RIG=${RIG:-/opt/k8s-rig}
RIG_SCRIPTS=${RIG_SCRIPTS:-$ROOT/../shared/k8s-rig}
BIN=${1:-$ROOT/build/gpumux}
[ "${1:-}" = "" ] || shift
[ "${1:-}" = "--" ] && shift

missing=""
for b in kube-apiserver kube-scheduler kubelet kube-controller-manager; do
  [ -x "$RIG/bin/$b" ] || missing="$missing $b"
done
for t in pause busybox cuda-standin; do [ -f "$RIG/images/$t.tar" ] || missing="$missing images/$t.tar"; done
for c in containerd runc etcd kubectl python3 ctr; do command -v "$c" >/dev/null || missing="$missing $c"; done
if [ ! -d "$RIG_SCRIPTS" ]; then missing="$missing $RIG_SCRIPTS"; fi
if [ -n "$missing" ]; then
  echo "e2e: SKIPPED: the Kubernetes rig is not built on this machine (missing:$missing)."
  echo "e2e: build it once with ../shared/k8s-rig/README.md (build-k8s.sh with BINS including"
  echo "e2e: kube-controller-manager, then build-images.sh), then run 'make e2e'."
  exit 0
fi
if [ "$(id -u)" != 0 ]; then echo "e2e: SKIPPED: the rig needs root (kubelet, containerd)"; exit 0; fi
[ -x "$BIN" ] || { echo "e2e: no gpumux binary at $BIN (run 'make build' first)" >&2; exit 2; }

OUT=${E2E_OUT:-$ROOT/build/e2e}
# A second node left by a run that was cut short is stopped by its pidfiles before they go.
if [ -d "$OUT/node2" ]; then "$HERE/second-node.sh" down "$OUT/node2" gpumux-e2e-node2 >/dev/null 2>&1 || true; fi
rm -rf "$OUT"; mkdir -p "$OUT/images" "$OUT/gpumux-bin"

# Images, built locally (no registry is reachable): gpumux exactly as `make image` writes it
# (scripts/make-image.sh: the binary, the shared libraries it links, busybox for the exec probes;
# docker.io/library/gpumux:latest, the deploy/base manifests' gpumux:latest) and kube-scheduler
# (the rig's v1.32.13 binary, under the name deploy/overlays/default sets, with the rig's
# mkimage.py).
IMAGE=docker.io/library/gpumux:latest sh "$ROOT/scripts/make-image.sh" "$BIN" \
  "$OUT/images/gpumux.tar" > "$OUT/gpumux-image.txt"
python3 "$RIG_SCRIPTS/mkimage.py" --name registry.k8s.io/kube-scheduler:v1.32.0 \
  --out "$OUT/images/kube-scheduler.tar" --file "$(readlink -f "$RIG/bin/kube-scheduler"):usr/local/bin/kube-scheduler" \
  >/dev/null

# The OCI runtime path: containerd's "gpumux" runtime handler runs $GPUMUX_BIN_DIR/gpumux-oci-runtime.
cp "$BIN" "$OUT/gpumux-bin/gpumux"
ln -sf gpumux "$OUT/gpumux-bin/gpumux-oci-runtime"
# kubectl's plugin for `kubectl gpumux` (e2e.py puts this folder first on PATH for it).
ln -sf gpumux "$OUT/gpumux-bin/kubectl-gpumux"
# Four fake GPUs, for the device plugin (fake backend) and for the OCI runtime path.
cat > "$OUT/gpus.csv" <<'EOF'
index,uuid,model,memory_mib
0,GPU-e2e00000-0000-0000-0000-000000000000,NVIDIA A100-SXM4-80GB,81920
1,GPU-e2e00000-0000-0000-0000-000000000001,NVIDIA A100-SXM4-80GB,81920
2,GPU-e2e00000-0000-0000-0000-000000000002,NVIDIA A100-SXM4-80GB,81920
3,GPU-e2e00000-0000-0000-0000-000000000003,NVIDIA A100-SXM4-80GB,81920
EOF

# The OCI runtime path checks each GPU's device node: fake ones (as the rig's README says).
mkdir -p "$OUT/dev"
for i in 0 1 2 3; do mknod "$OUT/dev/nvidia$i" c 195 "$i"; done
mknod "$OUT/dev/nvidiactl" c 195 255

# Enforcement: containerd 1.7 (Debian 13's, unpacked once into the rig's folder) reads the CDI
# specs the device plugin writes, in $RIG/cdi; the CDI hook and the device plugin set and read
# GPU memory limits through the NVML stand-in (tests/gpu/fake_nvml.cc, which this build's tests
# made), whose state file beside it names the four fake GPUs and records every limit it is given.
E2E_ARGS=()
if CTD=$("$HERE/containerd-cdi.sh" "$RIG/debian13-containerd" 2> "$OUT/containerd-cdi.log"); then
  export CONTAINERD_BIN_DIR="$CTD" CDI_SPEC_DIRS="$RIG/cdi"
  rm -rf "$RIG/cdi"
  E2E_ARGS+=(--cdi-dir "$RIG/cdi")
  echo "e2e: containerd $("$CTD/containerd" --version | awk '{print $3}') from Debian 13, CDI specs in $RIG/cdi"
else
  echo "e2e: containerd 1.7 (Debian 13) could not be fetched ($OUT/containerd-cdi.log): the rig runs"
  echo "e2e: Debian 12's containerd 1.6, which has no CDI, and the enforcement scenario SKIPS"
fi
NVML_STANDIN="$(dirname "$BIN")/tests/libgpumux_fake_nvml.so"
if [ -f "$NVML_STANDIN" ]; then
  mkdir -p "$OUT/nvml"
  cp "$NVML_STANDIN" "$OUT/nvml/libgpumux_fake_nvml.so"
  awk -F, 'NR > 1 {printf "gpu=%s|%s|%s|0|%s|0|0||\n", $2, $3, $4, $1}' "$OUT/gpus.csv" \
    > "$OUT/nvml/fake-nvml.state"
  E2E_ARGS+=(--nvml-standin "$OUT/nvml/libgpumux_fake_nvml.so")
else
  echo "e2e: no NVML stand-in at $NVML_STANDIN (build the tests: make test): the enforcement scenario SKIPS"
fi

echo "e2e: starting the rig (wiped) ..."
export GPUMUX_BIN_DIR="$OUT/gpumux-bin" GPUMUX_GPUS_FILE="$OUT/gpus.csv" GPUMUX_DEV_DIR="$OUT/dev"
if ! "$RIG_SCRIPTS/up.sh" --wipe --controller-manager > "$OUT/rig-up.log" 2>&1; then
  echo "e2e: the rig did not start; see $OUT/rig-up.log" >&2
  tail -20 "$OUT/rig-up.log" >&2
  exit 2
fi
for img in "$OUT"/images/*.tar; do
  ctr -a "$RIG/run/containerd/containerd.sock" -n k8s.io images import "$img" >/dev/null
done

set +e
python3 "$HERE/e2e.py" --root "$ROOT" --rig "$RIG" --rig-scripts "$RIG_SCRIPTS" --out "$OUT" \
  ${E2E_ARGS[@]+"${E2E_ARGS[@]}"} "$@"
rc=$?
set -e
# The two-node scenario stops its second node itself; this is for a run cut short.
if [ -d "$OUT/node2" ]; then
  "$HERE/second-node.sh" down "$OUT/node2" gpumux-e2e-node2 >/dev/null 2>&1 ||
    echo "e2e: stopping the second node failed; see $OUT/node2.logs" >&2
fi
if [ "${E2E_KEEP:-0}" != 1 ]; then "$RIG_SCRIPTS/down.sh" > "$OUT/rig-down.log" 2>&1 || true; fi
exit $rc
