#!/usr/bin/env python3
"""Bounded memory for what the daemon keeps: retained results (result_retain_bytes) and
pending waits per connection (max_subscriptions)."""
from tpdtest import SLOW, Daemon, check, run_tests

MIB = 1024 * 1024


def echo_done(c, value):
    """Submits an echo of value and returns (task id, done)."""
    rid, ev = c.submit({"kind": "echo", "value": value})
    check(ev["event"] == "accepted", "%r", ev)
    done = c.done(rid)
    check(done["state"] == "succeeded", "%r", {k: v for k, v in done.items() if k != "result"})
    return ev["task"], done


def test_result_retain_bytes_forgets_the_oldest_results_first():
    n, cap = 200, 8 * MIB
    value = "x" * MIB
    with Daemon("--result-retain-bytes", "8M", "--max-request-bytes", "2M") as d:
        c = d.client()
        small, _ = echo_done(c, "small")    # the oldest: it goes first, small as it is
        rss0 = d.rss_kib()
        ids = [echo_done(c, value)[0] for _ in range(n)]
        rss1 = d.rss_kib()
        st = c.request({"op": "stats"}, "stats")
        check(st["tasks_retained_bytes"] <= cap, "over the cap: %r", st)
        check(st["tasks_retained"] < 10, "%d retained under 8M", st["tasks_retained"])
        check(st["results_forgotten"] == n + 1 - st["tasks_retained"],
              "forgotten for the bytes: %r", st)
        # the newest are still answered, the older forgotten, with no hole between them
        answered = []
        for tid in [small] + ids:
            ev = c.request({"op": "wait", "task": tid})
            if ev["event"] == "done":
                check(ev["result"]["value"] == value, "task %d's result", tid)
                answered.append(True)
            else:
                check(ev["error"]["code"] == "no_such_task", "%r", ev)
                msg = ev["error"]["message"]
                check("forgotten" in msg and "result_retain_bytes" in msg, "%r", msg)
                answered.append(False)
        kept = answered.count(True)
        check(kept == st["tasks_retained"] and answered == [False] * (n + 1 - kept) + [True] * kept,
              "oldest first: %r", answered)
        check(kept >= 3, "only %d of the newest answered", kept)
        never = c.request({"op": "wait", "task": ids[-1] + 1000})
        check("never submitted" in never["error"]["message"], "%r", never)
        print("RSS: %d KiB before, %d KiB after %d echoes of 1 MiB (cap 8M; %d retained, "
              "%d bytes counted, %d forgotten)" % (rss0, rss1, n, kept,
                                                  st["tasks_retained_bytes"],
                                                  st["results_forgotten"]))
        if SLOW == 1:
            # without the cap the results alone pin 200 MiB; a sanitizer's
            # quarantine keeps freed memory, so the bound is for plain builds
            check(rss1 < 120 * 1024, "RSS %d KiB", rss1)


def test_result_retain_bytes_counts_what_each_task_keeps():
    with Daemon() as d:
        c = d.client()
        st0 = c.request({"op": "stats"}, "stats")
        check(st0["tasks_retained_bytes"] == 0 and st0["results_forgotten"] == 0, "%r", st0)
        echo_done(c, "y" * 100000)
        st1 = c.request({"op": "stats"}, "stats")
        per_task = st1["tasks_retained_bytes"]
        # its done (the value again) and its request (status's spec, rerun): both counted
        check(200000 < per_task < 200000 + 4096, "one retained echo of 100000 bytes: %r", st1)
        echo_done(c, 1)
        st2 = c.request({"op": "stats"}, "stats")
        check(st2["tasks_retained"] == 2 and st2["tasks_retained_bytes"] > per_task, "%r", st2)
        check(st2["results_forgotten"] == 0, "nothing forgotten under the default cap")
    # count and age limits are not counted as forgotten for the bytes
    with Daemon("--result-retain", "1") as d:
        c = d.client()
        for _ in range(3):
            echo_done(c, 1)
        st = c.request({"op": "stats"}, "stats")
        check(st["tasks_retained"] == 1 and st["results_forgotten"] == 0, "%r", st)


def ping_sync(c):
    """Every event before the pong of a ping sent now."""
    sync = c.send({"op": "ping"})
    got = []
    while True:
        ev = c.recv()
        if ev.get("id") == sync:
            return got
        got.append(ev)


def test_max_subscriptions_caps_pending_waits_per_connection():
    with Daemon("--max-subscriptions", "3", workers=3) as d:
        c = d.client()
        a = c.submit({"kind": "sleep", "ms": 600000}, detach=True)[1]["task"]
        b = c.submit({"kind": "sleep", "ms": 600000}, detach=True)[1]["task"]
        done_task, _ = echo_done(c, "finished")
        waits = [c.send({"op": "wait", "task": a}) for _ in range(3)]
        check(ping_sync(c) == [], "three waits pending, no answer yet")
        for task in (a, b):
            ev = c.request({"op": "wait", "task": task})
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request", "%r", ev)
            check("max_subscriptions is 3" in ev["error"]["message"], "%r", ev)
        # a finished task's wait is answered at once and does not count
        for _ in range(5):
            ev = c.request({"op": "wait", "task": done_task})
            check(ev["event"] == "done" and ev["result"]["value"] == "finished", "%r", ev)
        # the cap is per connection
        other = d.client()
        other_waits = [other.send({"op": "wait", "task": a}) for _ in range(3)]
        check(ping_sync(other) == [], "another connection waits too")
        # the task finishes: the three waits get their done, and room comes back
        check(c.request({"op": "cancel", "task": a})["event"] == "ok", "cancel")
        for rid in waits:
            check(c.done(rid)["state"] == "cancelled", "wait %r", rid)
        for rid in other_waits:
            check(other.done(rid)["state"] == "cancelled", "other's wait %r", rid)
        waits = [c.send({"op": "wait", "task": b}) for _ in range(3)]
        check(ping_sync(c) == [], "three waits on b")
        ev = c.request({"op": "wait", "task": b})
        check(ev["event"] == "error" and "max_subscriptions" in ev["error"]["message"], "%r", ev)
        check(c.request({"op": "cancel", "task": b})["event"] == "ok", "cancel b")
        for rid in waits:
            check(c.done(rid)["state"] == "cancelled", "wait %r", rid)
        # a wait on a finished task is no subscription even at the cap
        ev = c.request({"op": "wait", "task": b})
        check(ev["event"] == "done", "%r", ev)


def test_max_subscriptions_default_bounds_a_flood_of_waits():
    n, cap = 12000, 10000
    with Daemon(workers=1) as d:
        c = d.client()
        task = c.submit({"kind": "sleep", "ms": 600000}, detach=True)[1]["task"]
        rss0 = d.rss_kib()
        lines = b"".join(b'{"op":"wait","id":"w%d","task":%d}\n' % (i, task) for i in range(n))
        c.send_raw(lines)
        refused = ping_sync(c)
        rss1 = d.rss_kib()
        check(len(refused) == n - cap, "%d refused, expected %d", len(refused), n - cap)
        check(all(e["error"]["code"] == "bad_request" for e in refused), "%r", refused[:2])
        check([e["id"] for e in refused] == ["w%d" % i for i in range(cap, n)],
              "the last ones refused")
        c.request({"op": "cancel", "task": task})
        dones = set()
        while len(dones) < cap:
            ev = c.recv()
            check(ev["event"] == "done" and ev["id"] not in dones, "%r", ev)
            dones.add(ev["id"])
        check(dones == {"w%d" % i for i in range(cap)}, "one done for each accepted wait")
        print("RSS: %d KiB before, %d KiB with %d waits pending (%d refused)"
              % (rss0, rss1, cap, n - cap))


run_tests(globals())
