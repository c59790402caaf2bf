#!/bin/sh
# Times the study's whole grid end to end through the CLI, as a user runs it:
# 6 policies x 10 seeds on the embedded default trace, load 1.3.
#   sh bench/sweep.sh build/gpumux
set -eu
GPUMUX=${1:-build/gpumux}
echo "== $GPUMUX simulate --policy study --seeds 42-51 --no-report (wall time, peak memory)"
/usr/bin/time -f "wall %e s, user %U s, peak RSS %M KiB" \
  "$GPUMUX" simulate --policy study --seeds 42-51 --no-report -q
