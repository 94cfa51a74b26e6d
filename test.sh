#!/usr/bin/env bash
# test.sh: install the build dependencies, then build and test tpd four ways:
#   _build/werror  --enable-werror, make check
#   _build/asan    --enable-sanitizers=address,undefined, make check
#   _build/tsan    --enable-sanitizers=thread, make check
#   make distcheck from _build/werror
# Every stage runs even after an earlier one failed. The last line is
# "N passed, N failed" (", N skipped" when some were), summed over the
# automake test results of the three builds; a stage that fails outside
# the tests (configure, make, distcheck) counts as one failure. Exits
# non-zero when anything failed.
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

build werror --enable-werror
build asan --enable-sanitizers=address,undefined
build tsan --enable-sanitizers=thread

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
