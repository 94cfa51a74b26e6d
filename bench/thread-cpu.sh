#!/bin/bash
# thread-cpu.sh: where tpd's CPU goes, thread by thread, per request.
#
# usage: bench/thread-cpu.sh BUILD_DIR [-w WORKERS] [-s SECONDS] [-t 'TPD_OPTIONS']
#                            -- TPBENCH_ARGS...
#   e.g. bench/thread-cpu.sh _build/dev -w 2 -t '--journal-sync interval' -- -c 50 -w 1 --echo 64
#
# Starts BUILD_DIR/tpd on a private socket, with no configuration file and its
# state_dir in a temp dir (never the machine's own), TPD_OPTIONS added (split
# on spaces), warms it up for a second with the
# same load, then runs BUILD_DIR/bench/tpbench for SECONDS (default 3) and
# prints, for each of tpd's threads (the loop is "tpd", workers "t:POOL/N",
# the deadline watcher "t~POOL/N"), its CPU time, read and write syscalls and
# context switches per request, from /proc/PID/task/TID/{stat,io,status}.
# A manual tool for performance work: make bench gives the comparisons.
set -euo pipefail

[ $# -ge 1 ] || { sed -n '4,6p' "$0" >&2; exit 64; }
build=$1; shift
workers=2 secs=3 tpd_options=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	case $1 in
	-w) workers=$2; shift 2 ;;
	-s) secs=$2; shift 2 ;;
	-t) tpd_options=$2; shift 2 ;;
	*) echo "thread-cpu.sh: unknown option $1" >&2; exit 64 ;;
	esac
done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "thread-cpu.sh: give tpbench's load after --" >&2; exit 64; }

dir=$(mktemp -d)
# shellcheck disable=SC2086 # TPD_OPTIONS: words on purpose
"$build/tpd" -f -c none -s "$dir/sock" --state-dir "$dir/state" -w "$workers" \
	--limit "$workers" -q 4096 --max-connections 20000 --log-level warning $tpd_options \
	2>"$dir/tpd.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/sock" ] && break; sleep 0.05; done

# tid comm cpu_ticks syscr syscw voluntary_switches involuntary_switches
snapshot() {
	for t in /proc/$pid/task/*; do
		echo "${t##*/} $(tr ' ' _ <"$t/comm") $(awk '{print $14 + $15}' "$t/stat")" \
		    "$(awk '/^syscr|^syscw/ {printf "%s ", $2}' "$t/io")" \
		    "$(awk '/ctxt_switches/ {printf "%s ", $2}' "$t/status")"
	done | sort
}

"$build/bench/tpbench" -s "$dir/sock" -d 1 "$@" >/dev/null
snapshot >"$dir/before"
"$build/bench/tpbench" -s "$dir/sock" -d "$secs" --json "$@" >"$dir/run.json"
snapshot >"$dir/after"

python3 - "$dir" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
d, hz = sys.argv[1], int(sys.argv[2])
run = json.load(open(d + "/run.json"))
n = run["ok"]
print("rate %.0f/s  p50 %.1f us  tpbench CPU %.2f us/req" % (
    run["rate"], run["latency_us"]["p50"],
    (run["cpu_user_s"] + run["cpu_sys_s"]) * 1e6 / max(n, 1)))
before = {l.split()[0]: l.split() for l in open(d + "/before")}
for line in open(d + "/after"):
    a = line.split()
    b = before.get(a[0])
    if b is None or n == 0:
        continue
    cpu_us = (int(a[2]) - int(b[2])) * 1e6 / hz / n
    share = cpu_us * run["rate"] / 1e6 * 100
    print("%-7s %-13s %7.2f us/req (%3.0f%% of a CPU)  read() %.2f  write() %.2f  "
          "sleeps %.2f  preempted %.2f" % (
              a[0], a[1], cpu_us, share, (int(a[3]) - int(b[3])) / n,
              (int(a[4]) - int(b[4])) / n, (int(a[5]) - int(b[5])) / n,
              (int(a[6]) - int(b[6])) / n))
EOF
