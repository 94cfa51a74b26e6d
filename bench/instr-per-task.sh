#!/bin/bash
# instr-per-task.sh: instructions the daemon spends per echo task, under
# callgrind, for one or more build directories: (Ir(16000 tasks) - Ir(4000
# tasks)) / 12000. Unlike tasks/s it does not depend on what else the machine
# runs, so it tells whether a change costs the hot path anything (compare the
# build before a change with the one after).
#
# usage: bench/instr-per-task.sh [-t 'TPD_OPTIONS'] BUILD_DIR...
#   (each BUILD_DIR with tpd and bench/tpbench)
# TPD_OPTIONS (split on spaces) replace the default --journal off: for
# example -t '--journal-sync interval' counts what the journal costs a task,
# its sync and compaction threads included (valgrind counts every thread).
# Needs valgrind. Every tpd it starts is stopped by its own shutdown request.
set -eu
tpd_options="--journal off"
if [ "${1:-}" = "-t" ]; then
	[ $# -ge 2 ] || { echo "$0: -t needs the options" >&2; exit 64; }
	tpd_options=$2
	shift 2
fi
[ $# -ge 1 ] || { echo "usage: $0 [-t 'TPD_OPTIONS'] BUILD_DIR..." >&2; exit 64; }
command -v valgrind >/dev/null || { echo "$0: valgrind is needed" >&2; exit 69; }

# Ir of one tpd that ran n echo tasks (1 connection, 64 in flight)
ir() {
	local build=$1 n=$2 d pid
	d=$(mktemp -d)
	# no configuration file, the state_dir in the temp dir: never the machine's own
	# shellcheck disable=SC2086 # TPD_OPTIONS: words on purpose
	valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" "$build/tpd" -f -c none \
	    -s "$d/s" --state-dir "$d/state" \
	    -w 2 -q 4096 --log-level warning $tpd_options >"$d/log" 2>&1 &
	pid=$!
	for _ in $(seq 600); do [ -S "$d/s" ] && break; sleep 0.1; done
	"$build/bench/tpbench" -s "$d/s" --op ping -n 1 --connect-timeout 60000 >/dev/null
	"$build/bench/tpbench" -s "$d/s" -c 1 -w 64 -n "$n" --echo 64 >/dev/null
	"$build/bench/tpbench" -s "$d/s" --raw '{"op":"shutdown","mode":"now"}' -n 1 >/dev/null
	wait "$pid"
	awk '/^(summary|totals):/ { print $2; exit }' "$d/cg.out"
	rm -rf "$d"
}

for build in "$@"; do
	a=$(ir "$build" 4000)
	b=$(ir "$build" 16000)
	echo "$build ($tpd_options): $(( (b - a) / 12000 )) instructions per echo task"
done
