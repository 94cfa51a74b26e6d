#!/usr/bin/env python3
"""Output flow control and the connection's life (daemon/conn.c): a client
that stops reading is paused, not fed without bound; one that reads gets
everything, however large; one that closes with answers still owed is freed
only once nothing can reach it."""
import json
import socket
import threading

from tpdtest import SLOW, TIMEOUT, Daemon, check, run_tests


def connect(d, rcvbuf=None):
    s = socket.socket(socket.AF_UNIX)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(TIMEOUT)
    s.connect(d.sock)
    return s


def read_until(s, buf, pred):
    """Reads lines from s until pred(event) is true; returns (event, rest of buf)."""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            ev = json.loads(line)
            if pred(ev):
                return ev, buf
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("tpd closed the connection")
        buf += chunk


class Churn:
    """Clients that connect and close as fast as they can, in a thread."""

    def __init__(self, d):
        self.d = d
        self.stop = threading.Event()
        self.count = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.d.sock)
                s.close()
                self.count += 1
            except OSError:
                pass

    def end(self):
        self.stop.set()
        self.thread.join(TIMEOUT)
        return self.count


def test_a_connection_closed_with_output_due_is_not_used_after_it_is_freed():
    # A client pipelines 100,000 waits on one task and never reads their
    # answers; when the task ends, its dones pass max_output_buffer while
    # other clients connect and close (each close arms the reaping of dead
    # connections). The slow connection must not be freed while the list of
    # connections to write still holds it; the ASan build reports it if it is.
    n = 100000
    with Daemon(workers=1) as d:
        ctl = d.client()
        for round in range(3):
            _, acc = ctl.submit({"kind": "sleep", "ms": 600000})
            task = acc["task"]
            slow = connect(d, rcvbuf=4096)
            req = b'{"op":"wait","task":%d}\n' % task
            slow.sendall(req * n + b'{"op":"ping","id":"last"}\n')
            # Every wait is subscribed once its ping is answered (nothing else
            # is written to it before the task ends).
            read_until(slow, b"", lambda e: e.get("id") == "last")
            churn = Churn(d)
            done = ctl.request({"op": "cancel", "task": task}, "ok")
            check(done["task"] == task, "%r", done)
            w = ctl.request({"op": "wait", "task": task}, "done")
            check(w["state"] == "cancelled", "%r", w)
            check(ctl.request({"op": "ping"})["event"] == "pong", "tpd serves after the done")
            slow.close()
            print("round %d: %d waits answered (or held) while %d clients came and went"
                  % (round, n, churn.end()))
        check(ctl.request({"op": "ping"})["event"] == "pong", "tpd lives on")


run_tests(globals())
