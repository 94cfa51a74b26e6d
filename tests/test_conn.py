#!/usr/bin/env python3
"""A connection's framing and buffers (daemon/net/conn.c): lines cut anywhere,
lines longer than a read, the limit at its exact edge, a half-close with a
line left unfinished, and what an idle connection costs."""
import json
import os
import resource
import socket

from tpdtest import SLOW, Daemon, Skip, check, eventually, run_tests


def read_events(s, n):
    """Reads exactly n event lines from socket s."""
    buf, events = b"", []
    while len(events) < n:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("tpd closed the connection after %d of %d events" %
                                 (len(events), n))
        buf += chunk
        *lines, buf = buf.split(b"\n")
        events += [json.loads(l) for l in lines]
    check(buf == b"" and len(events) == n, "more than %d events: %r", n, events[n:] or buf)
    return events


def connect(d):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(15 * SLOW)
    s.connect(d.sock)
    return s


def test_requests_cut_at_every_byte_are_answered_in_order():
    with Daemon() as d:
        s = connect(d)
        data = b"".join(b'{"op":"ping","id":%d}\n' % i for i in range(5))
        for i in range(len(data)):
            s.sendall(data[i:i + 1])
        ids = [ev["id"] for ev in read_events(s, 5)]
        check(ids == list(range(5)), "pongs out of order or lost: %r", ids)


def test_a_batch_larger_than_one_read_is_answered_in_order():
    with Daemon() as d:
        s = connect(d)
        # about 200 KB: several reads of the daemon, lines cut at their edges
        n = 8000
        s.sendall(b"".join(b'{"op":"ping","id":%d}\n' % i for i in range(n)))
        ids = [ev["id"] for ev in read_events(s, n)]
        check(ids == list(range(n)), "pongs out of order or lost")
        print("%d pipelined pings in one write: %d pongs in order" % (n, n))


def test_a_request_of_many_reads_keeps_its_bytes():
    with Daemon() as d:
        c = d.client()
        value = "".join(chr(0x41 + i % 26) for i in range(900 * 1024))
        rid, acc = c.submit({"kind": "echo", "value": value})
        check(acc["event"] == "accepted", "%r", acc)
        done = c.done(rid)
        check(done["result"]["value"] == value, "the 900 KiB value came back changed")


def test_the_line_limit_at_its_edge():
    limit = 4096
    with Daemon("--max-request-bytes", str(limit)) as d:
        c = d.client()
        for size, cut in ((limit, None), (limit + 1, None), (limit, limit // 2),
                          (limit + 1, limit // 2), (limit + 1, limit)):
            head = b'{"op":"ping","id":"'
            tail = b'"}'
            line = head + b"p" * (size - len(head) - len(tail)) + tail
            check(len(line) == size, "bad test line")
            parts = [line + b"\n"] if cut is None else [line[:cut], line[cut:] + b"\n"]
            for p in parts:
                c.send_raw(p)
            ev = c.recv()
            if size <= limit:
                check(ev["event"] == "pong", "a %d-byte line (limit %d) got %r", size, limit, ev)
            else:
                check(ev["event"] == "error" and ev["error"]["code"] == "request_too_large" and
                      ("of %d bytes" % size) in ev["error"]["message"],
                      "a %d-byte line cut at %s got %r", size, cut, ev)
            check(c.request({"op": "ping"})["event"] == "pong", "usable after %d bytes", size)
        print("lines of %d bytes pass and of %d bytes are refused, whole or cut" %
              (limit, limit + 1))


def test_a_line_passing_the_limit_in_pieces_is_answered_before_its_newline():
    with Daemon("--max-request-bytes", "4096") as d:
        c = d.client()
        c.send_raw(b'{"op":"ping","id":"' + b"q" * 3000)
        c.send_raw(b"q" * 3000)
        ev = c.recv()
        check(ev["event"] == "error" and ev["error"]["code"] == "request_too_large" and
              "dropped up to its newline" in ev["error"]["message"], "%r", ev)
        c.send_raw(b"q" * 100000 + b'"}\n{"op":"ping","id":"after"}\n')
        check(c.recv() == {"event": "pong", "id": "after"}, "the next line is answered")


def test_half_close_drops_an_unfinished_line_and_answers_the_rest():
    with Daemon() as d:
        s = connect(d)
        s.sendall(b'{"op":"ping","id":1}\n{"op":"ping","id":2}\n{"op":"ping","id":3')
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        events = [json.loads(l) for l in data.splitlines()]
        check(events == [{"event": "pong", "id": 1}, {"event": "pong", "id": 2}], "%r", events)


def test_a_client_gone_before_its_done_is_closed_when_the_done_cannot_be_written():
    with Daemon() as d:
        s = connect(d)
        s.sendall(b'{"op":"submit","id":1,"task":{"kind":"sleep","ms":200}}\n')
        check(read_events(s, 1)[0]["event"] == "accepted", "accepted")
        s.shutdown(socket.SHUT_WR)
        s.close()
        c = d.client()
        eventually(lambda: "cannot write" in d.read_log(), "the done's write failed")
        eventually(lambda: c.request({"op": "stats"})["connections"] == 1,
                   "the connection is gone (only this one is left)")


def test_idle_connections_cost_under_a_kibibyte_each():
    if SLOW != 1:
        raise Skip("sanitizer builds pad every allocation: RSS says nothing there")
    n = 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n + 200:
        raise Skip("needs %d descriptors, the hard limit is %d" % (n + 200, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        with Daemon("--max-connections", str(n + 10)) as d:
            warm = d.client()
            check(warm.request({"op": "ping"})["event"] == "pong", "ping")
            before = d.rss_kib()
            socks = []
            for i in range(n):
                # one at a time: a Unix connect() fails at once when the backlog is full
                s = connect(d)
                socks.append(s)
                s.sendall(b'{"op":"ping","id":%d}\n' % i)
                check(read_events(s, 1) == [{"event": "pong", "id": i}], "pong %d", i)
            per = (d.rss_kib() - before) * 1024 / n
            for s in socks:
                s.close()
            print("%d idle connections: %.0f B of daemon RSS each" % (n, per))
            check(per <= 1024, "an idle connection costs %.0f B of RSS (target 1 KiB)", per)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


run_tests(globals())
