#!/usr/bin/env bash
# Makes this machine able to run `make compose-e2e`, and leaves what it
# already has as it is:
#   - a Docker engine that answers is used as it is;
#   - a Docker Compose v2 of at least MIN_COMPOSE is used as it is; otherwise
#     Compose is built from its Go module into bin/tools/docker-compose, the
#     project's own tool directory (the test runs it as LOOP_TEST_COMPOSE),
#     never over the user's docker CLI plugin (about 6 minutes on 2 cores,
#     once per clone).
# With no engine, or no mmdebstrap (the test makes its Debian base image with
# it, from Debian's packages: no image registry is needed), it installs and
# starts them only when LOOP_TEST_REQUIRE_DOCKER=1 (what CI sets, as root):
# Debian's docker.io and mmdebstrap, and dockerd in the background with the
# vfs storage driver and no bridge or iptables. Otherwise it says in one line
# what is missing and exits 3, and the Makefile skips the stage.
set -euo pipefail
cd "$(dirname "$0")/.."
COMPOSE_VERSION="${COMPOSE_VERSION:-v2.40.3}"
MIN_COMPOSE="${MIN_COMPOSE:-2.24.0}"
TOOLS="$PWD/bin/tools"
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
require="${LOOP_TEST_REQUIRE_DOCKER:-}"

stage() { echo "docker-env: $*"; }
skip() {
	echo "compose-e2e: skipped: $* (LOOP_TEST_REQUIRE_DOCKER=1 installs and starts what is missing, as root, as CI does)"
	exit 3
}

need=()
command -v dockerd >/dev/null && command -v docker >/dev/null || need+=(docker.io)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if [ "${#need[@]}" -gt 0 ]; then
	if ! docker info >/dev/null 2>&1 || [[ " ${need[*]} " == *" mmdebstrap "* ]]; then
		[ -n "$require" ] || skip "no ${need[*]} on this machine"
	fi
	if [ -n "$require" ]; then
		stage "installing ${need[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	fi
fi

if ! docker info >/dev/null 2>&1; then
	[ -n "$require" ] || skip "no Docker engine answers"
	stage "starting dockerd (vfs, no bridge)"
	log="${TMPDIR:-/tmp}/the-loop-dockerd.log"
	nohup dockerd --storage-driver=vfs --iptables=false --bridge=none >"$log" 2>&1 &
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		sleep 1
	done
	docker info >/dev/null 2>&1 || { echo "dockerd did not start; its log:" >&2; tail -20 "$log" >&2; exit 1; }
fi

# compose_ok VERSION-OUTPUT: a v2 of at least MIN_COMPOSE.
compose_ok() {
	local v
	v="$(sed -n 's/.*version v\{0,1\}\([0-9][0-9.]*\).*/\1/p' <<<"$1" | head -1)"
	[ -n "$v" ] && [ "${v%%.*}" = 2 ] && [ "$(printf '%s\n%s\n' "$MIN_COMPOSE" "$v" | sort -V | head -1)" = "$MIN_COMPOSE" ]
}
# bin/tools/compose.env says which Compose the test runs (the Makefile reads
# it): empty, the docker CLI's own plugin.
mkdir -p "$TOOLS"
if compose_ok "$(docker compose version 2>/dev/null || true)"; then
	echo "docker-env: $(docker compose version) (the machine's own)"
	echo "LOOP_TEST_COMPOSE=" >"$TOOLS/compose.env"
else
	if ! compose_ok "$("$TOOLS/docker-compose" version 2>/dev/null || true)"; then
		stage "building Docker Compose $COMPOSE_VERSION from its Go module into bin/tools"
		dir="$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
		[ -d "$dir" ] || { echo "go mod download of compose $COMPOSE_VERSION failed" >&2; exit 1; }
		(cd "$dir" && GOWORK=off GOFLAGS= CGO_ENABLED=0 go build -trimpath \
			-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
			-o "$TOOLS/docker-compose" ./cmd)
	fi
	echo "docker-env: $("$TOOLS/docker-compose" version) (bin/tools/docker-compose)"
	echo "LOOP_TEST_COMPOSE=$TOOLS/docker-compose" >"$TOOLS/compose.env"
fi
docker version --format 'docker-env: engine {{.Server.Version}}, client {{.Client.Version}}'
