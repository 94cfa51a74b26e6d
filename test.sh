#!/usr/bin/env bash
# test.sh: install the build dependencies, then build and test tpd five ways:
#   _build/werror  --enable-werror, make check
#   _build/asan    --enable-sanitizers=address,undefined, make check
#   _build/tsan    --enable-sanitizers=thread, make check
#   _build/fuzz    CC=clang --enable-fuzzing: each libFuzzer target of
#                  tests/fuzz/ runs for TPD_FUZZ_SECONDS (default 60)
#   make distcheck from _build/werror
# Every stage runs even after an earlier one failed. The last line is
# "N passed, N failed" (", N skipped" when some were), summed over the
# automake test results of the three builds and the fuzz targets (one
# result each); a stage that fails outside the tests (configure, make,
# distcheck) counts as one failure. Exits non-zero when anything failed.
set -uo pipefail
top=$(cd "$(dirname "$0")" && pwd)
cd "$top"
. tests/deps.sh

jobs=-j2
passed=0 failed=0 skipped=0
t_start=$SECONDS

stage_failed() { # NAME: a failure outside the test results
	echo "test.sh: stage $1 FAILED" >&2
	failed=$((failed + 1))
}

# count_results DIR: adds DIR's automake results (.trs) to the totals and
# prints the log tails of the failing tests; returns 1 if any failed.
count_results() {
	local dir=$1 trs res bad=0
	while IFS= read -r -d '' trs; do
		while read -r res; do
			case $res in
			PASS | XPASS | XFAIL) passed=$((passed + 1)) ;;
			SKIP) skipped=$((skipped + 1)) ;;
			*)
				failed=$((failed + 1))
				bad=1
				echo "---- $res: ${trs%.trs} (last lines of ${trs%.trs}.log)"
				tail -n 40 "${trs%.trs}.log" 2>/dev/null
				echo "----"
				;;
			esac
		done < <(sed -n 's/^:test-result: *\([A-Z]*\).*/\1/p' "$trs")
	done < <(find "$dir" -name '*.trs' -not -path '*/tpd-*/*' -print0 | sort -z)
	return $bad
}

# build NAME CONFIGURE-ARGS...: configure, make and make check in _build/NAME.
build() {
	local name=$1 dir=_build/$1 t0=$SECONDS
	shift
	echo "==== $name: configure $*"
	rm -rf "$dir"
	mkdir -p "$dir"
	if ! (cd "$dir" && ../../configure "$@" >configure.out 2>&1); then
		tail -n 30 "$dir/configure.out"
		stage_failed "$name configure"
		return
	fi
	if ! make -C "$dir" $jobs >/dev/null; then
		stage_failed "$name make"
		return
	fi
	local check_ok=1
	make -C "$dir" $jobs check >"$dir/check.out" 2>&1 || check_ok=0
	grep -E '^(PASS|FAIL|XPASS|XFAIL|SKIP|ERROR):' "$dir/check.out"
	if ! count_results "$dir"; then
		:
	elif [ $check_ok = 0 ]; then
		# make check failed without a failing test result: show why.
		tail -n 30 "$dir/check.out"
		stage_failed "$name make check"
	fi
	echo "==== $name: done in $((SECONDS - t0)) s"
}

# fuzz_run NAME SECONDS: runs tests/fuzz/NAME-fuzzer on a fresh copy of its
# seed corpus (tests/fuzz/ is never written to); its output goes to
# _build/fuzz/NAME.log, its exit status to _build/fuzz/NAME.rc, and what it
# finds (a crash, leak, timeout or OOM reproducer) to _build/fuzz/artifacts/NAME/.
fuzz_run() {
	local name=$1 secs=$2 dir=_build/fuzz dict=()
	rm -rf "$dir/corpus/$name" "$dir/artifacts/$name"
	mkdir -p "$dir/corpus/$name" "$dir/artifacts/$name"
	cp tests/fuzz/"$name"/* "$dir/corpus/$name/"
	[ ! -f "tests/fuzz/$name.dict" ] || dict=("-dict=tests/fuzz/$name.dict")
	"$dir/tests/fuzz/$name-fuzzer" -max_total_time="$secs" -print_final_stats=1 \
		-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$dir/artifacts/$name/" \
		"${dict[@]}" "$dir/corpus/$name" >"$dir/$name.log" 2>&1
	echo $? >"$dir/$name.rc"
}

# fuzz_stage: builds the fuzz targets in _build/fuzz and runs them two at a
# time (the machine has two CPUs); each target is one result.
fuzz_stage() {
	local dir=_build/fuzz t0=$SECONDS secs=${TPD_FUZZ_SECONDS:-60} names=() src name
	local running=0 rc execs art
	echo "==== fuzz: configure CC=clang --enable-fuzzing --enable-werror; $secs s per target"
	rm -rf "$dir"
	mkdir -p "$dir"
	if ! (cd "$dir" && ../../configure CC=clang --enable-fuzzing --enable-werror >configure.out 2>&1); then
		tail -n 30 "$dir/configure.out"
		stage_failed "fuzz configure"
		return
	fi
	if ! make -C "$dir" $jobs fuzz-targets >"$dir/make.out" 2>&1; then
		tail -n 30 "$dir/make.out"
		stage_failed "fuzz make"
		return
	fi
	for src in tests/fuzz/*-fuzzer.c; do
		name=${src##*/}
		names+=("${name%-fuzzer.c}")
	done
	for name in "${names[@]}"; do
		if [ $running -ge 2 ]; then
			wait -n
			running=$((running - 1))
		fi
		fuzz_run "$name" "$secs" &
		running=$((running + 1))
	done
	wait
	for name in "${names[@]}"; do
		rc=$(cat "$dir/$name.rc" 2>/dev/null || echo none)
		execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/$name.log")
		if [ "$rc" = 0 ]; then
			passed=$((passed + 1))
			echo "PASS: fuzz/$name (${execs:-?} executions in $secs s)"
			continue
		fi
		failed=$((failed + 1))
		echo "FAIL: fuzz/$name (exit status $rc after ${execs:-?} executions; log $dir/$name.log)"
		# the report, from its first line (the hex dump of the input left out)
		echo "---- the report in $dir/$name.log"
		LC_ALL=C awk '/-fuzzer: |ERROR: |WARNING: |runtime error: |^SUMMARY: / { p = 1 }
			p && !/^0x/' "$dir/$name.log" | head -n 60
		echo "----"
		for art in "$dir/artifacts/$name"/*; do
			[ ! -f "$art" ] || echo "reproducer: $art (run: $dir/tests/fuzz/$name-fuzzer $art)"
		done
	done
	echo "==== fuzz: done in $((SECONDS - t0)) s"
}

DEPS_LISTS="build-deps.txt test-deps.txt"
if ! deps_install "$top"; then
	echo "0 passed, 1 failed"
	exit 1
fi
mkdir -p m4 # aclocal's -I m4 (configure.ac's macro dir) warns when it is missing
if ! autoreconf -fi; then
	stage_failed autoreconf
	echo "$passed passed, $failed failed"
	exit 1
fi
# An in-tree configure would make every out-of-tree configure refuse to run.
[ ! -f config.status ] || make distclean >/dev/null

# The Debian package is built and checked once, in the first build.
TPD_TEST_DEB=1 build werror --enable-werror
build asan --enable-sanitizers=address,undefined
build tsan --enable-sanitizers=thread
fuzz_stage

echo "==== distcheck"
t0=$SECONDS
if [ -f _build/werror/Makefile ]; then
	if ! make -C _build/werror $jobs distcheck DISTCHECK_CONFIGURE_FLAGS=--enable-werror \
	    >_build/distcheck.out 2>&1; then
		tail -n 60 _build/distcheck.out
		find _build/werror -path '*/tpd-*/*' -name '*.trs' -exec grep -l -E ':test-result: (FAIL|ERROR)' {} + 2>/dev/null |
			while read -r trs; do echo "---- ${trs%.trs}.log"; tail -n 40 "${trs%.trs}.log"; done
		stage_failed distcheck
	else
		grep 'archives ready' _build/distcheck.out
	fi
else
	stage_failed "distcheck (no configured werror build)"
fi
echo "==== distcheck: done in $((SECONDS - t0)) s"

echo "test.sh: all stages took $((SECONDS - t_start)) s"
summary="$passed passed, $failed failed"
[ $skipped = 0 ] || summary="$summary, $skipped skipped"
echo "$summary"
[ $failed = 0 ]
