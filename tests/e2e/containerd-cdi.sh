#!/usr/bin/env bash
# containerd 1.7 for the rig, so that the container runtime reads CDI specs (Debian 12's
# containerd 1.6 has no CDI; the enforcement scenario needs the CDI hook the device plugin
# writes). Debian 13's package, downloaded with apt into a scratch folder and unpacked into DIR
# (nothing is installed; the system's apt state is not changed), once per machine:
#   tests/e2e/containerd-cdi.sh DIR      prints DIR/usr/bin, the rig's CONTAINERD_BIN_DIR
# Exit 1 (with apt's or dpkg's words on stderr) when the package cannot be had.
set -euo pipefail
DIR=${1:?usage: containerd-cdi.sh DIR}
if [ -x "$DIR/usr/bin/containerd" ] && [ -x "$DIR/usr/bin/containerd-shim-runc-v2" ]; then
  echo "$DIR/usr/bin"; exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/lists/partial" "$T/cache/archives/partial" "$T/debs"
# The machine's own Debian mirror (as ../shared/k8s-rig/README.md does for Go 1.24).
U=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
echo "deb ${U:-http://deb.debian.org/debian} trixie main" > "$T/sources.list"
O=(-o "Dir::Etc::sourcelist=$T/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$T/lists"
   -o "Dir::Cache=$T/cache" -o APT::Sandbox::User=root)
apt-get "${O[@]}" update >&2
(cd "$T/debs" && apt-get "${O[@]}" download containerd >&2)
rm -rf "$DIR.tmp"; mkdir -p "$DIR.tmp"
dpkg -x "$T"/debs/containerd_*.deb "$DIR.tmp"
"$DIR.tmp/usr/bin/containerd" --version >&2
rm -rf "$DIR"; mv "$DIR.tmp" "$DIR"
echo "$DIR/usr/bin"
