#!/usr/bin/env python3
"""An exec task's start gate (tpd(8), "DURABILITY"; doc/exec.md): with the
journal on, the program never runs before its STARTED record may be seen.
The child is made while the record is synced and waits at the gate, the
last step before execve: a journal that cannot sync keeps it there until
the recovery, and a kill -9 of tpd while it waits ends it without running
the program. The failing disk is tests/faultfs.so (LD_PRELOAD), as in
test_journal_faults.py."""
import os
import signal
import time

from tpdtest import SLOW, check, eventually, run_tests

from faultfs import EIO, Faulty


def children(pid):
    """The pids of pid's children (of every thread): a gated child is a worker's."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def journal_stats(c):
    return c.request({"op": "stats"}, "stats")["journal"]


def gated_start(f, d):
    """With every fdatasync failing, submits an exec task that would leave the marker;
    returns its request id and the gated child's pid once its start is held."""
    c = d.client()
    rid, ev = c.submit({"kind": "echo", "value": 1})
    check(ev["event"] == "accepted", "%r", ev)
    c.done(rid)
    f.set("sync 0 %d 0" % EIO)
    rid = c.send({"op": "submit", "task": {"kind": "exec", "argv": [
        "sh", "-c", "echo ran >> %s" % f.marker]}})
    o = d.client()
    eventually(lambda: journal_stats(o)["held_starts"] >= 1, "the start is held")
    # the child is made meanwhile, and waits at the gate
    eventually(lambda: children(d.proc.pid), "the child is made before the record is synced")
    kids = children(d.proc.pid)
    time.sleep(0.5 * SLOW)
    check(not f.ran(), "the program ran before its STARTED record was synced")
    check(all(alive(k) for k in kids), "the gated child %r did not wait", kids)
    return c, rid, kids


def test_failed_sync_keeps_the_program_from_running_until_recovery():
    with Faulty("tpdgate-") as f:
        with f.daemon(queue=100) as d:
            c, rid, _ = gated_start(f, d)
            check(not f.ran(), "ran while the journal is failed")
            f.set()
            ev = c.recv_id(rid, timeout=10 * SLOW)
            check(ev["event"] == "accepted", "%r", ev)
            done = c.done(rid, timeout=10 * SLOW)
            check(done["state"] == "succeeded", "%r", done)
            check(f.ran(), "the program did not run after the recovery")


def test_slow_sync_holds_the_program_until_it_returns():
    # with journal_sync = commit the sync thread opens the gate itself, once
    # the fdatasync that covers the STARTED record has returned: a record
    # written but still syncing keeps the program waiting. The task is
    # delayed, so that its ACCEPTED record is synced before the slow disk
    # begins, and its STARTED record is the only one of the slow sync.
    slow = 2.0 * SLOW
    with Faulty("tpdgate-") as f:
        with f.daemon(queue=100) as d:
            c = d.client()
            rid, acc = c.submit({"kind": "exec", "argv": [
                "sh", "-c", "echo ran >> %s" % f.marker]}, delay_ms=int(1000 * SLOW))
            check(acc["event"] == "accepted", "%r", acc)
            f.set("sync 0 slow%d 0" % int(slow * 1000))
            o = d.client()
            eventually(lambda: f.ran() or journal_stats(o)["held_starts"] >= 1,
                       "the start is held", timeout=10 * SLOW)
            check(not f.ran(), "the program ran before its STARTED record's fdatasync returned")
            eventually(lambda: children(d.proc.pid), "the child is made while the record syncs")
            time.sleep(0.5 * SLOW)
            check(not f.ran(), "the program ran before its STARTED record's fdatasync returned")
            done = c.done(rid, timeout=20 * SLOW)
            check(done["state"] == "succeeded", "%r", done)
            check(f.ran(), "the program did not run once the sync returned")
            f.set()


def test_cancels_racing_the_sync_threads_release():
    # the sync thread releases starts while the loop cancels and finishes
    # their tasks (and takes them off the list of starts waiting): every
    # task ends, none is left held, and tpd lives on (under the sanitizers:
    # no race, no use of a freed task)
    n = 40
    with Faulty("tpdgate-") as f:
        with f.daemon(shim=False, queue=200) as d:
            c = d.client()
            rids = [c.send({"op": "submit", "task": {"kind": "exec", "argv": [
                "sh", "-c", "echo ran >> %s" % f.marker]}}) for _ in range(n)]
            for i, rid in enumerate(rids):
                acc = c.recv_id(rid, "accepted", timeout=10 * SLOW)
                if i % 2 == 0:
                    c.send({"op": "cancel", "task": acc["task"]})
            states = [c.done(rid, timeout=20 * SLOW)["state"] for rid in rids]
            check(set(states) <= {"succeeded", "cancelled"}, "%r", states)
            runs = open(f.marker).read().count("ran\n") if f.ran() else 0
            check(runs >= states.count("succeeded"), "%d runs for %d succeeded tasks",
                  runs, states.count("succeeded"))
            check(journal_stats(c)["held_starts"] == 0, "a start is still held")


def test_kill9_while_gated_runs_nothing():
    with Faulty("tpdgate-") as f:
        with f.daemon(queue=100) as d:
            c, rid, kids = gated_start(f, d)
            d.proc.kill()
            d.proc.wait()
            eventually(lambda: not any(alive(k) for k in kids),
                       "the gated child %r outlived tpd" % kids)
            time.sleep(0.3 * SLOW)
            check(not f.ran(), "the program ran after tpd died while it was gated")
        # the restart finds its STARTED record (written, not synced: lost, and it never
        # ran) or not (never started: queued again, it runs now, once)
        with f.daemon(shim=False) as d:
            c = d.client()
            ev = c.request({"op": "wait", "task": 2}, timeout=10 * SLOW)
            check(ev["event"] == "done" and ev["state"] in ("lost", "succeeded"), "%r", ev)
            runs = open(f.marker).read() if f.ran() else ""
            check(runs == ("ran\n" if ev["state"] == "succeeded" else ""),
                  "ended %s, ran %r", ev["state"], runs)


def test_stop_while_gated_runs_nothing():
    # a stop while the journal cannot sync: the drain turns into a cancel at
    # shutdown_timeout, and the journal's close must not open the gate of a
    # start whose record never reached the disk
    with Faulty("tpdgate-") as f:
        with f.daemon("--shutdown-timeout", "200ms", queue=100) as d:
            c, rid, kids = gated_start(f, d)
            d.signal(signal.SIGTERM)
            d.wait_exit(timeout=20 * SLOW)
            eventually(lambda: not any(alive(k) for k in kids),
                       "the gated child %r outlived tpd" % kids)
            time.sleep(0.3 * SLOW)
            check(not f.ran(), "the program ran while tpd stopped with its start unsynced")


if __name__ == "__main__":
    run_tests(globals())
