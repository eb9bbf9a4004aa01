#!/usr/bin/env bash
# Runs the benchmarks and reports each "<name>/<variant>" against the
# "<name>/raw" baseline measured in the same run: absolute times on shared
# machines drift, ratios to a baseline taken alongside do not.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCHTIME="${BENCHTIME:-2s}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
go test -run='^$' -bench=. -benchmem -benchtime="$BENCHTIME" -count=1 ./... | tee "$out"
echo
echo "ratios to the raw JetStream baseline of the same run (lower is faster):"
awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	n = split(name, parts, "/")
	if (n < 2) next
	base = name; sub(/\/[^\/]+$/, "", base)
	for (i = 2; i <= NF; i++) if ($(i+1) == "ns/op") { ns[name] = $i; group[name] = base; variant[name] = parts[n] }
}
END {
	found = 0
	for (k in ns) {
		b = group[k] "/raw"
		if (variant[k] != "raw" && (b in ns) && ns[b] > 0) { printf "  %-40s %8.2fx\n", k, ns[k] / ns[b]; found = 1 }
	}
	if (!found) print "  (no benchmark with a /raw baseline ran)"
}' "$out"
