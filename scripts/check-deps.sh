#!/usr/bin/env bash
# Enforces the dependency direction of README.md#repository-map: pkg/ never
# imports services/, and only pkg/bus (and pkg/bus/bustest) imports NATS.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=github.com/the-loop/bus
fail=0
while read -r pkg imports; do
	case "$pkg" in
	"$mod"/pkg/*)
		for imp in $imports; do
			case "$imp" in "$mod"/services/*) echo "$pkg imports $imp (pkg must not import services)"; fail=1 ;; esac
		done ;;
	esac
	case "$pkg" in
	"$mod"/pkg/bus | "$mod"/pkg/bus/*) ;;
	*)
		for imp in $imports; do
			case "$imp" in github.com/nats-io/*) echo "$pkg imports $imp (only pkg/bus may import NATS)"; fail=1 ;; esac
		done ;;
	esac
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./...)
[ "$fail" -eq 0 ] && echo "dependency rules hold"
exit "$fail"
