#!/usr/bin/env python3
"""tpd under systemd: the units pass `systemd-analyze verify` and stay under an exposure
of 2.0 in `systemd-analyze security --offline`; socket activation through
systemd-socket-activate serves both the unix and the tcp fd; a test-owned NOTIFY_SOCKET
gets READY=1, STATUS=, WATCHDOG=1, RELOADING=1/READY=1 and STOPPING=1 from tpd's own
pid, in that order; log lines carry <N> prefixes when JOURNAL_STREAM names stderr."""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

from tpdtest import (SANITIZER_MARKS, TIMEOUT, TPD, Client, Skip, check, eventually,
                     run_tests)

SRCDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILDDIR = os.path.dirname(TPD)
EXPOSURE_MAX = 2.0      # systemd-analyze security --offline=yes on tpd.service


def need(tool):
    path = shutil.which(tool)
    if path is None:
        raise Skip("%s is not installed (Debian package systemd)" % tool)
    return path


class Spawned:
    """A process of the test, always killed and reaped; its stderr goes to a file."""

    def __init__(self, argv, env=None, log=None):
        self.dir = tempfile.mkdtemp(prefix="tpdsd-")
        self.log_path = log or os.path.join(self.dir, "log")
        self.log = open(self.log_path, "wb")
        self.argv, self.env = argv, env
        self.proc = None

    def start(self, argv=None, env=None):
        self.proc = subprocess.Popen(argv or self.argv, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log,
                                     env=env or self.env)
        return self

    def read_log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        log = self.read_log()
        shutil.rmtree(self.dir, ignore_errors=True)
        if exc[0] is not None and exc[0] is not Skip:
            print("---- log ----\n%s\n-------------" % log[-4000:])
        elif any(mark in log for mark in SANITIZER_MARKS):
            raise AssertionError("sanitizer report in the tpd log:\n" + log[-8000:])


def units_for_verify(dest):
    """The units as installed, with ExecStart naming the built tpd and the source's tpd.conf."""
    built = os.path.join(BUILDDIR, "packaging", "tpd.service")
    check(os.path.exists(built), "%s is built by make all", built)
    with open(built) as f:
        service = f.read()
    m = re.search(r"^ExecStart=(\S+)/tpd -f -c (\S+)/tpd/tpd\.conf$", service, re.M)
    check(m is not None, "ExecStart runs $(sbindir)/tpd with $(sysconfdir)/tpd/tpd.conf")
    service = service.replace(m.group(0), "ExecStart=%s -f -c %s" %
                              (TPD, os.path.join(SRCDIR, "conf", "tpd.conf")))
    with open(os.path.join(dest, "tpd.service"), "w") as f:
        f.write(service)
    for name in ("tpd.socket", "tpd-tcp.socket"):
        shutil.copy(os.path.join(SRCDIR, "packaging", name), dest)
    return [os.path.join(dest, n) for n in ("tpd.service", "tpd.socket", "tpd-tcp.socket")]


def test_units_verify_cleanly():
    analyze = need("systemd-analyze")
    with tempfile.TemporaryDirectory() as d:
        units = units_for_verify(d)
        env = dict(os.environ)
        if shutil.which("man"):
            # Documentation=man:... is checked against the pages we install
            for page, sect in (("daemon/tpd.8", "8"), ("conf/tpd.conf.5", "5")):
                os.makedirs(os.path.join(d, "man", "man" + sect), exist_ok=True)
                shutil.copy(os.path.join(SRCDIR, page), os.path.join(d, "man", "man" + sect))
            env["MANPATH"] = os.path.join(d, "man")
            extra = []
        else:
            print("man is not installed: Documentation= not checked")
            extra = ["--man=no"]
        r = subprocess.run([analyze, "verify"] + extra + units, capture_output=True,
                           text=True, env=env, timeout=60)
        check(r.returncode == 0 and r.stdout == "" and r.stderr == "",
              "systemd-analyze verify printed:\n%s%s", r.stdout, r.stderr)
    print("systemd-analyze verify: silent on tpd.service, tpd.socket, tpd-tcp.socket")


def test_run_as_drop_in_verifies():
    """packaging/tpd-run-as.conf applied to the unit: still silent, and it grants only
    CAP_SETUID and CAP_SETGID."""
    analyze = need("systemd-analyze")
    with tempfile.TemporaryDirectory() as d:
        units = units_for_verify(d)
        with open(os.path.join(SRCDIR, "packaging", "tpd-run-as.conf")) as f:
            drop_in = f.read()
        caps = re.findall(r"^(?:CapabilityBoundingSet|AmbientCapabilities)=(.*)$", drop_in, re.M)
        check(caps == ["CAP_SETUID CAP_SETGID"] * 2, "the drop-in grants %r", caps)
        os.makedirs(units[0] + ".d")
        with open(os.path.join(units[0] + ".d", "run-as.conf"), "w") as f:
            f.write(drop_in)
        env = dict(os.environ, SYSTEMD_UNIT_PATH=d + ":")
        r = subprocess.run([analyze, "verify", "--man=no"] + units, capture_output=True,
                           text=True, env=env, timeout=60)
        check(r.returncode == 0 and r.stdout == "" and r.stderr == "",
              "systemd-analyze verify with run-as.conf printed:\n%s%s", r.stdout, r.stderr)
    print("systemd-analyze verify: silent on tpd.service with run-as.conf")


def test_service_exposure_is_low():
    analyze = need("systemd-analyze")
    with tempfile.TemporaryDirectory() as d:
        service = units_for_verify(d)[0]
        r = subprocess.run([analyze, "security", "--offline=yes", "--no-pager", service],
                           capture_output=True, text=True, timeout=60)
        m = re.search(r"Overall exposure level for tpd\.service: ([0-9.]+)", r.stdout)
        if m is None and "offline" in r.stderr:
            raise Skip("this systemd-analyze has no --offline: %s" % r.stderr.strip())
        check(m is not None, "no exposure in:\n%s%s", r.stdout, r.stderr)
        level = float(m.group(1))
        print("exposure of tpd.service: %.1f (threshold %.1f)" % (level, EXPOSURE_MAX))
        check(level <= EXPOSURE_MAX, "exposure %.1f above %.1f:\n%s", level, EXPOSURE_MAX,
              "\n".join(l for l in r.stdout.split("\n") if "\u2717" in l))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_socket_activation_serves_unix_and_tcp():
    activate = need("systemd-socket-activate")
    with Spawned(None) as sp:
        path = os.path.join(sp.dir, "activated.sock")
        own = os.path.join(sp.dir, "own.sock")
        for attempt in range(5):
            port = free_port()
            # -s and -l name listeners tpd must not create: the passed fds replace them
            sp.start([activate, "-l", path, "-l", "127.0.0.1:%d" % port, "--fdname=unix:tcp",
                      TPD, "-f", "-c", "none", "-w", "1", "-s", own, "-l", "127.0.0.1:0", "--tcp-auth", "none",
                      "--log-level", "debug"])
            eventually(lambda: "as 4." in sp.read_log() or sp.proc.poll() is not None,
                       "systemd-socket-activate listens")
            if sp.proc.poll() is None:
                break
            check("in use" in sp.read_log(), "activate failed: %s", sp.read_log())
        # the first connection starts tpd on the passed fds
        u = Client(path)
        check(u.request({"op": "ping"})["event"] == "pong", "pong over the unix fd")
        t = Client(("127.0.0.1", port))
        check(t.request({"op": "ping"})["event"] == "pong", "pong over the tcp fd")
        rid, _ = t.submit({"kind": "echo", "value": "via tcp"})
        check(t.done(rid)["result"]["value"] == "via tcp", "tasks run")
        log = sp.read_log()
        check("listening on unix %s (socket activation)" % path in log, log)
        check("listening on tcp 127.0.0.1:%d (socket activation)" % port in log, log)
        check(not os.path.exists(own), "no socket of its own when one was passed")
        # ... and it says so, naming what it does not use
        check("systemd passed a Unix socket; the socket %s (-s or socket =) is not used"
              % own in log, "the ignored -s is logged: %s", log)
        check("systemd passed a TCP socket; the 1 address of -l or listen = is not used"
              in log, "the ignored -l is logged: %s", log)
        check(len(re.findall(r"listening on tcp", log)) == 1, "no -l listener besides: %s", log)
        u.close()
        t.close()
        sp.proc.send_signal(signal.SIGTERM)
        check(sp.proc.wait(timeout=TIMEOUT) == 0, "clean exit")
        check(os.path.exists(path), "systemd's socket file is not tpd's to remove")


def test_socket_activated_tcp_without_a_token_stops_the_start():
    """A TCP socket systemd passes is a TCP listener too: no token file, no start."""
    activate = need("systemd-socket-activate")
    with Spawned(None) as sp:
        own = os.path.join(sp.dir, "own.sock")
        for attempt in range(5):
            port = free_port()
            sp.start([activate, "-l", "127.0.0.1:%d" % port, "--fdname=tcp",
                      TPD, "-f", "-c", "none", "-w", "1", "-s", own])
            eventually(lambda: "as 3." in sp.read_log() or sp.proc.poll() is not None,
                       "systemd-socket-activate listens")
            if sp.proc.poll() is None:
                break
            check("in use" in sp.read_log(), "activate failed: %s", sp.read_log())
        c = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)   # starts tpd
        check(sp.proc.wait(timeout=TIMEOUT) != 0, "tpd served a TCP socket without a token")
        c.close()
        log = sp.read_log()
        check(re.search(r"error: tcp 127\.0\.0\.1:%d: a TCP listener needs a token: set "
                        r"\[daemon\] token_file" % port, log), "%s", log)
        check(not os.path.exists(own), "it made its own socket")


def recv_notify(sock, timeout):
    """One datagram and its sender's pid (SCM_CREDENTIALS), or None on timeout."""
    sock.settimeout(timeout)
    try:
        data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(12))
    except socket.timeout:
        return None
    pid = None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _, _ = struct.unpack("iII", payload[:12])
    return pid, data.decode()


def test_notify_ready_status_watchdog_reload_stopping_in_order():
    with Spawned(None) as sp:
        ns = os.path.join(sp.dir, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(ns)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        conf = os.path.join(sp.dir, "tpd.conf")
        with open(conf, "w") as f:
            f.write("[pool default]\nsize = 1\n")
        env = dict(os.environ, NOTIFY_SOCKET=ns, WATCHDOG_USEC="400000")
        env.pop("WATCHDOG_PID", None)
        # sh execs tpd, so $$ is tpd's pid: WATCHDOG_PID names it as systemd would
        sp.start(["sh", "-c", 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$0" "$@"', TPD,
                  "-f", "-s", os.path.join(sp.dir, "tpd.sock"), "-c", conf], env=env)
        msgs = []

        def until(pred, what):
            deadline = time.monotonic() + TIMEOUT
            while not pred():
                left = deadline - time.monotonic()
                check(left > 0, "timed out waiting for %s; got %r", what, msgs)
                m = recv_notify(sock, left)
                if m is not None:
                    msgs.append((time.monotonic(), m[0], m[1]))

        def texts():
            return [m[2] for m in msgs]

        def index(prefix, start=0):
            for i, t in enumerate(texts()):
                if i >= start and t.startswith(prefix):
                    return i
            return -1

        until(lambda: texts().count("WATCHDOG=1") >= 2, "two watchdog pings")
        check(texts()[0].split("\n")[0] == "READY=1", "READY=1 first: %r", texts())
        check(texts()[0].split("\n")[1:] == ["X_TPD_LISTEN=unix " +
                                             os.path.join(sp.dir, "tpd.sock")],
              "with the listener: %r", texts()[0])
        s = index("STATUS=")
        check(0 < s < index("WATCHDOG=1"), "READY=1, STATUS=, WATCHDOG=1: %r", texts())
        status = texts()[s]
        check(re.match(r"STATUS=default 0/1 busy, 0 queued; 0 connections$", status),
              "live pool figures: %r", status)
        c = Client(os.path.join(sp.dir, "tpd.sock"))
        check(c.request({"op": "ping"})["event"] == "pong", "serving")

        # the figures change (one connection): a new STATUS=, not sooner than a second after
        until(lambda: any(t.endswith("; 1 connection") for t in texts()), "the new figures")
        times = [m[0] for m in msgs if m[2].startswith("STATUS=")]
        check(all(b - a >= 0.9 for a, b in zip(times, times[1:])), "once a second: %r", times)

        mark = len(msgs)
        sp.proc.send_signal(signal.SIGHUP)
        until(lambda: index("READY=1", index("RELOADING=1", mark) + 1) > 0, "reload notified")

        mark = len(msgs)
        sp.proc.send_signal(signal.SIGTERM)
        until(lambda: index("EXTEND_TIMEOUT_USEC=", mark) > 0, "STOPPING=1 and the extension")
        check(0 < index("STOPPING=1", mark) < index("EXTEND_TIMEOUT_USEC=", mark),
              "STOPPING=1 then EXTEND_TIMEOUT_USEC=: %r", texts()[mark:])
        c.close()
        check(sp.proc.wait(timeout=TIMEOUT) == 0, "clean exit")
        pids = set(m[1] for m in msgs)
        check(pids == {sp.proc.pid}, "every message from tpd's pid %d: %r", sp.proc.pid, pids)
        sock.close()
        print("notifications, all from pid %d: %s" % (sp.proc.pid, ", ".join(
            sorted(set(t.split("=")[0] for t in texts())))))


def test_status_shows_recent_rate_and_p99():
    """While a pool runs tasks, STATUS= adds its tasks/s and the p99 of waits and runs."""
    with Spawned(None) as sp:
        ns = os.path.join(sp.dir, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(ns)
        env = dict(os.environ, NOTIFY_SOCKET=ns)
        sp.start([TPD, "-f", "-c", "none", "-s", os.path.join(sp.dir, "tpd.sock"), "-w", "2"], env=env)
        got = []
        deadline = time.monotonic() + TIMEOUT
        while not any(t.split("\n")[0] == "READY=1" for t in got):
            check(time.monotonic() < deadline, "no READY=1: %r", got)
            m = recv_notify(sock, TIMEOUT)
            if m is not None:
                got.append(m[1])
        c = Client(os.path.join(sp.dir, "tpd.sock"))
        pat = re.compile(r"STATUS=default (\d+)/2 busy, (\d+) queued, ([0-9.]+) tasks/s, "
                         r"wait p99 ([0-9.]+)(us|ms|s), run p99 ([0-9.]+)(us|ms|s); "
                         r"1 connection$")
        found = None
        # Batches of tasks until a STATUS= shows them: the figures are of the last seconds.
        while found is None:
            check(time.monotonic() < deadline, "no STATUS= with the rate: %r", got[-5:])
            rids = [c.send({"op": "submit", "task": {"kind": "sleep", "ms": 5}})
                    for _ in range(10)]
            for rid in rids:
                check(c.done(rid)["state"] == "succeeded", "sleep task")
            until = time.monotonic() + 1.5
            while found is None and time.monotonic() < until:
                m = recv_notify(sock, until - time.monotonic())
                if m is not None:
                    got.append(m[1])
                    found = pat.match(m[1])
        scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
        check(float(found.group(3)) > 0, "rate: %r", found.group(0))
        run_p99_ms = float(found.group(6)) * scale[found.group(7)]
        check(run_p99_ms >= 5, "a 5 ms task's run p99 is at least 5 ms: %r", found.group(0))
        c.close()
        sock.close()
        print(found.group(0))


def test_no_watchdog_for_another_pid():
    with Spawned(None) as sp:
        ns = os.path.join(sp.dir, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(ns)
        env = dict(os.environ, NOTIFY_SOCKET=ns, WATCHDOG_USEC="200000", WATCHDOG_PID="1")
        sp.start([TPD, "-f", "-c", "none", "-s", os.path.join(sp.dir, "tpd.sock")], env=env)
        got = []
        deadline = time.monotonic() + TIMEOUT
        while not any(t.split("\n")[0] == "READY=1" for t in got):
            check(time.monotonic() < deadline, "no READY=1: %r", got)
            m = recv_notify(sock, TIMEOUT)
            if m is not None:
                got.append(m[1])
        # Pings would come every 100 ms. A connection changes the figures, whose STATUS=
        # may only follow the first one a second later: a window of a second, no sleep.
        c = Client(os.path.join(sp.dir, "tpd.sock"))
        c.request({"op": "ping"})
        while not any(t.endswith("; 1 connection") for t in got):
            m = recv_notify(sock, TIMEOUT)
            check(m is not None, "no STATUS= with the connection: %r", got)
            got.append(m[1])
        c.close()
        sp.proc.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in got:
            m = recv_notify(sock, TIMEOUT)
            check(m is not None, "no STOPPING=1: %r", got)
            got.append(m[1])
        check("WATCHDOG=1" not in got, "WATCHDOG_PID names another process: %r", got)
        sp.proc.wait(timeout=TIMEOUT)
        sock.close()


def start_and_stop(journal, log):
    """Runs tpd with stderr on log until it serves, then stops it; returns the log text.
    JOURNAL_STREAM names the log file (journal) or some other file."""
    with Spawned(None, log=log) as sp:
        sock = os.path.join(sp.dir, "tpd.sock")
        st = os.fstat(sp.log.fileno())
        stream = "%d:%d" % (st.st_dev, st.st_ino) if journal else "%d:%d" % (st.st_dev, 1)
        sp.start([TPD, "-f", "-c", "none", "-s", sock], env=dict(os.environ, JOURNAL_STREAM=stream))
        eventually(lambda: os.path.exists(sock) or sp.proc.poll() is not None, "listening")
        sp.proc.send_signal(signal.SIGTERM)
        check(sp.proc.wait(timeout=TIMEOUT) == 0, "clean exit")
        return sp.read_log()


def test_log_prefixes_only_under_the_journal():
    with tempfile.TemporaryDirectory() as d:
        journal = start_and_stop(True, os.path.join(d, "j"))
        plain = start_and_stop(False, os.path.join(d, "p"))
    lines = journal.strip().split("\n")
    check(all(re.match(r"<[0-7]>\S", l) for l in lines), "every line prefixed: %r", lines)
    check(any(l.startswith("<5>tpd ") and "ready" in l for l in lines), "notice is <5>")
    check(any(l.startswith("<6>") for l in lines), "info is <6>")
    lines = plain.strip().split("\n")
    check(all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} tpd\[\d+\] \w+: ", l)
              for l in lines), "a JOURNAL_STREAM that is not stderr is ignored: %r", lines)


def test_config_errors_at_start_are_errors_in_the_journal():
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "bad.conf")
        with open(conf, "w") as f:
            f.write("[daemon]\nmax_connections = 0\nbogus = 1\n")
        with open(os.path.join(d, "log"), "wb") as log:
            st = os.fstat(log.fileno())
            r = subprocess.run([TPD, "-f", "-c", conf, "-s", os.path.join(d, "s")],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=30,
                               env=dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev,
                                                                             st.st_ino)))
        with open(os.path.join(d, "log")) as f:
            lines = f.read().split("\n")
    check(r.returncode == 1, "exit 1")
    check(lines == ["<3>%s:2: [daemon] max_connections: 0 is out of range (1 to 1048576)" % conf,
                    "<3>%s:3: [daemon] bogus: unknown key" % conf, ""],
          "each error line is an error for journald: %r", lines)


if __name__ == "__main__":
    run_tests(globals())
