#!/usr/bin/env python3
"""Output flow control and the connection's life (daemon/net/conn.c): a client
that stops reading is paused, not fed without bound; one that reads gets
everything, however large; one that closes with answers still owed is freed
only once nothing can reach it."""
import json
import os
import socket
import subprocess
import threading

from tpdtest import SLOW, TIMEOUT, TPCTL, Daemon, check, eventually, run_tests

MIB = 1024 * 1024


def tpctl(d, *args, timeout=None):
    return subprocess.run([TPCTL, "-s", d.sock] + list(args), capture_output=True,
                          timeout=timeout or TIMEOUT * 4)


def mib_of_a(n=1):
    """An exec task that prints n MiB of 'a' (its whole output is kept: output_limit is 1 MiB per n)."""
    return {"kind": "exec", "argv": ["sh", "-c", "head -c %d /dev/zero | tr '\\0' a" % (n * MIB)],
            "output_limit": n * MIB}


def connect(d, rcvbuf=None):
    """A raw connection; a Unix connect() fails at once while the daemon's
    backlog is full (others connecting fast), so that one is retried."""
    import time
    deadline = time.monotonic() + TIMEOUT
    while True:
        s = socket.socket(socket.AF_UNIX)
        if rcvbuf is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(TIMEOUT)
        try:
            s.connect(d.sock)
            return s
        except BlockingIOError:
            s.close()
            check(time.monotonic() < deadline, "the daemon's backlog stayed full")
            time.sleep(0.001)


def read_until(s, buf, pred):
    """Reads lines from s until pred(event) is true; returns (event, rest of buf)."""
    while True:
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            ev = json.loads(line)
            if pred(ev):
                return ev, buf
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("tpd closed the connection")
        buf += chunk


def test_a_connection_closed_with_output_due_is_not_used_after_it_is_freed():
    # A client pipelines 100,000 waits on a task and never reads their
    # answers; when the task ends, their dones come in the same loop pass as
    # the reaping of another client's close. The slow connection must not
    # be freed while anything (the list of connections to write, its held
    # answers) can still reach it; the ASan build reports it if it is.
    #
    # The interleaving is forced: one loop pass takes both the close of an
    # idle client and the cancel of the queued task (whose done is posted
    # at once), sent back to back while the daemon is busy reading a flood
    # of silent requests, and nothing in that pass writes (the cancel comes
    # from a client that shut down its reading side), so the done is
    # handled at the start of the next pass, before the reaper, which
    # runs before the write of that pass.
    n = 100000
    # (max_subscriptions, 10000 by default, would answer most of the waits at once)
    with Daemon("--max-subscriptions", str(2 * n), workers=1) as d:
        ctl = d.client()
        _, blocker = ctl.submit({"kind": "sleep", "ms": 600000})
        # (the one worker may still be starting: wait until it runs the blocker)
        eventually(lambda: ctl.request({"op": "status", "task": blocker["task"]})["state"] ==
                   "running", "the blocker runs")
        for round in range(3):
            _, acc = ctl.submit({"kind": "sleep", "ms": 1})
            task = acc["task"]
            st = ctl.request({"op": "status", "task": task})
            check(acc["queued"] == 0 and st["state"] ==
                  "queued", "the task waits behind the blocker: %r %r", acc, st)
            slow = connect(d, rcvbuf=4096)
            slow.sendall(b'{"op":"wait","task":%d}\n' % task * n + b'{"op":"ping","id":0}\n')
            # Every wait is subscribed once the ping is answered (nothing else
            # is written to it before the task ends).
            read_until(slow, b"", lambda e: e.get("id") == 0)
            # A client whose answers cannot be written: its requests write nothing.
            mute = connect(d)
            mute.shutdown(socket.SHUT_RD)
            broken = d.read_log().count("cannot write")
            mute.sendall(b'{"op":"ping"}\n')
            eventually(lambda: d.read_log().count("cannot write") > broken, "its pong fails")
            idle = connect(d)
            idle.sendall(b'{"op":"ping","id":1}\n')
            read_until(idle, b"", lambda e: e.get("id") == 1)
            # A flood of waits on the blocker: read for a while, answering nothing.
            flood = connect(d)
            flood_reqs = b'{"op":"wait","task":%d}\n' % blocker["task"] * n
            flood.sendall(flood_reqs[:len(flood_reqs) // 4])
            rest = threading.Thread(target=flood.sendall, args=(flood_reqs[len(flood_reqs) // 4:],),
                                    daemon=True)
            rest.start()
            mute.sendall(b'{"op":"cancel","task":%d}\n' % task)
            idle.close()
            w = ctl.request({"op": "wait", "task": task}, "done")
            check(w["state"] == "cancelled", "%r", w)
            rest.join(TIMEOUT)
            check(ctl.request({"op": "ping"})["event"] == "pong", "tpd serves after the done")
            for s in (slow, mute, flood):
                s.close()
        check(ctl.request({"op": "ping"})["event"] == "pong", "tpd lives on")
        print("3 rounds of %d waits answered (or held) next to a close being reaped" % n)


def test_tpctl_batch_of_tasks_printing_a_mebibyte_each_is_not_disconnected():
    # 16 dones of 1 MiB come back in one loop pass: twice max_output_buffer.
    n = 32
    with Daemon(workers=16, queue=64) as d:
        path = os.path.join(d.dir, "batch")
        with open(path, "w") as f:
            for _ in range(n):
                f.write("sh -c \"head -c %d /dev/zero | tr '\\\\0' a\"\n" % MIB)
        p = tpctl(d, "batch", "--no-progress", path)
        check(p.returncode == 0, "tpctl batch exit %d: %r", p.returncode, p.stderr[-2000:])
        check(p.stdout.count(b"a") == n * MIB, "%d bytes of output printed, %d expected",
              p.stdout.count(b"a"), n * MIB)
        check("passed max_output_buffer" not in d.read_log(), "a client was cut off")
        print("tpctl batch -j 16: %d tasks of 1 MiB output each, all printed" % n)


def test_tpctl_wait_on_30_finished_tasks_of_a_mebibyte_each_gets_them_all():
    n = 30
    with Daemon(workers=2, queue=64) as d:
        c = d.client()
        rids = [c.send({"op": "submit", "task": mib_of_a()}) for _ in range(n)]
        ids = []
        for r in rids:
            ids.append(c.recv_id(r, "accepted")["task"])
        for r in rids:
            check(c.done(r, timeout=TIMEOUT * 2)["state"] == "succeeded", "task ran")
        p = tpctl(d, "wait", *[str(i) for i in ids])
        check(p.returncode == 0, "tpctl wait exit %d: %r", p.returncode, p.stderr[-2000:])
        lines = p.stdout.decode().splitlines()
        check(len(lines) == n and all("succeeded" in l for l in lines), "%r", lines[:5])
        print("tpctl wait on %d finished tasks of 1 MiB each: %d lines" % (n, len(lines)))


def test_a_client_pipelining_waits_on_10k_results_and_reading_gets_every_answer():
    n, ntasks = 1660, 10
    value = "v" * 10240
    with Daemon() as d:
        c = d.client()
        tasks = []
        for _ in range(ntasks):
            rid, acc = c.submit({"kind": "echo", "value": value})
            tasks.append(acc["task"])
            c.done(rid)
        s = connect(d)
        s.sendall(b"".join(b'{"op":"wait","id":%d,"task":%d}\n' % (i, tasks[i % ntasks])
                           for i in range(n)))
        buf, got = b"", []
        while len(got) < n:
            ev, buf = read_until(s, buf, lambda e: True)
            check(ev["event"] == "done" and ev["result"]["value"] == value, "%r", ev.get("error"))
            got.append(ev["id"])
        check(sorted(got) == list(range(n)), "answers lost or doubled")
        print("%d pipelined waits on 10 KiB results: %d dones" % (n, len(got)))


class Reader:
    """Reads n answer lines from s slowly, in a thread, keeping only each line's
    id and length (1 MiB answers: 10 GB in all is not kept)."""

    def __init__(self, s, n, chunk=256 * 1024, pause_every=64 * MIB, pause=0.002):
        self.s, self.n = s, n
        self.chunk, self.pause_every, self.pause = chunk, pause_every, pause
        self.lines = []        # (id, length)
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        import time
        buf = bytearray(self.chunk)
        view = memoryview(buf)
        line_len, head, since_pause = 0, b"", 0
        try:
            while len(self.lines) < self.n:
                k = self.s.recv_into(view)
                if k == 0:
                    raise EOFError("tpd closed the connection after %d answers" % len(self.lines))
                start = 0
                while start < k:
                    nl = buf.find(b"\n", start, k)
                    end = k if nl == -1 else nl
                    if len(head) < 64:
                        head += bytes(buf[start:min(end, start + 64)])
                    line_len += end - start
                    if nl == -1:
                        break
                    self.lines.append((json.loads(head[:head.index(b",")] + b"}")["id"]
                                       if head.startswith(b'{"id":') else None, line_len))
                    line_len, head, start = 0, b"", nl + 1
                since_pause += k
                if since_pause >= self.pause_every:
                    since_pause = 0
                    time.sleep(self.pause)
        except Exception as e:
            self.error = e

    def join(self, timeout):
        self.thread.join(timeout)
        check(not self.thread.is_alive(), "the reader did not finish: %d of %d answers"
              % (len(self.lines), self.n))
        if self.error is not None:
            raise self.error
        return self.lines


def test_memory_stays_bounded_for_10000_waits_on_mebibyte_results_read_slowly():
    # 8 tasks of 1 MiB output each: 4 finished and retained, 4 still running
    # (each waiting for a file to appear) that end together. One client waits on them 10,000
    # times (10 GB of answers) and reads slowly. Without flow control the
    # daemon would buffer gigabytes (or cut the client off); with it, every
    # answer arrives and RSS stays within the cap and a few results.
    # (Sanitizer builds move the 10 GB several times slower: a fifth of it there.)
    n_running_waits, n = (2000, 10000) if SLOW == 1 else (400, 2000)
    with Daemon(workers=8, queue=64) as d:
        go = os.path.join(d.dir, "go")
        c = d.client()
        finished, running = [], []
        for _ in range(4):
            rid, acc = c.submit(mib_of_a())
            finished.append((rid, acc["task"]))
        for rid, _ in finished:
            check(c.done(rid, timeout=TIMEOUT * 2)["state"] == "succeeded", "ran")
        for _ in range(4):
            task = mib_of_a()
            task["argv"][2] = "while [ ! -e %s ]; do sleep 0.01; done; %s" % (go, task["argv"][2])
            rid, acc = c.submit(task)
            running.append(acc["task"])
        rss0 = d.rss_kib()
        s = connect(d)
        # the waits on the running tasks first: subscribed once the ping is answered
        s.sendall(b"".join(b'{"op":"wait","id":%d,"task":%d}\n' % (i, running[i % 4])
                           for i in range(n_running_waits)) + b'{"op":"ping","id":"sub"}\n')
        check(read_until(s, b"", lambda e: True)[0] == {"event": "pong", "id": "sub"},
              "the ping is the only answer before the tasks end")
        open(go, "w").close()             # every running task goes on, all at once
        reader = Reader(s, n)
        rest = b"".join(b'{"op":"wait","id":%d,"task":%d}\n' % (i, finished[i % 4][1])
                        for i in range(n_running_waits, n))
        sender = threading.Thread(target=s.sendall, args=(rest,), daemon=True)
        sender.start()
        peak = rss0
        while reader.thread.is_alive():
            peak = max(peak, d.rss_kib())
            reader.thread.join(0.05)
        lines = reader.join(TIMEOUT * 20)
        sender.join(TIMEOUT)
        ids = sorted(i for i, _ in lines)
        check(ids == list(range(n)), "answers lost or doubled: %d distinct of %d",
              len(set(ids)), n)
        check(all(length > MIB for _, length in lines), "an answer without its 1 MiB result")
        grown = (peak - rss0) / 1024
        print("%d waits on 1 MiB results (%.1f GB) read slowly: tpd RSS %.1f MiB before, "
              "peak %.1f MiB (+%.1f MiB)" % (n, sum(l for _, l in lines) / 1e9, rss0 / 1024,
                                            peak / 1024, grown))
        # The cap (8 MiB) plus one answer, the held list and the results: far
        # below what buffering even a tenth of the answers would take. (A
        # sanitizer's quarantine of freed memory makes RSS meaningless.)
        if SLOW == 1:
            check(grown < 160, "tpd grew by %.1f MiB", grown)


def test_a_client_reading_nothing_is_disconnected_after_the_stall_timeout_and_its_task_goes_on():
    # A streaming task prints 2.5 MB to a client that reads none of it: the
    # task is paced, then the client is disconnected once its socket took
    # nothing for output_stall_timeout (logged with the reason); the task
    # then runs to its end and wait returns its whole result.
    size = 2500000
    with Daemon("--max-output-buffer", "256k", "--output-stall-timeout", "300ms") as d:
        slow = d.client()
        task = mib_of_a()
        task["argv"][2] = "head -c %d /dev/zero | tr '\\0' y" % size
        task["output_limit"] = 3000000
        rid, acc = slow.submit(task, stream=True)
        w = d.client()
        done = w.request({"op": "wait", "task": acc["task"]}, "done", timeout=TIMEOUT * 2)
        check(done["state"] == "succeeded" and done["result"]["stdout"] == "y" * size,
              "the task went on to its end: %r", done.get("error"))
        log = d.read_log()
        check("(output_stall_timeout)" in log and "disconnecting; its tasks go on" in log,
              "the disconnect is logged with its reason")
        try:
            while True:
                slow.recv()
        except EOFError:
            pass
        line = [l for l in log.splitlines() if "output_stall_timeout" in l][0]
        print("logged: %s" % line[line.index("connection"):])


def test_a_client_that_reads_slowly_is_never_disconnected_by_the_stall_timeout():
    # The same 2.5 MB read in small pieces with pauses shorter than the
    # timeout: the socket keeps taking bytes, so the client gets it all.
    size = 2500000
    timeout_s = 1.0 * SLOW
    with Daemon("--max-output-buffer", "64k", "--output-stall-timeout",
                "%dms" % (timeout_s * 1000)) as d:
        s = connect(d, rcvbuf=8192)
        task = mib_of_a()
        task["argv"][2] = "head -c %d /dev/zero | tr '\\0' y" % size
        task["output_limit"] = 3000000
        s.sendall((json.dumps({"op": "submit", "id": 1, "task": task, "stream": True}) +
                   "\n").encode())
        import time
        # The pause is taken per read from the socket, not per event: how
        # many events one read brings depends on how the task's output was
        # cut, and a pause per event could add up to more than the timeout
        # on a loaded machine.
        buf, got, ev = b"", 0, {}
        while ev.get("event") != "done":
            chunk = s.recv(65536)
            if not chunk:
                raise EOFError("tpd closed the connection")
            buf += chunk
            while b"\n" in buf and ev.get("event") != "done":
                line, buf = buf.split(b"\n", 1)
                ev = json.loads(line)
                if ev["event"] == "output":
                    got += len(ev["data"])
            time.sleep(timeout_s / 20)
        check(got == size and ev["state"] == "succeeded", "%d bytes, %r", got, ev.get("error"))
        check("output_stall_timeout" not in d.read_log(), "a reading client was disconnected")


def test_a_client_holding_output_does_not_hold_the_exit():
    # A client owed 2,000 dones of 10 KiB that reads none of them (and no
    # stall timeout): a drain ends the task, then the daemon exits when its
    # exit flush time passes, not never.
    with Daemon("--output-stall-timeout", "0") as d:
        go = os.path.join(d.dir, "go")
        c = d.client()
        task = mib_of_a()
        task["argv"][2] = ("while [ ! -e %s ]; do sleep 0.01; done; head -c 10240 /dev/zero | "
                           "tr '\\0' w" % go)
        _, acc = c.submit(task)
        s = connect(d, rcvbuf=4096)
        s.sendall(b'{"op":"wait","task":%d}\n' % acc["task"] * 2000 + b'{"op":"ping","id":1}\n')
        read_until(s, b"", lambda e: e.get("id") == 1)   # every wait is subscribed
        check(c.request({"op": "shutdown"})["event"] == "ok", "shutdown")
        open(go, "w").close()
        check(d.wait_exit(timeout=TIMEOUT + 5) == 0, "exit 0")
        check("clients did not read their last events" in d.read_log(), "the exit flush timed out")


def test_a_half_closed_client_gets_every_held_answer_then_eof():
    # 3,000 pipelined waits on 10 KiB results, then the client shuts down
    # its writing side and reads through a small buffer: the requests are answered as it
    # reads (the daemon pauses reading them in between), all of them, in
    # order, and then the connection is closed.
    n = 3000
    with Daemon() as d:
        c = d.client()
        rid, acc = c.submit({"kind": "echo", "value": "h" * 10240})
        c.done(rid)
        s = connect(d, rcvbuf=8192)
        reqs = b"".join(b'{"op":"wait","id":%d,"task":%d}\n{"op":"ping","id":"p%d"}\n'
                        % (i, acc["task"], i) for i in range(n))
        sender = threading.Thread(target=lambda: (s.sendall(reqs), s.shutdown(socket.SHUT_WR)),
                                  daemon=True)
        sender.start()
        f = s.makefile("rb")
        ids = []
        while True:
            line = f.readline()
            if not line:
                break
            ids.append(json.loads(line)["id"])
        sender.join(TIMEOUT)
        want = [x for i in range(n) for x in (i, "p%d" % i)]
        check(ids == want, "%d answers of %d, in order: %s", len(ids), len(want), ids == want)


def test_an_answer_that_cannot_be_encoded_becomes_an_internal_error_not_silence():
    # An op name of 2-byte characters is quoted in the unknown_op message cut
    # at 64 bytes; a cut in the middle of a character makes an answer that
    # cannot be built as JSON. The request must still be answered, before
    # the next one, and the daemon must say so in its log.
    with Daemon() as d:
        c = d.client()
        op = "x" + "\u00e9" * 40      # byte 64 is inside a character
        c.send_raw((json.dumps({"op": op, "id": 7}) + "\n" +
                    json.dumps({"op": "ping", "id": 8}) + "\n").encode())
        first = c.recv()
        check(first["event"] == "error", "the bad request got no answer: %r", first)
        second = c.recv()
        check(second == {"event": "pong", "id": 8}, "%r", second)
        code = first["error"]["code"]
        if code == "internal":
            # the event was never built, so its id is not known
            check(first["id"] in (7, None), "%r", first)
            check("answered with an internal error" in d.read_log(), "not logged")
        else:
            check(code == "unknown_op" and first["id"] == 7, "%r", first)
        print("answered with %r" % first)


run_tests(globals())
