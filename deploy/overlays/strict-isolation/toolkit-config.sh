#!/bin/sh
# Sets the NVIDIA container toolkit of this node to take a container's GPUs from volume mounts
# only (the strict-isolation overlay runs it as the device plugin's init container, with the
# host's /etc/nvidia-container-runtime mounted):
#   accept-nvidia-visible-devices-envvar-when-unprivileged = false
#   accept-nvidia-visible-devices-as-volume-mounts = true
# The two keys are written at the top of config.toml (top-level keys precede its [sections]),
# replacing any line that set them or left them commented out; everything else is kept. The
# first run keeps the original as config.toml.before-gpumux. Idempotent; the file is replaced
# atomically. The toolkit reads the file at every container start: nothing to restart.
#   toolkit-config.sh [CONFIG]   (default /host/etc/nvidia-container-runtime/config.toml)
set -eu
f=${1:-/host/etc/nvidia-container-runtime/config.toml}
if [ ! -f "$f" ]; then
  echo "gpumux: $f not found: is NVIDIA's container toolkit installed on this node? The" \
       "strict-isolation overlay needs it (deploy/README.md, \"Isolation\")" >&2
  exit 1
fi
[ -e "$f.before-gpumux" ] || cp "$f" "$f.before-gpumux"
tmp="$f.gpumux.$$"
printf '%s\n' "accept-nvidia-visible-devices-envvar-when-unprivileged = false" \
  "accept-nvidia-visible-devices-as-volume-mounts = true" > "$tmp"
# grep exits 1 when it keeps no line (a file of only these keys), 2 when it cannot read: then
# the config is left as it is.
status=0
grep -v -E '^[[:space:]]*#?[[:space:]]*accept-nvidia-visible-devices-(envvar-when-unprivileged|as-volume-mounts)[[:space:]]*=' "$f" >> "$tmp" || status=$?
if [ "$status" -gt 1 ]; then
  rm -f "$tmp"
  echo "gpumux: cannot read $f; left as it is" >&2
  exit 1
fi
mv "$tmp" "$f"
echo "gpumux: $f: device lists from volume mounts only (the env of unprivileged containers is ignored)"
