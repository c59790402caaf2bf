#!/bin/sh
# The gpumux image, runtime only, as an OCI archive, without Docker (`make image` runs this).
#   scripts/make-image.sh [BINARY] [OUT]     (defaults: build/gpumux, build/gpumux-image.tar)
# IMAGE names it (default docker.io/library/gpumux:latest, which is what deploy/base's
# `gpumux:latest` means to the kubelet); BUSYBOX is the busybox to put in (default /bin/busybox,
# Debian's busybox-static). The image holds, and nothing else:
#   /usr/local/bin/gpumux   BINARY, the entrypoint (the daemons run `gpumux extender ...` etc.)
#   the shared libraries    every one `ldd` lists for BINARY (and for busybox if it is not static),
#                           at the path ldd gives, with the content of the file it resolves to
#   /bin/busybox            the manifests' exec probes run its wget, the strict-isolation
#                           overlay's init container its sh
#   /etc/passwd, /etc/group root, gpumux (65532, the extender's runAsUser) and nobody
#   /tmp, /proc, /sys, /dev empty folders
# Prints the archive, the image's digest (the manifest's: the digest a registry shows after
# `skopeo copy`) and the sizes. The same binary and libraries give the same digest
# (scripts/mkimage.py writes every entry with mtime 0 and owner root).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/build/gpumux}
OUT=${2:-$ROOT/build/gpumux-image.tar}
IMAGE=${IMAGE:-docker.io/library/gpumux:latest}
BUSYBOX=${BUSYBOX:-/bin/busybox}
PYTHON=${PYTHON:-python3}

if [ ! -f "$BIN" ] || [ ! -x "$BIN" ]; then
  echo "make-image: no gpumux binary at $BIN (make build)" >&2
  exit 2
fi
if [ ! -f "$BUSYBOX" ]; then
  echo "make-image: no busybox at $BUSYBOX (apt-get install busybox-static, or set BUSYBOX)" >&2
  exit 2
fi
case "${ARCH:-$(uname -m)}" in
  x86_64|amd64) ARCH=amd64 ;;
  aarch64|arm64) ARCH=arm64 ;;
  *) ARCH=${ARCH:-$(uname -m)} ;;
esac

# The absolute paths of the libraries FILE loads (ld.so included); none for a static binary.
libs_of() {
  if ! out=$(ldd "$1" 2>&1); then
    case "$out" in
      *"not a dynamic executable"*) return 0 ;;
      *) echo "make-image: ldd $1: $out" >&2; return 1 ;;
    esac
  fi
  if printf '%s\n' "$out" | grep -q 'not found'; then
    echo "make-image: $1 needs libraries that are not on this machine:" >&2
    printf '%s\n' "$out" | grep 'not found' >&2
    return 1
  fi
  printf '%s\n' "$out" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
}
bin_libs=$(libs_of "$BIN")
busybox_libs=$(libs_of "$BUSYBOX")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'gpumux:x:65532:65532:gpumux:/nonexistent:/sbin/nologin' \
  'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' > "$tmp/passwd"
printf '%s\n' 'root:x:0:' 'gpumux:x:65532:' 'nogroup:x:65534:' > "$tmp/group"

set -- --name "$IMAGE" --out "$OUT" --arch "$ARCH" --entrypoint /usr/local/bin/gpumux \
  --file "$BIN:/usr/local/bin/gpumux" --file "$BUSYBOX:/bin/busybox" \
  --file "$tmp/passwd:/etc/passwd" --file "$tmp/group:/etc/group" \
  --dir /tmp:1777 --dir /proc:555 --dir /sys:555 --dir /dev
for lib in $(printf '%s\n%s\n' "$bin_libs" "$busybox_libs" | sort -u); do
  set -- "$@" --file "$lib:$lib"
done
"$PYTHON" "$ROOT/scripts/mkimage.py" "$@"
