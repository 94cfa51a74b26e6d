#!/usr/bin/env python3
"""The wire protocol against the real tpd: every op, pipelining, and bad input."""
import json
import re
import socket

from tpdtest import Daemon, check, eventually, read_to_eof, run_tests


def test_hello_ping_stats():
    with Daemon() as d:
        c = d.client()
        ev = c.request({"op": "hello", "client": "test"})
        check(ev["event"] == "hello" and ev["server"] == "tpd" and ev["protocol"] == 1, "%r", ev)
        check(ev["role"] == "admin", "root or the daemon's uid is admin: %r", ev)
        check(c.request({"op": "ping", "id": "p-1"}) == {"event": "pong", "id": "p-1"}, "pong")
        ev = c.request({"op": "stats"})
        check(ev["event"] == "stats" and ev["connections"] == 1 and ev["uptime_ms"] >= 0, "%r", ev)
        p = ev["pools"][0]
        for key in ("name", "target", "workers", "busy", "queued", "capacity", "limit",
                    "accepted", "rejected", "succeeded", "failed", "oldest_queued_ms"):
            check(key in p, "stats pool lacks %s: %r", key, p)
        check(p["name"] == "default" and p["target"] == 2 and p["capacity"] == 16, "%r", p)


def test_submit_echo_roundtrip_keeps_value_and_id():
    value = {"nested": [1, "two", None, True, {"x": -3}], "unicode": "h\u00e9llo \u2603"}
    with Daemon() as d:
        c = d.client()
        rid, ev = c.submit({"kind": "echo", "value": value}, id="abc")
        check(rid == "abc" and ev["event"] == "accepted" and ev["pool"] == "default", "%r", ev)
        done = c.done("abc")
        check(done["task"] == ev["task"] and done["state"] == "succeeded", "%r", done)
        check(done["result"] == {"value": value}, "echo changed the value: %r", done)
        check(done["queued_ms"] >= 0 and done["run_ms"] >= 0, "%r", done)


def test_pipelined_submits_finish_out_of_order_with_their_ids():
    with Daemon(workers=4) as d:
        c = d.client()
        lines = []
        for i, ms in enumerate([300, 200, 100, 0]):
            lines.append(json.dumps({"op": "submit", "id": "r%d" % i,
                                     "task": {"kind": "sleep", "ms": ms}}))
        c.send_raw(("\n".join(lines) + "\n").encode())
        order = []
        tasks = {}
        while len(order) < 4:
            ev = c.recv()
            if ev["event"] == "accepted":
                tasks[ev["id"]] = ev["task"]
            elif ev["event"] == "done":
                check(tasks[ev["id"]] == ev["task"], "done %r has another request's id", ev)
                order.append(ev["id"])
        check(order == ["r3", "r2", "r1", "r0"], "finish order %r", order)


def test_long_pipelined_run_answers_every_request_once():
    # 200 lines in one write: the loop answers a long run in parts as it goes
    # (conn.c, CONN_LINES_PER_WRITE); each request still gets one accepted, then one done.
    n = 200
    with Daemon(workers=2, queue=256) as d:
        c = d.client()
        lines = [json.dumps({"op": "submit", "id": i, "task": {"kind": "echo", "value": "v%d" % i}})
                 for i in range(n)]
        c.send_raw(("\n".join(lines) + "\n").encode())
        accepted, done = set(), set()
        while len(done) < n:
            ev = c.recv()
            i = ev["id"]
            if ev["event"] == "accepted":
                check(i not in accepted, "two accepted for request %r", i)
                accepted.add(i)
            else:
                check(ev["event"] == "done", "unexpected %r", ev)
                check(i in accepted, "done before accepted for request %r", i)
                check(i not in done, "two dones for request %r", i)
                check(ev["result"]["value"] == "v%d" % i, "request %r got %r", i, ev["result"])
                done.add(i)
        check(accepted == set(range(n)), "accepted for %d of %d", len(accepted), n)
    print("checked: %d pipelined submits, one accepted then one done each, values matched" % n)


def test_wait_status_cancel_ops():
    with Daemon(workers=1) as d:
        c = d.client()
        _, acc = c.submit({"kind": "sleep", "ms": 60000})
        running = acc["task"]
        _, acc2 = c.submit({"kind": "echo", "value": 1})
        queued = acc2["task"]
        check(acc2["queued"] >= 0, "%r", acc2)
        ev = c.request({"op": "status", "task": queued})
        check(ev["event"] == "status" and ev["state"] == "queued", "%r", ev)
        w = c.send({"op": "wait", "task": queued})
        ok = c.request({"op": "cancel", "task": queued})
        check(ok["event"] == "ok", "%r", ok)
        done = c.done(w)
        check(done["state"] == "cancelled" and done["error"]["code"] == "cancelled", "%r", done)
        check(done["run_ms"] == 0, "a cancelled queued task never ran: %r", done)
        # a cancel of a finished task is idempotent
        check(c.request({"op": "cancel", "task": queued})["event"] == "ok", "second cancel")
        c.request({"op": "cancel", "task": str(running)})  # ids as strings work too
        ev = c.request({"op": "wait", "task": running}, "done")
        check(ev["state"] == "cancelled", "%r", ev)
        st = c.request({"op": "status", "task": running})
        check(st["state"] == "cancelled", "%r", st)
        ev = c.request({"op": "wait", "task": 999999})
        check(ev["event"] == "error" and ev["error"]["code"] == "no_such_task", "%r", ev)


def test_detach_and_stream_and_pools():
    with Daemon("--pool", "io:1:4") as d:
        c = d.client()
        rid, acc = c.submit({"kind": "echo", "value": "x"}, detach=True)
        check(acc["event"] == "accepted", "%r", acc)
        ev = c.request({"op": "wait", "task": acc["task"]}, "done")
        check(ev["state"] == "succeeded", "%r", ev)
        check(not [e for e in c.pending if e.get("id") == rid], "detach sends no done")
        rid, acc = c.submit({"kind": "sleep", "ms": 1}, stream=True, pool="io")
        check(acc["pool"] == "io", "%r", acc)
        started = c.recv_id(rid, "started")
        check(started["task"] == acc["task"], "%r", started)
        c.done(rid)
        rid, ev = c.submit({"kind": "echo"}, pool="nope")
        check(ev["event"] == "rejected" and ev["error"]["code"] == "no_such_pool", "%r", ev)


def test_resize_op():
    with Daemon(workers=1, *["--limit", "8"]) as d:
        c = d.client()
        ev = c.request({"op": "resize", "size": 4})
        check(ev["event"] == "ok" and ev["target"] == 4 and ev["workers"] == 4, "%r", ev)
        ev = c.request({"op": "resize", "size": 9})
        check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
              "limit" in ev["error"]["message"], "%r", ev)
        ev = c.request({"op": "resize", "size": 2, "pool": "nope"})
        check(ev["error"]["code"] == "no_such_pool", "%r", ev)
        ev = c.request({"op": "resize", "size": 1})
        check(ev["target"] == 1, "%r", ev)


# Each line, and the error code it must get. The daemon must answer every one
# and still answer ping afterwards on the same connection.
BAD_LINES = [
    (b"{", "bad_json"),
    (b"not json", "bad_json"),
    (b"GET / HTTP/1.1", "bad_json"),
    (b'{"op":"ping","op":"ping"}', "bad_json"),            # duplicate key
    (b'{"op":"ping","id":"a\\u0000b"}', "bad_json"),       # NUL escape
    (b'{"op":"ping","id":"\xff\xfe"}', "bad_json"),         # invalid UTF-8
    (b'{"op":"ping"} {"op":"ping"}', "bad_json"),          # two objects on a line
    (b"[1,2,3]", "bad_request"),
    (b'"just a string"', "bad_request"),
    (b"42", "bad_request"),
    (b"{}", "bad_request"),                                 # no op
    (b'{"op":42}', "bad_request"),
    (b'{"op":"ping","id":{"x":1}}', "bad_request"),
    (b'{"op":"ping","id":1.5}', "bad_request"),
    (b'{"op":"launch"}', "unknown_op"),
    (b'{"op":"ping","extra":1}', "bad_request"),            # unknown field
    (b'{"op":"submit"}', "bad_request"),                    # no task
    (b'{"op":"submit","task":"echo"}', "bad_request"),
    (b'{"op":"submit","task":{}}', "bad_request"),          # no kind
    (b'{"op":"submit","task":{"kind":"teleport"}}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"sleep"}}', "bad_request"),  # no ms
    (b'{"op":"submit","task":{"kind":"sleep","ms":-1}}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"sleep","ms":"10"}}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"echo","colour":"red"}}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"echo"},"detach":"yes"}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"echo"},"queue_timeout_ms":0}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"echo"},"stream":1}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"echo"},"pool":7}', "bad_request"),
    (b'{"op":"submit","task":{"kind":"echo","timeout_ms":1e3}}', "bad_request"),
    (b'{"op":"wait"}', "bad_request"),
    (b'{"op":"wait","task":"abc"}', "bad_request"),
    (b'{"op":"cancel","task":-4}', "bad_request"),
    (b'{"op":"resize","size":0}', "bad_request"),
    (b'{"op":"resize","size":"big"}', "bad_request"),
    (b'{"op":"shutdown","mode":"later"}', "bad_request"),
    (b"[" * 65 + b"]" * 65, "bad_request"),                 # nesting deeper than 64
    (b'{"op":"ping","id":' + b"[" * 100 + b"]" * 100 + b"}", "bad_request"),
]


def test_malformed_and_hostile_lines_get_the_right_error():
    with Daemon() as d:
        c = d.client()
        for line, code in BAD_LINES:
            c.send_raw(line + b"\n")
            ev = c.recv()
            check(ev["event"] == "error", "line %r got %r", line[:60], ev)
            check(ev["error"]["code"] == code, "line %r: expected %s, got %r", line[:60], code, ev)
            check(ev["error"]["message"], "empty message for %r", line[:60])
            check(c.request({"op": "ping"})["event"] == "pong", "no pong after %r", line[:60])
        # empty lines and CRLF are fine
        c.send_raw(b"\n\r\n   \n" + b'{"op":"ping","id":"crlf"}\r\n')
        check(c.recv() == {"event": "pong", "id": "crlf"}, "CRLF ping")


def test_error_carries_the_request_id():
    with Daemon() as d:
        c = d.client()
        ev = c.request({"op": "submit", "id": 77, "task": {"kind": "sleep", "ms": "x"}})
        check(ev["id"] == 77 and "ms" in ev["error"]["message"], "the message names the field: %r",
              ev)
        ev = c.request({"op": "frobnicate", "id": "q"})
        check(ev["id"] == "q" and ev["error"]["code"] == "unknown_op", "%r", ev)


def test_long_string_ids_come_back_verbatim():
    with Daemon() as d:
        c = d.client()
        rid = "\u00e9\"quoted\"-" + "x" * 2000
        check(c.request({"op": "ping", "id": rid}) == {"event": "pong", "id": rid}, "pong")
        ev = c.request({"op": "submit", "id": rid, "task": {"kind": "echo"}})
        check(ev["event"] == "accepted" and ev["id"] == rid, "%r", ev)
        check(c.done(rid)["id"] == rid, "done")


def test_overlong_line_without_newline_is_refused_and_connection_survives():
    with Daemon("--max-request-bytes", "64k") as d:
        c = d.client()
        other = d.client()
        chunk = b"x" * 65536
        for _ in range(160):       # 10 MiB with no newline
            c.send_raw(chunk)
        ev = c.recv()
        check(ev["event"] == "error" and ev["error"]["code"] == "request_too_large", "%r", ev)
        check(other.request({"op": "ping"})["event"] == "pong", "others still served")
        c.send_raw(b"\n")
        check(c.request({"op": "ping"})["event"] == "pong", "usable after the newline")
        check(d.rss_kib() < 64 * 1024, "daemon RSS %d KiB after a 10 MiB line", d.rss_kib())


class RawClient:
    """Requests by line, answers as the daemon wrote them (the text, not the JSON value)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(15)
        self.sock.connect(path)
        self.f = self.sock.makefile("rb")

    def ask(self, obj):
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def line(self):
        line = self.f.readline()
        check(line.endswith(b"\n"), "tpd closed the connection")
        return line.decode()

    def until(self, rid, event):
        while True:
            line = self.line()
            ev = json.loads(line)
            if ev.get("id") == rid and ev.get("event") == event:
                return line

    def close(self):
        self.f.close()
        self.sock.close()


def raw_number(line, key):
    m = re.search(r'"%s":(-?[0-9][0-9.eE+-]*)' % key, line)
    check(m is not None, "no number %s in %s", key, line)
    return m.group(1)


MS = re.compile(r"^[0-9]+\.[0-9]{3}$")    # the daemon's durations: three decimals


def test_status_writes_times_as_done_writes_them():
    """queued_ms and run_ms: the same text in status as in done, three decimals each
    (status once wrote 0.029999999999999999 where done wrote 0.030)."""
    with Daemon(queue=64) as d:
        c = RawClient(d.sock)
        for i in range(20):
            c.ask({"op": "submit", "id": i, "task": {"kind": "sleep", "ms": i % 3}})
        dones = {}
        while len(dones) < 20:
            line = c.line()
            ev = json.loads(line)
            check(ev["event"] in ("accepted", "done"), "%s", line)
            if ev["event"] == "done":
                dones[ev["task"]] = line
        for task, done in dones.items():
            c.ask({"op": "status", "id": "s", "task": task})
            status = c.until("s", "status")
            for key in ("queued_ms", "run_ms"):
                check(raw_number(status, key) == raw_number(done, key),
                      "%s: status %s, done %s", key, status, done)
                check(MS.match(raw_number(status, key)), "%s is not x.yyy: %s", key, status)
        c.close()


def test_stats_writes_oldest_queued_ms_with_three_decimals():
    with Daemon(workers=1) as d:
        c = RawClient(d.sock)
        c.ask({"op": "submit", "id": "long", "task": {"kind": "sleep", "ms": 60000}})
        c.until("long", "accepted")
        for i in range(5):
            c.ask({"op": "submit", "id": i, "task": {"kind": "echo"}})
            c.until(i, "accepted")
        for i in range(10):
            c.ask({"op": "stats", "id": i})
            stats = c.until(i, "stats")
            check(MS.match(raw_number(stats, "oldest_queued_ms")), "not x.yyy: %s", stats)
        c.close()


def test_numbers_in_results_are_written_in_their_shortest_form():
    """A real reads back as itself in the fewest digits: 0.1, not 0.10000000000000001;
    an exec task's usage in milliseconds has at most three decimals."""
    with Daemon() as d:
        c = RawClient(d.sock)
        c.ask({"op": "submit", "id": 1, "task": {"kind": "echo",
                                                 "value": [0.1, 1e300, 5.772, 3.0, -2.5]}})
        done = c.until(1, "done")
        check('"result":{"value":[0.1,1e+300,5.772,3.0,-2.5]}' in done, "%s", done)
        for i in range(5):
            c.ask({"op": "submit", "id": "x%d" % i, "task": {
                "kind": "exec", "argv": ["sh", "-c", "i=0; while [ $i -lt 2000 ]; do "
                                                     "i=$((i+1)); done"]}})
            done = c.until("x%d" % i, "done")
            for key in ("user_ms", "system_ms"):
                check(re.match(r"^[0-9]+(\.[0-9]{1,3})?$", raw_number(done, key)),
                      "%s: %s", key, done)
        c.close()


def test_max_connections_refuses_extra_client_with_error():
    with Daemon("--max-connections", "2") as d:
        a = d.client()
        # the harness's start-up probe must be gone before the count matters
        eventually(lambda: a.request({"op": "stats"})["connections"] == 1, "one connection")
        b = d.client()
        check(b.request({"op": "ping"})["event"] == "pong", "b")
        s = socket.socket(socket.AF_UNIX)
        s.connect(d.sock)
        data = read_to_eof(s)
        s.close()
        ev = json.loads(data.split(b"\n")[0])
        check(ev["event"] == "error" and "max_connections" in ev["error"]["message"], "%r", ev)
        check("max_connections (2) reached" in d.read_log(), "the limit is logged")


run_tests(globals())
