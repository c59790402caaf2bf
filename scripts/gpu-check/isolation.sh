#!/usr/bin/env bash
# Does a grant hold on a real GPU? Run only on a machine with an NVIDIA GPU (never in CI: the
# tests use stand-ins), as root, in a few minutes:
#   scripts/gpu-check/isolation.sh [GPUMUX_BINARY] [OUT_DIR]      (defaults: build/gpumux, gpu-check)
# On GPU 0, under each backend this machine's driver supports, two CUDA processes share the GPU,
# each granted GRANT_MIB (4096) MiB: tenant A asks for twice its grant, tenant B holds half of its
# own meanwhile. Enforced means A gets out-of-memory at about its grant while B keeps running.
# Under MPS the compute split is measured too: A at 25 % and B at 75 % of the threads spin the same
# kernel side by side for SPIN_S (10) s, against each alone.
#   none                 no limit at all (the baseline: A gets what it asks)
#   mps-v2               a private MPS control daemon (nvidia-cuda-mps-control -d), the server's
#                        limit at the grant, each client's own limits in its environment
#   MPS namespaces       (driver r615+, `-p 3 -h` lists namespace) a namespace per tenant
#   memory-partitioning  (driver r615+, cgroup v2 at /sys/fs/cgroup, GPU not in MIG mode) a cgroup
#                        per tenant whose hard limit `gpumux enforce createRuntime` sets, as the
#                        CDI hook does
#   hami-core            (/usr/local/vgpu/libvgpu.so installed) preloaded with HAMi's variables
# It starts and stops its own MPS daemons (pipe and log folders under OUT_DIR) and changes neither
# the GPU's MIG mode nor its compute mode (it checks, before and after). Writes OUT_DIR/results.md
# and prints it. Exit 0 when it ran (whatever it found), 2 when there is no GPU or no compiler.
set -u
GPUMUX=$(readlink -f "${1:-build/gpumux}")
OUT=$(mkdir -p "${2:-gpu-check}" && cd "${2:-gpu-check}" && pwd)
GRANT_MIB=${GRANT_MIB:-4096}
SPIN_S=${SPIN_S:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi: no NVIDIA GPU here" >&2; exit 2; }
CC=$(command -v cc || command -v gcc || command -v clang) || { echo "gpu-check: no C compiler" >&2; exit 2; }
"$CC" -O2 -o "$OUT/cuda_probe" "$HERE/cuda_probe.c" -ldl || exit 2
PROBE="$OUT/cuda_probe"

q() { nvidia-smi -i 0 --query-gpu="$1" --format=csv,noheader,nounits | head -1 | sed 's/^ *//'; }
UUID=$(q uuid); DRIVER=$(q driver_version); MIG_BEFORE=$(q mig.mode.current)
COMPUTE_BEFORE=$(q compute_mode); TOTAL=$(q memory.total); NAME=$(q name)
BRANCH=${DRIVER%%.*}
CGROUP_FS=$(stat -fc %T /sys/fs/cgroup 2>/dev/null || echo unknown)
echo "gpu-check: $NAME ($UUID), driver $DRIVER, $TOTAL MiB, MIG $MIG_BEFORE, compute mode $COMPUTE_BEFORE, /sys/fs/cgroup is $CGROUP_FS"
ROWS=()
row() { ROWS+=("| $1 | $2 | $3 | $4 |"); echo "gpu-check: $1: A: $2; B: $3; compute: $4"; }

# A (asks 2 x grant) and B (holds grant / 2 for the time A runs), each with the environment and
# wrapper given; "<A's result>" and "<B's result>" as the probe prints them.
pair() {
  local envA="$1" envB="$2" wrapA="${3:-}" wrapB="${4:-}"
  env $envB $wrapB "$PROBE" alloc $((GRANT_MIB / 2)) 8 > "$OUT/b.out" 2>&1 &
  local b=$!
  sleep 2
  env $envA $wrapA "$PROBE" alloc $((GRANT_MIB * 2)) > "$OUT/a.out" 2>&1
  local alive=no
  kill -0 "$b" 2>/dev/null && alive=yes
  wait "$b"
  A="$(tr '\n' ' ' < "$OUT/a.out")"
  B="$(tr '\n' ' ' < "$OUT/b.out") (running while A allocated: $alive)"
}

# Kernels in SPIN_S s: each alone, then side by side.
split() {
  local envA="$1" envB="$2"
  local aa bb a b
  aa=$(env $envA "$PROBE" spin "$SPIN_S" | awk '/kernels/{print $2}')
  bb=$(env $envB "$PROBE" spin "$SPIN_S" | awk '/kernels/{print $2}')
  env $envA "$PROBE" spin "$SPIN_S" > "$OUT/sa.out" &
  env $envB "$PROBE" spin "$SPIN_S" > "$OUT/sb.out"
  wait
  a=$(awk '/kernels/{print $2}' "$OUT/sa.out"); b=$(awk '/kernels/{print $2}' "$OUT/sb.out")
  SPLIT="alone A $aa, B $bb kernels; together A $a, B $b (A's share $(awk -v a="$a" -v b="$b" 'BEGIN{if (a+b>0) printf "%.0f %%", 100*a/(a+b); else print "-"}'))"
}

# --- none ---------------------------------------------------------------------------------------
pair "" ""
row none "$A" "$B" "-"

# --- legacy MPS ---------------------------------------------------------------------------------
if command -v nvidia-cuda-mps-control >/dev/null; then
  P="$OUT/mps-v2/pipe"; L="$OUT/mps-v2/log"; mkdir -p "$P" "$L"
  M="CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L"
  env $M CUDA_VISIBLE_DEVICES="$UUID" nvidia-cuda-mps-control -d
  echo "set_default_device_pinned_mem_limit 0 ${GRANT_MIB}M" | env $M nvidia-cuda-mps-control
  pair "$M CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=${GRANT_MIB}M" "$M CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=${GRANT_MIB}M"
  A2="$A"; B2="$B"
  # A tenant that clears its environment: held to the server's limit only.
  pair "$M" "$M CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=${GRANT_MIB}M"
  split "$M CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" "$M CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75"
  row mps-v2 "$A2" "$B2" "$SPLIT"
  row "mps-v2, A clears its environment" "$A" "$B" "-"
  echo quit | env $M nvidia-cuda-mps-control
  sleep 1
  # --- MPS v3 namespaces ----------------------------------------------------------------------
  if nvidia-cuda-mps-control -p 3 -h 2>&1 | grep -q namespace; then
    P="$OUT/mps-v3/pipe"; L="$OUT/mps-v3/log"; mkdir -p "$P" "$L"
    M="CUDA_MPS_PIPE_DIRECTORY=$P CUDA_MPS_LOG_DIRECTORY=$L"
    env $M CUDA_VISIBLE_DEVICES="$UUID" nvidia-cuda-mps-control -d -p 3
    c3() { env $M nvidia-cuda-mps-control -p 3 "$@"; }
    c3 server create check
    c3 namespace create a --server=check
    c3 namespace create b --server=check
    c3 namespace set a --server=check --pinned-memory-limit=${GRANT_MIB}M --active-thread-percentage=25
    c3 namespace set b --server=check --pinned-memory-limit=${GRANT_MIB}M --active-thread-percentage=75
    pair "CUDA_MPS_PIPE_DIRECTORY=$P/check/a" "CUDA_MPS_PIPE_DIRECTORY=$P/check/b"
    split "CUDA_MPS_PIPE_DIRECTORY=$P/check/a" "CUDA_MPS_PIPE_DIRECTORY=$P/check/b"
    row "MPS namespaces (v3)" "$A" "$B" "$SPLIT"
    env $M nvidia-cuda-mps-control -q 2>/dev/null || echo quit | env $M nvidia-cuda-mps-control
  else
    row "MPS namespaces (v3)" "not available (nvidia-cuda-mps-control -p 3 -h lists no namespace module)" "-" "-"
  fi
else
  row mps-v2 "not available (no nvidia-cuda-mps-control)" "-" "-"
fi

# --- memory partitioning ------------------------------------------------------------------------
why=""
[ "$BRANCH" -ge 615 ] 2>/dev/null || why="driver $DRIVER is before r615"
[ -z "$why" ] && [ "$CGROUP_FS" != cgroup2fs ] && why="/sys/fs/cgroup is $CGROUP_FS, not cgroup v2"
[ -z "$why" ] && [ "$MIG_BEFORE" = Enabled ] && why="the GPU is in MIG mode"
[ -z "$why" ] && [ ! -x "$GPUMUX" ] && why="no gpumux binary at $GPUMUX"
if [ -z "$why" ]; then
  CG=/sys/fs/cgroup/gpumux-check-$$
  mkdir -p "$CG-a" "$CG-b"
  # A process in each cgroup, waiting; its limit set by gpumux's CDI hook as a runtime would.
  start_in() {  # cgroup -> pid of a shell waiting on its fifo, then exec'ing the probe
    local cg=$1; shift
    rm -f "$cg.fifo"; mkfifo "$cg.fifo"
    sh -c 'echo $$ > "$0/cgroup.procs"; read go < "$0.fifo"; exec "$@"' "$cg" "$@" > "$cg.out" 2>&1 &
    echo $!
  }
  limit() {  # pid tenant
    echo "{\"ociVersion\":\"1.0.2\",\"id\":\"gpu-check-$2\",\"pid\":$1,\"bundle\":\"/\"}" |
      "$GPUMUX" enforce createRuntime --state-dir "$OUT/state" --gpu "$UUID=$GRANT_MIB" \
        --pod gpu-check/tenant-$2 --pod-uid check-$2 --container main
  }
  pb=$(start_in "$CG-b" "$PROBE" alloc $((GRANT_MIB / 2)) 8)
  pa=$(start_in "$CG-a" "$PROBE" alloc $((GRANT_MIB * 2)))
  sleep 0.5
  if limit "$pb" b && limit "$pa" a; then
    echo go > "$CG-b.fifo"; sleep 2; echo go > "$CG-a.fifo"
    wait "$pa"; alive=no; kill -0 "$pb" 2>/dev/null && alive=yes; wait "$pb"
    row memory-partitioning "$(tr '\n' ' ' < "$CG-a.out")" \
      "$(tr '\n' ' ' < "$CG-b.out") (running while A allocated: $alive)" "-"
  else
    echo go > "$CG-b.fifo"; echo go > "$CG-a.fifo"; wait
    row memory-partitioning "the hook could not set the limit: $(tail -1 "$OUT/state/enforce.log" 2>/dev/null)" "-" "-"
  fi
  # A cleared limit: what NVML reads back (kNoHardLimit in gpu/memory_limits.h is assumed UINT64_MAX).
  mkdir -p "$CG-c"
  sh -c 'echo $$ > "$0/cgroup.procs"; exec sleep 5' "$CG-c" & pc=$!
  sleep 0.3
  limit "$pc" c >/dev/null 2>&1
  echo "{\"ociVersion\":\"1.0.2\",\"id\":\"gpu-check-c\",\"pid\":0,\"bundle\":\"/\"}" |
    "$GPUMUX" enforce poststop --state-dir "$OUT/state"
  CLEARED=$(nvidia-smi memory-limits --get -n "$CG-c" -i 0 2>&1 | tr '\n' ' ')
  row "memory-partitioning, a cleared limit reads back as" "$CLEARED" "-" "-"
  wait "$pc" 2>/dev/null
  "$GPUMUX" enforce reconcile --state-dir "$OUT/state" >/dev/null 2>&1
  rmdir "$CG-a" "$CG-b" "$CG-c" 2>/dev/null
  rm -f "$CG-a.fifo" "$CG-b.fifo" "$CG-a.out" "$CG-b.out"
else
  row memory-partitioning "not available: $why" "-" "-"
fi

# --- HAMi-core ----------------------------------------------------------------------------------
if [ -f /usr/local/vgpu/libvgpu.so ]; then
  H="LD_PRELOAD=/usr/local/vgpu/libvgpu.so CUDA_DEVICE_MEMORY_LIMIT_0=${GRANT_MIB}m CUDA_DEVICE_MEMORY_SHARED_CACHE=$OUT/vgpu.cache"
  pair "$H" "$H"
  row hami-core "$A" "$B" "-"
else
  row hami-core "not available (no /usr/local/vgpu/libvgpu.so)" "-" "-"
fi

MIG_AFTER=$(q mig.mode.current); COMPUTE_AFTER=$(q compute_mode)
{
  echo "# GPU isolation check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "$NAME ($UUID), driver $DRIVER, $TOTAL MiB; /sys/fs/cgroup: $CGROUP_FS; grant $GRANT_MIB MiB each."
  echo "MIG mode $MIG_BEFORE -> $MIG_AFTER, compute mode $COMPUTE_BEFORE -> $COMPUTE_AFTER (unchanged: $([ "$MIG_BEFORE/$COMPUTE_BEFORE" = "$MIG_AFTER/$COMPUTE_AFTER" ] && echo yes || echo NO))."
  echo
  echo "| backend | tenant A asks $((GRANT_MIB * 2)) MiB | tenant B holds $((GRANT_MIB / 2)) MiB | compute split (A 25 %, B 75 %) |"
  echo "|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} > "$OUT/results.md"
cat "$OUT/results.md"
