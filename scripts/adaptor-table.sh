#!/usr/bin/env bash
# adaptor-table.sh — the adaptor's cost table: adaptor ÷ raw backend ratios
# from adaptor/bench_test.go, each benchmark run COUNT times (default 3),
# printed as "runs → median" per row, ready for an issue or a closing note.
# Rows ending in /cpu are the CPU-time ratio (raw CPU ÷ adaptor CPU per
# record): steadier than the records/s ratio where the disk's writeback, not
# the CPU, decides the pace (the local rows without sync).
#
#   scripts/adaptor-table.sh            # 3 runs, 30000 appends, 3 scans
#   COUNT=5 APPENDS=50000x scripts/adaptor-table.sh
#
# The ratios are measured within one benchmark (raw and adaptor rounds
# alternate), so they hold on a noisy machine better than absolute rates;
# run it on an otherwise idle machine all the same. Needs only Go.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-3}
APPENDS=${APPENDS:-30000x}
SCANS=${SCANS:-3x}
OPENS=${OPENS:-20x}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

go test -c -o "$out/adaptor.test" ./adaptor/
(cd adaptor && "$out/adaptor.test" -test.run '^$' -test.bench 'Append' -test.benchtime "$APPENDS" -test.count "$COUNT") >"$out/bench.txt"
(cd adaptor && "$out/adaptor.test" -test.run '^$' -test.bench 'Scan' -test.benchtime "$SCANS" -test.count "$COUNT") >>"$out/bench.txt"
(cd adaptor && "$out/adaptor.test" -test.run '^$' -test.bench 'Open' -test.benchtime "$OPENS" -test.count "$COUNT") >>"$out/bench.txt"

# One line per run: name and its ratio; then runs and the median per name.
awk '/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 1; i <= NF; i++) {
		if ($i == "ratio") print name, $(i-1)
		if ($i == "batch-ratio") print name "/batches", $(i-1)
		if ($i == "goroutines-ratio") print name "/goroutines", $(i-1)
		if ($i == "cpu-ratio") print name "/cpu", $(i-1)
	}
}' "$out/bench.txt" | sort -s -k1,1 | awk '
function median(   n, i, j, t, a) {
	n = split(vals, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return a[int((n + 1) / 2)]
}
$1 != cur { if (cur != "") printf "| %-40s | %-24s | %.2f |\n", cur, runs, median(); cur = $1; runs = ""; vals = "" }
{ runs = runs (runs == "" ? "" : ", ") sprintf("%.2f", $2); vals = vals " " $2 }
END { if (cur != "") printf "| %-40s | %-24s | %.2f |\n", cur, runs, median() }
' | { printf "| %-40s | %-24s | %s |\n|---|---|---|\n" "benchmark (adaptor ÷ raw; Open: 1 GiB ÷ 10 MiB)" "runs" "median"; cat; }
