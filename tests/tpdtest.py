"""tpdtest: start the built tpd on a private socket and talk to it.

Every test file imports this module, defines test_* functions and ends with
run_tests(globals()). A Daemon starts `tpd -f` in a fresh temporary
directory with NOTIFY_SOCKET naming a datagram socket of its own there, and
waits for the READY=1 tpd sends once every listener is up (never by
sleeping, never by reading the log); the X_TPD_LISTEN= lines that come with
it name each listener, the bound TCP port included. It is always killed and
reaped, even when a test fails. A Client speaks the wire protocol:
newline-delimited JSON, one object per line.
"""
import atexit
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

TPD = os.environ.get("TPD", os.path.abspath("tpd"))
TPCTL = os.environ.get("TPCTL", os.path.abspath("tpctl"))
# Sanitizer builds are several times slower: give every wait more room.
SLOW = float(os.environ.get("TPD_TEST_SLOW", "1"))
TIMEOUT = 15 * SLOW

# A tpd a test starts by hand (not through Daemon, which gives each its own
# --state-dir) keeps its journal here, never in /var/lib/tpd: the default rule
# takes $STATE_DIRECTORY first. One directory per test process, removed at exit.
# A tpd started without -c reads $TPD_CONFIG, else $sysconfdir/tpd/tpd.conf (the
# machine's): every test passes -c FILE or -c none. One that forgets reads this file
# instead, which tpd refuses, naming the mistake; a test of the default sets its own.
if "TPD_CONFIG" not in os.environ:
    _fd, os.environ["TPD_CONFIG"] = tempfile.mkstemp(prefix="tpdtest-forgot-c-", suffix=".conf")
    os.write(_fd, b"[a test started tpd without -c FILE or -c none]\n")
    os.close(_fd)
    atexit.register(os.unlink, os.environ["TPD_CONFIG"])

if "STATE_DIRECTORY" not in os.environ:
    os.environ["STATE_DIRECTORY"] = tempfile.mkdtemp(prefix="tpdtest-state-")
    atexit.register(shutil.rmtree, os.environ["STATE_DIRECTORY"], True)


# Lines a sanitizer writes into tpd's stderr (which is the log): any is a failure.
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "runtime error:",
                   "ERROR: LeakSanitizer", "ERROR: ThreadSanitizer")


class Skip(Exception):
    """Raised by a test that cannot run here; the message says why."""


class Notify:
    """The NOTIFY_SOCKET of one Daemon: a thread reads every datagram tpd sends (so
    its STATUS= lines never fill the socket's queue) and keeps them in order."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.messages = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            with self.cond:
                self.messages.append(data.decode(errors="replace"))
                self.cond.notify_all()

    def wait_ready(self, start, alive, timeout):
        """The first message at index >= start whose first line is READY=1, as a dict of
        its lines (X_TPD_LISTEN gives a list); None when alive() turns false first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for m in self.messages[start:]:
                    lines = m.split("\n")
                    if lines[0] == "READY=1":
                        fields = {"X_TPD_LISTEN": []}
                        for line in lines[1:]:
                            k, _, v = line.partition("=")
                            if k == "X_TPD_LISTEN":
                                fields[k].append(v)
                            else:
                                fields[k] = v
                        return fields
                left = deadline - time.monotonic()
                if left <= 0 or not alive():
                    return None
                self.cond.wait(min(left, 0.05))  # a wake-up to look at alive(), not a sleep

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=5)


class Daemon:
    def __init__(self, *args, workers=2, queue=16, tcp=False, tcp_auth="none", env=None,
                 sock_name="tpd.sock", start=True, conf=None):
        self.dir = tempfile.mkdtemp(prefix="tpdtest-")
        self.sock = os.path.join(self.dir, sock_name)
        self.log_path = os.path.join(self.dir, "tpd.log")
        # every test daemon keeps its journal in its own temp dir (never /var/lib/tpd);
        # a --state-dir or --journal off in args comes later and wins
        # -c none: never the machine's $sysconfdir/tpd/tpd.conf (a later -c FILE wins)
        self.args = ["-f", "-c", "none", "-s", self.sock, "-w", str(workers), "-q", str(queue),
                     "--log-level", "debug", "--state-dir", os.path.join(self.dir, "state")
                     ] + list(args)
        if conf is not None:
            # conf: the text of a tpd.conf, written in the daemon's dir and given by -c
            path = os.path.join(self.dir, "tpd.conf")
            with open(path, "w") as f:
                f.write(conf)
            self.args += ["-c", path]
        self.tcp = tcp
        if tcp:
            # a TCP listener needs a token file, or tcp_auth = none: a test with
            # token files passes tcp_auth="token" (tcp_auth=None: no flag)
            self.args += ["-l", "127.0.0.1:0"]
            if tcp_auth is not None:
                self.args += ["--tcp-auth", tcp_auth]
        self.env = dict(os.environ if env is None else env)
        self.notify = Notify(os.path.join(self.dir, "notify"))
        self.env["NOTIFY_SOCKET"] = self.notify.path
        self.proc = None
        self.port = None
        self.listeners = []     # what READY=1's X_TPD_LISTEN lines named: "unix PATH", "tcp H:P"
        self.clients = []
        if start:
            self.start()

    def start(self):
        self.log = open(self.log_path, "wb")
        mark = len(self.notify.messages)
        self.proc = subprocess.Popen([TPD] + self.args, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        ready = self.notify.wait_ready(mark, lambda: self.proc.poll() is None, TIMEOUT)
        if ready is None:
            if self.proc.poll() is not None:
                raise AssertionError("tpd exited with %d at start:\n%s"
                                     % (self.proc.returncode, self.read_log()))
            raise AssertionError("tpd sent no READY=1 within %ss:\n%s"
                                 % (TIMEOUT, self.read_log()))
        self.listeners = ready["X_TPD_LISTEN"]
        self.port = None
        for name in self.listeners:
            m = re.match(r"tcp (?:[0-9.]+|\[[0-9a-f:]+\]):(\d+)$", name)
            if m and self.port is None:
                self.port = int(m.group(1))

    def metrics_port(self):
        """The TCP port /metrics is served on (--metrics-listen 127.0.0.1:0), from the log."""
        m = re.search(r"metrics: serving GET /metrics on tcp 127\.0\.0\.1:(\d+)",
                      self.read_log())
        check(m is not None, "the log names no metrics port:\n%s", self.read_log())
        return int(m.group(1))

    def metrics(self):
        """The text of GET /metrics, on a connection of its own."""
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port(), timeout=TIMEOUT)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    def read_log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def client(self, tcp=False):
        c = Client(self.sock if not tcp else ("127.0.0.1", self.port))
        self.clients.append(c)
        return c

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=None):
        """Waits for tpd to exit by itself; returns its exit status."""
        return self.proc.wait(timeout=timeout or TIMEOUT)

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def close(self):
        for c in self.clients:
            c.close()
        if self.proc is not None and self.proc.poll() is None:
            # Stop now, so long tasks a test left behind do not hold the drain.
            try:
                c = Client(self.sock)
                c.request({"op": "shutdown", "mode": "now"}, timeout=2)
                c.close()
            except (OSError, EOFError, AssertionError, ValueError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()
        self.notify.close()
        log = self.read_log()
        shutil.rmtree(self.dir, ignore_errors=True)
        for mark in SANITIZER_MARKS:
            if mark in log:
                raise AssertionError("sanitizer report in the tpd log:\n" + log[-8000:])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is not None and exc[0] is not Skip:
            sys.stderr.write("---- tpd log ----\n%s\n-----------------\n" % self.read_log()[-6000:])
        self.close()


class Client:
    """A protocol client: send requests, read events, match them by id."""

    def __init__(self, address):
        family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(address)
        self.buf = b""
        self.pending = []   # events read but not yet asked for
        self.next_id = 1

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, obj):
        if "id" not in obj:
            obj = dict(obj, id=self.next_id)
            self.next_id += 1
        self.sock.sendall((json.dumps(obj) + "\n").encode())
        return obj["id"]

    def _read_line(self, timeout):
        self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("tpd closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def recv(self, timeout=None):
        if self.pending:
            return self.pending.pop(0)
        return self._read_line(timeout or TIMEOUT)

    def recv_match(self, pred, timeout=None):
        """The first event (pending or new) for which pred is true; others stay pending."""
        for i, ev in enumerate(self.pending):
            if pred(ev):
                return self.pending.pop(i)
        deadline = time.monotonic() + (timeout or TIMEOUT)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no matching event within the timeout; pending: %r"
                                     % self.pending[-5:])
            ev = self._read_line(left)
            if pred(ev):
                return ev
            self.pending.append(ev)

    def recv_id(self, rid, event=None, timeout=None):
        return self.recv_match(lambda e: e.get("id") == rid and
                               (event is None or e.get("event") == event), timeout)

    def request(self, obj, event=None, timeout=None):
        """Sends obj and returns its first answer (or the first of the given event)."""
        rid = self.send(obj)
        return self.recv_id(rid, event, timeout)

    def submit(self, task, **fields):
        """Submits a task; returns (request id, first answer)."""
        rid = self.send(dict(op="submit", task=task, **fields))
        return rid, self.recv_id(rid)

    def done(self, rid, timeout=None):
        return self.recv_id(rid, "done", timeout)

    def stats(self, pool="default"):
        ev = self.request({"op": "stats"}, "stats")
        for p in ev["pools"]:
            if p["name"] == pool:
                return p
        raise AssertionError("no pool %s in stats" % pool)


def read_to_eof(sock, timeout=None):
    """Everything sock receives until the other end closes it."""
    sock.settimeout(timeout or TIMEOUT)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def as_user(user, sock_path, requests):
    """Runs requests over a fresh connection in a child that became user; returns the answers."""
    import pwd
    pw = pwd.getpwnam(user)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock_path)
            f = s.makefile("rwb")
            out = []
            for req in requests:
                f.write((json.dumps(req) + "\n").encode())
                f.flush()
                out.append(json.loads(f.readline()))
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def remove_cgroup(path):
    """Kills what runs in the cgroup tree at path and removes it, leaves first."""
    for top, _, _ in os.walk(path, topdown=False):
        try:
            with open(os.path.join(top, "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            pass
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                os.rmdir(top)
                break
            except OSError:
                time.sleep(0.01)  # polling an emptied cgroup's removal


def eventually(pred, what, timeout=None):
    """Polls pred (a query of the daemon's state) until it is true."""
    deadline = time.monotonic() + (timeout or TIMEOUT)
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting until " + what)
        time.sleep(0.01)


def check(cond, msg, *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def run_tests(namespace):
    """Runs every test_* function of a file; exit 0 all passed, 1 any failed, 77 all skipped."""
    names = sorted(n for n in namespace if n.startswith("test_") and callable(namespace[n]))
    only = os.environ.get("TPD_TEST_ONLY")
    failed = skipped = passed = 0
    for name in names:
        if only and only not in name:
            continue
        start = time.monotonic()
        try:
            namespace[name]()
        except Skip as e:
            skipped += 1
            print("SKIP %s: %s" % (name, e), flush=True)
            continue
        except Exception:
            failed += 1
            print("FAIL %s (%.2fs)\n%s" % (name, time.monotonic() - start,
                                          traceback.format_exc()), flush=True)
            continue
        passed += 1
        print("ok   %s (%.2fs)" % (name, time.monotonic() - start), flush=True)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    if failed:
        sys.exit(1)
    if skipped and not passed:
        sys.exit(77)
    sys.exit(0)
