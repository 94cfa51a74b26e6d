#!/usr/bin/env python3
"""Pool semantics through the daemon: exact admission, resize under load, cancel, deadlines."""
import json

from tpdtest import Daemon, check, eventually, run_tests

LONG = {"kind": "sleep", "ms": 600000}


def burst(c, n, task, prefix="b", **fields):
    """Sends n submits in one write; returns {request id: first answer}."""
    lines = [json.dumps(dict(op="submit", id="%s%d" % (prefix, i), task=task, **fields))
             for i in range(n)]
    c.send_raw(("\n".join(lines) + "\n").encode())
    answers = {}
    while len(answers) < n:
        ev = c.recv_match(lambda e: e.get("event") in ("accepted", "rejected", "error")
                          and str(e.get("id", "")).startswith(prefix))
        answers[ev["id"]] = ev
    return answers


def test_exact_admission_w_plus_q_then_queue_full():
    W, Q = 3, 5
    with Daemon(workers=W, queue=Q) as d:
        c = d.client()
        answers = burst(c, W + Q + 4, LONG)
        accepted = [a for a in answers.values() if a["event"] == "accepted"]
        rejected = [a for a in answers.values() if a["event"] == "rejected"]
        check(len(accepted) == W + Q, "accepted %d, want %d", len(accepted), W + Q)
        check(len(rejected) == 4, "rejected %d", len(rejected))
        check(all(r["error"]["code"] == "queue_full" for r in rejected), "%r", rejected)
        # the first W+Q in order were accepted: admission is FIFO at one point
        check(all(answers["b%d" % i]["event"] == "accepted" for i in range(W + Q)), "order")
        eventually(lambda: c.stats()["busy"] == W, "all workers busy")
        s = c.stats()
        check(s["accepted"] == W + Q and s["rejected"] == 4 and s["queued"] == Q, "%r", s)
        check(s["oldest_queued_ms"] > 0, "%r", s)
        # rejected tasks never run: shutting down now cancels exactly the accepted ones
        c.request({"op": "shutdown", "mode": "now"})
        states = [c.done("b%d" % i)["state"] for i in range(W + Q)]
        check(states == ["cancelled"] * (W + Q), "%r", states)
        check(d.wait_exit() == 0, "exit status")


def test_accepted_says_how_many_are_ahead():
    with Daemon(workers=1) as d:
        c = d.client()
        c.submit(LONG)
        eventually(lambda: c.stats()["busy"] == 1, "the worker is busy")
        ahead = [c.submit({"kind": "echo"})[1]["queued"] for _ in range(3)]
        check(ahead == [0, 1, 2], "%r", ahead)


def test_resize_up_and_down_under_load_loses_nothing():
    with Daemon(workers=2, queue=2000) as d:
        c = d.client()
        n = 400
        answers = burst(c, n, {"kind": "spin", "ms": 2})
        check(all(a["event"] == "accepted" for a in answers.values()), "all accepted")
        a = d.client()
        for size in (8, 1, 6, 2, 4):
            ev = a.request({"op": "resize", "size": size})
            check(ev["event"] == "ok" and ev["target"] == size, "%r", ev)
            check(ev["workers"] >= size, "resize up starts threads before answering: %r", ev)
        ids = set()
        for i in range(n):
            done = c.done("b%d" % i, timeout=60)
            check(done["state"] == "succeeded", "%r", done)
            ids.add(done["task"])
        check(len(ids) == n, "every task done exactly once")
        eventually(lambda: a.stats()["workers"] == 4, "workers converge on the target 4")
        s = a.stats()
        check(s["succeeded"] == n and s["accepted"] == n, "%r", s)


def test_shrink_never_interrupts_running_tasks():
    with Daemon(workers=3) as d:
        c = d.client()
        rids = [c.submit({"kind": "sleep", "ms": 300})[0] for _ in range(3)]
        eventually(lambda: c.stats()["busy"] == 3, "three running")
        ev = c.request({"op": "resize", "size": 1})
        check(ev["target"] == 1 and ev["workers"] == 3, "busy workers stay: %r", ev)
        for r in rids:
            check(c.done(r)["state"] == "succeeded", "not interrupted")
        eventually(lambda: c.stats()["workers"] == 1, "surplus workers leave")


def test_cancel_queued_and_running():
    with Daemon(workers=1) as d:
        c = d.client()
        r1, a1 = c.submit({"kind": "spin", "ms": 600000})
        r2, a2 = c.submit({"kind": "sleep", "ms": 600000})
        eventually(lambda: c.request({"op": "status", "task": a1["task"]})["state"] == "running",
                   "first running")
        c.request({"op": "cancel", "task": a2["task"]})
        d2 = c.done(r2)
        check(d2["state"] == "cancelled" and d2["run_ms"] == 0, "%r", d2)
        c.request({"op": "cancel", "task": a1["task"]})
        d1 = c.done(r1)
        check(d1["state"] == "cancelled" and d1["run_ms"] > 0, "%r", d1)
        s = c.stats()
        check(s["cancelled"] == 2 and s["busy"] == 0, "%r", s)


def test_queue_deadline_expires_behind_a_long_task():
    with Daemon(workers=1) as d:
        c = d.client()
        r1, _ = c.submit(LONG)
        r2, a2 = c.submit({"kind": "echo", "value": 1}, queue_timeout_ms=50)
        d2 = c.done(r2)
        check(d2["state"] == "expired" and d2["error"]["code"] == "expired", "%r", d2)
        check(d2["queued_ms"] >= 50 and d2["run_ms"] == 0, "queue time is reported: %r", d2)
        check(c.stats()["expired"] == 1, "counted")


def test_timeout_ms_of_builtin_kinds():
    with Daemon() as d:
        c = d.client()
        r, _ = c.submit({"kind": "sleep", "ms": 600000, "timeout_ms": 50})
        done = c.done(r)
        check(done["state"] == "timed_out" and done["error"]["code"] == "timed_out", "%r", done)
        r, _ = c.submit({"kind": "fail", "message": "no luck"})
        done = c.done(r)
        check(done["state"] == "failed" and done["error"] == {"code": "task_failed",
              "message": "no luck"}, "%r", done)


def test_queued_ms_is_apart_from_run_ms():
    with Daemon(workers=1) as d:
        c = d.client()
        r1, _ = c.submit({"kind": "sleep", "ms": 200})
        r2, _ = c.submit({"kind": "sleep", "ms": 10})
        c.done(r1)
        d2 = c.done(r2)
        check(d2["queued_ms"] >= 150, "waited behind the first: %r", d2)
        check(d2["run_ms"] < 150, "but ran briefly: %r", d2)


run_tests(globals())
