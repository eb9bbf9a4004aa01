#!/usr/bin/env bash
# Enforces the dependency direction of README.md#repository-map, for
# production and test imports alike:
#   - pkg/ never imports services/ (nor cmd/);
#   - a service never imports another service;
#   - only pkg/bus (and the test-support tree's bus helpers) import NATS;
#   - internal/testsupport imports testing only in test files, and the
#     product binary does not link the testing package.
set -euo pipefail
cd "$(dirname "$0")/.."
# The workspace (go.work), whatever GOWORK the shell has: every module.
export GOWORK="$PWD/go.work"
mod=github.com/the-loop/bus
fail=0
# Every module of the workspace (go.work; `./...` stops at a nested one),
# tools/ aside: it holds no packages.
mapfile -t modules < <(go list -m -f '{{.Dir}}/...' | grep -v '/tools/\.\.\.$')
service_of() { # the service directory an import path lies in, or nothing
	case "$1" in "$mod"/services/*) local rest=${1#"$mod"/services/}; echo "${rest%%/*}" ;; esac
}
while read -r pkg imports; do
	for imp in $imports; do
		case "$pkg" in
		"$mod"/pkg/*)
			case "$imp" in "$mod"/services/* | "$mod"/cmd/*) echo "$pkg imports $imp (pkg must not import services or cmd)"; fail=1 ;; esac ;;
		esac
		from=$(service_of "$pkg")
		to=$(service_of "$imp")
		if [ -n "$from" ] && [ -n "$to" ] && [ "$from" != "$to" ]; then
			echo "$pkg imports $imp (a service must not import another service)"; fail=1
		fi
		case "$pkg" in
		"$mod"/pkg/bus | "$mod"/pkg/bus/* | "$mod"/internal/testsupport/*) ;;
		*)
			case "$imp" in github.com/nats-io/*) echo "$pkg imports $imp (only pkg/bus may import NATS)"; fail=1 ;; esac ;;
		esac
	done
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' "${modules[@]}")
# The test-support tree imports testing only in its test files
# (docs/decisions/081-test-support-tree.md).
while read -r pkg imports; do
	case " $imports " in *" testing "*) echo "$pkg imports testing outside its test files"; fail=1 ;; esac
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./internal/testsupport/...)
# The product binary carries no test code: fakes and stand-ins the demo uses
# import nothing from testing outside their test files.
if go list -deps ./cmd/the-loop | grep -x testing >/dev/null; then
	echo "the product binary links the testing package:"
	go list -f '{{.ImportPath}} {{join .Imports " "}}' -deps ./cmd/the-loop | awk '{for (i = 2; i <= NF; i++) if ($i == "testing") print "  " $1}'
	fail=1
fi
[ "$fail" -eq 0 ] && echo "dependency rules hold"
exit "$fail"
