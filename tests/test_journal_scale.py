#!/usr/bin/env python3
"""The journal at scale: compaction keeps the disk use under journal_max_bytes
through a long run (the loop's longest pause meanwhile printed), and a clean
restart replays many retained results quickly (the time printed).

TPD_JOURNAL_TASKS=N sets the long run's task count (1,000,000; 200,000 in
sanitizer builds), TPD_JOURNAL_RETAINED=N the replay's (100,000; 20,000).
"""
import os
import shutil
import tempfile
import threading
import time

from tpdtest import SLOW, TIMEOUT, Client, Daemon, check, run_tests

MAX_BYTES = 16 * 1024 * 1024


def pump(c, n, in_flight=256, task=None):
    """Submits n echo tasks keeping in_flight in flight; returns how many were rejected."""
    task = task or {"kind": "echo", "value": 1}
    sent = done = rejected = 0
    line = b""
    while done < n:
        batch = []
        while sent < n and sent - done < in_flight:
            batch.append({"op": "submit", "id": sent, "task": task})
            sent += 1
        for r in batch:
            c.send(r)
        ev = c.recv(timeout=TIMEOUT)
        if ev.get("event") == "done":
            done += 1
        elif ev.get("event") == "rejected":
            check(ev["error"]["code"] == "storage", "%r", ev)
            rejected += 1
            done += 1
    return rejected


def test_compaction_keeps_the_journal_bounded():
    n = int(os.environ.get("TPD_JOURNAL_TASKS", "1000000" if SLOW == 1 else "200000"))
    root = tempfile.mkdtemp(prefix="tpdscale-")
    try:
        with Daemon("--state-dir", os.path.join(root, "s"), "--journal-max-bytes",
                    str(MAX_BYTES), "--result-retain", "1000", workers=2, queue=1000) as d:
            stop = threading.Event()
            worst = [0.0, 0]
            peak = [0]

            def watch():
                w = d.client()
                while not stop.is_set():
                    t0 = time.monotonic()
                    ev = w.request({"op": "stats"}, "stats")
                    dt = time.monotonic() - t0
                    j = ev["journal"]
                    peak[0] = max(peak[0], j["bytes"])
                    if j.get("compactions", 0) != worst[1] or dt > worst[0]:
                        worst[0] = max(worst[0], dt)
                        worst[1] = j.get("compactions", 0)
                    time.sleep(0.005)

            th = threading.Thread(target=watch)
            th.start()
            c = d.client()
            t0 = time.monotonic()
            try:
                rejected = pump(c, n)
            finally:
                stop.set()
                th.join()
            el = time.monotonic() - t0
            j = c.request({"op": "stats"}, "stats")["journal"]
            print("# %d tasks in %.1f s: %d compactions, journal at most %d bytes on disk "
                  "(limit %d), %d submits rejected (storage); the longest stats round trip "
                  "meanwhile %.1f ms" % (n, el, j["compactions"], peak[0], MAX_BYTES, rejected,
                                         worst[0] * 1000), flush=True)
            check(j["compactions"] > 0, "never compacted: %r", j)
            check(peak[0] <= MAX_BYTES + j["segment_bytes"], "the journal reached %d bytes",
                  peak[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_clean_restart_replays_retained_results_quickly():
    n = int(os.environ.get("TPD_JOURNAL_RETAINED", "100000" if SLOW == 1 else "20000"))
    root = tempfile.mkdtemp(prefix="tpdscale-")
    args = ("--state-dir", os.path.join(root, "s"), "--result-retain", str(n + 10))
    try:
        with Daemon(*args, workers=2, queue=1000) as d:
            c = d.client()
            pump(c, n, task={"kind": "echo", "value": {"some": "result", "n": 12345}})
            c.request({"op": "shutdown"}, "ok")
            check(d.wait_exit() == 0, "clean exit")
        t0 = time.monotonic()
        d = Daemon(*args, workers=2, queue=1000)
        el = time.monotonic() - t0
        with d:
            c = d.client()
            ev = c.request({"op": "wait", "task": n // 2}, "done")
            check(ev["state"] == "succeeded", "%r", ev)
            print("# a clean restart with %d retained results listened after %.0f ms" %
                  (n, el * 1000), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
