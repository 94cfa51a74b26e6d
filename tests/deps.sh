# deps.sh: sourced by run.sh and test.sh. Installs packaging/build-deps.txt.
#
# On a fresh Debian machine, as root: apt-get update, then install what is
# missing. When everything is already installed, nothing is run, so the
# scripts also work for a developer who is not root.

deps_list() {
	sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$1/packaging/build-deps.txt"
}

# deps_missing TOP: prints the packages of the list that are not installed.
deps_missing() {
	local pkg
	for pkg in $(deps_list "$1"); do
		if ! dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
			echo "$pkg"
		fi
	done
}

# deps_install TOP: returns non-zero, with a message, when it cannot.
deps_install() {
	local missing
	if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
		echo "deps: this is not a Debian system (no dpkg-query/apt-get); install by hand:" $(deps_list "$1") >&2
		return 1
	fi
	missing=$(deps_missing "$1" | tr '\n' ' ')
	if [ -z "$missing" ]; then
		echo "deps: build dependencies already installed"
		return 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing packages: $missing; run as root, or: apt-get install $missing" >&2
		return 1
	fi
	echo "deps: installing $missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update && apt-get install -y --no-install-recommends $missing
}
