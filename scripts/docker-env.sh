#!/usr/bin/env bash
# Makes this machine able to run `make compose-e2e`: a Docker engine and
# Docker Compose v2, with no image registry and no download but Debian's
# packages and Go modules. Run as root; every step is skipped when already done,
# so CI and a developer run it alike, as often as they like.
#
#   - Debian's docker.io and mmdebstrap packages, when missing;
#   - dockerd started in the background with the vfs storage driver and no
#     bridge or iptables (what works inside this sandbox), when no engine
#     answers;
#   - Compose v2 built from its Go module and installed as the docker CLI
#     plugin, when `docker compose version` does not name COMPOSE_VERSION
#     (about 6 minutes on 2 cores, once per machine).
set -euo pipefail
COMPOSE_VERSION="${COMPOSE_VERSION:-v2.40.3}"
PLUGIN_DIR="${DOCKER_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}"
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

stage() { echo "docker-env: $*"; }

need=()
command -v dockerd >/dev/null && command -v docker >/dev/null || need+=(docker.io)
# mmdebstrap makes the test's Debian base image from Debian's packages.
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if [ "${#need[@]}" -gt 0 ]; then
	stage "installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
	stage "starting dockerd (vfs, no bridge)"
	log="${TMPDIR:-/tmp}/the-loop-dockerd.log"
	nohup dockerd --storage-driver=vfs --iptables=false --bridge=none >"$log" 2>&1 &
	for _ in $(seq 1 60); do
		docker info >/dev/null 2>&1 && break
		sleep 1
	done
	docker info >/dev/null 2>&1 || { echo "dockerd did not start; its log:" >&2; tail -20 "$log" >&2; exit 1; }
fi

if ! docker compose version 2>/dev/null | grep -qF "$COMPOSE_VERSION"; then
	stage "building Docker Compose $COMPOSE_VERSION from its Go module"
	dir="$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[ -d "$dir" ] || { echo "go mod download of compose $COMPOSE_VERSION failed" >&2; exit 1; }
	mkdir -p "$PLUGIN_DIR"
	(cd "$dir" && GOWORK=off GOFLAGS= CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
		-o "$PLUGIN_DIR/docker-compose" ./cmd)
fi
docker version --format 'docker-env: engine {{.Server.Version}}, client {{.Client.Version}}'
echo "docker-env: $(docker compose version)"
