#!/usr/bin/env python3
"""Connections come and go, the daemon shuts down: nothing accepted is lost."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

from tpdtest import TIMEOUT, TPD, Daemon, check, eventually, read_to_eof, run_tests


def test_disconnect_mid_task_then_wait_from_new_connection():
    with Daemon() as d:
        c = d.client()
        _, acc = c.submit({"kind": "sleep", "ms": 200})
        c.close()
        c2 = d.client()
        done = c2.request({"op": "wait", "task": acc["task"]}, "done")
        check(done["state"] == "succeeded" and done["task"] == acc["task"], "%r", done)
        # and once more, after it finished: retained
        again = c2.request({"op": "wait", "task": acc["task"]}, "done")
        check(again["task"] == acc["task"], "%r", again)


def test_half_closed_client_still_gets_its_dones():
    with Daemon() as d:
        s = socket.socket(socket.AF_UNIX)
        s.connect(d.sock)
        s.sendall(b'{"op":"submit","id":1,"task":{"kind":"sleep","ms":100}}\n{"op":"ping","id":2}\n')
        s.shutdown(socket.SHUT_WR)   # like `nc -U` at the end of its input
        data = read_to_eof(s)
        events = [json.loads(l) for l in data.splitlines()]
        check([e["event"] for e in events] == ["accepted", "pong", "done"], "%r", events)
        check(events[2]["state"] == "succeeded", "%r", events)


def test_sigterm_drains_tasks_in_flight():
    with Daemon(workers=2, queue=8) as d:
        c = d.client()
        rids = [c.submit({"kind": "sleep", "ms": 150})[0] for _ in range(6)]
        waiter = d.client()
        w = waiter.send({"op": "wait", "task": 6})
        d.signal(signal.SIGTERM)
        eventually(lambda: "shutting down (drain)" in d.read_log(), "drain began")
        rid, ev = c.submit({"kind": "echo"})
        check(ev["event"] == "rejected" and ev["error"]["code"] == "closed", "%r", ev)
        # new connections may still ask
        late = d.client()
        check(late.request({"op": "stats"})["event"] == "stats", "stats while draining")
        for r in rids:
            check(c.done(r)["state"] == "succeeded", "drained, not cancelled")
        check(waiter.done(w)["state"] == "succeeded", "every subscriber gets its done")
        check(d.wait_exit() == 0, "exit 0 after a drain")


def test_sigterm_as_soon_as_the_socket_appears_is_a_clean_shutdown():
    # The socket file appears before the loop runs; a SIGTERM sent right then
    # must be caught (a clean exit 0), not kill tpd by the default action.
    for attempt in range(10):
        d = Daemon(start=False)
        try:
            d.log = open(d.log_path, "wb")
            d.proc = subprocess.Popen([TPD] + d.args, stdin=subprocess.DEVNULL,
                                      stdout=d.log, stderr=subprocess.STDOUT, env=d.env)
            deadline = time.monotonic() + TIMEOUT
            while not os.path.exists(d.sock):   # spin: the point is to hit the start
                check(d.proc.poll() is None, "tpd exited at start:\n%s", d.read_log())
                check(time.monotonic() < deadline, "no socket:\n%s", d.read_log())
            d.signal(signal.SIGTERM)
            rc = d.wait_exit()
            check(rc == 0, "attempt %d: exit status %d after an early SIGTERM:\n%s",
                  attempt, rc, d.read_log())
        finally:
            d.close()
    print("checked: 10 SIGTERMs sent as the socket appeared, 10 clean exits")


def test_only_the_loop_thread_takes_signals():
    # Every thread but the loop's (the main one) blocks the signals tpd
    # handles: the pool's workers at start and those an elastic pool grows
    # later, the journal's sync and maintenance threads. A SIGHUP then goes
    # to the loop and is handled, however busy the other threads are.
    # SIGCHLD is blocked in every thread, the loop's too: an exec task's end
    # then wakes no thread but its worker (pgroup.h).
    handled = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM}
    chld = signal.SIGCHLD

    def masks(pid):
        out = {}
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                    blk = [l for l in f if l.startswith("SigBlk:")][0].split()[1]
            except (OSError, IndexError):
                continue        # a thread that left meanwhile
            out[int(tid)] = {s for s in handled | {chld} if int(blk, 16) >> (s - 1) & 1}
        return out

    with Daemon(workers=2, conf="[pool grow]\nmin_workers = 1\nmax_workers = 4\n") as d:
        c = d.client()
        rids = [c.submit({"kind": "sleep", "ms": 300}, pool="grow")[0] for _ in range(4)]
        eventually(lambda: len(masks(d.proc.pid)) >= 1 + 2 + 4 + 1, "the threads are made")
        m = masks(d.proc.pid)
        check(m.pop(d.proc.pid) == {chld}, "the loop thread blocks a handled signal, or "
              "takes SIGCHLD")
        check(all(b == handled | {chld} for b in m.values()), "threads that take a handled "
              "signal or SIGCHLD: %r", {t: (handled | {chld}) - b for t, b in m.items()})
        for rid in rids:
            check(c.done(rid)["state"] == "succeeded", "a task of the grown pool")


def test_second_sigterm_turns_drain_into_now():
    with Daemon(workers=1) as d:
        c = d.client()
        r1, _ = c.submit({"kind": "sleep", "ms": 600000})
        r2, _ = c.submit({"kind": "sleep", "ms": 600000})
        eventually(lambda: c.stats()["busy"] == 1, "running")
        d.signal(signal.SIGTERM)
        eventually(lambda: "shutting down (drain)" in d.read_log(), "drain began")
        d.signal(signal.SIGTERM)
        check(c.done(r1)["state"] == "cancelled", "running task cancelled")
        check(c.done(r2)["state"] == "cancelled", "queued task cancelled")
        check(d.wait_exit() == 0, "exit 0")


def test_shutdown_now_cancels_and_delivers_every_done():
    with Daemon(workers=2, queue=8) as d:
        c = d.client()
        rids = [c.submit({"kind": "spin", "ms": 600000})[0] for _ in range(2)]
        rids += [c.submit({"kind": "echo", "value": i})[0] for i in range(5)]
        eventually(lambda: c.stats()["busy"] == 2, "both workers spinning")
        ok = c.request({"op": "shutdown", "mode": "now"})
        check(ok["event"] == "ok", "%r", ok)
        states = [c.done(r)["state"] for r in rids]
        check(states == ["cancelled"] * 7, "%r", states)
        check(d.wait_exit() == 0, "exit 0")


def test_shutdown_timeout_turns_drain_into_now():
    with Daemon("--shutdown-timeout", "100ms", workers=1) as d:
        c = d.client()
        r, _ = c.submit({"kind": "sleep", "ms": 600000})
        c.request({"op": "shutdown"})
        check(c.done(r)["state"] == "cancelled", "cancelled after the timeout")
        check(d.wait_exit() == 0, "exit 0")


def test_slow_reader_is_paused_at_the_output_cap_and_then_gets_everything():
    # 600 submits of 16 KiB echoes (about 20 MB of answers) from a client that
    # reads nothing: past the 256 KiB cap the daemon stops reading its
    # requests (its sender blocks), others are served, memory stays bounded;
    # once it reads, every answer comes, in order.
    n = 600
    with Daemon("--max-output-buffer", "256k", workers=2, queue=10000) as d:
        slow = socket.socket(socket.AF_UNIX)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(d.sock)
        rss0 = d.rss_kib()
        big = "y" * 16384
        lines = [(json.dumps({"op": "submit", "id": i, "task": {"kind": "echo", "value": big}})
                  + "\n").encode() for i in range(n)]
        sender = threading.Thread(target=slow.sendall, args=(b"".join(lines),), daemon=True)
        sender.start()
        c = d.client()
        eventually(lambda: c.stats()["succeeded"] >= 16, "some of its tasks ran")
        check(c.request({"op": "ping"})["event"] == "pong", "others are served")
        # Its requests wait unread: the submits it sent are not all accepted.
        eventually(lambda: c.stats()["busy"] == 0 and c.stats()["queued"] == 0,
                   "what was read ran")
        accepted = c.stats()["accepted"]
        check(accepted < n, "every request was read (%d): nothing paused it", accepted)
        check(sender.is_alive(), "its sender is not blocked")
        grown = d.rss_kib() - rss0
        check(grown < 48 * 1024, "RSS grew %d KiB", grown)
        f = slow.makefile("rb")
        events = [json.loads(f.readline()) for _ in range(2 * n)]
        sender.join(TIMEOUT)
        order = [(e["event"], e["id"]) for e in events]
        check([i for ev, i in order if ev == "accepted"] == list(range(n)) and
              sorted(i for ev, i in order if ev == "done") == list(range(n)),
              "answers lost or out of order")
        check(all(order.index(("accepted", i)) < order.index(("done", i)) for i in range(n)),
              "a done before its accepted")
        check("passed max_output_buffer" not in d.read_log(), "cut off")
        print("a client that read nothing: %d of %d submits read while it did not, RSS +%d KiB; "
              "then all %d answers in order" % (accepted, n, grown, 2 * n))
        slow.close()


def test_one_event_larger_than_the_cap_reaches_a_reading_client():
    with Daemon("--max-output-buffer", "64k") as d:
        c = d.client()
        big = "z" * (512 * 1024)
        rid, acc = c.submit({"kind": "echo", "value": big})
        done = c.done(rid)
        check(done["result"]["value"] == big, "the whole 512 KiB done arrived")
        check(c.request({"op": "ping"})["event"] == "pong", "still connected")


run_tests(globals())
