#!/bin/sh
# Golden-output test of the simulator: fixed inputs, seeds and config -> expected output, byte
# for byte. A difference fails the test and shows the diff. Regenerate only on purpose, and
# review the new expected files like code:
#   sh tests/golden/run_golden.sh build/gpumux tests/golden --update
set -eu
GPUMUX=$1
DIR=$2
UPDATE=${3:-}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# Every policy, three seeds, the study's protocol at load 1.3, curves in the study's CSV layout.
"$GPUMUX" simulate --nodes "$DIR/tiny_nodes.csv" --pods "$DIR/tiny_pods.csv" --policy all \
  --seeds 1-3 --load 1.3 --format csv --no-timing --no-report -q > "$OUT/tiny_all_seeds1-3.csv"
# Every placement of fgd, seed 2.
"$GPUMUX" simulate --nodes "$DIR/tiny_nodes.csv" --pods "$DIR/tiny_pods.csv" --policy fgd \
  --seeds 2 --load 1.3 --no-report -q --placements "$OUT/tiny_fgd_seed2_placements.csv" > /dev/null

# The JCT simulator: 40 generated training jobs, 8 GPUs, every co-location policy, loads 1 and 3.
"$GPUMUX" simulate --workload dl --count 40 --gpus 8 --loads 1,3 --seeds 7 --format json \
  --no-report -q > "$OUT/dl_40jobs_seed7.json"

status=0
for f in tiny_all_seeds1-3.csv tiny_fgd_seed2_placements.csv dl_40jobs_seed7.json; do
  if [ "$UPDATE" = "--update" ]; then
    cp "$OUT/$f" "$DIR/$f.expected"
    echo "updated $DIR/$f.expected"
  elif ! diff -u "$DIR/$f.expected" "$OUT/$f"; then
    echo "golden: $f differs from $DIR/$f.expected (see diff above)" >&2
    status=1
  fi
done
[ "$status" = 0 ] && [ "$UPDATE" != "--update" ] && echo "golden: all outputs equal the expected files"
exit $status
