#!/usr/bin/env bash
# Renders a report's index.html (from `gpumux simulate`, FGD or DL) to a PNG with headless
# Chromium, to check by looking how the page reads: colours, line styles, legends, labels.
#
#   scripts/render-report.sh REPORT OUT.png [WIDTHxHEIGHT]
#
# REPORT is the report folder or its index.html; the window defaults to 1400x4000 (the page is
# cut at the window's height: raise it for a long DL report, e.g. 1400x12000).
# Chromium is a manual tool here, not a build or test dependency: on Debian,
# `apt-get install chromium` (scripts/setup.sh does not install it). Set CHROMIUM to use
# another binary (chromium-browser, google-chrome).
set -euo pipefail

usage() {
  echo "usage: $0 REPORT_DIR_OR_INDEX_HTML OUT.png [WIDTHxHEIGHT]" >&2
  exit 2
}
[[ $# -ge 2 && $# -le 3 ]] || usage

report=$1
out=$2
size=${3:-1400x4000}
if [[ -d $report ]]; then report=$report/index.html; fi
if [[ ! -f $report ]]; then
  echo "$0: $report: no such file (expected a report's index.html or its folder)" >&2
  exit 1
fi
if [[ ! $size =~ ^([0-9]+)x([0-9]+)$ ]]; then
  echo "$0: window size '$size': expected WIDTHxHEIGHT, e.g. 1400x4000" >&2
  exit 2
fi
width=${BASH_REMATCH[1]}
height=${BASH_REMATCH[2]}

browser=${CHROMIUM:-}
if [[ -z $browser ]]; then
  for candidate in chromium chromium-browser google-chrome; do
    if command -v "$candidate" >/dev/null; then
      browser=$candidate
      break
    fi
  done
fi
if [[ -z $browser ]]; then
  echo "$0: no chromium found (install it: apt-get install chromium; or set CHROMIUM)" >&2
  exit 1
fi
if ! command -v "$browser" >/dev/null; then
  echo "$0: CHROMIUM=$browser: no such command" >&2
  exit 1
fi

url="file://$(realpath "$report")"
out_abs=$(realpath -m "$out")
mkdir -p "$(dirname "$out_abs")"
rm -f "$out_abs"
# A private profile, so that a running browser or a stale lock never gets in the way.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$profile" --screenshot="$out_abs" \
  --window-size="$width,$height" "$url" >/dev/null 2>"$profile/stderr" || {
  cat "$profile/stderr" >&2
  exit 1
}
if [[ ! -s $out_abs ]]; then
  cat "$profile/stderr" >&2
  echo "$0: $browser wrote no screenshot to $out_abs" >&2
  exit 1
fi
echo "$out_abs"
