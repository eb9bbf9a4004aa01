#!/usr/bin/env bash
# Runs every Go fuzz target of the workspace's modules (go.work) for FUZZTIME
# (default 10s) each.
set -euo pipefail
cd "$(dirname "$0")/.."
# The workspace (go.work), whatever GOWORK the shell has: every module.
export GOWORK="$PWD/go.work"
FUZZTIME="${FUZZTIME:-10s}"
found=0
# `./...` stops at a nested module: every module's packages, tools/ aside
# (it holds none).
for pkg in $(go list $(go list -m -f '{{.Dir}}/...' | grep -v '/tools/\.\.\.$')); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found=$((found + 1))
		echo "fuzz $pkg $target ($FUZZTIME)"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg"
	done
done
if [ "$found" -eq 0 ]; then echo "no fuzz targets found" >&2; exit 1; fi
echo "fuzzed $found targets"
