#!/usr/bin/env python3
"""The daemon's words as a new user meets them: each message says what to do, names the
limit it applies, and counts in the singular for one."""
import os
import signal
import subprocess

from tpdtest import TPD, TIMEOUT, Daemon, check, eventually, run_tests


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def test_unauthenticated_says_where_the_token_goes():
    d = Daemon(tcp=True, tcp_auth="token", start=False)
    d.args += ["--token-file", write(os.path.join(d.dir, "tokens"), "ci tok-ci\n")]
    with d:
        d.start()
        c = d.client(tcp=True)
        ev = c.request({"op": "submit", "task": {"kind": "echo", "value": 1}})
        msg = ev["error"]["message"]
        check(ev["error"]["code"] == "unauthenticated", "%r", ev)
        check('"token"' in msg and "hello" in msg and "--token-file" in msg,
              "names hello's token field and tpctl's option: %r", msg)


def test_forbidden_over_tcp_needs_the_admin_token_in_hello():
    d = Daemon(tcp=True, tcp_auth="token", start=False)
    d.args += ["--token-file", write(os.path.join(d.dir, "tokens"), "ci tok-ci\n"),
               "--admin-token-file", write(os.path.join(d.dir, "admin"), "root tok-root\n")]
    with d:
        d.start()
        c = d.client(tcp=True)
        check(c.request({"op": "hello", "token": "tok-ci"})["event"] == "hello", "hello")
        ev = c.request({"op": "resize", "size": 2})
        check(ev["error"]["code"] == "forbidden" and
              "needs the admin token in hello" in ev["error"]["message"], "%r", ev)
    with Daemon(tcp=True) as d:
        ev = d.client(tcp=True).request({"op": "resize", "size": 2})
        check("needs the admin token in hello, and none is configured" in
              ev["error"]["message"], "%r", ev)


def test_resize_out_of_range_names_the_pools_limit():
    with Daemon("--pool", "small:2:16:4") as d:
        c = d.client()
        for size in (0, -1, 65, 2000000):
            ev = c.request({"op": "resize", "size": size})
            check(ev["event"] == "error" and ev["error"]["message"] ==
                  'field "size" is %d, out of range 1..64: pool default\'s limit is 64 '
                  "(its limit setting)" % size, "size %d: %r", size, ev)
        ev = c.request({"op": "resize", "size": 5, "pool": "small"})
        check("out of range 1..4: pool small's limit is 4" in ev["error"]["message"], "%r", ev)
        check(c.request({"op": "resize", "size": 4, "pool": "small"})["event"] == "ok",
              "the limit itself is in range")


def test_expired_says_how_long_it_waited_against_its_queue_timeout():
    with Daemon(workers=1) as d:
        c = d.client()
        _, first = c.submit({"kind": "sleep", "ms": 60000}, detach=True)
        rid, acc = c.submit({"kind": "echo", "value": 1}, queue_timeout_ms=50)
        done = c.done(rid)
        msg = done["error"]["message"]
        check(done["state"] == "expired", "%r", done)
        check(msg.startswith("task waited ") and
              " in the queue, longer than its queue_timeout_ms of 50 ms" in msg,
              "in plain words: %r", msg)
        c.request({"op": "cancel", "task": first["task"]})


def test_a_busy_socket_is_one_line_naming_it():
    with Daemon() as d:
        p = subprocess.run([TPD, "-f", "-c", "none", "-s", d.sock], capture_output=True, text=True,
                           timeout=TIMEOUT)
        lines = (p.stdout + p.stderr).splitlines()
        check(p.returncode == 1, "exit 1: %d", p.returncode)
        check(len(lines) == 1 and d.sock in lines[0] and "in use" in lines[0],
              "one line naming the path: %r", lines)


def test_one_is_singular_and_signals_go_by_their_names():
    with Daemon(workers=1) as d:
        c = d.client()
        _, acc = c.submit({"kind": "sleep", "ms": 60000}, detach=True)
        eventually(lambda: c.request({"op": "status", "task": acc["task"]})["state"] ==
                   "running", "the sleep runs")
        d.signal(signal.SIGTERM)
        eventually(lambda: "task outstanding" in d.read_log(), "the drain is logged")
        d.signal(signal.SIGTERM)    # the second: now
        d.wait_exit()
        log = d.read_log()
        check("pool default: 1 worker (limit" in log, "1 worker: %s", log[-2000:])
        check("SIGTERM received" in log and "Terminated received" not in log,
              "the signal by its name: %s", log[-2000:])
        check("shutting down (drain): 1 task outstanding" in log, "%s", log[-2000:])
        check("shutdown turned into now: cancelling 1 outstanding task\n" in log,
              "%s", log[-2000:])
        check("flushing 1 connection\n" in log, "%s", log[-2000:])


run_tests(globals())
