#!/bin/sh
# test_deb.sh: builds the Debian package from this source tree with
# dpkg-buildpackage -us -uc -b, then checks what it installs (dpkg -c: the
# programs, units, man pages and the docs of doc/), how it
# installs it (conffiles, enabled units, sysusers, tmpfiles), that lintian
# reports no error and that the build leaves nothing .gitignore misses.
# Slow (a full build), so it runs only with TPD_TEST_DEB=1.
# Needs the Debian packages dpkg-dev, debhelper, lintian and the build
# dependencies of debian/control. No network.
set -eu

if [ "${TPD_TEST_DEB:-}" != 1 ]; then
	echo "SKIP: building the .deb takes minutes; set TPD_TEST_DEB=1 to run this test"
	exit 77
fi
for tool in dpkg-buildpackage dh lintian; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "FAIL: $tool is missing: apt-get install dpkg-dev debhelper lintian"
		exit 1
	fi
done

src=$(cd "${srcdir:-$(dirname "$0")/..}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tpd-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
tree="$work/tpd"
mkdir "$tree"

# A clean copy of the sources: git's view when there is one (tracked files and
# new ones not ignored, as they are in the working tree), else the tree minus
# build products.
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$src" && git ls-files -z --cached --others --exclude-standard |
	    xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
	    tar --null -T - -cf -) | tar -C "$tree" -xf -
else
	tar -C "$src" --exclude='./_build*' --exclude='*.o' --exclude='*.a' \
	    --exclude=./config.status --exclude=./config.log -cf - . | tar -C "$tree" -xf -
fi

# The copy as a git tree of its own, to see what the build leaves behind.
if command -v git >/dev/null 2>&1; then
	git -C "$tree" init -q && git -C "$tree" add -A &&
	    git -C "$tree" -c user.name=test -c user.email=test@localhost \
	    commit -qm "the sources" || { echo "FAIL: cannot make a git tree of the copy"; exit 1; }
fi

echo "building the package in $tree"
if ! (cd "$tree" && env -u TPD_TEST_DEB DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}" \
    dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
	tail -n 60 "$work/build.log"
	echo "FAIL: dpkg-buildpackage failed"
	exit 1
fi
deb=$(ls "$work"/tpd_*.deb)
echo "built $(basename "$deb")"

fail=0
bad() {
	echo "FAIL: $*"
	fail=1
}

# An in-tree build leaves nothing that .gitignore does not cover.
if [ -d "$tree/.git" ]; then
	left=$(git -C "$tree" status --porcelain)
	[ -z "$left" ] || bad "the build leaves files .gitignore does not cover: $(echo $left)"
fi

contents=$(dpkg -c "$deb" | awk '{ print $6 }')
for path in ./usr/sbin/tpd ./etc/tpd/tpd.conf \
    ./lib/systemd/system/tpd.service ./lib/systemd/system/tpd.socket \
    ./lib/systemd/system/tpd-tcp.socket \
    ./usr/lib/sysusers.d/tpd.conf ./usr/lib/tmpfiles.d/tpd.conf \
    ./usr/share/man/man8/tpd.8.gz ./usr/share/man/man5/tpd.conf.5.gz \
    ./usr/share/doc/tpd/examples/tpd-run-as.conf; do
	echo "$contents" | grep -qx "$path" || bad "$path is not in the package"
done
if grep -q '^bin_PROGRAMS += tpctl' "$tree/Makefile.am"; then
	echo "$contents" | grep -qx ./usr/bin/tpctl || bad "./usr/bin/tpctl is not in the package"
	if [ -e "$tree/client/tpctl.1" ] || grep -q 'tpctl\.1' "$tree/Makefile.am"; then
		echo "$contents" | grep -qx ./usr/share/man/man1/tpctl.1.gz ||
		    bad "tpctl.1 is not in the package"
	fi
else
	echo "note: this tree does not build tpctl yet: not looked for"
fi

# the documentation: the protocol and exec references (compressed or not),
# the README, and the ISC copyright
for doc in protocol.md exec.md README.md; do
	echo "$contents" | grep -qx -e "./usr/share/doc/tpd/$doc" -e "./usr/share/doc/tpd/$doc.gz" ||
	    bad "/usr/share/doc/tpd/$doc is not in the package"
done
echo "$contents" | grep -qx ./usr/share/doc/tpd/copyright || bad "no /usr/share/doc/tpd/copyright"
dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/share/doc/tpd/copyright >"$work/copyright"
grep -qx "License: ISC" "$work/copyright" || bad "debian/copyright does not give the ISC license"
grep -q "Copyright (c) 2026 tpd developers" "$tree/LICENSE" ||
    bad "LICENSE does not name the copyright holders"

dpkg-deb -e "$deb" "$work/control"
grep -qx /etc/tpd/tpd.conf "$work/control/conffiles" || bad "/etc/tpd/tpd.conf is not a conffile"
postinst="$work/control/postinst"
grep -q "deb-systemd-helper .*enable.*tpd.socket" "$postinst" || bad "tpd.socket is not enabled"
grep -q "deb-systemd-helper .*enable.*tpd.service" "$postinst" || bad "tpd.service is not enabled"
# --no-enable: tpd-tcp.socket is enabled again on upgrade only if the admin enabled it
grep -q "debian-installed 'tpd-tcp.socket'" "$postinst" ||
    bad "tpd-tcp.socket must not be enabled on install"
if grep "deb-systemd-invoke" "$postinst" | grep -q tpd-tcp.socket; then
	bad "tpd-tcp.socket must not be started on install"
fi
grep -q "systemd-sysusers" "$postinst" || bad "postinst does not create the user tpd"
grep -q "systemd-tmpfiles" "$postinst" || bad "postinst does not create /run/tpd"

dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./lib/systemd/system/tpd.service >"$work/tpd.service"
grep -qx "ExecStart=/usr/sbin/tpd -f -c /etc/tpd/tpd.conf" "$work/tpd.service" ||
    bad "tpd.service does not run /usr/sbin/tpd with /etc/tpd/tpd.conf"

echo "lintian:"
if ! lintian --fail-on error "$deb" >"$work/lintian.log" 2>&1; then
	bad "lintian reports errors"
fi
sed 's/^/  /' "$work/lintian.log"
grep -q '^E:' "$work/lintian.log" && bad "lintian: errors above"

if [ "$fail" = 0 ]; then
	echo "ok: package contents, docs and copyright, conffile, enabled units, sysusers, tmpfiles, no lintian error"
fi
exit "$fail"
