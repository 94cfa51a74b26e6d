#!/usr/bin/env python3
"""Pools that schedule, through the real daemon: elastic size, admission (wait, drop_oldest),
pause, priorities, fair share between owners, per-owner quotas, and a live resize that a
reload keeps."""
import json
import os
import signal
import subprocess
import threading
import time

from tpdtest import TPCTL, TPD, Daemon, check, eventually, run_tests

LONG = {"kind": "sleep", "ms": 600000}
ECHO = {"kind": "echo", "value": 1}


def write(path, text, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def pool_daemon(conf, tcp=False, tokens=None, extra=()):
    """A daemon with conf (text of a tpd.conf) given by -c; tokens: NAME TOKEN lines."""
    d = Daemon(tcp=tcp, tcp_auth="token" if tokens else "none", start=False)
    d.args += ["-c", write(os.path.join(d.dir, "tpd.conf"), conf)] + list(extra)
    if tokens:
        d.args += ["--token-file", write(os.path.join(d.dir, "tokens"), tokens)]
    d.start()
    return d


def tcp_as(d, token):
    c = d.client(tcp=True)
    ev = c.request({"op": "hello", "token": token})
    check(ev["event"] == "hello", "hello: %r", ev)
    return c


def pool_stats(c, name):
    return c.stats(name)


def done_order(c, rids, timeout=None):
    """The request ids of rids in the order their dones arrive (one connection)."""
    order = []
    want = set(rids)
    while want:
        ev = c.recv_match(lambda e: e.get("event") == "done" and e.get("id") in want, timeout)
        order.append(ev["id"])
        want.discard(ev["id"])
    return order


# ---------------------------------------------------------------- elastic pools

def test_grow_before_queueing_then_keepalive_back_to_min():
    conf = "[pool el]\nmin_workers = 1\nmax_workers = 4\nkeepalive = 300ms\n"
    with pool_daemon(conf) as d:
        c = d.client()
        s = pool_stats(c, "el")
        check((s["min_workers"], s["max_workers"], s["workers"]) == (1, 4, 1), "%r", s)
        check(s["keepalive_ms"] == 300, "%r", s)
        rids = [c.send({"op": "submit", "pool": "el", "task": {"kind": "sleep", "ms": 400}})
                for _ in range(4)]
        for r in rids:
            check(c.recv_id(r)["event"] == "accepted", "accepted")
        eventually(lambda: pool_stats(c, "el")["busy"] == 4, "four running at once")
        s = pool_stats(c, "el")
        check(s["queued"] == 0 and s["workers"] == 4, "none waited in the queue: %r", s)
        for r in rids:
            ev = c.done(r)
            check(ev["state"] == "succeeded", "%r", ev)
            check(ev["queued_ms"] < 100, "a task waited %s ms in a pool that could grow",
                  ev["queued_ms"])
        # idle past keepalive: back to min_workers
        eventually(lambda: pool_stats(c, "el")["workers"] == 1, "workers back to 1", timeout=10)
        check(pool_stats(c, "el")["target"] == 1, "target follows")


def test_keepalive_never_interrupts_a_running_task():
    conf = "[pool el]\nmin_workers = 1\nmax_workers = 2\nkeepalive = 100ms\n"
    with pool_daemon(conf) as d:
        c = d.client()
        long_id = c.send({"op": "submit", "pool": "el", "task": {"kind": "sleep", "ms": 1200}})
        short_id = c.send({"op": "submit", "pool": "el", "task": {"kind": "sleep", "ms": 10}})
        check(c.done(short_id)["state"] == "succeeded", "short")
        # the idle worker leaves after 100 ms; the busy one stays and its task ends well
        eventually(lambda: pool_stats(c, "el")["workers"] == 1, "the idle one left")
        check(pool_stats(c, "el")["busy"] == 1, "the long task still runs")
        ev = c.done(long_id)
        check(ev["state"] == "succeeded" and ev["run_ms"] >= 1100, "%r", ev)


def test_resize_min_max_and_bad_bounds():
    with pool_daemon("[pool el]\nsize = 2\nlimit = 8\n") as d:
        c = d.client()
        ev = c.request({"op": "resize", "pool": "el", "min": 1, "max": 6})
        check(ev["event"] == "ok" and ev["min_workers"] == 1 and ev["max_workers"] == 6, "%r", ev)
        check("reload" in ev["note"], "the answer says how long it lasts: %r", ev)
        for bad in ({"size": 2, "min": 1}, {"min": 5, "max": 3}, {"max": 9}, {"min": 7}):
            ev = c.request(dict(op="resize", pool="el", **bad))
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request",
                  "%r: %r", bad, ev)
        s = pool_stats(c, "el")
        check((s["min_workers"], s["max_workers"]) == (1, 6), "unchanged by the bad ones: %r", s)


def test_size_with_min_workers_is_a_config_error():
    d = Daemon(start=False)
    try:
        conf = write(os.path.join(d.dir, "tpd.conf"), "[pool x]\nsize = 2\nmin_workers = 1\n")
        p = subprocess.run([TPD, "-n", "-c", conf], capture_output=True, text=True, timeout=10)
        check(p.returncode != 0 and "give either size or min_workers/max_workers" in p.stderr,
              "%d %s", p.returncode, p.stderr)
    finally:
        d.close()


def test_live_resize_survives_a_reload_with_the_same_size():
    with pool_daemon("[pool el]\nsize = 2\n") as d:
        c = d.client()
        c.request({"op": "resize", "pool": "el", "size": 3})
        conf = os.path.join(d.dir, "tpd.conf")
        with open(conf, "a") as f:
            f.write("capacity = 99\n")      # another key changes, size does not
        d.signal(signal.SIGHUP)
        eventually(lambda: pool_stats(c, "el")["capacity"] == 99, "the reload applied")
        check(pool_stats(c, "el")["target"] == 3, "the live size stays: %r", pool_stats(c, "el"))
        write(conf, "[pool el]\nsize = 1\ncapacity = 99\n")
        d.signal(signal.SIGHUP)
        eventually(lambda: pool_stats(c, "el")["target"] == 1, "the file's new size applies")


def test_live_pause_survives_a_reload_with_the_same_paused():
    with pool_daemon("[pool p]\nsize = 1\n") as d:
        c = d.client()
        c.request({"op": "pause", "pool": "p"})
        conf = os.path.join(d.dir, "tpd.conf")
        write(conf, "[pool p]\nsize = 1\ncapacity = 77\n")
        d.signal(signal.SIGHUP)
        eventually(lambda: pool_stats(c, "p")["capacity"] == 77, "the reload applied")
        check(pool_stats(c, "p")["state"] == "paused", "the live pause stays")
        write(conf, "[pool p]\nsize = 1\ncapacity = 77\npaused = yes\n")
        d.signal(signal.SIGHUP)
        time.sleep(0.2)
        check(pool_stats(c, "p")["state"] == "paused", "paused = yes")
        write(conf, "[pool p]\nsize = 1\ncapacity = 77\npaused = no\n")
        d.signal(signal.SIGHUP)
        eventually(lambda: pool_stats(c, "p")["state"] == "open", "the file's change resumes it")


def test_priority_is_replayed_from_the_journal():
    with pool_daemon("[pool p]\nsize = 1\npaused = yes\n") as d:
        c = d.client()
        for p in (1, 9, 5):
            ev = c.submit(ECHO, pool="p", priority=p, detach=True)[1]
            check(ev["event"] == "accepted", "%r", ev)
        d.proc.kill()           # a crash: the queued tasks stay in the journal
        d.proc.wait()
        d.start()
        c = d.client()
        ids = [t["task"] for t in c.request({"op": "list", "pool": "p"})["tasks"]]
        prios = {t["task"]: t["priority"] for t in c.request({"op": "list", "pool": "p"})["tasks"]}
        check(sorted(prios.values()) == [1, 5, 9], "replayed with their priorities: %r", prios)
        waits = {c.send({"op": "wait", "task": t}): t for t in ids}
        c.request({"op": "resume", "pool": "p"})
        order = [prios[waits[r]] for r in done_order(c, list(waits))]
        check(order == [9, 5, 1], "highest first after the restart: %r", order)


# ---------------------------------------------------------------- admission

WAIT_POOL = "[pool w]\nsize = 1\ncapacity = 1\nadmission = wait\nadmission_timeout = 20s\n"


def fill(c, pool):
    """One running long task and one queued: the pool's queue (capacity 1) is full."""
    run = c.send({"op": "submit", "pool": pool, "task": LONG})
    check(c.recv_id(run)["event"] == "accepted", "running one")
    eventually(lambda: pool_stats(c, pool)["busy"] == 1, "busy")
    q = c.send({"op": "submit", "pool": pool, "task": LONG})
    check(c.recv_id(q)["event"] == "accepted", "queued one")
    return run, q


def test_wait_holds_past_a_full_queue_and_accepts_when_a_task_ends():
    with pool_daemon(WAIT_POOL) as d:
        c = d.client()
        run, q = fill(c, "w")
        held = c.send({"op": "submit", "pool": "w", "task": ECHO})
        # the connection is served meanwhile
        check(c.request({"op": "ping"})["event"] == "pong", "ping answered while held")
        s = pool_stats(c, "w")
        check(s["held"] == 1 and s["admission"] == "wait", "%r", s)
        check(not [e for e in c.pending if e.get("id") == held], "no answer yet: %r", c.pending)
        # a task ends: the queued one starts, its slot goes to the held submit
        tid = c.request({"op": "list", "pool": "w", "state": "running"})["tasks"][0]["task"]
        c.request({"op": "cancel", "task": tid})
        ev = c.recv_id(held)
        check(ev["event"] == "accepted", "the held submit was accepted: %r", ev)
        check(ev["queued"] == 0, "first in the queue: %r", ev)
        check(pool_stats(c, "w")["held"] == 0, "held 0 after")


def test_held_past_its_timeout_is_rejected_and_max_held_plus_one_at_once():
    conf = WAIT_POOL + "max_held = 2\n"
    with pool_daemon(conf) as d:
        c = d.client()
        fill(c, "w")
        t0 = time.monotonic()
        short = c.send({"op": "submit", "pool": "w", "task": ECHO, "admission_timeout_ms": 300})
        c.send({"op": "submit", "pool": "w", "task": ECHO})
        third = c.send({"op": "submit", "pool": "w", "task": ECHO})
        ev = c.recv_id(third)
        check(ev["event"] == "rejected" and ev["error"]["code"] == "queue_full" and
              "max_held" in ev["error"]["message"], "max_held + 1 at once: %r", ev)
        ev = c.recv_id(short)
        took = time.monotonic() - t0
        check(ev["event"] == "rejected" and ev["error"]["code"] == "queue_full", "%r", ev)
        check(0.25 < took < 5, "rejected at its deadline, after %.2f s", took)
        check(pool_stats(c, "w")["held"] == 1, "the other one is still held")
        # a submit with admission reject is refused at once, even from a wait pool
        ev = c.submit(ECHO, pool="w", admission="reject")[1]
        check(ev["event"] == "rejected" and ev["error"]["code"] == "queue_full", "%r", ev)
        ev = c.submit(ECHO, pool="w", admission="drop_oldest")[1]
        check(ev["event"] == "error" and ev["error"]["code"] == "bad_request", "%r", ev)


def test_closing_the_connection_drops_its_held_submits_and_nothing_runs():
    with pool_daemon(WAIT_POOL) as d:
        c = d.client()
        fill(c, "w")
        mark = os.path.join(d.dir, "ran")
        h = d.client()
        for _ in range(3):
            h.send({"op": "submit", "pool": "w",
                    "task": {"kind": "exec", "argv": ["touch", mark]}})
        eventually(lambda: pool_stats(c, "w")["held"] == 3, "three held")
        accepted = pool_stats(c, "w")["accepted"]
        h.close()
        eventually(lambda: pool_stats(c, "w")["held"] == 0, "dropped with the connection")
        # room comes: nothing of them runs
        for t in c.request({"op": "list", "pool": "w"})["tasks"]:
            c.request({"op": "cancel", "task": t["task"]})
        eventually(lambda: pool_stats(c, "w")["busy"] == 0, "idle")
        check(pool_stats(c, "w")["accepted"] == accepted, "nothing of them was accepted")
        check(not os.path.exists(mark), "a dropped submit ran")


def test_drain_rejects_held_submits_closed():
    with pool_daemon(WAIT_POOL) as d:
        c = d.client()
        fill(c, "w")
        held = c.send({"op": "submit", "pool": "w", "task": ECHO})
        eventually(lambda: pool_stats(c, "w")["held"] == 1, "held")
        d.signal(signal.SIGTERM)
        ev = c.recv_id(held)
        check(ev["event"] == "rejected" and ev["error"]["code"] == "closed", "%r", ev)
        c.request({"op": "shutdown", "mode": "now"})


def test_drop_oldest_displaces_the_oldest_of_the_lowest_priority_never_a_higher_one():
    conf = "[pool d]\nsize = 1\ncapacity = 2\nadmission = drop_oldest\n"
    with pool_daemon(conf) as d:
        c = d.client()
        run = c.send({"op": "submit", "pool": "d", "task": LONG})
        c.recv_id(run)
        eventually(lambda: pool_stats(c, "d")["busy"] == 1, "busy")
        a = c.send({"op": "submit", "pool": "d", "task": ECHO, "priority": 0})
        b = c.send({"op": "submit", "pool": "d", "task": ECHO, "priority": 5})
        check(c.recv_id(a)["event"] == "accepted" and c.recv_id(b)["event"] == "accepted", "a b")
        new = c.send({"op": "submit", "pool": "d", "task": ECHO, "priority": 0})
        check(c.recv_id(new)["event"] == "accepted", "the new one takes a's place")
        ev = c.done(a)
        check(ev["state"] == "expired" and ev["error"]["code"] == "displaced", "%r", ev)
        low = c.send({"op": "submit", "pool": "d", "task": ECHO, "priority": -1})
        ev = c.recv_id(low)
        check(ev["event"] == "rejected" and ev["error"]["code"] == "queue_full",
              "every queued one is higher: %r", ev)
        s = pool_stats(c, "d")
        check(s["displaced"] == 1 and s["expired"] == 1 and s["queued"] == 2, "%r", s)


# ---------------------------------------------------------------- order

def test_priorities_start_highest_first_fifo_within_each():
    with pool_daemon("[pool p]\nsize = 1\npaused = yes\n") as d:
        c = d.client()
        check(pool_stats(c, "p")["state"] == "paused", "configured paused")
        rids, prio = [], {}
        for i in range(12):
            p = (5, -3, 0)[i % 3]
            r = c.send({"op": "submit", "pool": "p", "task": ECHO, "priority": p})
            check(c.recv_id(r)["event"] == "accepted", "accepted")
            rids.append(r)
            prio[r] = p
        eventually(lambda: pool_stats(c, "p")["queued"] == 12, "nothing starts while paused")
        ev = c.request({"op": "resume", "pool": "p"})
        check(ev["event"] == "ok" and ev["state"] == "open", "%r", ev)
        order = done_order(c, rids)
        want = sorted(rids, key=lambda r: (-prio[r], r))
        check(order == want, "started %r, want %r", order, want)
        st = c.request({"op": "status", "task": 1})
        check(st.get("priority") in (5, -3, 0), "status shows priority: %r", st)


def test_pause_keeps_running_tasks_and_queues_submits():
    with pool_daemon("[pool p]\nsize = 1\ncapacity = 4\n") as d:
        c = d.client()
        run = c.send({"op": "submit", "pool": "p", "task": {"kind": "sleep", "ms": 300}})
        c.recv_id(run)
        eventually(lambda: pool_stats(c, "p")["busy"] == 1, "running")
        ev = c.request({"op": "pause", "pool": "p"})
        check(ev == dict(ev, event="ok", pool="p", state="paused"), "%r", ev)
        q = c.send({"op": "submit", "pool": "p", "task": ECHO})
        check(c.recv_id(q)["event"] == "accepted", "accepted while paused")
        check(c.done(run)["state"] == "succeeded", "the running one went on")
        time.sleep(0.2)
        s = pool_stats(c, "p")
        check(s["queued"] == 1 and s["state"] == "paused", "nothing started: %r", s)
        c.request({"op": "resume", "pool": "p"})
        check(c.done(q)["state"] == "succeeded", "runs after resume")
        ev = c.request({"op": "pause", "pool": "nope"})
        check(ev["error"]["code"] == "no_such_pool", "%r", ev)


TOKENS = "alice tok-a\nbob tok-b\n"


def order_by_done(conf, tokens):
    with pool_daemon(conf, tcp=True, tokens=tokens) as d:
        a, b = tcp_as(d, "tok-a"), tcp_as(d, "tok-b")
        watch = d.client()
        ra = []
        for _ in range(100):
            ra.append(a.send({"op": "submit", "pool": "f", "task": ECHO}))
        for r in ra:
            check(a.recv_id(r)["event"] == "accepted", "a accepted")
        rb = b.send({"op": "submit", "pool": "f", "task": ECHO})
        tb = b.recv_id(rb)["task"]
        ta = sorted(t["task"] for t in watch.request(
            {"op": "list", "pool": "f", "owner": "token:alice", "limit": 200})["tasks"])
        # every task's end, one worker: the end order is the start order
        waits = {}
        for t in ta + [tb]:
            waits[watch.send({"op": "wait", "task": t})] = t
        watch.request({"op": "resume", "pool": "f"})
        order = [waits[i] for i in done_order(watch, list(waits))]
        return order.index(tb)


def test_fair_share_one_task_of_another_owner_is_not_stuck_behind_a_batch():
    conf = "[pool f]\nsize = 1\ncapacity = 200\npaused = yes\n"
    pos = order_by_done(conf, TOKENS)
    check(pos <= 1, "bob's task started after %d of alice's (fair = owner)", pos)


def test_fair_none_is_fifo():
    conf = "[pool f]\nsize = 1\ncapacity = 200\npaused = yes\nfair = none\n"
    pos = order_by_done(conf, TOKENS)
    check(pos == 100, "bob's task started after %d of alice's (fair = none: last)", pos)


# ---------------------------------------------------------------- quotas

def test_max_queued_per_owner_refuses_with_quota_while_others_submit():
    conf = ("[pool q]\nsize = 1\npaused = yes\ncapacity = 3\nmax_queued_per_owner = 2\n"
            "admission = wait\n")
    with pool_daemon(conf, tcp=True, tokens=TOKENS) as d:
        a, b = tcp_as(d, "tok-a"), tcp_as(d, "tok-b")
        for _ in range(2):
            check(a.submit(ECHO, pool="q")[1]["event"] == "accepted", "a's first two")
        ev = a.submit(ECHO, pool="q")[1]
        check(ev["event"] == "rejected" and ev["error"]["code"] == "quota" and
              "max_queued_per_owner" in ev["error"]["message"], "at once, also with wait: %r", ev)
        check(b.submit(ECHO, pool="q")[1]["event"] == "accepted", "bob still submits")
        # the queue is full now: bob's next is held; alice's, behind it, is quota at once
        b.send({"op": "submit", "pool": "q", "task": ECHO})
        eventually(lambda: pool_stats(d.client(), "q")["held"] == 1, "bob's next is held")
        ev = a.submit(ECHO, pool="q")[1]
        check(ev["event"] == "rejected" and ev["error"]["code"] == "quota",
              "quota at once behind a held submit: %r", ev)
        check(pool_stats(d.client(), "q")["rejected_quota"] == 2, "counted")


def test_max_running_per_owner_keeps_an_owner_at_its_cap():
    conf = "[pool r]\nsize = 3\nmax_running_per_owner = 1\n"
    with pool_daemon(conf, tcp=True, tokens=TOKENS) as d:
        a, b = tcp_as(d, "tok-a"), tcp_as(d, "tok-b")
        for _ in range(3):
            a.submit(LONG, pool="r")
        b.submit(LONG, pool="r")
        admin = d.client()
        eventually(lambda: pool_stats(admin, "r")["busy"] == 2, "alice 1 + bob 1 running")
        time.sleep(0.2)
        s = pool_stats(admin, "r")
        check(s["busy"] == 2 and s["queued"] == 2, "alice stays at her cap: %r", s)
        running = admin.request({"op": "list", "pool": "r", "state": "running"})["tasks"]
        check(sorted(t["owner"] for t in running) == ["token:alice", "token:bob"], "%r", running)


# ---------------------------------------------------------------- metrics

def test_metrics_held_bounds_quota_and_displaced_as_expired():
    conf = (WAIT_POOL + "[pool el]\nmin_workers = 2\nmax_workers = 5\n"
            "[pool d]\nsize = 1\ncapacity = 1\nadmission = drop_oldest\n"
            "[pool q]\npaused = yes\nmax_queued_per_owner = 1\n")
    with pool_daemon(conf, extra=["--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        fill(c, "w")
        c.send({"op": "submit", "pool": "w", "task": ECHO})
        c.submit(ECHO, pool="q")
        ev = c.submit(ECHO, pool="q")[1]
        check(ev["error"]["code"] == "quota", "%r", ev)
        run = c.send({"op": "submit", "pool": "d", "task": LONG})
        c.recv_id(run)
        eventually(lambda: pool_stats(c, "d")["busy"] == 1, "busy")
        c.submit(ECHO, pool="d")
        c.submit(ECHO, pool="d")                # displaces the one before
        eventually(lambda: pool_stats(c, "w")["held"] == 1, "held")
        text = d.metrics()
        for line in ('tpd_submits_held{pool="w"} 1', 'tpd_workers_min{pool="el"} 2',
                     'tpd_workers_max{pool="el"} 5',
                     'tpd_tasks_rejected_total{pool="q",reason="quota"} 1',
                     'tpd_tasks_finished_total{pool="d",state="expired"} 1'):
            check(line in text.splitlines(), "%s not in /metrics:\n%s", line, text[:3000])


# ---------------------------------------------------------------- tpctl

def tpctl(d, *args, timeout=60):
    return subprocess.run([TPCTL, "-s", d.sock] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def test_tpctl_submit_waits_for_room_and_says_so_after_a_second():
    with pool_daemon("[pool w]\nsize = 1\ncapacity = 1\n") as d:
        c = d.client()
        fill(c, "w")
        p = subprocess.Popen([TPCTL, "-s", d.sock, "submit", "--pool", "w", "--detach",
                              "--task", json.dumps(ECHO)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        eventually(lambda: pool_stats(c, "w")["held"] == 1, "tpctl's submit is held")
        time.sleep(1.3)
        check(p.poll() is None, "tpctl submit waits")
        tid = c.request({"op": "list", "pool": "w", "state": "running"})["tasks"][0]["task"]
        c.request({"op": "cancel", "task": tid})
        out, err = p.communicate(timeout=20)
        check(p.returncode == 0 and out.strip().isdigit(), "%d %r %r", p.returncode, out, err)
        check("waiting for room in pool w" in err, "the line after a second: %r", err)
        r = tpctl(d, "submit", "--pool", "w", "--no-wait-for-room", "--task", json.dumps(ECHO))
        check(r.returncode == 75 and "queue_full" in r.stderr, "%d %r", r.returncode, r.stderr)


def test_tpctl_pause_resume_resize_and_priority():
    with pool_daemon("[pool p]\nsize = 1\nlimit = 8\n") as d:
        r = tpctl(d, "pause", "p")
        check(r.returncode == 0 and "pool p: paused" in r.stdout, "%r %r", r.stdout, r.stderr)
        r = tpctl(d, "submit", "--pool", "p", "--detach", "--priority", "7", "--task",
                  json.dumps(ECHO))
        check(r.returncode == 0, "%r", r.stderr)
        tid = r.stdout.strip()
        r = tpctl(d, "status", tid)
        head, row = r.stdout.splitlines()[0].split(), r.stdout.splitlines()[1].split()
        check("PRI" in head and row[head.index("PRI")] == "7", "status shows it: %r", r.stdout)
        r = tpctl(d, "list", "--pool", "p")
        # PRI, then the command, last
        check(r.stdout.splitlines()[0].split()[-2:] == ["PRI", "COMMAND"] and
              r.stdout.splitlines()[1].split()[-2:] == ["7", "echo"], "%r", r.stdout)
        r = tpctl(d, "stats")
        check("paused" in r.stdout, "stats shows the state: %r", r.stdout)
        r = tpctl(d, "resume", "p")
        check(r.returncode == 0 and "pool p: open" in r.stdout, "%r", r.stdout)
        r = tpctl(d, "resize", "--pool", "p", "--min", "1", "--max", "5")
        check(r.returncode == 0 and "1 to 5 workers" in r.stdout and "reload" in r.stdout,
              "%r %r", r.stdout, r.stderr)
        r = tpctl(d, "stats")
        check("1-5" in r.stdout, "stats shows min-max: %r", r.stdout)
        r = tpctl(d, "resize", "--pool", "p", "--min", "6", "--max", "2")
        check(r.returncode != 0 and "bad_request" in r.stderr, "%r", r.stderr)
        r = tpctl(d, "submit", "--priority", "1001", "--task", json.dumps(ECHO))
        check(r.returncode == 64 and "--priority" in r.stderr, "%r", r.stderr)


def test_tpctl_batch_waits_for_room_in_a_small_queue():
    with pool_daemon("[pool b]\nsize = 2\ncapacity = 4\n") as d:
        path = write(os.path.join(d.dir, "jobs"), '{"kind":"sleep","ms":5}\n' * 300)
        r = tpctl(d, "batch", "--pool", "b", "-j", "64", path, timeout=120)
        check(r.returncode == 0 and "300 succeeded" in r.stderr, "%d %r", r.returncode, r.stderr)
        s = pool_stats(d.client(), "b")
        check(s["rejected"] == 0 and s["succeeded"] == 300, "no rejection: %r", s)


# ---------------------------------------------------------------- exactly once, mixed

def test_stress_every_submit_ends_once_with_priorities_owners_wait_pauses():
    conf = ("[pool s]\nmin_workers = 1\nmax_workers = 4\nkeepalive = 50ms\ncapacity = 8\n"
            "admission = wait\nmax_held = 100000\nlimit = 8\n")
    with pool_daemon(conf, tcp=True, tokens=TOKENS) as d:
        n_per, results, errors = 150, {}, []

        def submitter(k, token):
            try:
                c = tcp_as(d, token)
                rids = []
                for i in range(n_per):
                    rids.append(c.send({"op": "submit", "pool": "s", "priority": (i * 7) % 11 - 5,
                                        "task": {"kind": "spin", "ms": 1}}))
                got = {}
                for r in rids:
                    ev = c.recv_id(r, timeout=60)
                    got[r] = [ev]
                for r in rids:
                    if got[r][0]["event"] == "accepted":
                        got[r].append(c.done(r, timeout=60))
                # no second done for any of them
                c.request({"op": "ping"})
                extra = [e for e in c.pending if e.get("event") == "done"]
                if extra:
                    errors.append("extra dones %r" % extra[:3])
                results[k] = got
            except Exception as e:      # noqa: BLE001 - reported below
                errors.append("%s: %r" % (k, e))

        threads = [threading.Thread(target=submitter, args=(k, ("tok-a", "tok-b")[k % 2]))
                   for k in range(4)]
        for t in threads:
            t.start()
        admin = d.client()
        cancelled = 0
        for i in range(12):
            admin.request({"op": "pause", "pool": "s"})
            admin.request({"op": "resize", "pool": "s", "min": 1 + i % 2, "max": 2 + i % 5})
            admin.request({"op": "resume", "pool": "s"})
            for t in admin.request({"op": "list", "pool": "s", "state": "queued", "limit": 2})["tasks"]:
                if admin.request({"op": "cancel", "task": t["task"]})["event"] == "ok":
                    cancelled += 1
            time.sleep(0.02)
        for t in threads:
            t.join(120)
        check(not errors, "%r", errors[:5])
        accepted = sum(1 for got in results.values() for g in got.values()
                       if g[0]["event"] == "accepted")
        rejected = sum(1 for got in results.values() for g in got.values()
                       if g[0]["event"] == "rejected")
        check(accepted + rejected == 4 * n_per, "every submit answered once")
        for got in results.values():
            for g in got.values():
                if g[0]["event"] == "accepted":
                    check(len(g) == 2 and g[1]["event"] == "done", "one done each: %r", g)
        s = pool_stats(admin, "s")
        ends = s["succeeded"] + s["failed"] + s["timed_out"] + s["cancelled"] + s["expired"]
        check(s["accepted"] == accepted and ends == accepted, "stats add up: %r (%d)", s, accepted)
        check(s["held"] == 0 and s["queued"] == 0, "%r", s)


run_tests(globals())
