#!/usr/bin/env bash
# Checks the workspace's modules (docs/decisions/104-one-workspace-lean-product-module.md):
#   - go.work names every module of the repository (a go.mod it missed would
#     take its tests out of `make test`, silently);
#   - each module is tidy on its own (GOWORK=off: what `go mod tidy` in it
#     writes), its go.sum complete, and every module it uses matches its
#     checksum; the workspace's go.work.sum is complete too;
#   - the product module's graph (`go list -m all` of it alone) names none of
#     what only the tests and the build need, nor any other module of the
#     workspace, and one major of the GitHub client;
#   - the workspace builds the product's packages, tests included, with the
#     versions the product's own go.mod selects, so that `go run` here and
#     `go install` elsewhere build the same binary.
set -euo pipefail
cd "$(dirname "$0")/.."
# The workspace (go.work), whatever GOWORK the shell has: every module.
export GOWORK="$PWD/go.work"
root=$PWD
product=github.com/the-loop/bus
fail=0

# go.work's modules, as directories relative to the root.
mapfile -t modules < <(go list -m -f '{{.Dir}}' | sed "s|^$root|.|")
# Every go.mod of the repository but fixtures under testdata/, which Go
# ignores.
mapfile -t gomods < <(git ls-files --cached --others --exclude-standard -- 'go.mod' '*/go.mod' | grep -v '/testdata/' | xargs -n1 dirname | sed 's|^\([^.]\)|./\1|' | sort)
missing=$(comm -13 <(printf '%s\n' "${modules[@]}" | sort) <(printf '%s\n' "${gomods[@]}"))
if [ -n "$missing" ]; then
	echo "modules go.work does not use (their tests would not run): $missing"
	fail=1
fi

for m in "${modules[@]}"; do
	if ! (cd "$m" && GOWORK=off go mod tidy -diff); then
		echo "$m: not tidy: run 'make tidy' and commit"
		fail=1
	fi
	if ! out=$(cd "$m" && GOWORK=off go mod verify 2>&1); then
		echo "$m: $out"
		fail=1
	fi
	# The tools' graph names versions of buf's generated modules that the
	# module proxy does not serve, so `go list -m all` cannot run there;
	# tidy -diff covers what its builds need.
	[ "$m" = ./tools ] && continue
	before=$(cat "$m/go.sum")
	if ! (cd "$m" && GOWORK=off go list -m all >/dev/null); then
		echo "$m: go list -m all failed"
		fail=1
	elif [ "$(cat "$m/go.sum")" != "$before" ]; then
		echo "$m: go.sum was incomplete: 'go list -m all' added to it"
		fail=1
	fi
done

# The workspace's own checksums (go.work.sum: the versions it selects above
# a module's own, where modules share a dependency, and their go.mod files):
# loading every package of every module, tests and build tags included,
# adds none.
mapfile -t patterns < <(go list -m -f '{{.Dir}}/...' | grep -v '/tools/\.\.\.$')
before=$(cat go.work.sum 2>/dev/null || true)
if ! go list -deps -test -tags 'e2e compose' "${patterns[@]}" >/dev/null; then
	echo "the workspace's packages do not load"
	fail=1
elif [ "$(cat go.work.sum 2>/dev/null || true)" != "$before" ]; then
	echo "go.work.sum was incomplete: loading the workspace's packages added to it"
	fail=1
fi

# What only the tests and the build use: the deploy validation (client-go,
# kustomize, compose-go), the observability tests (Prometheus, chromedp, the
# Grafana SDK), the tools, and the GitHub App library the product replaced.
forbidden='^(k8s\.io/(api|apimachinery|client-go)|sigs\.k8s\.io/kustomize/|github\.com/compose-spec/compose-go|github\.com/prometheus/prometheus|github\.com/chromedp/|github\.com/grafana/grafana-foundation-sdk|github\.com/bradleyfalzon/ghinstallation|github\.com/bufbuild/|'"${product//./\\.}"'/)'
graph=$(GOWORK=off go list -m all)
if bad=$(grep -E "$forbidden" <<<"$graph"); then
	echo "the product module's graph names what only tests or tools need:"
	sed 's/^/  /' <<<"$bad"
	fail=1
fi
majors=$(grep -cE '^github\.com/google/go-github(/v[0-9]+)? ' <<<"$graph" || true)
if [ "$majors" -gt 1 ]; then
	echo "the product module's graph names $majors majors of go-github:"
	grep -E '^github\.com/google/go-github' <<<"$graph" | sed 's/^/  /'
	fail=1
fi

format='{{with .Module}}{{.Path}} {{.Version}}{{end}}'
if ! diff <(GOWORK=off go list -deps -test -f "$format" ./... | sort -u) <(go list -deps -test -f "$format" ./... | sort -u); then
	echo "the workspace selects other versions for the product's packages (> above) than its go.mod (<): raise them in the product's go.mod, or lower them in the module that raised them"
	fail=1
fi

[ "$fail" -eq 0 ] && echo "modules: ${#modules[@]} in go.work, each tidy and verified; the product's graph is lean, with one go-github major"
exit "$fail"
