"""redistest: a private redis-server for the tests of tpd's Redis sources, and a client.

A Redis starts `redis-server` on a Unix socket in a fresh temporary directory
(--port 0 --save '' --appendonly no, or with its data kept across a stop and
start when persist=True; listening on 127.0.0.1:tcp_port too when given), waits for it by connecting (never by sleeping), and
is always stopped and reaped, even when a test fails. A test that needs it
raises tpdtest.Skip, saying why, only when redis-server cannot start.

RedisClient speaks RESP2 over the socket: call(*args) sends one command and
returns its reply (str for bulk and simple strings, int, list, None; a
RedisError for an error reply); pipeline(cmds) sends many and returns their
replies in order.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from tpdtest import TIMEOUT, Skip


class RedisError(Exception):
    pass


class RedisClient:
    def __init__(self, path, timeout=None):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout or TIMEOUT)
        self.sock.connect(path)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("redis closed the connection")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode(errors="surrogateescape")
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply() for _ in range(n)]
        raise ValueError("unexpected reply %r" % line)

    def call(self, *args):
        self.sock.sendall(self.encode(args))
        r = self._reply()
        if isinstance(r, RedisError):
            raise r
        return r

    def pipeline(self, cmds, chunk=1000):
        replies = []
        for i in range(0, len(cmds), chunk):
            part = cmds[i:i + chunk]
            self.sock.sendall(b"".join(self.encode(c) for c in part))
            replies += [self._reply() for _ in part]
        return replies


def fields(flat):
    """A stream entry's [k1, v1, k2, v2...] as a dict (a repeated key keeps its first value)."""
    d = {}
    for i in range(0, len(flat or []), 2):
        d.setdefault(flat[i], flat[i + 1])
    return d


class Redis:
    def __init__(self, persist=False, tcp_port=0):
        self.dir = tempfile.mkdtemp(prefix="tpdredis-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.persist = persist
        self.tcp_port = tcp_port
        self.proc = None
        self.clients = []
        self.start()

    def start(self):
        if shutil.which("redis-server") is None:
            self._cleanup()
            raise Skip("redis-server is not installed (Debian package redis-server)")
        args = ["redis-server", "--port", str(self.tcp_port), "--bind", "127.0.0.1",
                "--unixsocket", self.sock,
                "--unixsocketperm", "700", "--dir", self.dir, "--save", "",
                "--logfile", os.path.join(self.dir, "redis.log")]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else \
            ["--appendonly", "no"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + TIMEOUT
        while True:
            if self.proc.poll() is not None:
                log, rc = self.read_log(), self.proc.returncode
                self.proc = None
                self._cleanup()
                raise Skip("redis-server cannot start here (exit %s): %s" % (rc, log[-300:]))
            try:
                c = RedisClient(self.sock, timeout=2)
                if c.call("PING") == "PONG":
                    c.close()
                    return
                c.close()
            except (OSError, EOFError, RedisError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                self._cleanup()
                raise Skip("redis-server did not answer within %ss" % TIMEOUT)
            time.sleep(0.01)  # polling the connect, not synchronising on time

    def read_log(self):
        try:
            with open(os.path.join(self.dir, "redis.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def client(self):
        c = RedisClient(self.sock)
        self.clients.append(c)
        return c

    @property
    def addr(self):
        return "unix:" + self.sock

    def stop(self):
        """Stops it for real (SIGTERM: it writes its data, if any, and exits) and reaps it."""
        for c in self.clients:
            c.close()
        self.clients = []
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None

    def _cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def close(self):
        self.stop()
        self._cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
