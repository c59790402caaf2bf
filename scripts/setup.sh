#!/bin/sh
# Installs everything gpumux needs to build and test, from Debian 12 packages.
# Idempotent: does nothing when every package is already installed.
#   scripts/setup.sh          install what is missing (uses sudo when not root)
#   scripts/setup.sh --demo   only what building gpumux needs (make demo), not the test tools
#   scripts/setup.sh --check  exit 1 and list what is missing, install nothing
set -eu

# What building gpumux needs (make demo builds only this: no tests, no benchmarks).
BUILD_PACKAGES="build-essential cmake ninja-build pkg-config git ccache \
  nlohmann-json3-dev libcli11-dev libexpected-dev \
  libcurl4-openssl-dev libssl-dev openssl libcpp-httplib-dev prometheus-cpp-dev libyaml-cpp-dev \
  libsimdjson-dev libspdlog-dev libboost-dev libglpk-dev \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler"
# What the tests, benchmarks and checks need on top (make test): test and benchmark libraries,
# real peers (runc, etcd, PyTorch training jobs, kubectl), the sanitizer and formatting tools.
TEST_PACKAGES="time libgtest-dev libgmock-dev libbenchmark-dev \
  runc busybox-static python3 python3-yaml python3-kubernetes etcd-server python3-torch \
  python3-pip python3-setuptools kubernetes-client \
  clang clang-format libclang-rt-14-dev llvm-14"

QUIET=0
CHECK=0
PACKAGES="$BUILD_PACKAGES $TEST_PACKAGES"
for arg in "$@"; do
  case "$arg" in
    --quiet) QUIET=1 ;;
    --check) CHECK=1 ;;
    --demo) PACKAGES="$BUILD_PACKAGES" ;;
    *) echo "setup: unknown option $arg (--demo, --check, --quiet)" >&2; exit 2 ;;
  esac
done

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done

if [ -z "$missing" ]; then
  [ "$QUIET" = 1 ] || echo "setup: all build dependencies are installed"
  exit 0
fi
if [ "$CHECK" = 1 ]; then
  echo "setup: missing packages:$missing" >&2
  exit 1
fi

echo "setup: installing:$missing"
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: need root (or sudo) to install:$missing" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive
# Debian's kubernetes-client (kubectl 1.20 with kustomize v2.0.3) renders deploy/'s overlays in
# the tests. Where another package already owns /usr/bin/kubectl (Google's apt repository ships
# one as package "kubectl"), Debian's goes to /usr/bin/kubectl.debian instead of failing to
# install or replacing it; the tests use both (tests/CMakeLists.txt, deploy.CheckManifests.*).
case " $missing " in
  *" kubernetes-client "*)
    owner=$(dpkg-query -S /usr/bin/kubectl 2>/dev/null | grep -v '^diversion' | cut -d: -f1 || true)
    if [ -n "$owner" ] && [ -z "$(dpkg-divert --listpackage /usr/bin/kubectl)" ]; then
      $SUDO dpkg-divert --package "$owner" --no-rename --divert /usr/bin/kubectl.debian \
        --add /usr/bin/kubectl
    fi
    ;;
esac
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
echo "setup: done"
