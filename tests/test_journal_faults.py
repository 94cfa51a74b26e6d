#!/usr/bin/env python3
"""The journal's error path against a failing disk (tpd(8), "DURABILITY"):
nothing whose record was not written (and, with journal_sync = commit,
synced) is ever shown to a client or started. Every way the journal can fail
(a failed fdatasync, a failed or short write, a segment that cannot be
created, the directory's fsync, compaction's rename) holds what depends on
the lost records until the recovery writes the live state afresh; answers
that depend on no record (ping, stats, storage rejections) are never held;
and after a kill -9 every task a client saw accepted is known, with the state
its done said. The faults come from tests/faultfs.so (LD_PRELOAD), and from a
real full tmpfs where mounting one is allowed."""
import json
import os
import shutil
import subprocess
import tempfile
import time

from tpdtest import SLOW, Client, Daemon, Skip, check, eventually, run_tests

from faultfs import EIO, ENOSPC, Faulty


def journal_stats(c):
    return c.request({"op": "stats"}, "stats")["journal"]


def silent(c, rid, seconds):
    """True when nothing for request rid comes within seconds."""
    try:
        ev = c.recv_id(rid, timeout=seconds)
    except (AssertionError, TimeoutError, OSError):
        return True
    c.pending.append(ev)
    return False


def check_operator_sees_it(d, state_dir):
    """While failed: ping, stats and a storage rejection answer at once, on another connection."""
    o = d.client()
    t0 = time.monotonic()
    o.request({"op": "ping"}, "pong", timeout=2)
    j = journal_stats(o)
    check(j["state"] == "failed" and j["held_connections"] >= 1 and j["held_bytes"] > 0,
          "stats.journal while failed: %r", j)
    _, ev = o.submit({"kind": "echo"})
    check(ev["event"] == "rejected" and ev["error"]["code"] == "storage" and
          state_dir in ev["error"]["message"], "%r", ev)
    check(time.monotonic() - t0 < 2 * SLOW, "the operator's answers waited %.1f s",
          time.monotonic() - t0)
    p = o.stats()
    check(p["rejected_storage"] >= 1 and p["rejected"] >= p["rejected_storage"],
          "stats count no storage rejection: %r", p)
    eventually(lambda: "refused (storage)" in d.read_log(), "the refusal is logged")
    o.close()
    d.clients.remove(o)


def restart_and_account(f, seen, daemon_args=()):
    """kill -9 done before; a tpd on the same state_dir knows every task seen accepted,
    with the state of every done seen."""
    with f.daemon(*daemon_args, shim=False) as d:
        c = d.client()
        for tid, state in sorted(seen.items()):
            ev = c.request({"op": "status", "task": tid})
            check(ev["event"] != "error", "task %d, seen %s, is unknown after the restart: %r",
                  tid, state, ev)
            if state not in ("accepted", None):
                check(ev.get("state") == state, "task %d: the client saw done %s, the restarted "
                      "daemon says %r", tid, state, ev)


def fault_holds_until_recovery(rules, value_bytes=16, args=(), max_tasks=3000, switch=False):
    """Submits echo tasks one by one under rules until one's answer is held; checks the
    hold, clears the rules, sees the held answers come, then kill -9 and the accounting."""
    with Faulty() as f:
        seen = {}
        with f.daemon("--result-retain", "100000", *args, queue=100000) as d:
            c = d.client()
            rid, ev = c.submit({"kind": "echo", "value": 0})
            check(ev["event"] == "accepted", "%r", ev)
            seen[ev["task"]] = c.done(rid)["state"]
            f.set(*rules)
            held = None
            wait = 0.5 * SLOW if not switch else 0.3 * SLOW
            for i in range(1, max_tasks):
                rid = c.send({"op": "submit", "task": {"kind": "echo", "value": "v" * value_bytes}})
                if silent(c, rid, wait):
                    held = rid          # its accepted waits
                    break
                ev = c.recv_id(rid)
                check(ev["event"] == "accepted", "%r (hits: %s)", ev, f.hits())
                seen[ev["task"]] = "accepted"
                if silent(c, rid, wait):
                    held = rid          # its done waits (the failure came between)
                    break
                seen[ev["task"]] = c.done(rid)["state"]
            check(held is not None, "no answer was held (faults made: %r)", f.hits())
            check(f.hits(), "the shim made no fault")
            check_operator_sees_it(d, f.dir)
            check(silent(c, held, 1.0), "an answer came while the journal is failed")
            f.set()
            ev = c.recv_id(held, timeout=10 * SLOW)
            check(ev["event"] in ("accepted", "done"), "after the recovery: %r", ev)
            seen[ev["task"]] = c.done(held)["state"] if ev["event"] == "accepted" else ev["state"]
            o = d.client()
            eventually(lambda: journal_stats(o)["state"] == "ok", "the journal is ok again")
            check(journal_stats(o)["recoveries"] >= 1, "no recovery counted")
            check("writable again" in d.read_log(), "the recovery is not logged")
            d.proc.kill()
            d.proc.wait()
        restart_and_account(f, seen)


def test_failed_fdatasync_holds_answers_until_recovery():
    fault_holds_until_recovery(["sync 0 %d 0" % EIO])


def test_failed_write_holds_answers_until_recovery():
    fault_holds_until_recovery(["write 0 %d 0" % ENOSPC])


def test_short_write_then_full_disk_holds_answers():
    fault_holds_until_recovery(["write 0 short 1", "write 1 %d 0" % ENOSPC])


def test_segment_not_created_holds_answers():
    # 64 KiB segments: a new one every few dozen tasks; its creation fails
    fault_holds_until_recovery(["create 0 %d 0" % ENOSPC], value_bytes=2000,
                               args=("--journal-max-bytes", "256k"), switch=True)


def test_directory_fsync_failing_holds_answers():
    fault_holds_until_recovery(["syncdir 0 %d 0" % ENOSPC], value_bytes=2000,
                               args=("--journal-max-bytes", "256k"), switch=True)


def test_compaction_rename_failing_fails_the_journal_and_recovers():
    with Faulty() as f:
        seen = {}
        with f.daemon("--journal-max-bytes", "256k", "--result-retain", "0",
                      queue=100000) as d:
            c = d.client()
            f.set("replace 0 %d 0" % EIO)
            deadline = time.monotonic() + 20 * SLOW
            while "replace" not in f.hits() and time.monotonic() < deadline:
                rids = [c.send({"op": "submit", "task": {"kind": "echo", "value": "c" * 2000}})
                        for _ in range(20)]
                for rid in rids:
                    try:
                        ev = c.recv_id(rid, timeout=0.3 * SLOW)
                    except (AssertionError, OSError):
                        break
                    if ev["event"] == "accepted":
                        seen[ev["task"]] = "accepted"
            check("replace" in f.hits(), "no compaction renamed within 20 s: %s",
                  d.read_log()[-2000:])
            o = d.client()
            eventually(lambda: "cannot rename its compaction" in d.read_log(),
                       "the failed rename is logged")
            f.set()
            eventually(lambda: journal_stats(o)["recoveries"] >= 1 and
                       journal_stats(o)["state"] == "ok", "recovered", timeout=10 * SLOW)
            d.proc.kill()
            d.proc.wait()
        # result_retain 0: a finished task is forgotten; an accepted one is known or forgotten,
        # never unknown as "never submitted"
        with f.daemon(shim=False) as d:
            c = d.client()
            for tid in seen:
                ev = c.request({"op": "status", "task": tid})
                check(ev["event"] != "error" or "never" not in ev["error"]["message"],
                      "task %d, seen accepted, is unknown after the restart: %r", tid, ev)


def test_output_held_past_output_stall_timeout_is_dropped():
    with Faulty() as f, f.daemon("--output-stall-timeout", "1s") as d:
        c = d.client()
        f.set("sync 0 %d 0" % EIO)
        rid = c.send({"op": "submit", "task": {"kind": "echo"}})
        t0 = time.monotonic()
        try:
            while True:
                ev = c.recv(timeout=5 * SLOW)
                check(ev.get("id") != rid, "an answer came from a failed journal: %r", ev)
        except EOFError:
            pass
        waited = time.monotonic() - t0
        check(0.9 <= waited <= 4 * SLOW, "dropped after %.1f s (output_stall_timeout 1s)", waited)
        check("its output waited for the gate (the journal)" in d.read_log(), "not logged")
        # the daemon goes on: an operator still sees it
        check(journal_stats(d.client())["state"] == "failed", "stats")


def scrape(d):
    """{sample line's name and labels: value} of GET /metrics."""
    return dict(line.rsplit(" ", 1) for line in d.metrics().splitlines()
                if not line.startswith("#"))


def test_metrics_show_the_failed_journal_and_storage_rejections():
    with Faulty() as f, f.daemon("--metrics-listen", "127.0.0.1:0") as d:
        c = d.client()
        m = scrape(d)
        check(m.get("tpd_journal_failed") == "0" and int(m["tpd_journal_bytes"]) > 0 and
              m.get("tpd_journal_at_limit") == "0", "%r", m)
        f.set("sync 0 %d 0" % EIO)
        rid = c.send({"op": "submit", "task": {"kind": "echo"}})
        check(silent(c, rid, 0.5 * SLOW), "the answer was not held")
        o = d.client()
        eventually(lambda: o.submit({"kind": "echo"})[1]["event"] == "rejected", "refused")
        m = scrape(d)
        check(m.get("tpd_journal_failed") == "1" and int(m["tpd_journal_held_bytes"]) > 0,
              "%r", {k: v for k, v in m.items() if "journal" in k})
        check(int(m.get('tpd_tasks_rejected_total{pool="default",reason="storage"}', 0)) >= 1,
              "%r", {k: v for k, v in m.items() if "rejected" in k})
        f.set()
        c.done(rid, timeout=10 * SLOW)
        eventually(lambda: scrape(d).get("tpd_journal_failed") == "0", "ok again")
        check(int(scrape(d)["tpd_journal_recoveries_total"]) >= 1, "no recovery counted")


# ---------------------------------------------------------------- the full disk


APPEND = "echo %s >> %s; while [ ! -e %s ]; do sleep 0.02; done"


def test_full_disk_shows_nothing_unwritten_and_runs_nothing_twice():
    """state_dir on a 1 MiB tmpfs, journal_sync = commit: an exec task running, a
    built-in sleeping, an exec task queued; the disk fills; echo tasks until storage
    rejections; kill -9; restart with the space freed."""
    if os.geteuid() != 0:
        raise Skip("mounting a tmpfs needs root")
    mnt = tempfile.mkdtemp(prefix="tpdfull-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", mnt],
                      stderr=subprocess.PIPE).returncode != 0:
        os.rmdir(mnt)
        raise Skip("mount -t tmpfs is not allowed here")
    work = tempfile.mkdtemp(prefix="tpdfull-work-")
    ran, go = os.path.join(work, "ran"), os.path.join(work, "go")
    state = os.path.join(mnt, "state")
    seen = {}            # task id -> "accepted" or its done's state
    try:
        with Daemon("--state-dir", state, "--journal-max-bytes", "4M", workers=2,
                    queue=100000) as d:
            c = d.client()
            ra, ev = c.submit({"kind": "exec", "argv": ["sh", "-c", APPEND % ("A", ran, go)]})
            seen[ev["task"]] = "accepted"
            rb, ev = c.submit({"kind": "sleep", "ms": 1500})
            seen[ev["task"]] = "accepted"
            rc_, ev = c.submit({"kind": "exec", "argv": ["sh", "-c", "echo C >> %s" % ran]})
            seen[ev["task"]] = "accepted"
            eventually(lambda: os.path.exists(ran) and "A" in open(ran).read(), "A runs")
            filler = os.path.join(mnt, "filler")
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while True:
                    os.write(fd, b"\1" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)
            # echoes until one is held (its record could not be written)
            held = None
            for i in range(20000):
                rid = c.send({"op": "submit", "task": {"kind": "echo", "value": "y" * 200}})
                if silent(c, rid, 0.4 * SLOW):
                    held = rid
                    break
                ev = c.recv_id(rid)
                check(ev["event"] == "accepted", "%r", ev)
                seen[ev["task"]] = "accepted"
            check(held is not None, "every echo was answered on a full disk")
            check_operator_sees_it(d, state)
            open(go, "w").close()       # A ends, B's sleep ends: their dones wait
            time.sleep(2.0)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                try:
                    ev = c._read_line(0.1)
                except (AssertionError, OSError, ValueError, TimeoutError):
                    continue
                c.pending.append(ev)
            for ev in c.pending:
                if ev.get("event") == "accepted":
                    seen[ev["task"]] = "accepted"
                elif ev.get("event") == "done":
                    seen[ev["task"]] = ev["state"]
            c.pending = []
            check(open(ran).read().split() == ["A"], "C started while its STARTED record "
                  "could not be written: %r", open(ran).read())
            d.proc.kill()
            d.proc.wait()
        os.unlink(filler)
        # the space freed: the replay writes the ends of every echo the full disk held
        subprocess.run(["mount", "-o", "remount,size=16M", mnt], check=True)
        with Daemon("--state-dir", state, "--journal-max-bytes", "4M", workers=2,
                    queue=100000) as d:
            c = d.client()
            for tid, st in sorted(seen.items()):
                ev = c.request({"op": "status", "task": tid})
                check(ev["event"] != "error", "task %d, seen %s, unknown after the restart: %r",
                      tid, st, ev)
                if st != "accepted":
                    check(ev["state"] == st, "task %d: done %s seen, %r after", tid, st, ev)
            eventually(lambda: open(ran).read().split().count("C") == 1, "C runs once")
            lines = open(ran).read().split()
            check(lines.count("A") == 1 and lines.count("C") == 1, "ran: %r", lines)
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
