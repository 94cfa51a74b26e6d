#!/usr/bin/env python3
"""A task's life past one run, against the real daemon: delay_ms (scheduled),
after/after_mode (waiting, skipped), retries (retrying events, one done), keys
(duplicate submits), status's spec and submit, list's command, tpctl rerun;
and the journal keeping all of it across kill -9 (doc/protocol.md, tpd(8))."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from tpdtest import SLOW, TIMEOUT, TPCTL, Client, Daemon, Skip, as_user, check, \
    eventually, run_tests


def status(c, task):
    return c.request({"op": "status", "task": task}, "status")


def conf_daemon(conf, *args, **kw):
    d = Daemon(*args, start=False, **kw)
    path = os.path.join(d.dir, "tpd.conf")
    with open(path, "w") as f:
        f.write(conf)
    d.args += ["-c", path]
    d.start()
    return d


def open_daemon(conf, *args):
    """A daemon whose socket any user may reach (0666, in a directory they may enter)."""
    d = Daemon("--socket-mode", "0666", *args, start=False)
    os.chmod(d.dir, 0o755)
    path = os.path.join(d.dir, "tpd.conf")
    with open(path, "w") as f:
        f.write(conf)
    d.args += ["-c", path]
    d.start()
    return d


class State:
    """A state_dir that outlives the daemons started on it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="tpdsched-")
        self.dir = os.path.join(self.root, "state")

    def daemon(self, *args, **kw):
        return Daemon("--state-dir", self.dir, *args, **kw)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)


def kill9(d):
    d.proc.kill()
    d.proc.wait()


# ---------------------------------------------------------------- delay


def test_delay_scheduled_then_runs_queued_ms_from_due():
    with Daemon() as d:
        c = d.client()
        t0 = time.monotonic()
        rid, acc = c.submit({"kind": "echo", "value": 1}, delay_ms=1500)
        check(acc["event"] == "accepted", "delayed submit: %r", acc)
        time.sleep(0.5)
        st = status(c, acc["task"])
        check(st["state"] == "scheduled", "at 500 ms: %r", st)
        check(0 < st["due_ms"] <= 1000 + 50 * SLOW, "due_ms: %r", st)
        ls = c.request({"op": "list", "state": "scheduled"}, "list")
        check([t["task"] for t in ls["tasks"]] == [acc["task"]], "list scheduled: %r", ls)
        done = c.done(rid, timeout=10)
        elapsed = time.monotonic() - t0
        check(done["state"] == "succeeded", "done: %r", done)
        check(elapsed >= 1.5, "ran after %.3f s, before its delay of 1.5 s", elapsed)
        # queued_ms counts from when it entered the queue, not from the submit
        check(done["queued_ms"] < 200 * SLOW, "queued_ms counted from the submit: %r", done)


def test_delay_10000_scheduled_cost_little():
    with Daemon("--journal", "off") as d:
        c = d.client()
        c.request({"op": "ping"}, "pong")
        rss0 = d.rss_kib()
        n = 10000
        for i in range(n):
            c.send({"op": "submit", "task": {"kind": "echo", "value": i}, "delay_ms": 600000,
                    "detach": True, "id": "s%d" % i})
        for i in range(n):
            ev = c.recv_id("s%d" % i)
            check(ev["event"] == "accepted", "submit %d: %r", i, ev)
        rss1 = d.rss_kib()
        rtts = []
        for _ in range(200):
            t = time.monotonic()
            c.request({"op": "ping"}, "pong")
            rtts.append(time.monotonic() - t)
        rtts.sort()
        p99 = rtts[int(len(rtts) * 0.99) - 1] * 1000
        growth = rss1 - rss0
        print("10000 scheduled tasks: RSS +%d KiB (%.0f bytes a task); ping p50 %.3f ms, "
              "p99 %.3f ms" % (growth, growth * 1024.0 / n, rtts[len(rtts) // 2] * 1000, p99))
        p = c.stats()
        check(p["scheduled"] == n and p["queued"] == 0, "stats: %r", p)
        if SLOW == 1:
            # a sanitizer's redzones and quarantine inflate it: the bound is for plain builds
            check(growth * 1024 / n < 4096, "RSS grew %d KiB for %d scheduled tasks", growth, n)
        check(p99 < 20 * SLOW, "ping p99 %.3f ms with %d tasks scheduled", p99, n)
        # the heap's head is the only timer: a cancel in the middle is cheap and exact
        c.request({"op": "cancel", "task": 5000}, "ok")
        check(status(c, 5000)["state"] == "cancelled", "cancelled in the heap")
        check(c.stats()["scheduled"] == n - 1, "scheduled after a cancel")


def test_delay_due_with_full_queue_waits_and_enters_in_order():
    # one worker, queue of 1: a due task finds no room, stays scheduled, never rejected
    with Daemon(workers=1, queue=1) as d:
        c = d.client()
        rb, blocker = c.submit({"kind": "sleep", "ms": int(800 * SLOW)})
        rq, queued = c.submit({"kind": "echo", "value": "q"})
        rids = []
        for i in range(3):
            rid, acc = c.submit({"kind": "echo", "value": i}, delay_ms=100 + i)
            check(acc["event"] == "accepted", "delayed: %r", acc)
            rids.append((rid, acc["task"]))
        time.sleep(0.4)
        for _, task in rids:
            check(status(c, task)["state"] == "scheduled", "due, no room: still scheduled")
        dones = [c.done(rid) for rid, _ in rids]
        check(all(x["state"] == "succeeded" for x in dones), "dones: %r", dones)
        check([x["result"]["value"] for x in dones] == [0, 1, 2], "order: %r", dones)


def test_delay_survives_restart():
    with State() as s:
        with s.daemon() as d:
            c = d.client()
            t0 = time.time()
            _, far = c.submit({"kind": "echo", "value": "far"}, delay_ms=60000, detach=True)
            _, near = c.submit({"kind": "echo", "value": "near"}, delay_ms=1500, detach=True)
            time.sleep(0.3)
            kill9(d)
        with s.daemon() as d:
            c = d.client()
            st = status(c, far["task"])
            check(st["state"] == "scheduled", "after kill -9: %r", st)
            left = t0 + 60 - time.time()
            check(abs(st["due_ms"] / 1000.0 - left) < 0.5 * SLOW, "due_ms %r, %.3f s left",
                  st["due_ms"], left)
            done = c.request({"op": "wait", "task": near["task"]}, "done", timeout=10 * SLOW)
            check(done["state"] == "succeeded", "done: %r", done)
            check(time.time() - t0 >= 1.5, "ran before its time")
            c.request({"op": "cancel", "task": far["task"]}, "ok")


def test_delay_in_a_pool_removed_by_a_reload_ends_lost():
    with Daemon(conf="[pool extra]\nsize = 1\n") as d:
        path = os.path.join(d.dir, "tpd.conf")      # written again for the reload
        c = d.client()
        gone = [c.submit({"kind": "echo", "value": i}, pool="extra", delay_ms=ms)
                for i, ms in enumerate((300, 400))]
        _, far = c.submit({"kind": "echo", "value": "far"}, pool="extra", delay_ms=60000,
                          detach=True)
        rk, kept = c.submit({"kind": "echo", "value": "kept"}, delay_ms=500)
        with open(path, "w") as f:
            f.write("")
        d.signal(signal.SIGHUP)
        eventually(lambda: "pool extra removed" in d.read_log(), "the reload")
        for rid, acc in gone:
            done = c.done(rid)
            check(done["state"] == "lost" and "extra" in done["error"]["message"], "%r", done)
        check(c.done(rk)["state"] == "succeeded", "the other pool's task runs")
        check(status(c, far["task"])["state"] == "scheduled", "the far one still waits")
        c.request({"op": "cancel", "task": far["task"]}, "ok")


def test_drain_keeps_scheduled_in_journal():
    with State() as s:
        with s.daemon() as d:
            c = d.client()
            _, acc = c.submit({"kind": "echo", "value": 1}, delay_ms=60000, detach=True)
            c.request({"op": "shutdown"}, "ok")
            check(d.wait_exit() == 0, "drain with a scheduled task exits 0 at once")
        with s.daemon() as d:
            st = status(d.client(), acc["task"])
            check(st["state"] == "scheduled", "kept for the next start: %r", st)
    with Daemon("--journal", "off") as d:
        c = d.client()
        rid, acc = c.submit({"kind": "echo", "value": 1}, delay_ms=60000)
        c.send({"op": "shutdown"})
        done = c.done(rid)
        check(done["state"] == "cancelled", "journal off: cancelled at the drain: %r", done)
        check(d.wait_exit() == 0, "exit")


# ---------------------------------------------------------------- dependencies


def test_after_chain_runs_in_order():
    with Daemon(workers=4) as d:
        c = d.client()
        ra, a = c.submit({"kind": "sleep", "ms": 300})
        rb, b = c.submit({"kind": "sleep", "ms": 100}, after=[a["task"]])
        rc, cc = c.submit({"kind": "echo", "value": "c"}, after=[b["task"]])
        sb = status(c, b["task"])
        check(sb["state"] == "waiting" and sb["after"] == [a["task"]], "B: %r", sb)
        check(status(c, cc["task"])["state"] == "waiting", "C waits")
        order = []
        pending = {ra: "A", rb: "B", rc: "C"}
        while pending:
            ev = c.recv_match(lambda e: e.get("id") in pending and e["event"] == "done")
            order.append(pending.pop(ev["id"]))
            check(ev["state"] == "succeeded", "done: %r", ev)
        check(order == ["A", "B", "C"], "order %r", order)


def test_after_failure_skips_the_chain():
    with Daemon() as d:
        c = d.client()
        ra, a = c.submit({"kind": "sleep", "ms": 200})
        rf, f = c.submit({"kind": "fail", "message": "no"}, after=[a["task"]])
        rb, b = c.submit({"kind": "echo", "value": "b"}, after=[f["task"]])
        rc, cc = c.submit({"kind": "echo", "value": "c"}, after=[b["task"]])
        check(c.done(rf)["state"] == "failed", "F fails")
        db, dc = c.done(rb), c.done(rc)
        for ev, dep in ((db, f["task"]), (dc, b["task"])):
            check(ev["state"] == "skipped", "skipped: %r", ev)
            check(ev["error"]["code"] == "dependency_failed", "code: %r", ev)
            check(("task %d" % dep) in ev["error"]["message"], "names the task: %r", ev)
        check("failed" in db["error"]["message"], "names the state: %r", db)
        check("skipped" in dc["error"]["message"], "names the state: %r", dc)
        # a dependency already failed at submit: skipped at once, accepted first
        rd, dd = c.submit({"kind": "echo", "value": "d"}, after=[f["task"]])
        check(dd["event"] == "accepted", "accepted first: %r", dd)
        check(c.done(rd)["state"] == "skipped", "skipped at once")
        p = c.stats()
        check(p["skipped"] == 3 and p["waiting"] == 0, "stats: %r", p)


def test_after_any_runs_after_a_failure():
    with Daemon() as d:
        c = d.client()
        rf, f = c.submit({"kind": "fail", "message": "no"})
        rb, b = c.submit({"kind": "echo", "value": "b"}, after=[f["task"]], after_mode="any")
        check(c.done(rb)["state"] == "succeeded", "any: runs after a failure")


def test_after_cancel_of_dependency_skips():
    with Daemon() as d:
        c = d.client()
        ra, a = c.submit({"kind": "sleep", "ms": 5000})
        rb, b = c.submit({"kind": "echo", "value": "b"}, after=[a["task"]])
        c.request({"op": "cancel", "task": a["task"]}, "ok")
        ev = c.done(rb)
        check(ev["state"] == "skipped" and "cancelled" in ev["error"]["message"], "%r", ev)
        # a cancel of the waiting task itself ends it cancelled
        rc, x = c.submit({"kind": "sleep", "ms": 5000})
        rw, w = c.submit({"kind": "echo", "value": 1}, after=[x["task"]])
        c.request({"op": "cancel", "task": w["task"]}, "ok")
        check(c.done(rw)["state"] == "cancelled", "waiting task cancelled")
        c.request({"op": "cancel", "task": x["task"]}, "ok")


def test_after_forbidden_and_no_such_task():
    conf = "[daemon]\nresult_ttl = 200ms\n"
    with open_daemon(conf) as d:
        c = d.client()
        rid, t = c.submit({"kind": "echo", "value": 1})
        c.done(rid)
        time.sleep(0.3)
        ev = c.request({"op": "submit", "task": {"kind": "echo", "value": 2},
                        "after": [t["task"]]})
        check(ev["event"] == "error" and ev["error"]["code"] == "no_such_task", "%r", ev)
        check("after" in ev["error"]["message"], "names the field: %r", ev)
        ev = c.request({"op": "submit", "task": {"kind": "echo", "value": 2}, "after": [999]})
        check(ev["error"]["code"] == "no_such_task", "never submitted: %r", ev)
        if os.geteuid() != 0:
            raise Skip("forbidden needs root to be another user")
        rs, mine = c.submit({"kind": "sleep", "ms": 2000})
        other = as_user("nobody", d.sock, [{"op": "submit", "id": 1, "task": {
            "kind": "echo", "value": 3}, "after": [mine["task"]]}])[0]
        check(other["event"] == "error" and other["error"]["code"] == "forbidden", "%r", other)
        check(c.stats()["waiting"] == 0, "nothing accepted")
        c.request({"op": "cancel", "task": mine["task"]}, "ok")


def test_after_fan_of_1000_released_at_once():
    with Daemon(workers=4, queue=2000) as d:
        c = d.client()
        gate = os.path.join(d.dir, "gate")
        # the parent ends when the test says: every dependent is waiting by then
        ra, a = c.submit({"kind": "exec", "argv": [
            "sh", "-c", "while [ ! -e %s ]; do sleep 0.01; done" % gate]})
        n = 1000
        for i in range(n):
            c.send({"op": "submit", "id": "f%d" % i, "task": {"kind": "echo", "value": i},
                    "after": [a["task"]]})
        for i in range(n):
            check(c.recv_id("f%d" % i)["event"] == "accepted", "fan %d", i)
        check(c.stats()["waiting"] == n, "all waiting")
        open(gate, "w").close()
        c.done(ra)
        t0 = time.monotonic()
        for i in range(n):
            check(c.recv_id("f%d" % i, "done")["state"] == "succeeded", "fan %d ran", i)
        spent = time.monotonic() - t0
        print("1000 dependents: the last done %.3f s after the parent's" % spent)
        check(spent < 2 * SLOW, "the fan took %.3f s", spent)
        check(c.stats()["waiting"] == 0, "none waiting")


def test_after_and_delay_counts_from_release():
    with Daemon() as d:
        c = d.client()
        ra, a = c.submit({"kind": "sleep", "ms": 400})
        rb, b = c.submit({"kind": "echo", "value": 1}, after=[a["task"]], delay_ms=600)
        c.done(ra)
        t0 = time.monotonic()
        check(status(c, b["task"])["state"] == "scheduled", "released, then its delay")
        c.done(rb, timeout=5)
        check(time.monotonic() - t0 >= 0.55, "the delay counts from the release")


def test_waiting_survives_restart():
    with State() as s:
        with s.daemon() as d:
            c = d.client()
            _, a = c.submit({"kind": "exec", "argv": ["sleep", "30"]}, detach=True,
                            on_lost="rerun")
            eventually(lambda: status(c, a["task"])["state"] == "running", "A runs")
            _, b = c.submit({"kind": "echo", "value": "b"}, after=[a["task"]], detach=True)
            kill9(d)
        with s.daemon() as d:
            c = d.client()
            st = status(c, b["task"])
            check(st["state"] == "waiting" and st["after"] == [a["task"]], "B: %r", st)
            c.request({"op": "cancel", "task": a["task"]}, "ok")
            done = c.request({"op": "wait", "task": b["task"]}, "done")
            check(done["state"] == "skipped", "B after A's cancel: %r", done)


# ---------------------------------------------------------------- retries


def test_retry_three_attempts_one_done_delays_grow():
    with Daemon("--journal", "off") as d:
        c = d.client()
        rid, acc = c.submit({"kind": "fail", "message": "flaky"}, retries=2,
                            retry_delay_ms=200, stream=True)
        follower = d.client()
        wid = follower.send({"op": "wait", "task": acc["task"], "stream": True})
        events = []
        while True:
            ev = c.recv_id(rid)
            events.append(ev)
            if ev["event"] == "done":
                break
        retrying = [e for e in events if e["event"] == "retrying"]
        check(len(retrying) == 2, "two retrying events: %r", events)
        check([e["attempt"] for e in retrying] == [1, 2], "attempts: %r", retrying)
        check(retrying[0]["state"] == "failed" and retrying[0]["error"]["code"] ==
              "task_failed", "retrying: %r", retrying[0])
        check(200 <= retrying[0]["delay_ms"] <= 220 and 400 <= retrying[1]["delay_ms"] <= 440,
              "the delays grow, with up to 10%% jitter: %r", retrying)
        done = events[-1]
        check(done["state"] == "failed" and done["attempt"] == 3, "done: %r", done)
        check(len([e for e in events if e["event"] == "done"]) == 1, "one done")
        # a follower gets the retrying events too, and the one done
        fev = []
        while True:
            ev = follower.recv_id(wid)
            fev.append(ev["event"])
            if ev["event"] == "done":
                break
        check(fev.count("retrying") >= 1 and fev.count("done") == 1, "follower: %r", fev)
        p = c.stats()
        check(p["retried"] == 2, "stats retried: %r", p)


def test_retry_exec_runs_the_same_program_again():
    with Daemon() as d:
        c = d.client()
        count = os.path.join(d.dir, "count")
        script = ('n=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s; '
                  'printf "run$n:"; cat; [ $n -ge 2 ]' % (count, count))
        rid, acc = c.submit({"kind": "exec", "argv": ["sh", "-c", script], "stdin": "in"},
                            retries=3, retry_delay_ms=50)
        done = c.done(rid)
        check(done["state"] == "succeeded" and done["attempt"] == 2, "done: %r", done)
        check(done["result"]["stdout"] == "run2:in", "the second run, its stdin again: %r",
              done)


def test_retry_cancel_between_attempts_ends_at_once():
    with Daemon() as d:
        c = d.client()
        rid, acc = c.submit({"kind": "fail", "message": "x"}, retries=5,
                            retry_delay_ms=10000, stream=True)
        c.recv_id(rid, "retrying")
        check(status(c, acc["task"])["state"] == "scheduled", "between attempts: scheduled")
        t0 = time.monotonic()
        c.request({"op": "cancel", "task": acc["task"]}, "ok")
        done = c.done(rid)
        check(done["state"] == "cancelled" and done["attempt"] == 2, "done: %r", done)
        check(time.monotonic() - t0 < 1, "at once")


def test_retry_on_without_timed_out_does_not_retry_a_timeout():
    with Daemon() as d:
        c = d.client()
        rid, acc = c.submit({"kind": "sleep", "ms": 2000, "timeout_ms": 100}, retries=2,
                            retry_on=["failed"], retry_delay_ms=50)
        done = c.done(rid)
        check(done["state"] == "timed_out" and done["attempt"] == 1, "done: %r", done)
        check(c.stats()["retried"] == 0, "not retried")
        # with timed_out in retry_on it is
        rid, acc = c.submit({"kind": "sleep", "ms": 2000, "timeout_ms": 100}, retries=1,
                            retry_on=["timed_out"], retry_delay_ms=50)
        done = c.done(rid)
        check(done["state"] == "timed_out" and done["attempt"] == 2, "done: %r", done)


def test_retry_lost_at_restart():
    with State() as s:
        marker = os.path.join(s.root, "ran-once")
        script = "if [ -e %s ]; then exit 0; fi; touch %s; sleep 30" % (marker, marker)
        with s.daemon() as d:
            c = d.client()
            _, acc = c.submit({"kind": "exec", "argv": ["sh", "-c", script]}, detach=True,
                              retries=1, retry_on=["lost"], retry_delay_ms=100)
            eventually(lambda: os.path.exists(marker), "attempt 1 runs")
            kill9(d)
        with s.daemon() as d:
            c = d.client()
            done = c.request({"op": "wait", "task": acc["task"]}, "done")
            check(done["state"] == "succeeded" and done["attempt"] == 2, "done: %r", done)


def test_retry_between_attempts_survives_restart():
    with State() as s:
        with s.daemon() as d:
            c = d.client()
            t0 = time.time()
            rid, acc = c.submit({"kind": "fail", "message": "x"}, retries=2,
                                retry_delay_ms=60000, stream=True)
            check(acc["event"] == "accepted", "%r", acc)
            c.recv_id(rid, "retrying")
            kill9(d)
        with s.daemon() as d:
            c = d.client()
            st = status(c, acc["task"])
            check(st["state"] == "scheduled" and st["attempt"] == 2, "after restart: %r", st)
            left = t0 + 60 - time.time()
            check(left - 0.5 * SLOW < st["due_ms"] / 1000.0 < left * 1.1 + 0.5 * SLOW,
                  "due_ms %r, %.3f s left", st["due_ms"], left)
            c.request({"op": "cancel", "task": acc["task"]}, "ok")
            done = c.request({"op": "wait", "task": acc["task"]}, "done")
            check(done["state"] == "cancelled" and done["attempt"] == 2, "done: %r", done)


# ---------------------------------------------------------------- keys


def test_key_same_owner_runs_once_both_get_the_done():
    with Daemon() as d:
        c1, c2 = d.client(), d.client()
        r1, a1 = c1.submit({"kind": "sleep", "ms": 300}, key="nightly")
        r2, a2 = c2.submit({"kind": "sleep", "ms": 300}, key="nightly")
        check(a2["task"] == a1["task"] and a2.get("duplicate") is True, "dup: %r %r", a1, a2)
        check("duplicate" not in a1, "first is no duplicate")
        d1, d2 = c1.done(r1), c2.done(r2)
        check(d1 == dict(d2, id=r1), "the same done: %r %r", d1, d2)
        # finished and retained: the done at once
        r3, a3 = c2.submit({"kind": "sleep", "ms": 300}, key="nightly")
        check(a3["task"] == a1["task"], "still held")
        check(c2.done(r3, timeout=1)["state"] == "succeeded", "at once")
        check(c1.stats()["accepted"] == 1, "ran once")


def test_key_two_owners_run_twice():
    if os.geteuid() != 0:
        raise Skip("needs root to be another user")
    with open_daemon("") as d:
        c = d.client()
        _, mine = c.submit({"kind": "echo", "value": 1}, key="k", detach=True)
        other = as_user("nobody", d.sock, [{"op": "submit", "id": 1, "key": "k",
                                            "detach": True, "task": {"kind": "echo",
                                                                     "value": 2}}])[0]
        check(other["event"] == "accepted" and other["task"] != mine["task"] and
              "duplicate" not in other, "another owner's key: %r", other)


def test_key_survives_kill9_and_is_free_after_forgotten():
    with State() as s:
        with s.daemon() as d:
            c = d.client()
            _, a = c.submit({"kind": "echo", "value": 1}, key="run-1", delay_ms=60000,
                            detach=True)
            rid, b = c.submit({"kind": "echo", "value": 2}, key="done-1")
            c.done(rid)
            kill9(d)
        with s.daemon() as d:
            c = d.client()
            _, a2 = c.submit({"kind": "echo", "value": 1}, key="run-1", detach=True)
            check(a2["task"] == a["task"] and a2["duplicate"], "unfinished: %r", a2)
            _, b2 = c.submit({"kind": "echo", "value": 2}, key="done-1", detach=True)
            check(b2["task"] == b["task"] and b2["duplicate"], "finished: %r", b2)
    with conf_daemon("[daemon]\nresult_ttl = 200ms\n") as d:
        c = d.client()
        rid, a = c.submit({"kind": "echo", "value": 1}, key="k")
        c.done(rid)
        time.sleep(0.3)
        rid, b = c.submit({"kind": "echo", "value": 1}, key="k")
        check(b["task"] != a["task"] and "duplicate" not in b, "free again: %r", b)


def test_held_submit_keeps_its_key_and_command():
    """A submit held for room (admission wait) outlives its request: its key, its
    task object (list's command) and its after are copies, not the request's."""
    with Daemon(workers=1, queue=1) as d:
        c = d.client()
        rb, b = c.submit({"kind": "sleep", "ms": int(300 * SLOW)})
        rq, q = c.submit({"kind": "echo", "value": "q"})
        rid = c.send({"op": "submit", "admission": "wait", "key": "held-key", "retries": 1,
                      "task": {"kind": "exec", "argv": ["echo", "held one"]}})
        time.sleep(0.1)
        # the request's buffers are reused by what follows on this connection
        for i in range(20):
            c.request({"op": "ping"}, "pong")
        acc = c.recv_id(rid, "accepted")
        done = c.done(rid)
        check(done["state"] == "succeeded", "done: %r", done)
        ls = c.request({"op": "list", "limit": 1}, "list")["tasks"][0]
        check(ls["command"] == "echo 'held one'", "command: %r", ls)
        _, dup = c.submit({"kind": "exec", "argv": ["true"]}, key="held-key", detach=True)
        check(dup["task"] == acc["task"] and dup["duplicate"], "the key held: %r", dup)


# ---------------------------------------------------------------- seeing and repeating


def test_status_spec_submit_and_list_command():
    with Daemon() as d:
        c = d.client()
        argv = ["printf", "%s\n", "it's", "a b", "plain"]
        rid, acc = c.submit({"kind": "exec", "argv": argv, "cwd": "/"}, label="L",
                            retries=1, retry_on=["failed"], key="kk", queue_timeout_ms=5000)
        c.done(rid)
        st = status(c, acc["task"])
        check(st["spec"] == {"kind": "exec", "argv": argv, "cwd": "/"}, "spec: %r", st)
        check(st["submit"] == {"label": "L", "retries": 1, "retry_on": ["failed"], "key": "kk",
                               "queue_timeout_ms": 5000}, "submit: %r", st)
        ls = c.request({"op": "list"}, "list")["tasks"][0]
        check(ls["command"] == "printf '%s\n' 'it'\\''s' 'a b' plain", "command: %r", ls)
        rid, acc = c.submit({"kind": "exec", "argv": ["echo", "é" * 150]})
        c.done(rid)
        cmd = c.request({"op": "list", "limit": 1}, "list")["tasks"][0]["command"]
        check(len(cmd.encode()) <= 200 and cmd.startswith("echo "), "cut: %r", cmd)
        rid, acc = c.submit({"kind": "sleep", "ms": 1})
        c.done(rid)
        check(c.request({"op": "list", "limit": 1}, "list")["tasks"][0]["command"] == "sleep",
              "built-in kind: its name")


def tpctl(d, *args, check_rc=None):
    r = subprocess.run([TPCTL, "-s", d.sock] + list(args), capture_output=True, text=True,
                       timeout=TIMEOUT)
    if check_rc is not None and r.returncode != check_rc:
        raise AssertionError("tpctl %s: exit %d\n%s%s" % (" ".join(args), r.returncode,
                                                           r.stdout, r.stderr))
    return r


def test_tpctl_rerun_same_argv_env_cwd_pool():
    with conf_daemon("[pool other]\nsize = 1\n") as d:
        c = d.client()
        task = {"kind": "exec", "argv": ["sh", "-c", "echo $GREETING; pwd"],
                "env": {"GREETING": "hi"}, "cwd": "/tmp"}
        rid, acc = c.submit(task, pool="other", label="first")
        first = c.done(rid)
        r = tpctl(d, "rerun", str(acc["task"]), check_rc=0)
        new = int(r.stdout.strip())
        check(new != acc["task"], "a new id")
        done = c.request({"op": "wait", "task": new}, "done")
        check(done["result"]["stdout"] == first["result"]["stdout"] == "hi\n/tmp\n",
              "same output: %r", done)
        st = status(c, new)
        check(st["pool"] == "other" and st["spec"] == task and st["label"] == "first",
              "same task: %r", st)
        r = tpctl(d, "rerun", "--wait", str(acc["task"]))
        check(r.returncode == 0 and r.stdout == "hi\n/tmp\n", "rerun --wait: %r", r)


def test_tpctl_flags_and_tables():
    with Daemon() as d:
        r = tpctl(d, "submit", "--detach", "--delay", "30s", "--key", "x", "--retries", "2",
                  "--retry-on", "failed,lost", "--retry-delay", "2s", "--", "true", check_rc=0)
        tid = int(r.stdout.strip())
        c = d.client()
        st = status(c, tid)
        check(st["state"] == "scheduled" and st["submit"] == {
            "delay_ms": 30000, "key": "x", "retries": 2, "retry_on": ["failed", "lost"],
            "retry_delay_ms": 2000}, "status: %r", st)
        r = tpctl(d, "submit", "--detach", "--after", str(tid), "--after-any", "--on-lost", "rerun",
                  "--", "echo", "a b", check_rc=0)
        tid2 = int(r.stdout.strip())
        st = status(c, tid2)
        check(st["state"] == "waiting" and st["submit"]["after"] == [tid] and
              st["submit"]["after_mode"] == "any" and st["submit"]["on_lost"] == "rerun",
              "status: %r", st)
        r = tpctl(d, "list", check_rc=0)
        check("COMMAND" in r.stdout and "echo 'a b'" in r.stdout and "scheduled" in r.stdout
              and "waiting" in r.stdout, "list: %s", r.stdout)
        r = tpctl(d, "status", str(tid2), check_rc=0)
        check("echo 'a b'" in r.stdout and "waiting" in r.stdout, "status: %s", r.stdout)
        # a later attempt shows in the state
        r = tpctl(d, "submit", "--detach", "--retries", "1", "--retry-delay", "30s", "--",
                  "false", check_rc=0)
        tid3 = int(r.stdout.strip())
        eventually(lambda: status(c, tid3).get("attempt") == 2, "attempt 2 scheduled")
        r = tpctl(d, "list", check_rc=0)
        check(any(l.split()[0] == str(tid3) and "scheduled#2" in l.split()
                  for l in r.stdout.splitlines()[1:]), "list: %s", r.stdout)
        r = tpctl(d, "status", str(tid3), check_rc=0)
        check("scheduled#2" in r.stdout.splitlines()[1].split(), "status: %s", r.stdout)
        c.request({"op": "cancel", "task": tid3}, "ok")
        # a skipped task: exit 1
        r = tpctl(d, "submit", "--detach", "--", "false", check_rc=0)
        bad = r.stdout.strip()
        r = tpctl(d, "run", "--after", bad, "--", "true")
        check(r.returncode == 1 and "skipped" in r.stderr, "run skipped: %r", r)


def test_tpctl_batch_names_a_pipeline():
    with Daemon() as d:
        path = os.path.join(d.dir, "pipe.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"name": "fetch", "task": {"kind": "echo", "value": 1}}) + "\n")
            f.write(json.dumps({"name": "build", "after": ["fetch"],
                                "task": {"kind": "echo", "value": 2}}) + "\n")
            f.write(json.dumps({"after": ["build", "fetch"], "retries": 0,
                                "task": {"kind": "echo", "value": 3}}) + "\n")
        r = tpctl(d, "--json", "batch", "--retries", "1", path, check_rc=0)
        c = d.client()
        ls = c.request({"op": "list"}, "list")["tasks"]
        check(len(ls) == 3 and all(t["state"] == "succeeded" for t in ls), "list: %r", ls)
        ids = sorted(t["task"] for t in ls)
        st = status(c, ids[2])
        check(st["submit"]["after"] == [ids[1], ids[0]] and st["submit"]["retries"] == 0,
              "the line's own fields win: %r", st)
        check(status(c, ids[1])["submit"]["retries"] == 1, "the flag elsewhere")
        with open(path, "w") as f:
            f.write(json.dumps({"after": ["nope"], "task": {"kind": "echo", "value": 1}}) + "\n")
        r = tpctl(d, "batch", path)
        check(r.returncode == 65 and "nope" in r.stderr, "an unknown name: %r", r)


def test_bash_completion_knows_the_scheduling_options():
    from test_tpctl import complete
    check(complete(["run", "--retry-"]) == ["--retry-delay", "--retry-on"], "%r",
          complete(["run", "--retry-"]))
    check(complete(["submit", "--on-lost", "r"]) == ["rerun"], "on-lost values")
    check(complete(["list", "--state", "sk"]) == ["skipped"], "the new states")
    check(complete(["rer"]) == ["rerun"], "rerun")
    # a value is skipped when looking for the command to run
    check("--after-any" in complete(["batch", "--after"]), "batch takes them")


# ---------------------------------------------------------------- bad values


BAD = [
    ("delay_ms", "1"), ("delay_ms", -1), ("delay_ms", 31536000001), ("delay_ms", 1.5),
    ("after", 1), ("after", []), ("after", list(range(1, 66))), ("after", ["x"]),
    ("after", [0]), ("after", [{"a": 1}]),
    ("after_mode", "all"), ("after_mode", 1),
    ("retries", 101), ("retries", -1), ("retries", "2"),
    ("retry_on", ["expired"]), ("retry_on", "failed"), ("retry_on", []), ("retry_on", [1]),
    ("retry_delay_ms", -5), ("retry_delay_ms", "1s"), ("retry_delay_ms", 86400001),
    ("retry_delay_max_ms", True), ("retry_delay_max_ms", 86400001),
    ("key", ""), ("key", "k" * 129), ("key", 7),
]


def test_bad_values_name_the_field_and_accept_nothing():
    with Daemon() as d:
        c = d.client()
        for field, value in BAD:
            req = {"op": "submit", "task": {"kind": "echo", "value": 1}, field: value}
            if field == "after_mode":
                req["after"] = [1]
            ev = c.request(req)
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request",
                  "%s=%r: %r", field, value, ev)
            check('"%s"' % field in ev["error"]["message"], "%s=%r: message %r", field, value,
                  ev["error"]["message"])
        ev = c.request({"op": "submit", "task": {"kind": "echo", "value": 1},
                        "after_mode": "any"})
        check(ev["error"]["code"] == "bad_request" and "after" in ev["error"]["message"],
              "after_mode alone: %r", ev)
        p = c.stats()
        check(p["accepted"] == 0 and p["scheduled"] == 0 and p["waiting"] == 0,
              "nothing accepted: %r", p)
        check(c.request({"op": "list"}, "list")["tasks"] == [], "nothing listed")
        ev = c.request({"op": "list", "state": "bogus"})
        check("scheduled" in ev["error"]["message"] and "skipped" in ev["error"]["message"],
              "list names the new states: %r", ev)


def test_max_scheduled_rejects_past_it():
    with conf_daemon("[daemon]\nmax_scheduled = 2\n") as d:
        c = d.client()
        for i in range(2):
            _, acc = c.submit({"kind": "echo", "value": i}, delay_ms=60000, detach=True)
            check(acc["event"] == "accepted", "within: %r", acc)
        _, rej = c.submit({"kind": "echo", "value": 3}, delay_ms=60000, detach=True)
        check(rej["event"] == "rejected" and rej["error"]["code"] == "queue_full" and
              "max_scheduled" in rej["error"]["message"], "past it: %r", rej)
        _, plain = c.submit({"kind": "echo", "value": 4}, detach=True)
        check(plain["event"] == "accepted", "a plain submit is not counted: %r", plain)


def test_metrics_name_the_new_figures():
    with Daemon("--metrics-listen", "127.0.0.1:0") as d:
        c = d.client()
        c.submit({"kind": "echo", "value": 1}, delay_ms=60000, detach=True)
        _, s = c.submit({"kind": "sleep", "ms": 60000}, detach=True)
        c.submit({"kind": "echo", "value": 1}, after=[s["task"]], detach=True)
        rid, _ = c.submit({"kind": "fail", "message": "x"}, retries=1, retry_delay_ms=1)
        c.done(rid)
        rf, f = c.submit({"kind": "fail", "message": "x"})
        rk, _ = c.submit({"kind": "echo", "value": 1}, after=[f["task"]])
        c.done(rk)
        text = d.metrics()
        for line in ('tpd_tasks_scheduled{pool="default"} 1', 'tpd_tasks_waiting{pool="default"} 1',
                     'tpd_task_retries_total{pool="default"} 1',
                     'tpd_tasks_finished_total{pool="default",state="skipped"} 1'):
            check(line in text.splitlines(), "no %r in:\n%s", line, text)
        c.request({"op": "cancel", "task": s["task"]}, "ok")


run_tests(globals())
