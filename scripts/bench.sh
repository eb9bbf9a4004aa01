#!/usr/bin/env bash
# Runs the benchmarks and reports each "<name>/<variant>" against the
# baseline of its group measured in the same run: "<name>/raw" (the raw
# JetStream path of the same hops), for a scaling series "<name>/replicas=1",
# for the cost of NATS authorization "<name>/auth=off", or for the cost of
# signed events "<name>/signing=off". Absolute figures on shared machines drift; ratios to a
# baseline taken alongside do not.
#
#   BENCHTIME      -benchtime of the in-process benchmarks (default 2s)
#   BENCHTAGS      build tags (default e2e: also the multi-process end-to-end
#                  benchmark in test/e2e, which builds the-loop and
#                  nats-server and needs tmux; empty: in-process only)
#   E2E_BENCHTIME  -benchtime of test/e2e (default 50x: events per
#                  sub-benchmark). A count, not a duration: the system's
#                  latency run waits out Slack's one-post-a-second pacer off
#                  the clock, and its throughput run is held to that pace,
#                  so a duration would cost minutes per second asked for.
#                  Its p99-ms is over that many samples (of 50: the worst).
#   REPLICA_BENCHTIME
#                  -benchtime of the ledger-writer's and slack-renderer's
#                  replica-scaling benchmarks (Benchmark*Replicas; default
#                  144x: events per replica count). A count, not a duration:
#                  144 events load their 24 partitions equally, and each
#                  round lasts many round trips of their slow downstream.
#   DISPATCHER_BENCHTIME
#                  the same for BenchmarkDispatcherReplicas (default 24x:
#                  two prompts to each of its 12 sessions)
#   FEEL_BENCHTIME -benchtime of BenchmarkFeel in test/inproc (default 30x:
#                  events per path, one a second; a count, not a duration,
#                  for the same reason). Its p99-ms is over that many
#                  samples (of 30: the worst).
#   SOAK           how long BenchmarkFootprint (test/e2e) keeps its load on
#                  the five service processes after its load window,
#                  sampling their memory every 10 s for the slope of each
#                  (default 30m; a Go duration). It runs once, alone: its
#                  loads are fixed, -benchtime does not size them.
#   BENCH          -bench pattern (default: every benchmark)
set -euo pipefail
cd "$(dirname "$0")/.."
# The workspace (go.work), whatever GOWORK the shell has: every module.
export GOWORK="$PWD/go.work"
BENCHTIME="${BENCHTIME:-2s}"
BENCHTAGS="${BENCHTAGS-e2e}"
E2E_BENCHTIME="${E2E_BENCHTIME:-50x}"
REPLICA_BENCHTIME="${REPLICA_BENCHTIME:-144x}"
DISPATCHER_BENCHTIME="${DISPATCHER_BENCHTIME:-24x}"
FEEL_BENCHTIME="${FEEL_BENCHTIME:-30x}"
BENCH="${BENCH:-.}"
SOAK="${SOAK:-30m}"
export SOAK
e2e=./test/e2e
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
# Every module of the workspace (go.work; `./...` stops at a nested one),
# tools/ aside: it holds no packages.
mapfile -t modules < <(go list -m -f '{{.Dir}}/...' | grep -v '/tools/\.\.\.$')
mapfile -t pkgs < <(go list -tags="$BENCHTAGS" "${modules[@]}" | grep -v '/test/e2e$')
go test -run='^$' -bench="$BENCH" -skip='Replicas$|^BenchmarkFeel$' -benchmem -benchtime="$BENCHTIME" -count=1 -timeout=30m \
	-tags="$BENCHTAGS" "${pkgs[@]}" | tee "$out"
if [[ "BenchmarkLedgerReplicas BenchmarkRendererReplicas" =~ $BENCH ]]; then
	go test -run='^$' -bench='Replicas$' -benchtime="$REPLICA_BENCHTIME" -count=1 -timeout=30m \
		-tags="$BENCHTAGS" ./services/ledger-writer ./services/slack-renderer | tee -a "$out"
fi
if [[ "BenchmarkDispatcherReplicas" =~ $BENCH ]]; then
	go test -run='^$' -bench='Replicas$' -benchtime="$DISPATCHER_BENCHTIME" -count=1 -timeout=30m \
		-tags="$BENCHTAGS" ./services/dispatcher | tee -a "$out"
fi
# BenchmarkFeel alone (BENCH=Feel/button-press runs one of its paths).
if [[ "BenchmarkFeel" =~ ${BENCH%%/*} ]]; then
	feel="$BENCH"
	[[ "$feel" == "." ]] && feel='^BenchmarkFeel$'
	go test -run='^$' -bench="$feel" -benchtime="$FEEL_BENCHTIME" -count=1 -timeout=30m \
		-tags="$BENCHTAGS" ./test/inproc | tee -a "$out"
fi
if [[ ",$BENCHTAGS," == *",e2e,"* ]]; then
	go test -run='^$' -bench="$BENCH" -skip='^BenchmarkFootprint$' -benchmem -benchtime="$E2E_BENCHTIME" -count=1 -timeout=30m \
		-tags="$BENCHTAGS" "$e2e" | tee -a "$out"
fi
# BenchmarkFootprint once (1x: its sub-benchmarks only report what its run
# measured), with time for the soak on top of its half hour of the rest.
if [[ ",$BENCHTAGS," == *",e2e,"* && "BenchmarkFootprint" =~ ${BENCH%%/*} ]]; then
	soak_s="$(awk -v d="$SOAK" 'BEGIN {
		s = 0
		while (match(d, /^[0-9.]+(h|ms|m|s)/)) {
			t = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
			u = t; sub(/^[0-9.]+/, "", u); v = t + 0
			s += (u == "h") ? v * 3600 : (u == "m") ? v * 60 : (u == "s") ? v : v / 1000
		}
		if (d != "") { print "bad"; exit }
		printf "%d\n", s
	}')"
	if [[ "$soak_s" == bad ]]; then
		echo "SOAK=$SOAK: want a Go duration such as 30m or 1h30m" >&2
		exit 2
	fi
	go test -run='^$' -bench='^BenchmarkFootprint$' -benchtime=1x -count=1 -timeout="$((soak_s + 1800))s" \
		-tags="$BENCHTAGS" "$e2e" | tee -a "$out"
fi
echo
echo "ratios to the baseline of the same run (variant ÷ baseline; for ns/op and"
echo "*-ms lower is faster, for */s higher is faster):"
ratios="$(awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	if (split(name, parts, "/") < 2) next
	seen[name] = 1
	group[name] = name; sub(/\/[^\/]+$/, "", group[name])
	for (i = 3; i < NF; i += 2) {
		unit = $(i + 1)
		# Allocation figures of a multi-process run mean nothing; the
		# ratio metrics some benchmarks report are ratios already.
		# Counts of GitHub requests are held to targets below, not to a
		# baseline.
		if (unit == "B/op" || unit == "allocs/op" || unit == "x-1-replica" || unit == "max-share" || unit == "x-baseline-median" || unit ~ /^gh-/) continue
		val[name, unit] = $i
		units[name] = units[name] " " unit
	}
}
END {
	for (k in seen) {
		b = group[k] "/raw"
		if (!(b in seen)) b = group[k] "/replicas=1"
		if (!(b in seen)) b = group[k] "/auth=off"
		if (!(b in seen)) b = group[k] "/signing=off"
		if (!(b in seen)) b = group[k] "/busy=1"
		if (!(b in seen) || b == k) continue
		m = split(units[k], us, " ")
		for (j = 1; j <= m; j++) {
			u = us[j]
			if (((b, u) in val) && val[b, u] > 0)
				printf "  %-40s %-16s %10.4g ÷ %-10.4g = %.3gx\n", k, u, val[k, u], val[b, u], val[k, u] / val[b, u]
		}
	}
}' "$out" | sort)"
if [ -n "$ratios" ]; then
	echo "$ratios"
else
	echo "  (no benchmark with a baseline ran)"
fi
paired="$(awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i += 2)
		if ($(i + 1) == "x-baseline-median") printf "  %-40s %.3gx\n", name, $i
}' "$out" | sort)"
if [ -n "$paired" ]; then
	echo
	echo "median of the rounds' paired ratios (variant ÷ baseline, rounds alternating):"
	echo "$paired"
fi
scaling="$(awk '
/^Benchmark[A-Za-z]*Replicas\/replicas=[0-9]+/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	n = name; sub(/.*replicas=/, "", n)
	x = ""; s = ""
	for (i = 3; i < NF; i += 2) {
		if ($(i + 1) == "x-1-replica") x = $i
		if ($(i + 1) == "max-share") s = $i
	}
	if (x == "" || s == "") next
	ok = (x + 0 >= 0.8 * n - 1e-9 && s + 0 <= 1.5 / n + 1e-9) ? "ok" : "MISSED"
	printf "  %-40s x-1-replica %5.2f (target >= %4.2f)  max-share %5.3f (target <= %5.3f)  %s\n", name, x, 0.8 * n, s, 1.5 / n, ok
}' "$out" | sort)"
if [ -n "$scaling" ]; then
	echo
	echo "replica scaling (throughput with N replicas over one replica's, busiest replica's share):"
	echo "$scaling"
fi
overhead="$(awk '
/^BenchmarkFeel\// {
	name = $1; sub(/-[0-9]+$/, "", name)
	seen[name] = 1
	for (i = 3; i < NF; i += 2)
		if ($(i + 1) ~ /-ms$/) { val[name, $(i + 1)] = $i; units[name] = units[name] " " $(i + 1) }
}
END {
	for (k in seen) {
		b = k; sub(/\/[^\/]+$/, "", b); b = b "/raw"
		if (!(b in seen) || b == k) continue
		m = split(units[k], us, " ")
		for (j = 1; j <= m; j++) {
			u = us[j]
			if (!((b, u) in val)) continue
			d = val[k, u] - val[b, u]
			verdict = ""
			if (u ~ /-p99-ms$/) verdict = (d < 20) ? "ok (target < 20)" : "MISSED (target < 20)"
			printf "  %-40s %-20s %8.2f - %-8.2f = %7.2f ms  %s\n", k, u, val[k, u], val[b, u], d, verdict
		}
	}
}' "$out" | sort)"
if [ -n "$overhead" ]; then
	echo
	echo "the project's own latency: ours minus the raw JetStream path of the same hops, same run:"
	echo "$overhead"
fi
requests="$(awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	line = ""
	for (i = 3; i < NF; i += 2)
		if ($(i + 1) ~ /^gh-/) line = line sprintf("  %s %s", $(i + 1), $i)
	if (line != "") printf "  %-40s%s\n", name, line
}' "$out" | sort)"
if [ -n "$requests" ]; then
	echo
	echo "GitHub requests, counted by the GitHub fake (targets, which the benchmarks enforce: an event"
	echo "from Slack at most one write of its own, an event from GitHub none, a quiet poll one request"
	echo "a repository answered 304 and none charged; gh-label-writes are a gate move's phase label):"
	echo "$requests"
fi
footprint="$(awk '
/^BenchmarkFootprint\// {
	name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkFootprint\//, "", name)
	for (i = 3; i < NF; i += 2) {
		v[name, $(i + 1)] = $i
		if (name == "rss/services" && $(i + 1) ~ /^rss-idle-MiB-/) {
			p = $(i + 1); sub(/^rss-idle-MiB-/, "", p); procs[p] = 1
		}
	}
}
END {
	if (("start/up", "ready-ms") in v && ("start/raw", "ready-ms") in v)
		printf "  start to ready: up %.0f ms, nats-server alone %.0f ms (%.3gx)\n", v["start/up", "ready-ms"], v["start/raw", "ready-ms"], v["start/up", "ready-ms"] / v["start/raw", "ready-ms"]
	if (("rss/up", "rss-idle-MiB") in v)
		printf "  up, one process: RSS %.1f MiB idle (its own %.1f), %.1f MiB under load (%.1f), peak %.1f MiB\n", v["rss/up", "rss-idle-MiB"], v["rss/up", "anon-idle-MiB"], v["rss/up", "rss-load-MiB"], v["rss/up", "anon-load-MiB"], v["rss/up", "hwm-MiB"]
	if (("soak", "events") in v)
		printf "  soak: %d events handled at %.1f/s, at most %d messages pending\n", v["soak", "events"], v["soak", "events/s"], v["soak", "max-pending"]
	n = 0
	for (p in procs) names[++n] = p
	if (n == 0) exit
	for (i = 2; i <= n; i++) # insertion sort: the processes by name
		for (j = i; j > 1 && names[j - 1] > names[j]; j--) { t = names[j]; names[j] = names[j - 1]; names[j - 1] = t }
	printf "  %-16s %6s %6s %6s %9s %9s %8s %11s %10s %11s\n", "process (MiB)", "idle", "load", "peak", "own idle", "own load", "slope/h", "slope/100k", "heap/100k", "limit/100k"
	for (k = 1; k <= n; k++) {
		p = names[k]
		idle = v["rss/services", "rss-idle-MiB-" p]
		limit = 0.05 * idle
		s = (("soak", "rss-slope-MiB-per-100k-" p) in v) ? v["soak", "rss-slope-MiB-per-100k-" p] : ""
		h = (("soak", "heap-slope-MiB-per-100k-" p) in v) ? v["soak", "heap-slope-MiB-per-100k-" p] : ""
		ph = (("soak", "rss-slope-MiB-per-h-" p) in v) ? v["soak", "rss-slope-MiB-per-h-" p] : ""
		printf "  %-16s %6.1f %6.1f %6.1f %9.1f %9.1f %8s %11s %10s %11.2f\n", p, idle, v["rss/services", "rss-load-MiB-" p], v["rss/services", "hwm-MiB-" p], \
			v["rss/services", "anon-idle-MiB-" p], v["rss/services", "anon-load-MiB-" p], \
			ph == "" ? "-" : sprintf("%.2f", ph), s == "" ? "-" : sprintf("%.2f", s), h == "" ? "-" : sprintf("%.2f", h), limit
	}
	printf "  %-16s %6.1f %6.1f %6s %9.1f %9.1f\n", "all", v["rss/services", "rss-idle-MiB"], v["rss/services", "rss-load-MiB"], "", v["rss/services", "anon-idle-MiB"], v["rss/services", "anon-load-MiB"]
}' "$out")"
if [ -n "$footprint" ]; then
	echo
	echo "footprint (BenchmarkFootprint; RSS, MiB, \"own\" its anonymous part, not the binary's shared pages;"
	echo "slopes of RSS and Go heap over the soak; a service fails the benchmark when either grows by more than"
	echo "limit/100k, 5 % of its idle RSS per 100k events, beyond twice the slope's error):"
	echo "$footprint"
fi
# The summary docs/performance.md and the README quote: one line per figure
# of issue 30 that ran, each beside its baseline or target.
summary="$(awk '
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i += 2) v[name, $(i + 1)] = $i
	seen[name] = 1
}
function ratio(a, b, u) { return ((a, u) in v && (b, u) in v && v[b, u] > 0) ? v[a, u] / v[b, u] : -1 }
function row(what, val, base, verdict) { printf "  | %-46s | %-22s | %-34s |\n", what, val, base " " verdict }
END {
	worst = ""; w = -1e9
	for (k in seen) {
		if (k !~ /^BenchmarkFeel\/[^\/]+\/loop$/) continue
		b = k; sub(/\/loop$/, "/raw", b)
		for (key in v) {
			split(key, kk, SUBSEP)
			if (kk[1] != k || kk[2] !~ /-p99-ms$/ || !((b, kk[2]) in v)) continue
			d = v[k, kk[2]] - v[b, kk[2]]
			if (d > w) { w = d; worst = k " " kk[2] }
		}
	}
	if (worst != "") {
		sub(/^BenchmarkFeel\//, "", worst)
		row("latency a person feels, worst p99 ours - raw", sprintf("%.1f ms", w), "(" worst ")", w < 20 ? "target < 20: ok" : "target < 20: MISSED")
	}
	mw = -1
	for (k in seen) if (k ~ /^BenchmarkFeel\// && (k, "gh-writes/event") in v && v[k, "gh-writes/event"] > mw) mw = v[k, "gh-writes/event"]
	if (mw >= 0) row("GitHub writes of its own per event, most", sprintf("%.2f", mw), "", "target <= 1")
	if (("BenchmarkPollQuiet", "gh-requests/repo") in v)
		row("quiet poll cycle, requests per repository", sprintf("%.2f (%.2f charged)", v["BenchmarkPollQuiet", "gh-requests/repo"], v["BenchmarkPollQuiet", "gh-charged/repo"]), "", "target 1 (0 charged)")
	split("senders=1 senders=8 items=200/senders=1 items=200/senders=8", cases, " ")
	for (c = 1; c <= 4; c++) {
		r = ratio("BenchmarkWebhookIntake/" cases[c] "/up", "BenchmarkWebhookIntake/" cases[c] "/raw", "deliveries/s")
		if (r >= 0) row("intake under the pipeline, " cases[c], sprintf("%.0f/s", v["BenchmarkWebhookIntake/" cases[c] "/up", "deliveries/s"]), sprintf("raw %.0f/s", v["BenchmarkWebhookIntake/" cases[c] "/raw", "deliveries/s"]), sprintf("= %.2fx (goal 0.6)", r))
	}
	for (s = 0; s < 2; s++) {
		p = s ? "raw" : "up"
		r = ratio("BenchmarkWebhookIntake/scale/" p "/busy=16", "BenchmarkWebhookIntake/scale/" p "/busy=1", "events/s")
		if (r >= 0) row("events/s, 16 partitions busy (" p ")", sprintf("%.0f/s", v["BenchmarkWebhookIntake/scale/" p "/busy=16", "events/s"]), sprintf("1 busy %.0f/s", v["BenchmarkWebhookIntake/scale/" p "/busy=1", "events/s"]), sprintf("= %.2fx (goal 8)", r))
	}
	f = "BenchmarkFootprint/"
	r = ratio(f "start/up", f "start/raw", "ready-ms")
	if (r >= 0) row("up, start to ready", sprintf("%.0f ms", v[f "start/up", "ready-ms"]), sprintf("nats-server alone %.0f ms", v[f "start/raw", "ready-ms"]), sprintf("= %.0fx", r))
	if ((f "rss/up", "rss-idle-MiB") in v)
		row("up, resident memory idle / under load", sprintf("%.0f / %.0f MiB", v[f "rss/up", "rss-idle-MiB"], v[f "rss/up", "rss-load-MiB"]), "", "")
	worst = ""; w = -1e9
	for (key in v) {
		split(key, kk, SUBSEP)
		if (kk[1] != f "soak" || kk[2] !~ /^rss-slope-MiB-per-100k-/) continue
		p = kk[2]; sub(/^rss-slope-MiB-per-100k-/, "", p)
		if (p == "nats-server" || !((f "rss/services", "rss-idle-MiB-" p) in v)) continue
		share = v[key] / v[f "rss/services", "rss-idle-MiB-" p]
		if (share > w) { w = share; worst = p }
	}
	if (worst != "") row("soak, most RSS growth of a service per 100k events", sprintf("%.1f %% of idle (%s)", 100 * w, worst), "", "limit 5 %")
}' "$out")"
if [ -n "$summary" ]; then
	echo
	echo "summary (docs/performance.md; the README quotes it):"
	echo "  | figure                                         | measured               | baseline or target                 |"
	echo "  |---|---|---|"
	echo "$summary"
fi
