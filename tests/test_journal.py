#!/usr/bin/env python3
"""The journal against the real daemon and real files: restarts, kill -9, torn
tails, damage, a full disk, compaction, replay speed (tpd(8), "DURABILITY")."""
import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from tpdtest import SLOW, TIMEOUT, TPD, Client, Daemon, Skip, check, eventually, run_tests


class State:
    """A state_dir that outlives the daemons started on it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="tpdjournal-")
        self.dir = os.path.join(self.root, "state")

    def daemon(self, *args, **kw):
        return Daemon("--state-dir", self.dir, *args, **kw)

    def segments(self):
        return sorted(glob.glob(os.path.join(self.dir, "journal.*[0-9]")))

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def kill9(d):
    d.proc.kill()
    d.proc.wait()


def journal_stats(c):
    return c.request({"op": "stats"}, "stats")["journal"]


def wait_done(c, task, timeout=None):
    return c.request({"op": "wait", "task": task}, "done", timeout)


# ---------------------------------------------------------------- restarts


def test_restart_keeps_results_queue_and_ids():
    with State() as st:
        with st.daemon(workers=1, queue=16) as d:
            c = d.client()
            _, a1 = c.submit({"kind": "echo", "value": {"n": 1}})
            d1 = c.done(1)
            _, blocker = c.submit({"kind": "sleep", "ms": 60000})
            eventually(lambda: c.request({"op": "status", "task": blocker["task"]})["state"]
                       == "running", "the blocker runs")
            queued = [c.submit({"kind": "echo", "value": i})[1]["task"] for i in range(5)]
            kill9(d)
        with st.daemon(workers=1, queue=16) as d:
            c = d.client()
            again = wait_done(c, a1["task"])
            check(again == dict(d1, id=again["id"]), "the retained done changed: %r vs %r",
                  again, d1)
            lost = wait_done(c, blocker["task"])
            check(lost["state"] == "lost" and lost["error"]["code"] == "lost" and
                  lost.get("attempt") == 1, "the running task: %r", lost)
            for i, t in enumerate(queued):
                dn = wait_done(c, t)
                check(dn["state"] == "succeeded" and dn["result"] == {"value": i} and
                      dn.get("attempt") == 1, "a queued task after the restart: %r", dn)
            _, fresh = c.submit({"kind": "echo"})
            check(fresh["task"] > max(queued), "task id %d reused (old ones up to %d)",
                  fresh["task"], max(queued))


def test_on_lost_rerun_runs_again_with_its_attempt():
    with State() as st:
        with st.daemon(workers=1) as d:
            c = d.client()
            rid, acc = c.submit({"kind": "sleep", "ms": 60000}, on_lost="rerun", stream=True)
            started = c.recv_id(rid, "started")
            check(started.get("attempt") == 1, "started: %r", started)
            _, plain = c.submit({"kind": "sleep", "ms": 60000})     # queued behind it
            kill9(d)
        with st.daemon(workers=1) as d:
            c = d.client()
            eventually(lambda: c.request({"op": "status", "task": acc["task"]})["state"]
                       == "running", "the rerun runs")
            c.request({"op": "cancel", "task": acc["task"]}, "ok")
            dn = wait_done(c, acc["task"])
            check(dn["state"] == "cancelled" and dn.get("attempt") == 2, "%r", dn)
            c.request({"op": "cancel", "task": plain["task"]}, "ok")
            dn = wait_done(c, plain["task"])
            check(dn["state"] == "cancelled" and dn.get("attempt") == 1, "never started: %r", dn)


def test_a_cancelled_rerun_task_is_not_run_again():
    with State() as st:
        with st.daemon(workers=1) as d:
            c = d.client()
            # it ignores SIGTERM: the cancel waits for kill_grace, and tpd dies meanwhile
            ready = os.path.join(st.root, "ready")
            rid, acc = c.submit({"kind": "exec", "argv": ["sh", "-c", "trap '' TERM; touch %s; "
                                                          "sleep 60" % ready]},
                                on_lost="rerun", stream=True)
            c.recv_id(rid, "started")
            eventually(lambda: os.path.exists(ready), "the program ignores SIGTERM")
            c.request({"op": "cancel", "task": acc["task"]}, "ok")
            kill9(d)
        with st.daemon(workers=1) as d:
            c = d.client()
            dn = wait_done(c, acc["task"])
            check(dn["state"] == "lost" and "cancel" in dn["error"]["message"] and
                  dn.get("attempt") == 1, "%r", dn)


def test_a_reload_keeps_the_journal_as_it_started():
    with State() as st:
        d = st.daemon(start=False)
        conf = os.path.join(d.dir, "tpd.conf")
        with open(conf, "w") as f:
            f.write("[daemon]\njournal_sync = commit\n")
        d.args += ["-c", conf]
        with d:
            d.start()
            c = d.client()
            with open(conf, "w") as f:
                f.write("[daemon]\njournal_sync = none\njournal = off\n")
            d.signal(signal.SIGHUP)
            eventually(lambda: "configuration reloaded" in d.read_log(), "reloaded")
            check("reload: journal, journal_sync take effect at the next start" in d.read_log(),
                  "no word of the change: %s", d.read_log()[-2000:])
            j = journal_stats(c)
            check(j["state"] == "ok" and j["sync"] == "commit", "%r", j)


def test_list_and_labels_after_a_restart():
    with State() as st:
        with st.daemon(workers=1, queue=16) as d:
            c = d.client()
            _, done = c.submit({"kind": "echo", "value": 1}, label="finished one")
            c.done(1)
            _, run = c.submit({"kind": "sleep", "ms": 60000}, label="running one")
            eventually(lambda: c.request({"op": "status", "task": run["task"]})["state"]
                       == "running", "it runs")
            _, queued = c.submit({"kind": "echo", "value": 2}, label="queued one")
            kill9(d)
        with st.daemon(workers=1, queue=16) as d:
            c = d.client()
            wait_done(c, queued["task"])
            tasks = {t["task"]: t for t in c.request({"op": "list"})["tasks"]}
            check([t for t in sorted(tasks, reverse=True)] == [t["task"] for t in
                  c.request({"op": "list"})["tasks"]], "newest first: %r", tasks)
            for ev, label, state in ((done, "finished one", "succeeded"),
                                     (run, "running one", "lost"),
                                     (queued, "queued one", "succeeded")):
                t = tasks.get(ev["task"])
                check(t is not None and t["label"] == label and t["state"] == state,
                      "task %d after the restart: %r", ev["task"], t)


def test_on_lost_is_checked():
    with State() as st, st.daemon() as d:
        c = d.client()
        _, ev = c.submit({"kind": "echo"}, on_lost="maybe")
        check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
              "on_lost" in ev["error"]["message"], "%r", ev)


def test_task_of_a_pool_gone_ends_lost():
    with State() as st:
        with st.daemon("--pool", "io:1", workers=1) as d:
            c = d.client()
            _, b = c.submit({"kind": "sleep", "ms": 60000}, pool="io")
            _, q = c.submit({"kind": "echo"}, pool="io")
            kill9(d)
        with st.daemon(workers=1) as d:
            c = d.client()
            for t in (b["task"], q["task"]):
                dn = wait_done(c, t)
                check(dn["state"] == "lost" and "io" in dn["error"]["message"], "%r", dn)


def test_journal_off_keeps_nothing():
    with State() as st:
        with st.daemon("--journal", "off") as d:
            c = d.client()
            _, a = c.submit({"kind": "echo"}, stream=True)
            c.done(1)
            check(journal_stats(c)["state"] == "off", "stats say the journal is on")
        check(not os.path.exists(st.dir), "journal off created %s" % st.dir)


def test_second_daemon_refused_naming_dir_and_pid():
    with State() as st, st.daemon() as d:
        p = subprocess.run([TPD, "-f", "-c", "none", "-s", os.path.join(st.root, "b.sock"),
                            "--state-dir", st.dir], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TIMEOUT)
        err = p.stderr.decode().strip().splitlines()
        check(p.returncode != 0 and len(err) == 1, "exit %d: %r", p.returncode, err)
        check(st.dir in err[0] and ("pid %d" % d.proc.pid) in err[0], "%r", err[0])


def test_state_dir_mode_0700():
    with State() as st, st.daemon():
        check(os.stat(st.dir).st_mode & 0o777 == 0o700, "mode %o", os.stat(st.dir).st_mode)


def test_stats_journal():
    with State() as st, st.daemon() as d:
        c = d.client()
        c.submit({"kind": "echo"})
        c.done(1)
        j = journal_stats(c)
        for k in ("path", "bytes", "segments", "records", "syncs", "last_sync_ms", "state"):
            check(k in j, "stats.journal has no %s: %r", k, j)
        check(j["path"] == st.dir and j["state"] == "ok" and j["syncs"] >= 1, "%r", j)


def test_echo_writes_no_started_record_and_comes_back_finished():
    """A built-in task whose start and end the loop sees in one pass: its
    FINISHED record alone is written, no STARTED (3 records a task without
    that, 2 with it; the worker's start notice and its done come in one pass
    most of the time, not always); an exec task keeps its 3. After a kill -9
    every done comes back unchanged."""
    with State() as st:
        with st.daemon() as d:
            c = d.client()
            before = journal_stats(c)["records_written"]
            dones = {}
            for i in range(20):
                _, acc = c.submit({"kind": "echo", "value": i})
                dones[acc["task"]] = c.done(acc["id"])
            echo = journal_stats(c)["records_written"] - before
            before += echo
            for i in range(5):
                _, acc = c.submit({"kind": "exec", "argv": ["true"]})
                dones[acc["task"]] = c.done(acc["id"])
            execs = journal_stats(c)["records_written"] - before
            check(40 <= echo < 60, "20 echo tasks wrote %d records, not 40 to 59", echo)
            check(execs == 15, "5 exec tasks wrote %d records, not 15", execs)
            kill9(d)
        with st.daemon() as d:
            c = d.client()
            for t, dn in dones.items():
                again = wait_done(c, t)
                check(again == dict(dn, id=again["id"]), "task %d: %r, then %r", t, dn, again)


def test_lost_task_is_counted_with_its_wait():
    with State() as st:
        with st.daemon() as d:
            c = d.client()
            _, ev = c.submit({"kind": "exec", "argv": ["sleep", "30"]})
            tid = ev["task"]
            eventually(lambda: c.request({"op": "status", "task": tid})["state"] == "running",
                       "it runs")
            time.sleep(1.0)
            kill9(d)
        with st.daemon("--metrics-listen", "127.0.0.1:0") as d:
            c = d.client()
            ev = c.request({"op": "status", "task": tid})
            check(ev["state"] == "lost" and ev["queued_ms"] < 900,
                  "a lost task's queued_ms is its wait, not the time until the restart: %r", ev)
            check(c.stats()["lost"] == 1, "stats: %r", c.stats())
            text = d.metrics()
            check('tpd_tasks_finished_total{pool="default",state="lost"} 1' in text,
                  "%s", [l for l in text.splitlines() if "finished" in l])


def test_lock_error_names_the_way_out():
    with State() as st, st.daemon():
        p = subprocess.run([TPD, "-f", "-c", "none", "-s", os.path.join(st.root, "b.sock"),
                            "--state-dir", st.dir], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT)
        check("give another --state-dir, or --journal off" in p.stderr.decode(), "%r",
              p.stderr.decode())


def test_at_max_bytes_the_oldest_results_make_room():
    with State() as st, st.daemon("--journal-max-bytes", "256k", queue=10000) as d:
        c = d.client()
        refused = 0
        deadline = time.monotonic() + 30 * SLOW
        for i in range(300):
            while True:
                rid, ev = c.submit({"kind": "echo", "value": "r" * 2000})
                if ev["event"] == "accepted":
                    c.done(rid)
                    break
                check(ev["error"]["code"] == "storage", "%r", ev)
                refused += 1
                check(time.monotonic() < deadline, "submits refused for good at "
                      "journal_max_bytes while results fill it (%d refusals)", refused)
                time.sleep(0.05)
        ev = c.request({"op": "stats"}, "stats")
        check(ev["results_forgotten"] > 0, "no result forgotten: %r", ev["results_forgotten"])
        check("oldest retained results forgotten to make room" in d.read_log(), "not logged")


def test_check_warns_when_max_bytes_is_below_result_retain_bytes():
    p = subprocess.run([TPD, "-c", "none", "-n", "--journal-max-bytes", "1M",
                        "--result-retain-bytes", "2M"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=TIMEOUT)
    check(p.returncode == 0 and "warning: journal_max_bytes (1048576) is smaller than "
          "result_retain_bytes (2097152)" in p.stdout, "%d %r %r", p.returncode, p.stdout,
          p.stderr)


def test_segment_size_is_a_key():
    with State() as st, st.daemon("--journal-segment-size", "128k") as d:
        c = d.client()
        rid, _ = c.submit({"kind": "echo"})
        c.done(rid)
        check(journal_stats(c)["segment_bytes"] == 131072, "%r", journal_stats(c))
        check(os.path.getsize(st.segments()[-1]) == 131072, "a segment of %d bytes",
              os.path.getsize(st.segments()[-1]))


def test_disk_smaller_than_a_segment_still_takes_submits():
    if os.geteuid() != 0:
        raise Skip("mounting a tmpfs needs root")
    mnt = tempfile.mkdtemp(prefix="tpdsmall-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", mnt],
                      stderr=subprocess.PIPE).returncode != 0:
        os.rmdir(mnt)
        raise Skip("mount -t tmpfs is not allowed here")
    try:
        # an 8 MiB segment (the default) on a 1 MiB disk
        with Daemon("--state-dir", os.path.join(mnt, "state")) as d:
            c = d.client()
            for i in range(20):
                rid, ev = c.submit({"kind": "echo", "value": i})
                check(ev["event"] == "accepted", "%r", ev)
                c.done(rid)
            log = d.read_log()
            check(log.count("writing segments without preallocation") == 1, "%s", log[-3000:])
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


# ---------------------------------------------------------------- torn tails, damage


def last_record_offset(path):
    """The offset of the last record before the zeros of a segment, and where data ends."""
    data = open(path, "rb").read()
    off, last = 40, None
    while off + 20 <= len(data) and data[off:off + 20] != bytes(20):
        last = off
        off += 20 + int.from_bytes(data[off + 4:off + 8], "little")
    return data, last, off


def test_torn_last_record_is_dropped_and_logged():
    with State() as st:
        with st.daemon() as d:
            c = d.client()
            for i in range(10):
                c.submit({"kind": "echo", "value": "x" * 50})
            for i in range(10):
                c.done(i + 1)
            kill9(d)
        seg = st.segments()[-1]
        data, last, end = last_record_offset(seg)
        for cut in range(last + 1, end):
            if not data[cut:end].strip(b"\0"):
                continue  # the cut took only zeros the record ends with: it is whole
            # torn: what a write cut short leaves (the preallocated zeros after it)
            with open(seg, "wb") as f:
                f.write(data[:cut] + bytes(len(data) - cut))
            expect = len(data[last:cut].rstrip(b"\0"))
            with st.daemon() as d:
                log = d.read_log()
                if expect:
                    check("torn tail at offset %d dropped: %d bytes" % (last, expect) in log,
                          "cut at %d: %s", cut, log[-2000:])
                kill9(d)


def last_mark(data):
    """The offset the last MARK record says was synced (0 when none)."""
    off, mark = 40, 0
    while off + 20 <= len(data) and data[off:off + 20] != bytes(20):
        if data[off + 8] == 7:
            mark = int.from_bytes(data[off + 12:off + 20], "little")
        off += 20 + int.from_bytes(data[off + 4:off + 8], "little")
    return mark


def test_flipped_bit_stops_the_start_naming_file_and_offset():
    with State() as st:
        with st.daemon(queue=1000) as d:
            c = d.client()
            # one at a time: many batches, each with a MARK saying how far the file was synced
            for i in range(50):
                c.submit({"kind": "echo", "value": i})
                c.done(i + 1)
            kill9(d)
        seg = st.segments()[-1]
        data = bytearray(open(seg, "rb").read())
        mark = last_mark(data)
        check(mark > 1000, "no MARK past offset 1000 in %s: %d", seg, mark)
        data[mark // 2] ^= 0x08     # in bytes a later MARK says were on disk: damage
        open(seg, "wb").write(data)
        p = subprocess.run([TPD, "-f", "-c", "none", "-s", os.path.join(st.root, "s"),
                            "--state-dir", st.dir],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TIMEOUT)
        err = p.stderr.decode()
        check(p.returncode != 0 and seg in err and "offset" in err, "exit %d: %s",
              p.returncode, err)


# ---------------------------------------------------------------- a full disk


def test_disk_full_rejects_storage_then_recovers():
    if os.geteuid() != 0:
        raise Skip("mounting a tmpfs needs root")
    mnt = tempfile.mkdtemp(prefix="tpdfull-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", mnt],
                      stderr=subprocess.PIPE).returncode != 0:
        os.rmdir(mnt)
        raise Skip("mount -t tmpfs is not allowed here")
    try:
        state = os.path.join(mnt, "state")
        with Daemon("--state-dir", state, "--journal-max-bytes", "4M", workers=2,
                    queue=1000) as d:
            c = d.client()
            _, long = c.submit({"kind": "sleep", "ms": 300})
            filler = os.path.join(mnt, "filler")
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while True:
                    os.write(fd, b"\1" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)
            # submits until one's answer waits (its record could not be written)
            o = d.client()
            for i in range(20000):
                rid = c.send({"op": "submit", "task": {"kind": "echo", "value": "y" * 200}})
                try:
                    ev = c.recv_id(rid, timeout=0.5 * SLOW)
                except (AssertionError, OSError):
                    break
                check(ev["event"] == "accepted", "%r", ev)
            # a storage rejection is not held: another client gets it at once
            _, rejected = o.submit({"kind": "echo"})
            check(rejected["event"] == "rejected" and rejected["error"]["code"] == "storage" and
                  state in rejected["error"]["message"], "%r", rejected)
            check(journal_stats(o)["state"] == "failed", "stats")
            os.unlink(filler)
            # its done waited for the recovery (its record could not be written)
            check(c.done(1)["state"] == "succeeded", "accepted work goes on")
            eventually(lambda: o.submit({"kind": "echo"})[1]["event"] == "accepted",
                       "submits accepted again", timeout=10 * SLOW)
            check(journal_stats(o)["state"] == "ok", "stats after the recovery")
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


if __name__ == "__main__":
    run_tests(globals())
