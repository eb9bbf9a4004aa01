#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME (default 10s) each.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-10s}"
found=0
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found=$((found + 1))
		echo "fuzz $pkg $target ($FUZZTIME)"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg"
	done
done
if [ "$found" -eq 0 ]; then echo "no fuzz targets found" >&2; exit 1; fi
echo "fuzzed $found targets"
