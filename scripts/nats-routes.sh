#!/usr/bin/env bash
# Writes DIR/routes.conf, the route credential of a three-node NATS JetStream
# cluster, which every node's cluster block includes. A route is a peer
# server, trusted with every subject and exempt from the identities'
# permissions, so only a node holding this credential may open one: without
# it, anything that reaches a route port (an agent session in the
# dispatcher's container, say) could read and publish around the
# authorization block (docs/deploy.md, decision 058).
#
#   scripts/nats-routes.sh DIR HOST:PORT...
#
# compose (--env-file deploy/nats/cluster.env):
#   scripts/nats-routes.sh deploy/secrets nats:6222 nats-2:6222 nats-3:6222
# Kubernetes (the Secret the-loop-nats-auth, key routes.conf):
#   scripts/nats-routes.sh deploy/secrets nats-0.nats-headless:6222 \
#     nats-1.nats-headless:6222 nats-2.nats-headless:6222
#
# Run it again to replace the credential, then restart the nodes one by one.
set -euo pipefail
if [ "$#" -lt 3 ]; then
	echo "usage: $0 DIR HOST:PORT HOST:PORT [HOST:PORT...]" >&2
	exit 2
fi
dir="$1"
shift
mkdir -p "$dir"
# 24 random bytes, hex: safe inside a URL's user information.
pass="$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')"
umask 077
tmp="$(mktemp "$dir/.routes.conf.XXXXXX")"
{
	echo "# The route credential of the NATS cluster (scripts/nats-routes.sh): a node"
	echo "# accepts a route only with it, and opens its own routes with it. Secret."
	echo "authorization {"
	echo "  user: route"
	echo "  password: \"$pass\""
	echo "}"
	echo "routes: ["
	for host in "$@"; do
		echo "  \"nats-route://route:$pass@$host\""
	done
	echo "]"
} >"$tmp"
mv "$tmp" "$dir/routes.conf"
echo "wrote $dir/routes.conf (routes to $*)"
