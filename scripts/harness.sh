#!/usr/bin/env bash
# Copies this machine's Claude Code into the build context, for the session
# image's HARNESS=prebuilt (deploy/Dockerfile, docs/deploy.md), so that the
# image carries the real harness without a network at build time.
#
#   scripts/harness.sh [DEST]      DEST defaults to bin/harness/claude
#
# The source is $CLAUDE, else the `claude` on PATH. Claude Code's npm package
# is a wrapper around a native, self-contained executable of its platform
# package: symbolic links are followed, and when they end at a script rather
# than an executable, the platform package beside the wrapper (linux, glibc,
# this machine's architecture) supplies it. DEST is written only when it
# differs. Prints the version the copy reports.
set -euo pipefail
dest="${1:-bin/harness/claude}"
src="${CLAUDE:-$(command -v claude || true)}"
[ -n "$src" ] || { echo "harness: no claude on PATH; set CLAUDE to Claude Code's executable" >&2; exit 1; }

is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; }

native="$(readlink -f "$src")"
if ! is_elf "$native"; then
	case "$(uname -m)" in
	x86_64 | amd64) arch=x64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) echo "harness: no Claude Code platform package for $(uname -m)" >&2; exit 1 ;;
	esac
	# The wrapper's package directory: .../@anthropic-ai/claude-code.
	pkg="$(dirname "$native")"
	while [ "$pkg" != / ] && [ ! -f "$pkg/package.json" ]; do pkg="$(dirname "$pkg")"; done
	found=""
	for c in "$pkg/node_modules/@anthropic-ai/claude-code-linux-$arch/claude" \
		"$(dirname "$pkg")/claude-code-linux-$arch/claude"; do
		if is_elf "$c"; then found="$c"; break; fi
	done
	[ -n "$found" ] || { echo "harness: $src leads to $native, not an executable, and no claude-code-linux-$arch package is beside it" >&2; exit 1; }
	native="$found"
fi

if ! cmp -s "$native" "$dest" 2>/dev/null; then
	mkdir -p "$(dirname "$dest")"
	tmp="$dest.tmp.$$"
	cp "$native" "$tmp" && chmod 0755 "$tmp" && mv -f "$tmp" "$dest"
fi
echo "harness: $dest is $("$dest" --version)"
