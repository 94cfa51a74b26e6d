#!/usr/bin/env bash
# run.sh: install the build dependencies, build tpd, and run it in the
# foreground on its built-in defaults. Extra arguments go to tpd, e.g.
#   ./run.sh -w 8 --log-level debug
# The build lives in _build/run (out of tree, so ./test.sh can share the tree).
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
cd "$top"
. tests/deps.sh
deps_install "$top"

mkdir -p m4 # aclocal's -I m4 (configure.ac's macro dir) warns when it is missing
autoreconf -fi
# An in-tree configure would make every out-of-tree configure refuse to run.
[ ! -f config.status ] || make distclean
build=_build/run
mkdir -p "$build"
cd "$build"
../../configure
make -j2

if [ -x ./tpd ]; then
	exec ./tpd -f "$@"
fi
# Until the daemon exists, run what does: the pool benchmark.
echo "run.sh: tpd is not built yet; running the pool benchmark instead" >&2
exec ./bench/pool-bench
