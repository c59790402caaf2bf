# Sourced by check_readme.py before each command of the README's OCI-runtime transcript: a fake
# 4-GPU host under gpumux-try/oci (a GPU file whose device nodes are /dev/null; the real runtime
# is `true`), and `gpumux-oci-runtime` on PATH as `cmake --install` puts it.
T=$PWD/gpumux-try/oci
export GPUMUX_STATE_DIR=$T/state GPUMUX_DEV_DIR=$T/dev GPUMUX_GPUS_FILE=$T/gpus.csv
export GPUMUX_RUNTIME=/bin/true
export PATH=$T/bin:$PATH
if [ ! -d "$T" ]; then
  mkdir -p "$T/state" "$T/dev" "$T/bin"
  printf 'index,uuid,model,memory_mib,device\n' > "$T/gpus.csv"
  for i in 0 1 2 3; do
    printf '%s,GPU-%s0000000-0000-0000-0000-000000000000,NVIDIA A100-SXM4-40GB,40960,/dev/null\n' \
      "$i" "$i" >> "$T/gpus.csv"
  done
  ln -s "$(readlink -f build/gpumux)" "$T/bin/gpumux-oci-runtime"
  for b in a b; do
    mkdir -p "$T/bundle-$b"
    printf '{"ociVersion":"1.0.2","process":{"env":["HOUDINI_GPU_REQUESTED=3"],"args":["sh"]},"root":{"path":"rootfs"}}\n' \
      > "$T/bundle-$b/config.json"
  done
  ln -s "$T/bundle-b" bundle-b 2>/dev/null || true
  # train-a is created, and its createRuntime hook runs with a live process (pid 1 stands in).
  gpumux-oci-runtime create -b "$T/bundle-a" train-a 2>/dev/null
  printf '{"ociVersion":"1.0.2","id":"train-a","status":"created","pid":1,"bundle":"%s"}' "$T/bundle-a" \
    | gpumux hook createRuntime 2>/dev/null
fi
