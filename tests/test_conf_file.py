#!/usr/bin/env python3
"""Which configuration file tpd reads, and tpd -n's one pass over it. Without -c tpd reads
its default file when it exists ($sysconfdir/tpd/tpd.conf, or the file $TPD_CONFIG names:
these tests point it at a temp dir, never at /etc), -c FILE reads another and -c none none;
the log and tpd -n say which. tpd -n reports every error of the file, the flags, the token
files, the listeners and the containment in one run, each with its FILE:LINE."""
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile

from tpdtest import TPD, TIMEOUT, Daemon, check, eventually, run_tests


def tpd(args, conf_env):
    """tpd with args, TPD_CONFIG set to conf_env (the default file) for this run only."""
    env = dict(os.environ, TPD_CONFIG=conf_env)
    r = subprocess.run([TPD] + args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=TIMEOUT, env=env)
    return r.returncode, r.stdout, r.stderr


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def test_the_default_file_is_read_when_it_exists_and_c_chooses_another_or_none():
    tmp = tempfile.mkdtemp(prefix="tpdconffile-")
    try:
        default = os.path.join(tmp, "tpd.conf")
        check(tpd(["-n"], default) == (0, "configuration OK: no file (%s does not exist)\n"
                                        % default, ""), "no default file: built-in defaults")
        write(default, "[daemon]\nmax_connections = 0\n")
        rc, out, err = tpd(["-n"], default)
        check((rc, out) == (1, "") and err == "%s:2: [daemon] max_connections: 0 is out of "
              "range (1 to 1048576)\n" % default, "the default file is read: %r", err)
        check(tpd(["-n", "-c", "none"], default) ==
              (0, "configuration OK: no file (-c none)\n", ""), "-c none reads no file")
        other = write(os.path.join(tmp, "other.conf"), "[daemon]\nmax_connections = 5\n")
        check(tpd(["-n", "-c", other], default) == (0, "configuration OK: %s\n" % other, ""),
              "-c FILE reads FILE instead")
        rc, out, err = tpd(["-n", "-c", os.path.join(tmp, "missing.conf")], default)
        check(rc == 1 and "missing.conf: cannot open: No such file or directory" in err,
              "a file given with -c must exist: %r", err)
        os.chmod(default, 0)
        if os.geteuid() != 0:
            rc, out, err = tpd(["-n"], default)
            check(rc == 1 and "cannot open: Permission denied" in err,
                  "a default file that exists but cannot be read is an error: %r", err)
        os.chmod(default, 0o600)
        rc, out, err = tpd(["--help"], default)
        check(re.search(r"-c, --config FILE .*none: no\n\s+file \(default: /\S*/tpd/tpd\.conf "
                        r"if it exists\)", out), "--help names the default file: %r", out)
    finally:
        shutil.rmtree(tmp)


def test_the_daemon_logs_which_file_it_read_and_applies_the_default_file():
    tmp = tempfile.mkdtemp(prefix="tpdconffile-")
    try:
        default = write(os.path.join(tmp, "tpd.conf"), "[pool default]\ncapacity = 7\n")
        d = Daemon(start=False, env=dict(os.environ, TPD_CONFIG=default))
        with d:
            d.args.remove("none")
            d.args.remove("-c")
            d.start()
            check("configuration: %s" % default in d.read_log(), "%s", d.read_log())
            stats = d.client().request({"op": "stats"}, "stats")
            pool = [p for p in stats["pools"] if p["name"] == "default"][0]
            check(pool["capacity"] == 16, "the harness's -q 16 is applied over the file: %r", pool)
        with Daemon() as d:
            check("configuration: no file (-c none)" in d.read_log(), "%s", d.read_log())
    finally:
        shutil.rmtree(tmp)


def test_check_reports_every_error_in_one_pass_with_file_and_line():
    tmp = tempfile.mkdtemp(prefix="tpdconffile-")
    try:
        conf = write(os.path.join(tmp, "tpd.conf"),
                     "[daemon]\nlisten = 127.0.0.1:7420\ncontainment = cgroup\n"
                     "cgroup_root = /tpd-conffile-no-such-cgroup\nmax_connections = 0\n"
                     "max_conections = 5\n")
        rc, out, err = tpd(["-n", "-c", conf, "--max-request-bytes", "1"], "/nonexistent")
        lines = err.rstrip("\n").split("\n")
        check(rc == 1 and out == "", "refused: %r", out)
        want = [r"%s:2: \[daemon\] listen: tcp 127\.0\.0\.1:7420: a TCP listener needs a token",
                r"%s:3: \[daemon\] containment: containment = cgroup, but ",
                r"%s:5: \[daemon\] max_connections: 0 is out of range",
                r"%s:6: \[daemon\] max_conections: unknown key \(did you mean max_connections\?\)",
                r"tpd: --max-request-bytes 1: 1 is out of range"]
        check(len(lines) == len(want) and
              all(re.match(w.replace("%s", re.escape(conf)), line) for w, line in zip(want, lines)),
              "every error, in one run, each with its FILE:LINE:\n%s", err)
        # a token file's own errors come with the file's, not after they are fixed
        tokens = write(os.path.join(tmp, "tokens"), "a b c\n")
        os.chmod(tokens, 0o600)
        write(conf, "[daemon]\nlisten = 127.0.0.1:7420\ntoken_file = %s\nmax_connections = 0\n"
              % tokens)
        rc, out, err = tpd(["-n", "-c", conf], "/nonexistent")
        check(rc == 1 and err == "%s:4: [daemon] max_connections: 0 is out of range (1 to 1048576)"
              "\n%s:1: more than a name and a token (a token has no white space in it)\n"
              % (conf, tokens), "the file's error and the token file's: %r", err)
        # the listener's error names the flag that gave it (after the values' errors)
        rc, out, err = tpd(["-n", "-c", "none", "-l", "127.0.0.1:0", "-w", "0"], "/nonexistent")
        check(rc == 1 and err == "tpd: -w 0: 0 is out of range (1 to 1024)\ntpd: -l 127.0.0.1:0: "
              "tcp 127.0.0.1:0: a TCP listener needs a token: set [daemon] token_file (or "
              "tcp_auth = none to let anyone who can connect in)\n", "%r", err)
    finally:
        shutil.rmtree(tmp)


def test_a_reload_names_exactly_the_restart_only_keys_that_changed():
    with Daemon(start=False) as d:
        conf = write(os.path.join(d.dir, "tpd.conf"),
                     "[daemon]\nsocket_mode = 0660\nmax_connections = 100\n")
        d.args += ["-c", conf]
        d.start()
        # restart-only (socket_mode, journal_sync_interval, containment) and not
        # (max_connections, log_level): the table says which is which
        write(conf, "[daemon]\nsocket_mode = 0600\nmax_connections = 5\n"
              "journal_sync_interval = 250ms\ncontainment = process\nlog_level = info\n")
        d.signal(signal.SIGHUP)
        eventually(lambda: "configuration reloaded" in d.read_log(), "the reload")
        said = [line for line in d.read_log().split("\n") if "next start" in line]
        check(len(said) == 1 and said[0].endswith(
            "reload: socket_mode, containment, journal_sync_interval take effect at the next "
            "start; the running values stay"), "one line naming exactly those: %r", said)
        check(stat.S_IMODE(os.stat(d.sock).st_mode) == 0o660, "the socket keeps its mode")
        write(conf, "[daemon]\nsocket_mode = 0660\nmax_connections = 7\n")
        d.signal(signal.SIGHUP)
        eventually(lambda: d.read_log().count("configuration reloaded") == 2, "the reload")
        check(d.read_log().count("next start") == 1, "nothing waits for a restart: %s",
              d.read_log()[-1500:])


run_tests(globals())
