#!/bin/sh
# Runs every fuzz target (or the ones named) for a bounded time and prints one line per target:
# executions, coverage, corpus size and the verdict. Exit 1 when any target found a crash, a
# leak, a sanitizer report, a timeout or an out-of-memory; the input that did it is kept in
# <build>/fuzz-artifacts/<target>/ with the reproducing command printed.
#   fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]
# New inputs that reach new coverage go to <build>/fuzz-corpus/<target>/ (not checked in; see
# fuzz/README.md for adding one to fuzz/corpus/).
set -u
BUILD=${1:?usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]}
SECONDS_EACH=${2:?usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGETS=${*:-$(ls "$ROOT/fuzz/corpus")}
# Symbolized reports; leaks are findings; a finding stops the target at once.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Targets write their inputs to files: on tmpfs, the ledger's fsyncs cost nothing.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=${FUZZ_TMPDIR:-/dev/shm}
command -v llvm-symbolizer >/dev/null 2>&1 || export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer-14
failed=0
printf '%-18s %10s %8s %8s %7s  %s\n' target execs exec/s cov corpus verdict
for t in $TARGETS; do
  bin="$BUILD/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then echo "fuzz: $bin is missing (build with 'make fuzz')" >&2; failed=1; continue; fi
  work="$BUILD/fuzz-corpus/$t"; artifacts="$BUILD/fuzz-artifacts/$t"; log="$BUILD/fuzz-logs/$t.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  # -timeout: one input taking longer is a finding (a hang); -rss_limit_mb: so is 2 GB.
  "$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$work" "$ROOT/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(ls "$work" | wc -l)
  if [ $rc -eq 0 ]; then verdict=ok; else
    verdict="FOUND (exit $rc): $(grep -m1 -E 'ERROR: |runtime error|SUMMARY|Test unit written' "$log" | cut -c1-140)"
    failed=1
  fi
  printf '%-18s %10s %8s %8s %7s  %s\n' "$t" "${execs:-?}" "${speed:-?}" "${cov:-?}" "$corpus" "$verdict"
  if [ $rc -ne 0 ]; then
    for a in "$artifacts"/*; do [ -f "$a" ] && echo "    reproduce: $bin $a   (log: $log)"; done
  fi
done
exit $failed
