#!/usr/bin/env bash
# The release dry run's last step (make release-check): the snapshot that
# `goreleaser build --snapshot` left in DIST holds the-loop for linux/amd64 and
# linux/arm64, each static, built for its platform and stamped with the
# version git describe gives; the binary for this machine's platform, if there
# is one, prints it.
set -euo pipefail
dist="${1:-dist}"
export PATH="/usr/local/go/bin:$PATH"
host_arch="$(go env GOHOSTARCH)"
# What .goreleaser.yaml stamps: THE_LOOP_VERSION (make release-check passes
# the Makefile's VERSION), else git describe's.
stamped="${THE_LOOP_VERSION:-$(git describe --tags --always --dirty)}"
for arch in amd64 arm64; do
	bin="$(find "$dist" -path "*linux_${arch}*" -name the-loop -type f | head -n1)"
	if [ -z "$bin" ]; then
		echo "release-check: no linux/$arch binary in $dist" >&2
		exit 1
	fi
	info="$(go version -m "$bin")"
	for want in "GOOS=linux" "GOARCH=$arch" "CGO_ENABLED=0"; do
		if ! grep -q -- "$want" <<<"$info"; then
			echo "release-check: $bin was not built with $want:" >&2
			echo "$info" >&2
			exit 1
		fi
	done
	# -trimpath keeps -ldflags out of the build info: the stamp is looked
	# for in the binary itself, and the one for this machine prints it.
	if ! grep -q -a -F -- "$stamped" "$bin"; then
		echo "release-check: $bin does not carry the version $stamped (-X main.version)" >&2
		exit 1
	fi
	if [ "$arch" = "$host_arch" ]; then
		got="$("$bin" version)"
		if [ "$got" != "the-loop $stamped" ]; then
			echo "release-check: $bin version printed \"$got\", want \"the-loop $stamped\"" >&2
			exit 1
		fi
	fi
	echo "release-check: linux/$arch $(du -h "$bin" | cut -f1) version $stamped"
done
