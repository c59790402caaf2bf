#!/bin/sh
# deploy/overlays/strict-isolation/toolkit-config.sh on a copy of the toolkit's shipped
# config.toml, with busybox's sh as in the gpumux image: the two keys set at the top level, the
# commented defaults gone, every section kept, idempotent, a missing file an error.
set -eu
script="$1/deploy/overlays/strict-isolation/toolkit-config.sh"
sh=${BUSYBOX:-busybox}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
f="$dir/config.toml"
cat > "$f" <<'TOML'
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig.real"

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
TOML
original=$(cat "$f")
$sh sh "$script" "$f" > /dev/null
first=$(cat "$f")
$sh sh "$script" "$f" > /dev/null
[ "$(cat "$f")" = "$first" ] || { echo "FAIL: a second run changed the file"; exit 1; }
[ "$(head -2 "$f")" = "accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true" ] || { echo "FAIL: the keys are not first:"; cat "$f"; exit 1; }
[ "$(grep -c 'accept-nvidia-visible-devices' "$f")" = 2 ] || { echo "FAIL: old key lines kept"; cat "$f"; exit 1; }
for line in 'disable-require = false' '[nvidia-container-cli]' 'ldconfig = "@/sbin/ldconfig.real"' \
            '[nvidia-container-runtime]' 'mode = "auto"'; do
  grep -qxF "$line" "$f" || { echo "FAIL: lost: $line"; exit 1; }
done
[ "$(cat "$f.before-gpumux")" = "$original" ] || { echo "FAIL: no copy of the original"; exit 1; }
if $sh sh "$script" "$dir/missing.toml" 2> "$dir/err"; then echo "FAIL: a missing file passed"; exit 1; fi
grep -q "is NVIDIA's container toolkit installed" "$dir/err" || { echo "FAIL: no reason given"; exit 1; }
echo "PASS toolkit-config.sh"
