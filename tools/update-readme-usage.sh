#!/bin/sh
# Regenerates README.md's usage block (between the vitc-help markers) from
# `vitc --help`; test_cli fails when the two differ.
# usage: tools/update-readme-usage.sh [path/to/vitc]
set -eu
cd "$(dirname "$0")/.."
vitc=${1:-build/vitc}
help=$(mktemp)
trap 'rm -f "$help"' EXIT
"$vitc" --help > "$help"
awk -v help="$help" '
  /^<!-- vitc --help: begin/ { print; print "```"; while ((getline l < help) > 0) print l; print "```"; skip = 1; next }
  /^<!-- vitc --help: end/ { skip = 0 }
  !skip { print }
' README.md > README.md.new
mv README.md.new README.md
