#!/usr/bin/env python3
"""GET /metrics on [daemon] metrics_listen: the text passes `promtool check metrics`
(Debian package prometheus), its counters and histograms match a known load, and the
HTTP server keeps its limits: only GET /metrics, bounded headers, no body, idle
connections closed, and at most metrics_max_connections open at once. A [source NAME]
has its tpd_source_* series (against a private redis-server: skipped without one), its
state also in tpctl stats and top. The loop's pauses (tpd_loop_pause_seconds, stats' loop)
show a long parse and nothing while idle."""
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from redistest import Redis
from tpdtest import TIMEOUT, TPCTL, TPD, Daemon, Skip, check, eventually, run_tests

LONG_MS = 60000
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics_daemon(*args, **kw):
    return Daemon("--metrics-listen", "127.0.0.1:0", *args, **kw)


def scrape(d, path="/metrics", method="GET", body=None, headers=None):
    """(status, headers dict, body text) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", d.metrics_port(), timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode()
    finally:
        conn.close()


def parse(text):
    """{(name, frozenset of labels): value} of every sample; checks the TYPE lines."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        check(m is not None, "not a sample line: %r", line)
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        key = (m.group(1), labels)
        check(key not in samples, "a sample given twice: %r", line)
        samples[key] = float(m.group(3))
    return samples, types


def value(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    check(key in samples, "no sample %s%r in %r", name, labels,
          sorted(k for k in samples if k[0] == name))
    return samples[key]


def check_histogram(samples, name, pool):
    """Buckets that never decrease, ending in +Inf = _count; returns (buckets, count, sum)."""
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                     if k[0] == name + "_bucket" and dict(k[1]).get("pool") == pool)
    check(buckets and buckets[-1][0] == float("inf"), "%s: a +Inf bucket: %r", name, buckets)
    check(buckets[0][0] == 0.001 and 3600.0 in [b for b, _ in buckets],
          "%s: buckets from 1 ms to 1 h: %r", name, [b for b, _ in buckets])
    counts = [v for _, v in buckets]
    check(counts == sorted(counts), "%s: cumulative buckets decrease: %r", name, buckets)
    count = value(samples, name + "_count", pool=pool)
    check(counts[-1] == count, "%s: +Inf %r != _count %r", name, counts[-1], count)
    return dict(buckets), count, value(samples, name + "_sum", pool=pool)


def promtool(text):
    if shutil.which("promtool") is None:
        raise Skip("promtool is not installed (Debian package prometheus)")
    p = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=TIMEOUT)
    check(p.returncode == 0, "promtool check metrics: exit %d\n%s%s\n--- the text:\n%s",
          p.returncode, p.stdout.decode(), p.stderr.decode(), text)


def test_metrics_count_a_known_load():
    with metrics_daemon(workers=2, queue=2) as d:
        c = d.client()
        tasks = [{"kind": "echo", "value": i} for i in range(3)] + \
            [{"kind": "fail", "message": "no"}] * 2 + \
            [{"kind": "sleep", "ms": LONG_MS, "timeout_ms": 50}]
        states = [c.done(c.submit(t)[0])["state"] for t in tasks]  # one at a time: W + Q is 4
        check(states == ["succeeded"] * 3 + ["failed"] * 2 + ["timed_out"], "%r", states)
        # both workers busy; one queued task expires, two stay queued, the next is refused
        longs = [c.submit({"kind": "sleep", "ms": LONG_MS})[1]["task"] for _ in range(2)]
        eventually(lambda: c.stats()["busy"] == 2, "both workers busy")
        _, a = c.submit({"kind": "sleep", "ms": 1})
        rid_b, _ = c.submit({"kind": "sleep", "ms": 1}, queue_timeout_ms=50)
        check(c.done(rid_b)["state"] == "expired", "the queue_timeout_ms task expired")
        _, cc = c.submit({"kind": "sleep", "ms": 1})
        _, refused = c.submit({"kind": "sleep", "ms": 1})
        check(refused["event"] == "rejected" and refused["error"]["code"] == "queue_full",
              "%r", refused)

        status, headers, text = scrape(d)
        check(status == 200, "status %d: %r", status, text)
        check(headers.get("Content-Type") == "text/plain; version=0.0.4; charset=utf-8",
              "%r", headers)
        s, types = parse(text)
        check(types.get("tpd_task_queued_seconds") == "histogram" and
              types.get("tpd_tasks_submitted_total") == "counter" and
              types.get("tpd_build_info") == "gauge", "types: %r", types)
        check(value(s, "tpd_queue_length", pool="default") == 2, "queue length")
        check(value(s, "tpd_queue_capacity", pool="default") == 2, "capacity")
        check(value(s, "tpd_workers", pool="default") == 2, "workers")
        check(value(s, "tpd_workers_busy", pool="default") == 2, "busy")
        st = c.stats()
        for gauge, field in (("tpd_workers_target", "target"),
                             ("tpd_workers_min", "min_workers"),
                             ("tpd_workers_max", "max_workers")):
            check(value(s, gauge, pool="default") == st[field], "%s: %r, stats %r",
                  gauge, value(s, gauge, pool="default"), st)
        check(value(s, "tpd_connections") == 1, "connections")
        check(value(s, "tpd_tasks_submitted_total", pool="default") == 11, "submitted")
        check(value(s, "tpd_tasks_rejected_total", pool="default", reason="queue_full") == 1,
              "rejected queue_full")

        for t in (a["task"], cc["task"]) + tuple(longs):
            check(c.request({"op": "cancel", "task": t})["event"] == "ok", "cancel %d", t)
        eventually(lambda: c.stats()["busy"] == 0 and c.stats()["queued"] == 0,
                   "every task ended")
        status, _, text = scrape(d)
        promtool(text)
        s, _ = parse(text)
        ends = {st: value(s, "tpd_tasks_finished_total", pool="default", state=st)
                for st in ("succeeded", "failed", "timed_out", "cancelled", "expired")}
        check(ends == {"succeeded": 3, "failed": 2, "timed_out": 1, "cancelled": 4,
                       "expired": 1}, "finished: %r", ends)
        check(value(s, "tpd_build_info", version=c.request({"op": "stats"})["version"]) == 1,
              "build info")
        # waits: 8 started and 1 expired (the 2 cancelled in the queue are not observed)
        qb, qcount, _ = check_histogram(s, "tpd_task_queued_seconds", "default")
        check(qcount == 9, "queue waits observed: %r", qcount)
        check(qb[0.025] <= 8, "the expired task waited 50 ms or more: %r", qb)
        # runs: the 8 that ran; three of them (timed out, two cancelled) ran 50 ms or more
        rb, rcount, rsum = check_histogram(s, "tpd_task_run_seconds", "default")
        check(rcount == 8, "run times observed: %r", rcount)
        check(rb[0.025] <= 5 and rsum >= 0.15, "runs: %r, sum %r", rb, rsum)
        print("tpd_task_run_seconds: %d observed, sum %.3f s" % (rcount, rsum))


def loop_of(c):
    return c.request({"op": "stats"}, "stats")["loop"]


def main_thread_switches(pid):
    """The loop thread's voluntary context switches (it is the process's first thread)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches for %d" % pid)


def test_metrics_loop_pause_of_a_long_parse():
    """A request line that takes long to parse pauses the loop: stats' loop object and
    tpd_loop_pause_seconds record it (no shorter than a tenth of the parse's round trip,
    no longer than it), agree with each other and pass promtool; an idle daemon records
    no pause and is not woken by the watch (its ticks stop). Three more such lines, each
    after an idle spell, each add at least half their round trip to the pauses' sum: a
    long callback woken with the watch's tick in one epoll_wait is seen too (the tick runs
    first: it ran after it once, and saw nothing of it)."""
    with metrics_daemon("--max-request-bytes", "16000000") as d:
        c = d.client()
        before = loop_of(c)
        check(before["longest_pause_ms"] < 1000 and
              set(before["pauses_le_ms"]) == {"1", "2.5", "5", "10", "25", "50", "100",
                                              "250", "500", "1000"}, "%r", before)
        # a line of 1.5 million array items: jansson parses it in one callback
        line = b'{"op":"ping","id":1,"items":[' + b",".join([b"1"] * 1500000) + b"]}\n"
        t0 = time.monotonic()
        c.send_raw(line)
        answer = c.recv()
        rtt_ms = (time.monotonic() - t0) * 1000
        check(answer.get("id") == 1, "the big line is answered: %r", answer)
        after = loop_of(c)
        print("a %d-byte line: answered in %.0f ms, longest pause %.1f ms (%d pauses)"
              % (len(line), rtt_ms, after["longest_pause_ms"], after["pauses"]))
        check(after["pauses"] > before["pauses"], "a pause recorded: %r", after)
        check(rtt_ms / 10 <= after["longest_pause_ms"] <= rtt_ms + 1,
              "the longest pause %.1f ms against a round trip of %.1f ms",
              after["longest_pause_ms"], rtt_ms)
        le = after["pauses_le_ms"]
        check(le["1000"] <= after["pauses"] and
              [le[k] for k in sorted(le, key=float)] == sorted(le.values()),
              "cumulative buckets: %r", after)

        # idle: no pause recorded, and the loop sleeps (a ticking watch would wake it 1000/s)
        time.sleep(0.2)
        idle = loop_of(c)
        n0 = main_thread_switches(d.proc.pid)
        time.sleep(1)
        woken = main_thread_switches(d.proc.pid) - n0
        check(loop_of(c)["pauses"] == idle["pauses"], "an idle second recorded a pause")
        check(woken < 100, "the idle loop woke %d times in a second", woken)

        # the scrape's figures fall between two stats requests around it (on a
        # loaded machine, passes between them may be pauses too: waiting for a CPU)
        stats_before = loop_of(c)
        status, _, text = scrape(d)
        stats = loop_of(c)
        check(status == 200, "status %d", status)
        promtool(text)
        s, types = parse(text)
        check(types.get("tpd_loop_pause_seconds") == "histogram", "types: %r", types)
        buckets = sorted((float(dict(k[1])["le"]), v) for k, v in s.items()
                         if k[0] == "tpd_loop_pause_seconds_bucket")
        check([b for b, _ in buckets] == [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                           0.25, 0.5, 1.0, float("inf")], "%r", buckets)
        count = value(s, "tpd_loop_pause_seconds_count")
        check(buckets[-1][1] == count and stats_before["pauses"] <= count <= stats["pauses"],
              "count %r, stats before %r and after %r", count, stats_before, stats)
        # in whole microseconds, as both are kept: seconds * 1000 can fall an ulp short
        check(round(value(s, "tpd_loop_pause_seconds_sum") * 1e6) >=
              round(after["longest_pause_ms"] * 1000), "the sum holds the longest")

        for i in range(3):
            time.sleep(0.3)
            before = loop_of(c)
            t0 = time.monotonic()
            c.send_raw(line)
            check(c.recv().get("id") == 1, "the big line is answered")
            rtt_ms = (time.monotonic() - t0) * 1000
            added = loop_of(c)["pause_sum_ms"] - before["pause_sum_ms"]
            check(rtt_ms / 2 <= added <= rtt_ms + 5, "line %d: %.1f ms of pauses added in a "
                  "round trip of %.1f ms", i + 2, added, rtt_ms)


def test_metrics_count_rejections_while_draining():
    with metrics_daemon(workers=1, queue=1) as d:
        c = d.client()
        _, ev = c.submit({"kind": "sleep", "ms": LONG_MS})
        eventually(lambda: c.stats()["busy"] == 1, "the sleep runs")
        check(c.request({"op": "shutdown", "mode": "drain"})["event"] == "ok", "drain")
        _, refused = c.submit({"kind": "echo", "value": 1})
        check(refused["event"] == "rejected" and refused["error"]["code"] == "closed",
              "%r", refused)
        status, _, text = scrape(d)
        check(status == 200, "/metrics is served while draining")
        promtool(text)
        s, _ = parse(text)
        check(value(s, "tpd_tasks_rejected_total", pool="default", reason="closed") == 1,
              "rejected closed")
        check(value(s, "tpd_tasks_submitted_total", pool="default") == 1, "submitted")
        check(value(s, "tpd_tasks_outstanding") == 1, "outstanding")
        c.request({"op": "cancel", "task": ev["task"]})
        check(d.wait_exit() == 0, "clean exit after the drain")


def test_metrics_only_get_metrics():
    with metrics_daemon() as d:
        for path in ("/", "/metricsx", "/metrics/", "/other"):
            status, _, body = scrape(d, path)
            check(status == 404 and "GET /metrics" in body, "%s: %d %r", path, status, body)
        for method in ("POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"):
            status, headers, _ = scrape(d, method=method)
            check(status == 405 and headers.get("Allow") == "GET", "%s: %d %r",
                  method, status, headers)
        status, _, _ = scrape(d, "/metrics?x=1")
        check(status == 200, "a query string is ignored: %d", status)
        # a body is refused, and so are headers past metrics_max_header_bytes (8k)
        status, _, _ = scrape(d, method="POST", body="x" * 10)
        check(status == 413, "a body: %d", status)
        status, _, _ = scrape(d, headers={"X-Big": "a" * 9000})
        check(status in (400, 413), "big headers: %d", status)
        # two scrapes on one kept-alive connection
        conn = http.client.HTTPConnection("127.0.0.1", d.metrics_port(), timeout=TIMEOUT)
        for _ in range(2):
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            check(r.status == 200 and b"tpd_workers" in r.read(), "keep-alive scrape")
        conn.close()
        # the daemon serves its protocol all along
        check(d.client().request({"op": "ping"})["event"] == "pong", "ping")


def test_metrics_connections_are_capped():
    with metrics_daemon("--metrics-max-connections", "2") as d:
        port = d.metrics_port()
        idle = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
                for _ in range(2)]
        eventually(lambda: "metrics_max_connections (2) reached" in d.read_log(),
                   "the cap is logged")
        third = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        third.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        third.settimeout(0.5)
        try:
            early = third.recv(100)
        except socket.timeout:
            early = None
        check(early is None, "a third connection was served at a cap of 2: %r", early)
        idle[0].close()     # a slot frees: the waiting scrape is accepted and answered
        third.settimeout(TIMEOUT)
        check(third.recv(100).startswith(b"HTTP/1.0 200"), "served once a slot freed")
        third.close()
        idle[1].close()


def test_metrics_idle_connections_are_closed():
    with metrics_daemon("--metrics-timeout", "200ms") as d:
        s = socket.create_connection(("127.0.0.1", d.metrics_port()), timeout=TIMEOUT)
        s.sendall(b"GET /metr")          # half a request line, then nothing
        start = time.monotonic()
        check(s.recv(100) == b"", "closed by tpd")
        print("an idle scrape connection was closed after %.2f s" % (time.monotonic() - start))
        s.close()


def test_metrics_listen_in_use_stops_the_start():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        d = Daemon("--metrics-listen", "127.0.0.1:%d" % port, start=False)
        p = subprocess.run([TPD] + d.args, capture_output=True, text=True, timeout=TIMEOUT)
        d.close()
        lines = p.stderr.strip().split("\n")
        check(p.returncode == 1 and "cannot listen on 127.0.0.1:%d" % port in lines[-1],
              "exit %d: %r", p.returncode, p.stderr)
    finally:
        busy.close()


def test_metrics_off_without_metrics_listen():
    with Daemon() as d:
        d.client().request({"op": "ping"})
        check("metrics:" not in d.read_log(), "no metrics server: %r", d.read_log())


def test_metrics_listen_change_waits_for_a_restart():
    fd, conf = tempfile.mkstemp(prefix="tpdmetrics-", suffix=".conf")
    os.write(fd, b"[daemon]\nmetrics_listen = 127.0.0.1:0\n")
    os.close(fd)
    try:
        with Daemon("-c", conf) as d:
            port = d.metrics_port()
            with open(conf, "w") as f:
                f.write("[daemon]\nmetrics_listen = 127.0.0.1:1\nmetrics_max_connections = 4\n")
            d.signal(signal.SIGHUP)
            eventually(lambda: "configuration reloaded" in d.read_log(), "the reload")
            check("metrics_listen takes effect at the next start; /metrics stays on tcp "
                  "127.0.0.1:%d" % port in d.read_log(), "the reload names what waits:\n%s",
                  d.read_log())
            check(scrape(d)[0] == 200, "still served on %d" % port)
    finally:
        os.unlink(conf)


def test_source_state_in_stats_top_and_metrics():
    """An operator sees each source: tpctl stats and top show its state, entries in
    flight and last error; /metrics has tpd_source_* series (up, read, acked, claimed,
    dead-lettered, in flight) that pass promtool, and up turns 0 while Redis is gone."""
    with Redis() as r:
        rc = r.client()
        rc.call("XGROUP", "CREATE", "jobs", "tpd", "0", "MKSTREAM")
        poison = rc.call("XADD", "jobs", "*", "task", '{"kind":"sleep","ms":10}', "id", "p")
        rc.call("XREADGROUP", "GROUP", "tpd", "ghost", "COUNT", 1, "STREAMS", "jobs", ">")
        for task in ['{"kind":"echo","value":1}'] * 3 + ['{"kind":"sleep","ms":60000}']:
            rc.call("XADD", "jobs", "*", "task", task)
        conf = os.path.join(r.dir, "tpd.conf")
        with open(conf, "w") as f:
            f.write("[source jobs]\ntype = redis-stream\nredis = %s\nstream = jobs\n"
                    "group = tpd\nconsumer = c1\nclaim_idle = 200ms\nmax_deliveries = 1\n"
                    "backoff_max = 200ms\ntimeout = 1s\n" % r.addr)
        with metrics_daemon("-c", conf) as d:
            eventually(lambda: int(rc.call("XLEN", "jobs:results")) == 4 and
                       d.client().request({"op": "stats"})["sources"][0]["dead_lettered"] == 1,
                       "three results, the poison entry dead-lettered")
            _, _, text = scrape(d)
            promtool(text)
            m, types = parse(text)
            want = {"tpd_source_up": 1, "tpd_source_entries_read_total": 4,
                    "tpd_source_entries_acked_total": 4,
                    "tpd_source_entries_claimed_total": 1,
                    "tpd_source_entries_dead_lettered_total": 1,
                    "tpd_source_entries_in_flight": 1}
            for name, v in want.items():
                check(value(m, name, source="jobs", pool="default") == v, "%s: %r", name,
                      value(m, name, source="jobs", pool="default"))
            check(types["tpd_source_entries_read_total"] == "counter" and
                  types["tpd_source_up"] == "gauge", "types: %r", types)

            def stats_row():
                p = subprocess.run([TPCTL, "-s", d.sock, "stats"], capture_output=True,
                                   text=True, timeout=TIMEOUT)
                check(p.returncode == 0, "tpctl stats: %r", p)
                head = [line for line in p.stdout.splitlines() if line.startswith("SOURCE")]
                row = [line for line in p.stdout.splitlines() if line.startswith("jobs ")]
                check(head and row, "no sources table in tpctl stats:\n%s", p.stdout)
                return dict(zip(head[0].split()[:8], row[0].split(None, 8)[:8])), row[0]
            cols, _ = stats_row()
            check(cols["STATE"] == "connected" and cols["IN_FLIGHT"] == "1" and
                  cols["READ"] == "4" and cols["DEAD_LETTERED"] == "1", "%r", cols)
            p = subprocess.run([TPCTL, "-s", d.sock, "top", "--once"], capture_output=True,
                               text=True, timeout=TIMEOUT)
            check(p.returncode == 0 and re.search(r"^jobs +connected +default +1 ", p.stdout,
                                                  re.M), "tpctl top --once:\n%r", p)
            r.stop()
            eventually(lambda: value(parse(scrape(d)[2])[0], "tpd_source_up", source="jobs",
                                     pool="default") == 0, "tpd_source_up 0 with Redis gone")
            cols, row = stats_row()
            check(cols["STATE"] == "down" and cols["IN_FLIGHT"] == "1" and
                  re.search(r"(connection lost|cannot connect)", row), "%r", row)


run_tests(globals())
