"""tpdtest: start the built tpd on a private socket and talk to it.

Every test file imports this module, defines test_* functions and ends with
run_tests(globals()). A Daemon starts `tpd -f` in a fresh temporary
directory, waits for it by connecting (never by sleeping), and is always
killed and reaped, even when a test fails. A Client speaks the wire protocol:
newline-delimited JSON, one object per line.
"""
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
import time
import traceback

TPD = os.environ.get("TPD", os.path.abspath("tpd"))
TPCTL = os.environ.get("TPCTL", os.path.abspath("tpctl"))
# Sanitizer builds are several times slower: give every wait more room.
SLOW = float(os.environ.get("TPD_TEST_SLOW", "1"))
TIMEOUT = 15 * SLOW


# Lines a sanitizer writes into tpd's stderr (which is the log): any is a failure.
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "runtime error:",
                   "ERROR: LeakSanitizer", "ERROR: ThreadSanitizer")


class Skip(Exception):
    """Raised by a test that cannot run here; the message says why."""


class Daemon:
    def __init__(self, *args, workers=2, queue=16, tcp=False, env=None, sock_name="tpd.sock",
                 start=True):
        self.dir = tempfile.mkdtemp(prefix="tpdtest-")
        self.sock = os.path.join(self.dir, sock_name)
        self.log_path = os.path.join(self.dir, "tpd.log")
        self.args = ["-f", "-s", self.sock, "-w", str(workers), "-q", str(queue),
                     "--log-level", "debug"] + list(args)
        self.tcp = tcp
        if tcp:
            self.args += ["-l", "127.0.0.1:0"]
        self.env = dict(os.environ if env is None else env)
        self.proc = None
        self.port = None
        self.clients = []
        if start:
            self.start()

    def start(self):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([TPD] + self.args, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("tpd exited with %d at start:\n%s"
                                     % (self.proc.returncode, self.read_log()))
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.sock)
                s.close()
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise AssertionError("tpd did not listen within %ss:\n%s"
                                         % (TIMEOUT, self.read_log()))
                time.sleep(0.01)  # polling the connect, not synchronising on time
        # With TCP, wait for the line that follows every listener (the port is logged before it).
        while self.tcp and " ready " not in self.read_log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("tpd did not become ready:\n%s" % self.read_log())
            time.sleep(0.01)
        m = re.search(r"listening on tcp [0-9.]+:(\d+)", self.read_log())
        if m:
            self.port = int(m.group(1))

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
