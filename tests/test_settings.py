#!/usr/bin/env python3
"""Flags and file keys are one grammar: every key of tpd's table (read from `tpd --help`,
checked against the keys conf/tpd.conf documents) is run as a flag (`tpd -n --KEY V`) and
as a line of a file (`tpd -n -c F`) over the same good and bad values, and must get the
same verdict and the same message after its name. Durations and sizes are also run
through tpctl, which must accept and refuse what tpd does, with the same reasons. Then
what only the command line has: usage errors, pool figures across flag and file, -l over
the file's listen, and a SIGHUP that checks the flags again over the new file."""
import grp
import os
import re
import signal
import subprocess
import tempfile

from tpdtest import TPCTL, TPD, TIMEOUT, Daemon, check, eventually, run_tests

SRCDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GROUP = grp.getgrgid(os.getgid()).gr_name
# The file keys are token files: a good value is a file tpd can read as one (a bare token).
_fd, READABLE = tempfile.mkstemp(prefix="tpdsettings-", suffix=".token")
os.write(_fd, b"settings-test-token\n")
os.close(_fd)

HELP_LINE = re.compile(r"^  (?:-(\w), )?\s*--([a-z-]+) (\S+)\s+\[(daemon|exec|pool default)\] "
                       r"(\w+)(?:, repeatable)?(?: \((\S+) to (\S+)\))?(?:, default .*?)?"
                       r"(?:, read at start)?$")


def tpd(*args):
    """tpd with args after -c none (a -c among them wins): never the machine's file."""
    r = subprocess.run([TPD, "-c", "none"] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=TIMEOUT)
    # "configuration OK: FILE" names the file read: the verdict is the same either way
    return r.returncode, re.sub(r"^configuration OK: .*", "configuration OK", r.stdout), r.stderr


def flags_of_keys():
    """The table of keys as `tpd --help` lists it: one dict per key."""
    rc, out, _ = tpd("--help")
    check(rc == 0, "tpd --help exits 0")
    keys = []
    for line in out.split("\n"):
        m = HELP_LINE.match(line)
        if m:
            letter, flag, meta, sect, key, lo, hi = m.groups()
            keys.append({"letter": letter, "flag": "--" + flag, "meta": meta,
                         "sect": sect, "key": key, "lo": lo, "hi": hi})
    check(len(keys) > 10, "help lists the keys' flags: %r", out)
    return keys


def documented_keys():
    """(section, key) for every key conf/tpd.conf shows, commented out with its default."""
    sect, keys = None, set()
    with open(os.path.join(SRCDIR, "conf", "tpd.conf")) as f:
        for line in f:
            m = re.match(r"^#?\[(daemon|exec|pool|source) ?[^\]]*\]", line)
            if m:
                sect = m.group(1)
                continue
            m = re.match(r"^#(\w+) = ", line)
            if m and sect is not None:
                keys.add((sect, m.group(1)))
    return keys


def num(v):
    return int(v)


def size_text(n):
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("k", 1 << 10)):
        if n and n % mult == 0:
            return "%d%s" % (n // mult, unit)
    return str(n)


def parse_size(s):
    mult = {"k": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1], 1)
    return int(s.rstrip("kMG")) * mult


def parse_ms(s):
    for unit, mult in (("ms", 1), ("min", 60000), ("s", 1000), ("h", 3600000), ("d", 86400000)):
        if s.endswith(unit):
            return int(s[:-len(unit)]) * mult
    raise ValueError(s)


def values_for(k):
    """Good and bad values for a key, from its kind and its range."""
    meta = k["meta"]
    if meta == "N":
        lo, hi = num(k["lo"]), num(k["hi"])
        vals = [str(lo), str(hi), str(hi + 1), "12abc", "-1", "1.5", "",
                "99999999999999999999999"]
        if lo > 0:
            vals.append(str(lo - 1))
        return vals
    if meta == "SIZE":
        lo, hi = parse_size(k["lo"]), parse_size(k["hi"])
        vals = [size_text(lo), size_text(hi), size_text(hi * 2), str(hi + 1), "lots", "1.1k",
                "64ki", "1T", "", "99999999999G", "1.5M" if lo <= 3 << 19 <= hi else "1k"]
        if lo > 0:
            vals.append(str(lo - 1))
        return vals
    if meta == "DUR":
        lo, hi = parse_ms(k["lo"]), parse_ms(k["hi"])
        return [k["lo"], k["hi"], "%dms" % (hi + 1), "5", "0", "1.5s", "250ms", "soon",
                "0.5ms", "5 s", "", "99999999999999d"] + (["%dms" % (lo - 1)] if lo else [])
    if meta == "PATH":
        return ["/tmp/tpd-settings.sock", "/" + "s" * 120, ""]
    if meta == "MODE":
        return ["0600", "660", "0999", "4755", "", "x"]
    if meta == "GROUP":
        return [GROUP, "no-such-group-tpdtest", ""]
    if meta == "FILE":
        return [READABLE, "/nonexistent/tok", ""]
    if meta == "LEVEL":
        return ["debug", "error", "loud", ""]
    if meta == "HOST:PORT":
        # names are not resolved by -n (only when tpd listens): nosuchhost.invalid passes both
        return ["127.0.0.1:7420", "[::1]:0", "*:0", "127.0.0.1:99999", "nohost", "::1:80",
                "nosuchhost.invalid:7420", "", "127.0.0.1:1 127.0.0.1:2", "127.0.0.1:1 127.0.0.1:1"]
    if meta == "token|none":
        return ["token", "none", "tokens", "None", ""]
    if meta == "auto|cgroup|process":
        # "cgroup" is left out: whether it can be used depends on the machine
        return ["auto", "process", "cgroups", ""]
    if meta == "CGROUP":
        return ["/tpd-settings-test", "", "relative/path"]
    if meta == "DIR":
        return ["/tmp/tpd-settings-state", "", "relative/dir"]
    if meta == "on|off":
        return ["on", "off", "yes", "On", ""]
    if meta == "commit|interval|none":
        return ["commit", "interval", "none", "always", ""]
    if meta == "reject|wait|drop_oldest":
        return ["reject", "wait", "drop_oldest", "drop", ""]
    if meta == "yes|no":
        return ["yes", "no", "on", ""]
    if meta == "owner|none":
        return ["owner", "none", "fifo", ""]
    if meta == "USER":
        return ["daemon", "caller", "nobody", "no-such-user-tpdtest", ""]
    if meta == "CORES":
        return ["0.5", "2", "0.01", "0.009", "1024", "1025", "1.", "x", "-1", ""]
    if meta == "NAME=VALUE":
        return ["FOO=bar", "FOO=", "1BAD=x", "NOEQUALS", "=x", ""]
    raise AssertionError("no values for %s %s: the test needs them for its kind %s"
                         % (k["sect"], k["key"], meta))


def file_verdict(text, prefix):
    """tpd -n -c on text: (exit status, messages with their FILE:LINE: [sect] key: cut)."""
    fd, path = tempfile.mkstemp(prefix="tpdsettings-", suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        rc, out, err = tpd("-n", "-c", path)
    finally:
        os.unlink(path)
    msgs = []
    for line in err.rstrip("\n").split("\n") if err else []:
        m = re.match(re.escape(path) + r":\d+: (.*)$", line)
        check(m is not None, "a file error names the file and line: %r", line)
        body = m.group(1)
        # an error between keys may be told at this key's line but name the other key
        check(body.startswith(prefix) or body.startswith("["), "%r starts with %r", body, prefix)
        msgs.append(body[len(prefix):] if body.startswith(prefix) else body)
    return rc, out, msgs


def flag_verdict(args, prefix):
    """tpd -n with args: (exit status, messages with their "tpd: FLAG VALUE: " cut)."""
    rc, out, err = tpd("-n", *args)
    msgs = []
    for line in err.rstrip("\n").split("\n") if err else []:
        check(line.startswith(prefix), "%r names the flag as %r", line, prefix)
        msgs.append(line[len(prefix):])
    return rc, out, msgs


def same(what, flag, file):
    (frc, fout, fmsgs), (crc, cout, cmsgs) = flag, file
    check(frc == crc, "%s: the flag exits %d, the file %d (%r / %r)", what, frc, crc, fmsgs, cmsgs)
    check(fmsgs == cmsgs, "%s: messages differ:\n flag %r\n file %r", what, fmsgs, cmsgs)
    check(fout == cout, "%s: stdout differs: %r / %r", what, fout, cout)
    return frc


def test_every_key_is_a_flag_and_documented():
    keys = flags_of_keys()
    listed = {("pool" if k["sect"].startswith("pool") else k["sect"], k["key"]) for k in keys}
    # a [source NAME]'s keys have no flags (test_conf.py reads them as documented)
    documented = {k for k in documented_keys() if k[0] != "source"}
    check(listed == documented, "keys with a flag %r\n and keys conf/tpd.conf documents %r differ"
          " by %r", sorted(listed), sorted(documented), sorted(listed ^ documented))
    flags = [k["flag"] for k in keys]
    check(len(set(flags)) == len(flags), "no flag serves two keys: %r", flags)
    for k in keys:
        if k["sect"] != "pool default" and k["key"] not in ("socket", "listen"):
            check(k["flag"] == "--" + k["key"].replace("_", "-"),
                  "%s's flag is derived from its name: %s", k["key"], k["flag"])
    by_key = {k["key"]: k for k in keys}
    check(by_key["socket"]["letter"] == "s" and by_key["listen"]["letter"] == "l", "-s and -l")
    check(by_key["size"]["flag"] == "--workers" and by_key["size"]["letter"] == "w", "-w")
    check(by_key["capacity"]["flag"] == "--queue" and by_key["capacity"]["letter"] == "q", "-q")
    check(by_key["limit"]["flag"] == "--limit", "--limit")


def test_every_flag_and_its_key_give_the_same_verdict():
    runs = refused = 0
    for k in flags_of_keys():
        sect = k["sect"]
        for v in values_for(k):
            what = "%s = %r" % (k["key"], v)
            flag_prefix = "tpd: %s %s: " % (k["flag"], v if v != "" else '""')
            file_prefix = "[%s] %s: " % (sect, k["key"])
            text = "[%s]\n%s = %s\n" % (sect, k["key"], v)
            # a TCP listener needs a token file or tcp_auth = none (tested in test_auth.py)
            extra = ["--tcp-auth", "none"] if k["key"] == "listen" else []
            if extra:
                text += "tcp_auth = none\n"
            rc = same(what, flag_verdict([k["flag"], v] + extra, flag_prefix),
                      file_verdict(text, file_prefix))
            if k["letter"]:
                same(what + " (-%s)" % k["letter"],
                     flag_verdict(["-" + k["letter"], v] + extra, "tpd: -%s %s: " % (k["letter"], v or '""')),
                     file_verdict(text, file_prefix))
            if sect == "pool default" and k["key"] in ("size", "capacity", "limit"):
                # the same key of another pool, through --pool NAME:SIZE[:CAPACITY[:LIMIT]]
                spec = {"size": "io:%s", "capacity": "io:1:%s", "limit": "io:1:1:%s"}[k["key"]] % v
                ptext = "[pool io]\n" + {"size": "", "capacity": "size = 1\n",
                                         "limit": "size = 1\ncapacity = 1\n"}[k["key"]] \
                    + "%s = %s\n" % (k["key"], v)
                same(what + " (--pool)", flag_verdict(["--pool", spec], "tpd: --pool %s: %s: "
                                                      % (spec, k["key"])),
                     file_verdict(ptext, "[pool io] %s: " % k["key"]))
            runs += 1
            refused += rc != 0
    check(refused > 0 and refused < runs, "some values are good, some bad")
    print("%d values of every key: %d refused, the same way, by flag and file" % (runs, refused))


# The regressions, each with the message both ways must give.
EXPECTED = [
    (["--max-request-bytes", "1"], "[daemon]\nmax_request_bytes = 1\n",
     "1 is out of range (256 to 1G)"),
    (["--max-request-bytes", "2G"], "[daemon]\nmax_request_bytes = 2G\n",
     "2G is out of range (256 to 1G)"),
    (["--max-output-buffer", "1"], "[daemon]\nmax_output_buffer = 1\n",
     "1 is out of range (64k to 1G)"),
    (["-l", "127.0.0.1:99999"], "[daemon]\nlisten = 127.0.0.1:99999\n",
     '"127.0.0.1:99999": port must be a number from 0 to 65535'),
    (["-l", "nohost"], "[daemon]\nlisten = nohost\n", '"nohost" is not HOST:PORT'),
    (["--admin-group", "nosuchgroup"], "[daemon]\nadmin_group = nosuchgroup\n",
     'no group named "nosuchgroup"'),
    (["--socket-group", "nosuchgroup"], "[daemon]\nsocket_group = nosuchgroup\n",
     'no group named "nosuchgroup"'),
    (["--token-file", "/nonexistent/tok"], "[daemon]\ntoken_file = /nonexistent/tok\n",
     "cannot read /nonexistent/tok: No such file or directory"),
    (["--max-connections", "2000000"], "[daemon]\nmax_connections = 2000000\n",
     "2000000 is out of range (1 to 1048576)"),
    (["-w", "100"], "[pool default]\nsize = 100\n", "100 is above limit 64"),
    (["--limit", "10", "-w", "20"], "[pool default]\nlimit = 10\nsize = 20\n",
     "20 is above limit 10"),
    (["-q", "2000000"], "[pool default]\ncapacity = 2000000\n",
     "2000000 is out of range (1 to 1000000)"),
    (["--pool", "io:2000"], "[pool io]\nsize = 2000\n", "size: 2000 is out of range (1 to 1024)"),
    (["--shutdown-timeout", "5"], "[daemon]\nshutdown_timeout = 5\n",
     "5: add a unit, as 5s or 5ms"),
    (["--socket-mode", " 660"], None, '" 660" is not an octal mode like 0660'),
    (["--output-limit", "32M"], "[exec]\noutput_limit = 32M\n",
     "32M is above output_limit_max 16M"),
]


def test_the_regressions_read_the_same_both_ways():
    for args, text, msg in EXPECTED:
        rc, out, err = tpd("-n", *args)
        check(rc == 1 and out == "", "tpd -n %s: refused (exit 1), got %d %r", args, rc, out)
        lines = err.rstrip("\n").split("\n")
        check(len(lines) == 1, "tpd -n %s: one line: %r", args, err)
        check(lines[0] == "tpd: %s %s: %s" % (args[-2], args[-1], msg),
              "tpd -n %s: %r", args, lines[0])
        if text is None:
            continue        # a value the file cannot hold (a leading space is trimmed)
        rc, out, msgs = file_verdict(text, "")
        msg = msg.split(": ", 1)[1] if args[0] == "--pool" else msg
        check(rc == 1 and len(msgs) == 1 and msgs[0].endswith(": " + msg),
              "the file %r: %r", text, msgs)


def test_good_values_pass_both_ways():
    for args, text in [
            (["--shutdown-timeout", "1.5s"], "[daemon]\nshutdown_timeout = 1.5s\n"),
            (["--result-ttl", "0.5h"], "[daemon]\nresult_ttl = 0.5h\n"),
            (["--max-request-bytes", "1.5M"], "[daemon]\nmax_request_bytes = 1.5M\n"),
            (["--max-output-buffer", "64KiB"], "[daemon]\nmax_output_buffer = 64KiB\n"),
            (["--limit", "1"], "[pool default]\nlimit = 1\n"),       # size follows
            (["--pool", "io:1"], "[pool io]\nsize = 1\n"),
            (["-l", "nosuchhost.invalid:7420", "--tcp-auth", "none"],
             "[daemon]\nlisten = nosuchhost.invalid:7420\ntcp_auth = none\n"),
            (["--env", "A=1", "--env", "B=2"], "[exec]\nenv = A=1\nenv = B=2\n")]:
        check(tpd("-n", *args) == (0, "configuration OK\n", ""), "tpd -n %s", args)
        check(file_verdict(text, "") == (0, "configuration OK\n", []), "the file %r", text)


def test_size_and_limit_across_flag_and_file():
    fd, path = tempfile.mkstemp(suffix=".conf")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("[pool default]\nlimit = 10\n")
        rc, out, err = tpd("-n", "-c", path, "-w", "20")
        check((rc, err) == (1, "tpd: -w 20: 20 is above limit 10\n"), "flag size, file limit: %r", err)
        check(tpd("-n", "-c", path, "-w", "20", "--limit", "20")[0] == 0, "the flag's limit wins")
        with open(path, "w") as f:
            f.write("[pool default]\nsize = 20\n")
        rc, out, err = tpd("-n", "-c", path, "--limit", "10")
        check((rc, err) == (1, "%s:2: [pool default] size: 20 is above limit 10\n" % path),
              "file size, flag limit: %r", err)
        check(tpd("-n", "-c", path, "--limit", "10", "-w", "5")[0] == 0, "the flag's size wins")
        with open(path, "w") as f:
            f.write("[daemon]\nmax_connections = 0\n")
        rc, out, err = tpd("-n", "-c", path, "--max-request-bytes", "1")
        check((rc, err) == (1, "%s:2: [daemon] max_connections: 0 is out of range (1 to 1048576)\n"
                            "tpd: --max-request-bytes 1: 1 is out of range (256 to 1G)\n" % path),
              "the file's errors, then the flags': %r", err)
    finally:
        os.unlink(path)


DURATIONS = ["0", "5", "1.5s", "0.5s", "250ms", "2m", "2min", "1h", "1d", "1.5", "soon", "5 s",
             "0.5ms", "5S", "-1s", "1e3ms", ".5s", "0.001s"]
SIZES = ["0", "65536", "64k", "64K", "64KiB", "64kB", "1M", "1.5M", "0.5G", "1.1k", "lots", "1T",
         "64ki", "0.5", "-1", "2.0"]


def test_tpctl_reads_durations_and_sizes_as_tpd_does():
    missing = os.path.join(tempfile.gettempdir(), "tpd-settings-no-such-dir", "none.sock")
    for kind, values, tpd_args, tpctl_args, tpctl_prefix in [
            ("duration", DURATIONS, ["--result-ttl"], ["--connect-timeout", "{}", "ping"],
             "tpctl: --connect-timeout: "),
            ("size", SIZES, ["--output-limit", "0", "--output-limit-max"],
             ["submit", "--output-limit", "{}", "--", "true"], "tpctl submit: --output-limit: ")]:
        for v in values:
            rc, _, err = tpd("-n", *(tpd_args + [v]))
            r = subprocess.run([TPCTL, "-s", missing] + [a.replace("{}", v) for a in tpctl_args],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=TIMEOUT)
            if rc == 0:
                check(r.returncode == 69, "%s %r: tpd takes it, tpctl must too (exit 69 for the "
                      "missing daemon), got %d %r", kind, v, r.returncode, r.stderr)
                continue
            why = err.rstrip("\n").split(": ", 2)[2]
            check(r.returncode == 64, "%s %r: tpd refuses it, so must tpctl: %d %r", kind, v,
                  r.returncode, r.stderr)
            check(r.stderr.split("\n")[0] == tpctl_prefix + why,
                  "%s %r: the same reason: tpd %r, tpctl %r", kind, v, why, r.stderr)


def test_usage_errors_are_one_line_and_exit_64():
    for args, want in [
            (["--bogus"], "tpd: unknown flag --bogus (see tpd --help)"),
            (["--bogus=1"], "tpd: unknown flag --bogus (see tpd --help)"),
            (["-x"], "tpd: unknown flag -x (see tpd --help)"),
            (["-w"], "tpd: -w needs a value (see tpd --help)"),
            (["--max-request-bytes"], "tpd: --max-request-bytes needs a value (see tpd --help)"),
            (["--foreground=yes"], "tpd: --foreground takes no value (see tpd --help)"),
            (["--result"], "tpd: --result is ambiguous: --result-ttl, --result-retain, "
                           "--result-retain-bytes (see tpd --help)"),
            (["--pool", "io"], "tpd: --pool io: expected NAME:SIZE[:CAPACITY[:LIMIT]] "
                               "(see tpd --help)"),
            (["--pool", "io:1:2:3:4"], "tpd: --pool io:1:2:3:4: expected "
                                       "NAME:SIZE[:CAPACITY[:LIMIT]] (see tpd --help)"),
            (["stray"], "tpd: unexpected argument stray (see tpd --help)")]:
        for mode in (["-n"], ["-f"]):
            rc, out, err = tpd(*(mode + args))
            check((rc, out, err) == (64, "", want + "\n"), "tpd %s: %d %r %r", args, rc, out, err)


def test_a_bad_flag_stops_the_daemon_at_start():
    d = Daemon("--max-request-bytes", "1", start=False)
    with d:
        r = subprocess.run([TPD] + d.args, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=TIMEOUT)
        check(r.returncode == 1, "exit 1, got %d", r.returncode)
        check(r.stderr == "tpd: --max-request-bytes 1: 1 is out of range (256 to 1G)\n",
              "one line naming the flag: %r", r.stderr)
        check(not os.path.exists(d.sock), "never listened")


def test_listen_flags_replace_the_files_list():
    with Daemon(tcp=True, start=False) as d:
        d.conf = os.path.join(d.dir, "tpd.conf")
        with open(d.conf, "w") as f:
            f.write("[daemon]\nlisten = 127.0.0.1:0\n")
        d.args += ["-c", d.conf]
        d.start()
        tcp = [name for name in d.listeners if name.startswith("tcp ")]
        check(len(tcp) == 1, "the file's listen is replaced by -l, not added to: %r",
              d.listeners)
        check(d.client(tcp=True).request({"op": "ping"})["event"] == "pong", "the -l one works")


def test_sighup_checks_the_flags_again_over_the_new_file():
    with Daemon("-w", "4", "--limit", "8", start=False) as d:
        d.conf = os.path.join(d.dir, "tpd.conf")
        with open(d.conf, "w") as f:
            f.write("[pool default]\ncapacity = 4\n")
        d.args += ["-c", d.conf]
        d.start()
        c = d.client()
        # a file that lowers the limit the flag set: the flag wins, all is well
        with open(d.conf + ".new", "w") as f:
            f.write("[pool default]\nlimit = 2\ncapacity = 5\n")
        os.rename(d.conf + ".new", d.conf)
        before = d.read_log().count("configuration reloaded")
        d.signal(signal.SIGHUP)
        eventually(lambda: d.read_log().count("configuration reloaded") > before, "reloaded")
        p = next(p for p in c.request({"op": "stats"}, "stats")["pools"] if p["name"] == "default")
        check((p["target"], p["limit"], p["capacity"]) == (4, 8, 16),
              "the flags -w 4 --limit 8 (and the harness's -q 16) are applied again: %r", p)
    with Daemon("-w", "4", start=False) as d:
        d.conf = os.path.join(d.dir, "tpd.conf")
        with open(d.conf, "w") as f:
            f.write("[pool default]\nlimit = 8\n")
        d.args += ["-c", d.conf]
        d.start()
        c = d.client()
        # now the file's limit falls below the flag's size: the reload is refused, naming the flag
        with open(d.conf + ".new", "w") as f:
            f.write("[pool default]\nlimit = 2\n")
        os.rename(d.conf + ".new", d.conf)
        d.signal(signal.SIGHUP)
        eventually(lambda: "reload refused" in d.read_log(), "the reload was refused")
        check("tpd: -w 4: 4 is above limit 2" in d.read_log(), "the flag named: %s", d.read_log())
        p = next(p for p in c.request({"op": "stats"}, "stats")["pools"] if p["name"] == "default")
        check((p["target"], p["limit"]) == (4, 8), "nothing changed: %r", p)


if __name__ == "__main__":
    try:
        run_tests(globals())
    finally:
        os.unlink(READABLE)
