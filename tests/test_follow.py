#!/usr/bin/env python3
"""Following a task (wait with stream: true) from any connection, from now or from the
start, and streamed output that output_limit does not cut. Each task waits on a FIFO the
test opens only once the follower is in place (its ping answered after the wait), so the
interleaving is forced, not timed."""
import base64
import json
import os
import subprocess

from tpdtest import TPCTL, TIMEOUT, Daemon, Skip, as_user, check, eventually, run_tests


def gated(d, name):
    """A FIFO the task blocks on, and a file the task creates once it printed 'one'."""
    fifo = os.path.join(d.dir, name + ".fifo")
    os.mkfifo(fifo)
    mark = os.path.join(d.dir, name + ".mark")
    script = "echo one; echo err-one >&2; : > %s; read x < %s; echo two; exit 3" % (mark, fifo)
    return fifo, mark, {"kind": "exec", "argv": ["sh", "-c", script]}


def release(fifo):
    with open(fifo, "w") as f:
        f.write("go\n")


def follow(c, task, **extra):
    """Sends a following wait and a ping behind it: once the pong is back, the wait is in."""
    rid = c.send(dict(op="wait", task=task, stream=True, **extra))
    events = []
    pong = c.send({"op": "ping"})
    while True:
        ev = c.recv()
        if ev.get("id") == pong:
            return rid, events
        events.append(ev)


def kept(d, task):
    """What tpd has read of task's stdout and stderr so far (a from-start follow, closed)."""
    c = d.client()
    try:
        events = follow(c, task, **{"from": "start"})[1]
        return text(events), text(events, "stderr")
    finally:
        c.close()


def read_first_lines(d, task):
    """The gated task's first lines are in its pipes once its mark exists; this waits
    until tpd has read them, where "from then on" starts."""
    eventually(lambda: kept(d, task) == ("one\n", "err-one\n"), "tpd read the first lines")


def until_done(c, rid, events):
    while not events or events[-1].get("event") != "done":
        events.append(c.recv_id(rid))
    return events


def text(events, stream="stdout"):
    return "".join(e.get("data", "") for e in events
                   if e["event"] == "output" and e["stream"] == stream)


def test_follow_from_another_connection_gets_output_from_then_on():
    with Daemon() as d:
        fifo, mark, task = gated(d, "a")
        s = d.client()
        _, acc = s.submit(task, detach=True)
        eventually(lambda: os.path.exists(mark), "the task printed its first line")
        read_first_lines(d, acc["task"])
        f = d.client()
        rid, events = follow(f, acc["task"])
        release(fifo)
        events = until_done(f, rid, events)
        names = [e["event"] for e in events]
        check("started" not in names, "a running task's follower gets no started: %r", names)
        check(text(events) == "two\n", "the output from the follow on: %r", events)
        check(all(e["task"] == acc["task"] and e["id"] == rid for e in events), "%r", events)
        done = events[-1]
        check(done["state"] == "failed" and done["result"]["exit_code"] == 3, "%r", done)
        check(done["result"]["stdout"] == "one\ntwo\n", "the result keeps all: %r", done)


def test_follow_from_start_replays_what_was_kept_first():
    with Daemon() as d:
        fifo, mark, task = gated(d, "b")
        s = d.client()
        _, acc = s.submit(task, detach=True)
        eventually(lambda: os.path.exists(mark), "the task printed its first lines")
        read_first_lines(d, acc["task"])
        f = d.client()
        rid, events = follow(f, acc["task"], **{"from": "start"})
        check(text(events) == "one\n" and text(events, "stderr") == "err-one\n",
              "the kept output comes at once: %r", events)
        release(fifo)
        events = until_done(f, rid, events)
        check(text(events) == "one\ntwo\n", "then the rest, each byte once: %r", events)
        check(events[-1]["result"]["exit_code"] == 3, "%r", events[-1])


def test_two_followers_and_the_submitter_each_get_the_stream():
    with Daemon() as d:
        fifo, mark, task = gated(d, "c")
        s = d.client()
        srid = s.send({"op": "submit", "task": task, "stream": True})
        eventually(lambda: os.path.exists(mark), "the task printed its first line")
        read_first_lines(d, 1)
        f1, f2 = d.client(), d.client()
        r1, e1 = follow(f1, 1)
        r2, e2 = follow(f2, 1, **{"from": "start"})
        release(fifo)
        e1 = until_done(f1, r1, e1)
        e2 = until_done(f2, r2, e2)
        es = until_done(s, srid, [])
        check(text(es) == "one\ntwo\n", "the submitter's stream: %r", es)
        check(text(e1) == "two\n", "the first follower's: %r", e1)
        check(text(e2) == "one\ntwo\n", "the second's, from the start: %r", e2)


def test_follow_a_queued_task_gets_its_start():
    with Daemon(workers=1) as d:
        fifo, mark, task = gated(d, "d")
        s = d.client()
        _, first = s.submit(task, detach=True)
        _, acc = s.submit({"kind": "exec", "argv": ["echo", "queued one"]}, detach=True)
        f = d.client()
        rid, events = follow(f, acc["task"])
        check(f.request({"op": "status", "task": acc["task"]})["state"] == "queued",
              "still queued behind the first")
        release(fifo)
        events = until_done(f, rid, events)
        names = [e["event"] for e in events]
        check(names[0] == "started" and "pid" in events[0], "started first: %r", events)
        check(text(events) == "queued one\n" and names[-1] == "done", "%r", events)


def test_follow_a_finished_task_answers_its_done_at_once():
    with Daemon() as d:
        s = d.client()
        rid, acc = s.submit({"kind": "exec", "argv": ["echo", "hi"]})
        s.done(rid)
        f = d.client()
        ev = f.request(dict(op="wait", task=acc["task"], stream=True))
        check(ev["event"] == "done" and ev["result"]["stdout"] == "hi\n", "%r", ev)
        # from the start: its spooled output first, then the done
        rid = f.send(dict(op="wait", task=acc["task"], stream=True, **{"from": "start"}))
        ev = f.recv_id(rid)
        check(ev["event"] == "output" and ev["data"] == "hi\n", "%r", ev)
        ev = f.recv_id(rid)
        check(ev["event"] == "done" and ev["result"]["stdout"] == "hi\n", "%r", ev)


def test_follow_bad_fields():
    with Daemon() as d:
        c = d.client()
        _, acc = c.submit({"kind": "echo", "value": 1}, detach=True)
        for req, want in [({"from": "start"}, 'needs "stream": true'),
                          ({"stream": True, "from": "end"}, 'must be "start"'),
                          ({"stream": 1}, "true or false")]:
            ev = c.request(dict(op="wait", task=acc["task"], **req))
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
                  want in ev["error"]["message"], "%r: %r", req, ev)


def test_streamed_output_is_not_cut_by_output_limit():
    with Daemon() as d:
        c = d.client()
        n = 200000
        rid = c.send({"op": "submit", "stream": True, "task": {
            "kind": "exec", "argv": ["head", "-c", str(n), "/dev/zero"], "output_limit": 1024}})
        events = until_done(c, rid, [])
        data = b"".join(e["data"].encode() if "data" in e else base64.b64decode(e["data_base64"])
                        for e in events if e["event"] == "output")
        check(len(data) == n, "the whole output streamed: %d of %d bytes", len(data), n)
        res = events[-1]["result"]
        kept = base64.b64decode(res["stdout_base64"])
        check(res["truncated"] is True and len(kept) == 1024,
              "the result keeps output_limit: %d, %r", len(kept), res["truncated"])


def test_follow_is_for_the_owner_and_admins():
    if os.geteuid() != 0:
        raise Skip("needs root to act as nobody")
    with Daemon("--socket-mode", "0666") as d:
        os.chmod(d.dir, 0o755)
        fifo, mark, task = gated(d, "f")
        s = d.client()
        _, acc = s.submit(task, detach=True)
        eventually(lambda: os.path.exists(mark), "the task printed its first line")
        ev = as_user("nobody", d.sock, [{"op": "wait", "id": 1, "task": acc["task"],
                                         "stream": True, "from": "start"}])[0]
        check(ev["event"] == "error" and ev["error"]["code"] == "forbidden" and
              "output" not in json.dumps(ev) and "one" not in json.dumps(ev),
              "nobody may not follow root's task, nor see its kept output: %r", ev)
        release(fifo)
        s.request({"op": "wait", "task": acc["task"]})


def tpctl(d, *args):
    return subprocess.run([TPCTL, "-s", d.sock] + list(args), capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_tpctl_follow_streams_and_exits_as_run():
    with Daemon() as d:
        fifo, mark, task = gated(d, "e")
        s = d.client()
        _, acc = s.submit(task, detach=True)
        eventually(lambda: os.path.exists(mark), "the task printed its first line")
        p = subprocess.Popen([TPCTL, "-s", d.sock, "follow", "--from-start",
                              str(acc["task"])], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        # tpctl's connection is the second; its wait is in once its first output comes
        eventually(lambda: s.request({"op": "stats"})["connections"] == 2, "tpctl connected")
        first = p.stdout.readline()
        check(first == "one\n", "the kept output first: %r", first)
        release(fifo)
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 3, "exits with the task's status: %d %r", p.returncode, err)
        check(out == "two\n" and "err-one" in err, "%r %r", out, err)
        r = tpctl(d, "follow", str(acc["task"]))
        check(r.returncode == 3 and r.stdout == "one\ntwo\n", "a finished task: %r", r)
        r = tpctl(d, "follow", "999")
        check(r.returncode == 1 and "no task 999" in r.stderr, "%r", r)


def test_tpctl_run_shows_the_whole_output_past_output_limit():
    with Daemon() as d:
        r = tpctl(d, "run", "--output-limit", "1k", "seq", "1", "50000")
        want = "".join("%d\n" % i for i in range(1, 50001))
        check(r.returncode == 0 and r.stdout == want, "run's output: %d bytes of %d, %r",
              len(r.stdout), len(want), r.stderr)
        check("output limit" not in r.stderr, "nothing was cut from what run showed: %r",
              r.stderr)


run_tests(globals())
