#!/usr/bin/env python3
"""tpd as a consumer of Redis streams ([source NAME]), against a private redis-server
on a Unix socket in the test's own directory: three tpds sharing 10,000 entries (one
result each, never more entries held than a pool takes), a tpd killed mid-stream whose
pending entries the other claims (attempt 2, nothing lost), bad entries failed at once,
a poison entry dead-lettered, Redis stopped and started again with its data (nothing
lost, local submits go on), SIGHUP adding, changing and removing a source, a drain that
acks its running tasks, stats' sources, a bare host read as port 6379, and the README's example. Waits poll Redis or tpd's stats, never sleep
as synchronisation; skipped, saying why, only when redis-server cannot start."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time

from redistest import Redis, RedisError, fields
from tpdtest import TPCTL, TIMEOUT, Daemon, Skip, check, eventually, run_tests


def source_conf(name="jobs", redis=None, stream="jobs", group="tpd", consumer="c1",
                pool="default", **keys):
    lines = ["[source %s]" % name, "type = redis-stream", "redis = %s" % redis,
             "stream = %s" % stream, "group = %s" % group, "consumer = %s" % consumer,
             "pool = %s" % pool]
    lines += ["%s = %s" % kv for kv in keys.items()]
    return "\n".join(lines) + "\n"


def write_conf(d, text):
    path = os.path.join(d, "tpd-%d.conf" % time.monotonic_ns())
    with open(path, "w") as f:
        f.write(text)
    return path


def tpd(r, text, workers=2, queue=4, extra=()):
    """A tpd reading the sections of text (a config file in r's directory)."""
    return Daemon("-c", write_conf(r.dir, text), *extra, workers=workers, queue=queue)


def add_entries(rc, stream, tasks, extra=None):
    cmds = []
    for i, t in enumerate(tasks):
        cmd = ["XADD", stream, "*", "task", t if isinstance(t, str) else json.dumps(t),
               "id", "e%d" % i]
        for k, v in (extra or {}).items():
            cmd += [k, v]
        cmds.append(cmd)
    return rc.pipeline(cmds)


def results(rc, stream):
    """Every result entry: [(entry id, fields dict)]."""
    out = []
    for eid, flat in rc.call("XRANGE", stream, "-", "+") or []:
        f = fields(flat)
        f["done"] = json.loads(f["done"])
        out.append((eid, f))
    return out


def pending_by_consumer(rc, stream, group):
    try:
        summary = rc.call("XPENDING", stream, group)
    except RedisError:
        return {}       # the group is not made yet
    return {c: int(n) for c, n in (summary[3] or [])}


def source_stats(c, name="jobs"):
    for s in c.request({"op": "stats"}, "stats").get("sources", []):
        if s["name"] == name:
            return s
    return None


def test_three_consumers_one_result_each():
    """10,000 entries, three tpds of different pool sizes: one result each, every entry
    acked with its result, and no tpd ever holds more entries than its pool takes."""
    n = 10000
    sizes = [(1, 1), (2, 4), (4, 8)]        # workers, queue: room = workers + queue
    with Redis() as r:
        rc = r.client()
        add_entries(rc, "jobs", [{"kind": "echo", "value": i} for i in range(n)])
        daemons = []
        try:
            for i, (w, q) in enumerate(sizes):
                daemons.append(tpd(r, source_conf(redis=r.addr, consumer="c%d" % i,
                                                  results_maxlen=0), workers=w, queue=q))
            sampler = r.client()
            worst = {}
            seen_pending = 0
            deadline = time.monotonic() + 120
            while True:
                pend = pending_by_consumer(sampler, "jobs", "tpd")
                for c, k in pend.items():
                    worst[c] = max(worst.get(c, 0), k)
                    seen_pending += k
                if int(sampler.call("XLEN", "jobs:results")) >= n and not pend:
                    break
                check(time.monotonic() < deadline, "not every entry got its result: %s of %d",
                      sampler.call("XLEN", "jobs:results"), n)
            check(seen_pending > 0, "XPENDING never saw an entry in flight")
            for i, (w, q) in enumerate(sizes):
                check(worst.get("c%d" % i, 0) <= w + q, "consumer c%d held %d entries; its "
                      "pool takes %d at once", i, worst.get("c%d" % i, 0), w + q)
            res = results(rc, "jobs:results")
            by_id = {}
            for _, f in res:
                by_id.setdefault(f["id"], []).append(f)
            check(len(res) == n and len(by_id) == n, "%d results for %d distinct ids "
                  "(expected %d each)", len(res), len(by_id), n)
            for eid, fs in by_id.items():
                f = fs[0]
                check(f["done"]["state"] == "succeeded" and f["attempt"] == "1",
                      "entry %s: %r", eid, f)
                check(f["done"]["result"] == {"value": int(eid[1:])}, "entry %s: result %r", eid,
                      f["done"].get("result"))
            consumers = {f["consumer"] for _, f in res}
            check(consumers == {"c0", "c1", "c2"}, "consumers that wrote results: %s",
                  consumers)
            summary = rc.call("XPENDING", "jobs", "tpd")
            check(int(summary[0]) == 0, "entries left pending: %r", summary)
            for i, d in enumerate(daemons):
                s = source_stats(d.client())
                check(s is not None and s["state"] == "connected", "c%d stats: %r", i, s)
            total = sum(source_stats(d.client())["acked"] for d in daemons)
            check(total == n, "acked %d in all, expected %d", total, n)
        finally:
            for d in daemons:
                d.close()


def test_killed_consumer_entries_claimed_by_the_other():
    """A tpd SIGKILLed with entries pending: the other claims them after claim_idle,
    runs them again (attempt 2), and every entry ends with exactly one result."""
    n = 40
    with Redis() as r:
        rc = r.client()
        add_entries(rc, "jobs", [{"kind": "sleep", "ms": 50} for _ in range(n)])
        victim = tpd(r, source_conf(redis=r.addr, consumer="victim", claim_idle="500ms"),
                     workers=4, queue=4)
        try:
            eventually(lambda: pending_by_consumer(rc, "jobs", "tpd").get("victim", 0) >= 4,
                       "the victim holds entries")
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            lost = {e[0] for e in rc.call("XPENDING", "jobs", "tpd", "-", "+", 100, "victim")}
            check(lost, "the victim held no entry when killed")
            with tpd(r, source_conf(redis=r.addr, consumer="heir", claim_idle="500ms"),
                     workers=4, queue=4) as heir:
                eventually(lambda: int(rc.call("XLEN", "jobs:results")) >= n and
                           int(rc.call("XPENDING", "jobs", "tpd")[0]) == 0,
                           "every entry has its result", timeout=60)
                res = results(rc, "jobs:results")
                entries = [f["entry"] for _, f in res]
                check(len(entries) == len(set(entries)) == n, "%d results, %d entries "
                      "(expected %d each)", len(entries), len(set(entries)), n)
                for _, f in res:
                    want = "2" if f["entry"] in lost else "1"
                    check(f["attempt"] == want, "entry %s: attempt %s, expected %s (held "
                          "by the victim: %s)", f["entry"], f["attempt"], want,
                          f["entry"] in lost)
                    check(f["done"]["state"] == "succeeded", "entry %s: %r", f["entry"], f)
                s = source_stats(heir.client())
                check(s["claimed"] >= len(lost), "claimed %d, the victim held %d",
                      s["claimed"], len(lost))
        finally:
            victim.close()


def test_claimed_entries_ask_their_delivery_counts_in_one_xpending():
    """The delivery counts of the entries one XAUTOCLAIM claims come from one ranged
    XPENDING for them all, not one per entry (Redis's own command counts), and
    each still runs with its count as attempt."""
    n = 20
    with Redis() as r:
        rc = r.client()
        rc.call("XGROUP", "CREATE", "jobs", "tpd", "0", "MKSTREAM")
        add_entries(rc, "jobs", [{"kind": "echo", "value": i} for i in range(n)])
        rc.call("XREADGROUP", "GROUP", "tpd", "ghost", "COUNT", n, "STREAMS", "jobs", ">")
        rc.call("CONFIG", "RESETSTAT")
        with tpd(r, source_conf(redis=r.addr, claim_idle="300ms"), workers=4, queue=32):
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) == n, "every result")
            stats = rc.call("INFO", "commandstats")
            calls = {line.split(":")[0]: int(line.split("calls=")[1].split(",")[0])
                     for line in stats.splitlines() if line.startswith("cmdstat_")}
            check(calls.get("cmdstat_xpending", 0) <= 2 and
                  calls.get("cmdstat_xautoclaim", 0) >= 1, "%d entries claimed, Redis's "
                  "command counts: %r", n, calls)
            attempts = {f["attempt"] for _, f in results(rc, "jobs:results")}
            check(attempts == {"2"}, "attempts: %r", attempts)


def test_bad_entries_fail_at_once_and_poison_is_dead_lettered():
    """Not JSON, an unknown kind, a bad field: a failed result with bad_request at
    once, acked. An entry already delivered max_deliveries times by consumers that
    died: dead-lettered with its reason, a lost result, acked."""
    with Redis() as r:
        rc = r.client()
        rc.call("XGROUP", "CREATE", "jobs", "tpd", "0", "MKSTREAM")
        poison = rc.call("XADD", "jobs", "*", "task", '{"kind":"sleep","ms":10}', "id", "p")
        # three deliveries to consumers that died: a read and two claims
        rc.call("XREADGROUP", "GROUP", "tpd", "ghost", "COUNT", 1, "STREAMS", "jobs", ">")
        rc.call("XCLAIM", "jobs", "tpd", "ghost", 0, poison)
        rc.call("XCLAIM", "jobs", "tpd", "ghost", 0, poison)
        add_entries(rc, "jobs", ["{not json", {"kind": "nope"}, {"kind": "sleep"},
                                 {"kind": "echo", "value": "fine"}])
        with tpd(r, source_conf(redis=r.addr, claim_idle="200ms", max_deliveries=3)) as d:
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) >= 5,
                       "five results")
            res = {f["id"]: f for _, f in results(rc, "jobs:results")}
            for eid in ("e0", "e1", "e2"):
                f = res[eid]
                check(f["done"]["state"] == "failed" and
                      f["done"]["error"]["code"] == "bad_request", "%s: %r", eid, f)
            check("JSON" in res["e0"]["done"]["error"]["message"], "%r", res["e0"])
            check("nope" in res["e1"]["done"]["error"]["message"], "%r", res["e1"])
            check(res["e3"]["done"]["state"] == "succeeded", "%r", res["e3"])
            check(res["p"]["done"]["state"] == "lost" and res["p"]["entry"] == poison,
                  "poison: %r", res["p"])
            dead = rc.call("XRANGE", "jobs:dead", "-", "+")
            check(len(dead) == 1, "dead letters: %r", dead)
            df = fields(dead[0][1])
            check(df["entry"] == poison and "max_deliveries" in df["reason"] and
                  json.loads(df["task"])["kind"] == "sleep", "dead letter: %r", df)
            check(int(rc.call("XPENDING", "jobs", "tpd")[0]) == 0, "left pending")
            s = source_stats(d.client())
            check(s["dead_lettered"] == 1, "stats: %r", s)


def test_redis_stopped_and_started_again_loses_nothing():
    """redis-server really stopped (with its data on disk) for a while mid-run and
    started again on the same socket: tpd says so in stats, local submits go on, it
    reconnects, and every entry gets its result."""
    n = 30
    with Redis(persist=True) as r:
        rc = r.client()
        add_entries(rc, "jobs", [{"kind": "sleep", "ms": 30} for _ in range(n)])
        with tpd(r, source_conf(redis=r.addr, timeout="1s", backoff_max="200ms"),
                 workers=2, queue=2) as d:
            c = d.client()
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) >= 4, "some results")
            r.stop()
            eventually(lambda: source_stats(c)["state"] == "down", "tpd sees Redis down")
            s = source_stats(c)
            check(s["last_error"], "no last_error while down: %r", s)
            # local submits are not held up: once the entries read before are done
            # (no more are read while Redis is down), the pool takes them
            eventually(lambda: c.stats()["busy"] == 0 and c.stats()["queued"] == 0,
                       "the entries read before the outage done")
            rid, _ = c.submit({"kind": "echo", "value": "local"})
            ev = c.done(rid)
            check(ev["state"] == "succeeded" and ev["result"] == {"value": "local"}, "%r", ev)
            r.start()
            rc = r.client()
            try:
                eventually(lambda: int(rc.call("XLEN", "jobs:results")) >= n and
                           int(rc.call("XPENDING", "jobs", "tpd")[0]) == 0,
                           "every entry has its result", timeout=60)
            except AssertionError:
                pend = rc.call("XPENDING", "jobs", "tpd", "-", "+", 100)
                about = [line for line in d.read_log().splitlines()
                         if any(p[0] in line for p in pend)]
                raise AssertionError("not every entry has its result: %d results, pending "
                                     "%r, source %r; the log about them:\n%s" %
                                     (int(rc.call("XLEN", "jobs:results")), pend,
                                      source_stats(c), "\n".join(about)))
            entries = [f["entry"] for _, f in results(rc, "jobs:results")]
            check(len(set(entries)) == n, "%d entries with results of %d", len(set(entries)),
                  n)
            check(source_stats(c)["state"] == "connected", "%r", source_stats(c))
            log = d.read_log()
            check(log.count("retrying with backoff") == 1, "the outage logged %d times:\n%s",
                  log.count("retrying with backoff"), log[-3000:])


def test_sighup_adds_changes_and_removes_sources():
    with Redis() as r:
        rc = r.client()
        path = write_conf(r.dir, "")
        with Daemon("-c", path) as d:
            c = d.client()
            check(c.request({"op": "stats"}, "stats")["sources"] == [], "sources at start")
            with open(path, "w") as f:
                f.write(source_conf(redis=r.addr, stream="a", consumer="one"))
            d.signal(signal.SIGHUP)
            eventually(lambda: (source_stats(c) or {}).get("state") == "connected",
                       "source jobs added")
            add_entries(rc, "a", [{"kind": "echo", "value": 1}])
            eventually(lambda: int(rc.call("XLEN", "a:results")) == 1, "a result from a")
            # changed: another stream, with a task of the old one running: it still
            # ends, and the old source acks it before it goes
            add_entries(rc, "a", [{"kind": "sleep", "ms": 400}])
            eventually(lambda: c.stats()["busy"] == 1, "a's sleep running")
            with open(path, "w") as f:
                f.write(source_conf(redis=r.addr, stream="b", consumer="two"))
            d.signal(signal.SIGHUP)
            eventually(lambda: (source_stats(c) or {}).get("stream") == "b" and
                       source_stats(c)["state"] == "connected", "source jobs changed")
            eventually(lambda: len(c.request({"op": "stats"}, "stats")["sources"]) == 1,
                       "the old one gone")
            ra = results(rc, "a:results")
            check(len(ra) == 2 and ra[1][1]["done"]["state"] == "succeeded" and
                  ra[1][1]["consumer"] == "one", "the old source's running task: %r", ra)
            check(int(rc.call("XPENDING", "a", "tpd")[0]) == 0, "left pending on a")
            add_entries(rc, "a", [{"kind": "echo", "value": 2}])
            add_entries(rc, "b", [{"kind": "echo", "value": 3}])
            eventually(lambda: int(rc.call("XLEN", "b:results")) == 1, "a result from b")
            check(int(rc.call("XLEN", "a:results")) == 2, "a is still read after the change")
            check(fields(rc.call("XRANGE", "b:results", "-", "+")[0][1])["consumer"] == "two",
                  "the new consumer name")
            # removed
            with open(path, "w") as f:
                f.write("")
            d.signal(signal.SIGHUP)
            eventually(lambda: c.request({"op": "stats"}, "stats")["sources"] == [],
                       "source jobs removed")
            add_entries(rc, "b", [{"kind": "echo", "value": 4}])
            # a local task done after the entry was added: the loop went round meanwhile
            c.done(c.submit({"kind": "sleep", "ms": 100})[0])
            check(int(rc.call("XLEN", "b:results")) == 1, "b still read after removal")


def tpd_with_a_plain_token(r):
    """A tpd -w 2 -q 1 reading "jobs", with a TCP listener where alice has a plain token."""
    tokens = os.path.join(r.dir, "tokens")
    with open(tokens, "w") as f:
        f.write("alice tok-alice\n")
    return tpd(r, source_conf(redis=r.addr), workers=2, queue=1,
               extra=("-l", "127.0.0.1:0", "--token-file", tokens))


def refused_to_a_plain_token(d, task):
    """A source's tasks are for admins: alice, with a plain token, is refused task."""
    alice = d.client(tcp=True)
    check(alice.request({"op": "hello", "token": "tok-alice"})["event"] == "hello", "hi")
    for op in ("status", "wait", "cancel"):
        ev = alice.request({"op": op, "task": task})
        check(ev["event"] == "error" and ev["error"]["code"] == "forbidden",
              "%s of a redis:jobs task by token:alice: %r", op, ev)
    check(alice.request({"op": "list"})["tasks"] == [], "alice lists none of them")


def test_drain_acks_running_and_owner_and_stats():
    """A drain lets the running tasks end and acks them; queued entries not yet read
    stay in the stream. The tasks are owned by redis:NAME; stats has the source's
    counters."""
    with Redis() as r:
        rc = r.client()
        add_entries(rc, "jobs", [{"kind": "sleep", "ms": 300} for _ in range(6)],
                    extra={"label": "nightly"})
        d = tpd_with_a_plain_token(r)
        try:
            c = d.client()
            eventually(lambda: c.stats()["busy"] == 2 and c.stats()["queued"] == 1,
                       "two tasks running, one queued")
            refused_to_a_plain_token(d, 1)
            st = c.request({"op": "status", "task": 1}, "status")
            check(st.get("owner") == "redis:jobs", "owner: %r", st)
            check(st.get("label") == "nightly", "the entry's label is the task's: %r", st)
            s = source_stats(c)
            for k in ("name", "state", "read", "acked", "claimed", "dead_lettered",
                      "last_error"):
                check(k in s, "stats sources lacks %s: %r", k, s)
            check(s["read"] == 3 and s["acked"] == 0, "%r", s)
            d.signal(signal.SIGTERM)
            check(d.wait_exit() == 0, "tpd exit")
            res = results(rc, "jobs:results")
            check(len(res) == 3 and all(f["done"]["state"] == "succeeded" for _, f in res),
                  "results after the drain: %r", res)
            check(int(rc.call("XPENDING", "jobs", "tpd")[0]) == 0, "an entry left "
                  "pending by the drain")
        finally:
            d.close()


def test_own_pending_entries_run_at_once_after_a_restart():
    """Entries pending for this consumer that it never saw (delivered by a read whose
    answer was lost with the connection, or to its life before a restart) run as soon
    as it connects, not after claim_idle (60 s here): with their delivery count."""
    with Redis() as r:
        rc = r.client()
        rc.call("XGROUP", "CREATE", "jobs", "tpd", "0", "MKSTREAM")
        add_entries(rc, "jobs", [{"kind": "echo", "value": i} for i in range(3)])
        rc.call("XREADGROUP", "GROUP", "tpd", "c1", "COUNT", 2, "STREAMS", "jobs", ">")
        with tpd(r, source_conf(redis=r.addr, consumer="c1")) as d:
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) == 3 and
                       int(rc.call("XPENDING", "jobs", "tpd")[0]) == 0,
                       "the three entries done well before claim_idle")
            res = {f["id"]: f for _, f in results(rc, "jobs:results")}
            check([res[i]["attempt"] for i in ("e0", "e1", "e2")] == ["2", "2", "1"],
                  "attempts: %r", res)
            check(source_stats(d.client())["claimed"] == 2, "%r", source_stats(d.client()))


def test_a_killed_tpd_with_its_journal_leaves_redis_tasks_to_redis():
    """With the journal on, a tpd killed while it runs a source's task does not
    bring that task back itself (no lost, no second run from the journal): the
    entry is still pending, and the same consumer runs it again as it connects."""
    with Redis() as r:
        rc = r.client()
        state = os.path.join(r.dir, "state")
        conf = source_conf(redis=r.addr, consumer="c1")
        add_entries(rc, "jobs", [{"kind": "sleep", "ms": 60000}])
        d = tpd(r, conf, extra=("--state-dir", state))
        try:
            c = d.client()
            eventually(lambda: c.stats()["busy"] == 1, "the entry's task runs")
            rid, local = c.submit({"kind": "echo", "value": "local"})
            c.done(rid)
            d.proc.kill()
            d.proc.wait()
        finally:
            d.close()
        rc.call("XADD", "jobs", "*", "task", '{"kind":"echo","value":"after"}', "id", "e1")
        d = tpd(r, conf, extra=("--state-dir", state))
        try:
            c = d.client()
            check(c.request({"op": "wait", "task": local["task"]})["event"] == "done",
                  "the local task's result came back from the journal")
            eventually(lambda: any(f.get("id") == "e1" for _, f in results(rc, "jobs:results")),
                       "the source reads again after the restart")
            check(int(rc.call("XPENDING", "jobs", "tpd")[0]) == 1,
                  "the killed run's entry is still pending, running again here")
            check(source_stats(c)["running"] == 1, "%r", source_stats(c))
            # the source's tasks listed are the new run's, with new ids; none came back lost
            mine = [t for t in c.request({"op": "list"})["tasks"] if t["owner"] == "redis:jobs"]
            check(mine and all(t["task"] > local["task"] and t["state"] != "lost"
                               for t in mine), "a source's task brought back by the journal: %r",
                  mine)
        finally:
            d.close()


def test_a_restart_never_gives_a_source_task_id_again():
    """Ids are never given twice, whatever the task's origin: a source's tasks have
    no records of their own, yet a tpd killed while one runs (its entry pending)
    gives the entry's second run, and every later task, an id past the first run's,
    in each journal_sync mode."""
    for sync in ("commit", "interval"):
        with Redis() as r:
            rc = r.client()
            state = os.path.join(r.dir, "state")
            conf = "[daemon]\njournal_sync = %s\n" % sync + source_conf(redis=r.addr,
                                                                        consumer="c1")
            add_entries(rc, "jobs", [{"kind": "sleep", "ms": 60000}])
            extra = ("--state-dir", state)

            def source_ids(c):
                return [t["task"] for t in c.request({"op": "list"})["tasks"]
                        if t["owner"] == "redis:jobs" and t["state"] == "running"]
            d = tpd(r, conf, extra=extra)
            try:
                c = d.client()
                eventually(lambda: len(source_ids(c)) == 1, "the entry's task runs")
                first = source_ids(c)[0]
                d.proc.kill()
                d.proc.wait()
            finally:
                d.close()
            d = tpd(r, conf, extra=extra)
            try:
                c = d.client()
                eventually(lambda: len(source_ids(c)) == 1, "the pending entry runs again")
                again = source_ids(c)[0]
                check(again > first, "%s: the entry's second run got id %d, the first had "
                      "%d", sync, again, first)
                rid, local = c.submit({"kind": "echo", "value": "local"})
                check(local["task"] > first, "%s: a local task got id %d after the source's "
                      "%d", sync, local["task"], first)
                c.done(rid)
            finally:
                d.close()


def test_bad_entries_name_their_id_in_their_result():
    """Every result of an entry names the entry's own id field when it has one:
    an entry with no task, one with an unknown field (before or after its id), one
    given a field twice, and a poison entry with an unknown field that is
    dead-lettered."""
    with Redis() as r:
        rc = r.client()
        rc.call("XGROUP", "CREATE", "jobs", "tpd", "0", "MKSTREAM")
        poison = rc.call("XADD", "jobs", "*", "colour", "red", "task",
                         '{"kind":"sleep","ms":10}', "id", "poison")
        rc.call("XREADGROUP", "GROUP", "tpd", "ghost", "COUNT", 1, "STREAMS", "jobs", ">")
        rc.call("XCLAIM", "jobs", "tpd", "ghost", 0, poison)
        rc.call("XCLAIM", "jobs", "tpd", "ghost", 0, poison)
        rc.call("XADD", "jobs", "*", "id", "no-task", "label", "x")
        rc.call("XADD", "jobs", "*", "colour", "red", "id", "unknown-first",
                "task", '{"kind":"echo"}')
        rc.call("XADD", "jobs", "*", "id", "unknown-after", "task", '{"kind":"echo"}',
                "colour", "red")
        rc.call("XADD", "jobs", "*", "id", "twice", "task", '{"kind":"echo"}', "task", "{}")
        with tpd(r, source_conf(redis=r.addr, claim_idle="200ms", max_deliveries=3)):
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) >= 5, "five results")
            res = {f["entry"]: f for _, f in results(rc, "jobs:results")}
            ids = sorted(f.get("id", "(none)") for f in res.values())
            check(ids == sorted(["poison", "no-task", "unknown-first", "unknown-after",
                                 "twice"]), "the results' id fields: %r", res)
            check(res[poison]["id"] == "poison" and
                  res[poison]["done"]["state"] == "lost", "poison: %r", res[poison])
            for f in res.values():
                if f["id"] != "poison":
                    check(f["done"]["state"] == "failed" and
                          f["done"]["error"]["code"] == "bad_request", "%r", f)


def test_drain_with_redis_down_leaves_the_entry_pending():
    """tpd drains while Redis is down: its task ends, its result cannot be written, tpd
    leaves after the exit flush, and the entry is still pending (not acked, not lost)
    once Redis is back."""
    with Redis(persist=True) as r:
        rc = r.client()
        add_entries(rc, "jobs", [{"kind": "sleep", "ms": 300}])
        d = tpd(r, source_conf(redis=r.addr, timeout="1s", backoff_max="200ms"))
        try:
            c = d.client()
            eventually(lambda: c.stats()["busy"] == 1, "the task running")
            r.stop()
            d.signal(signal.SIGTERM)
            check(d.wait_exit(timeout=30) == 0, "tpd exit")
            check("last results not written to Redis" in d.read_log(), "the exit does not "
                  "say why it waited:\n%s", d.read_log()[-2000:])
            r.start()
            rc = r.client()
            check(int(rc.call("XPENDING", "jobs", "tpd")[0]) == 1, "the entry is not pending")
            check(int(rc.call("XLEN", "jobs:results") or 0) == 0, "a result was written")
        finally:
            d.close()


def test_stop_now_leaves_running_entries_pending():
    with Redis() as r:
        rc = r.client()
        add_entries(rc, "jobs", [{"kind": "sleep", "ms": 30000} for _ in range(2)])
        add_entries(rc, "jobs", [{"kind": "sleep", "ms": 30000}])
        d = tpd_with_a_plain_token(r)
        try:
            c = d.client()
            eventually(lambda: c.stats()["busy"] == 2 and c.stats()["queued"] == 1,
                       "two tasks running, one queued")
            refused_to_a_plain_token(d, 1)
            c.request({"op": "shutdown", "mode": "now"})
            check(d.wait_exit() == 0, "tpd exit")
            check(int(rc.call("XLEN", "jobs:results")) == 0, "results written: %r",
                  rc.call("XRANGE", "jobs:results", "-", "+"))
            check(int(rc.call("XPENDING", "jobs", "tpd")[0]) == 3, "not left pending: %r",
                  rc.call("XPENDING", "jobs", "tpd"))
        finally:
            d.close()


def test_status_line_names_the_source():
    """systemd's STATUS= carries each source's state: in flight while connected, down
    while Redis is gone."""
    with Redis() as r:
        with tpd(r, source_conf(redis=r.addr, backoff_max="200ms")) as d:
            def status(pred):
                with d.notify.cond:
                    return any(m.startswith("STATUS=") and pred(m) for m in d.notify.messages)
            eventually(lambda: status(lambda m: m.endswith("; jobs 0 in flight")),
                       "STATUS= with the source connected")
            r.stop()
            eventually(lambda: status(lambda m: m.endswith("; jobs down (0 in flight)")),
                       "STATUS= with the source down")


def test_source_redis_without_port_reads_6379():
    """redis = 127.0.0.1 is Redis's own port, as tpctl --redis reads it; with 6379 taken
    here the test cannot tell what listens there, and leaves it alone."""
    import socket
    s = socket.socket()
    taken = s.connect_ex(("127.0.0.1", 6379)) == 0
    s.close()
    if taken:
        raise Skip("127.0.0.1:6379 is in use here: the test uses it only when free")
    with Redis(tcp_port=6379) as r:
        with tpd(r, source_conf(redis="127.0.0.1")):
            rc = r.client()
            add_entries(rc, "jobs", [{"kind": "echo", "value": 1}])
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) == 1, "its result")


def test_readme_example():
    """The README's "More than one machine" commands, with redis-cli and tpctl, on a
    Unix socket instead of redis.example.net."""
    if shutil.which("redis-cli") is None:
        raise Skip("redis-cli is not installed (Debian package redis-tools)")
    with Redis() as r:
        with tpd(r, "[source jobs]\ntype = redis-stream\nredis = %s\nstream = jobs\n"
                 "group = tpd\n" % r.addr):
            cli = ["redis-cli", "-s", r.sock]
            uname = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout
            p = subprocess.run(cli + ["XADD", "jobs", "*", "id", "build-1", "task",
                                      '{"kind":"exec","argv":["uname","-r"]}'],
                               capture_output=True, text=True, timeout=TIMEOUT)
            check(p.returncode == 0 and "-" in p.stdout, "XADD: %r", p)
            rc = r.client()
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) == 1, "its result")
            p = subprocess.run(cli + ["XRANGE", "jobs:results", "-", "+"],
                               capture_output=True, text=True, timeout=TIMEOUT)
            for word in ("done", "entry", "build-1", "consumer", "attempt", uname.strip()):
                check(word in p.stdout, "XRANGE lacks %r: %r", word, p.stdout)
            p = subprocess.run([TPCTL, "enqueue", "--redis", r.addr, "--stream", "jobs",
                                "--id", "build-2", "--wait", "--", "uname", "-r"],
                               capture_output=True, text=True, timeout=TIMEOUT)
            check(p.returncode == 0 and "(id build-2): succeeded" in p.stdout, "enqueue --wait: %r", p)
            p = subprocess.run([TPCTL, "results", "--redis", r.addr, "--stream",
                                "jobs:results", "--from", "0", "--count", "2"],
                               capture_output=True, text=True, timeout=TIMEOUT)
            check(p.returncode == 0 and "build-1" in p.stdout and "build-2" in p.stdout and
                  p.stdout.count("succeeded") == 2, "results: %r", p)


if __name__ == "__main__":
    run_tests(globals())
