#!/bin/sh
# Fails (exit 1, naming each file) when a C++ file of the repository is not as clang-format
# (.clang-format) writes it. `make format` rewrites them.
#   scripts/check-format.sh [ROOT]
set -eu
root=${1:-$(dirname "$0")/..}
cd "$root"
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "check-format: $CLANG_FORMAT not found (scripts/setup.sh installs it)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files '*.h' '*.cc')
else
  files=$(find apps bench fuzz include src tests -name '*.h' -o -name '*.cc' | sort)
fi
bad=0
for f in $files; do
  [ -f "$f" ] || continue
  if ! "$CLANG_FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "check-format: $f is not formatted (make format)" >&2
    bad=$((bad + 1))
  fi
done
if [ "$bad" -ne 0 ]; then
  echo "check-format: $bad file(s) to format" >&2
  exit 1
fi
echo "check-format: $(echo "$files" | wc -w) files formatted as .clang-format says"
