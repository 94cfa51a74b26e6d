#!/usr/bin/env python3
"""exec tasks against the real daemon: exit codes, output, stdin, env, cwd, fds,
spawn failures, timeouts that kill a whole process tree, truncation, binary
output, streaming, cancel, slow clients, and no children left behind."""
import base64
import os
import socket
import time

from tpdtest import SLOW, TIMEOUT, Daemon, check, run_tests

BASE_ENV = ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]


def exec_task(argv, **fields):
    return dict(kind="exec", argv=argv, **fields)


def sh(script, **fields):
    return exec_task(["sh", "-c", script], **fields)


def run(c, task, **fields):
    """Submits task and returns its done."""
    rid, ev = c.submit(task, **fields)
    check(ev["event"] == "accepted", "not accepted: %r", ev)
    return c.done(rid)


def stream(c, task, **fields):
    """Submits task with stream: true; returns (events after accepted, done)."""
    rid, ev = c.submit(task, stream=True, **fields)
    check(ev["event"] == "accepted", "not accepted: %r", ev)
    events = []
    while True:
        ev = c.recv_id(rid)
        if ev["event"] == "done":
            return events, ev
        events.append(ev)


def daemon_with(conf, **kw):
    """A Daemon started with conf (INI text) as its configuration file."""
    d = Daemon(start=False, **kw)
    path = os.path.join(d.dir, "tpd.conf")
    with open(path, "w") as f:
        f.write(conf)
    d.args += ["-c", path]
    d.start()
    return d


def proc_stat(pid):
    """(state, ppid) of pid, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def exited(pid, tpd_pid):
    """True when pid has exited: gone, or a zombie of someone else than tpd.

    An orphan is reparented to PID 1 (or a subreaper), whose reaping is not
    tpd's business: in some containers PID 1 never reaps. A zombie child of
    tpd itself would be tpd's bug and does not count as exited here.
    """
    st = proc_stat(pid)
    return st is None or (st[0] == "Z" and st[1] != tpd_pid)


def tpd_children(pid):
    kids = []
    task_dir = "/proc/%d/task" % pid
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "children")) as f:
                kids += [int(k) for k in f.read().split()]
        except OSError:
            pass
    return kids


def test_exit_codes():
    with Daemon() as d:
        c = d.client()
        done = run(c, exec_task(["true"]))
        check(done["state"] == "succeeded" and "error" not in done, "%r", done)
        r = done["result"]
        check(r["exit_code"] == 0 and r["signal"] is None and r["truncated"] is False, "%r", r)
        check(isinstance(done["queued_ms"], (int, float)) and isinstance(done["run_ms"], (int, float)),
              "%r", done)

        done = run(c, sh("exit 7"))
        check(done["state"] == "failed", "%r", done)
        check(done["error"] == {"code": "exit_status", "message": "exited with status 7"}, "%r", done)
        check(done["result"]["exit_code"] == 7 and done["result"]["signal"] is None, "%r", done)

        done = run(c, sh("echo bye; kill -TERM $$"))
        check(done["state"] == "failed" and done["error"]["code"] == "signal", "%r", done)
        check("SIGTERM" in done["error"]["message"], "message does not name the signal: %r", done)
        r = done["result"]
        check(r["exit_code"] is None and r["signal"] == 15 and r["signal_name"] == "SIGTERM", "%r", r)
        check(r["stdout"] == "bye\n", "%r", r)
    print("checked: 0 succeeds; 7 is exit_status with result; SIGTERM is signal with result")


def test_stdout_stderr_and_stdin():
    with Daemon() as d:
        c = d.client()
        r = run(c, sh("echo out; echo err >&2; printf 'no newline'"))["result"]
        check(r["stdout"] == "out\nno newline" and r["stderr"] == "err\n", "%r", r)

        r = run(c, exec_task(["cat"], stdin="line one\nline two\n\u00e9t\u00e9\n"))["result"]
        check(r["stdout"] == "line one\nline two\n\u00e9t\u00e9\n", "%r", r)

        raw = bytes(range(256))
        r = run(c, exec_task(["cat"], stdin_base64=base64.b64encode(raw).decode()))["result"]
        check(base64.b64decode(r["stdout_base64"]) == raw, "binary stdin changed: %r", r)

        # no stdin given: /dev/null (cat must not wait)
        r = run(c, sh("cat; readlink /proc/self/fd/0"))["result"]
        check(r["stdout"] == "/dev/null\n", "%r", r)

        # 800 KB in and out at once (under max_request_bytes): neither pipe may block the other
        big = "0123456789abcdef" * (800 * 1024 // 16)
        done = run(c, exec_task(["cat"], stdin=big))
        check(done["state"] == "succeeded" and done["result"]["stdout"] == big,
              "800 KB through cat: %s", done.get("error"))

        # a child that never reads its stdin: the write fails with EPIPE, tpd lives on
        done = run(c, exec_task(["true"], stdin=big))
        check(done["state"] == "succeeded", "true with 800 KB of stdin: %r", done)
        check(c.request(dict(op="ping"))["event"] == "pong", "tpd did not survive the EPIPE")
    print("checked: both streams, text and binary stdin, /dev/null stdin, 800 KB round trip, "
          "stdin refused by the child")


def test_env_added_and_daemon_env_not_leaked():
    env = dict(os.environ, TPD_LEAK_MARKER="must-not-leak")
    with Daemon(env=env) as d:
        c = d.client()
        r = run(c, exec_task(["env"], env={"FOO": "bar baz", "EMPTY": ""}))["result"]
        lines = r["stdout"].splitlines()
        check(lines == BASE_ENV + ["FOO=bar baz", "EMPTY="], "child env: %r", lines)
        check("must-not-leak" not in r["stdout"], "the daemon's environment leaked")

        # the request can replace and remove base variables
        r = run(c, exec_task(["/usr/bin/env"], env={"PATH": "/bin", "LANG": None}))["result"]
        check(r["stdout"].splitlines() == ["PATH=/bin"], "%r", r)

        # argv[0] is looked up in the child's PATH, not the daemon's
        bindir = os.path.join(d.dir, "bin")
        os.mkdir(bindir)
        prog = os.path.join(bindir, "tpd-test-only-here")
        with open(prog, "w") as f:
            f.write("#!/bin/sh\necho found in $PATH\n")
        os.chmod(prog, 0o755)
        done = run(c, exec_task(["tpd-test-only-here"], env={"PATH": bindir}))
        check(done["state"] == "succeeded" and done["result"]["stdout"] == "found in %s\n" % bindir,
              "%r", done)
    print("checked: base env plus request env, replace/remove, daemon marker absent, child PATH used")


def test_env_from_config():
    with daemon_with("[exec]\nenv = TZ=UTC\nenv = LANG=C\n") as d:
        r = run(d.client(), exec_task(["env"]))["result"]
        check(r["stdout"].splitlines() == ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C", "TZ=UTC"],
              "%r", r)
    print("checked: [exec] env in the configuration sets the base environment")


def test_cwd():
    with Daemon() as d:
        c = d.client()
        r = run(c, exec_task(["pwd"], cwd=d.dir))["result"]
        check(r["stdout"] == d.dir + "\n", "%r", r)
        done = run(c, exec_task(["pwd"], cwd="/nonexistent/dir"))
        check(done["state"] == "failed" and done["error"] == {
            "code": "spawn_failed",
            "message": "cannot chdir to /nonexistent/dir: No such file or directory"}, "%r", done)
        check("result" not in done, "a result for a process that never ran: %r", done)
    print("checked: cwd applied; a missing directory is spawn_failed naming it")


def test_only_fds_0_1_2_in_child():
    with Daemon(tcp=True) as d:
        c = d.client()
        c2 = d.client()   # the daemon holds sockets, listeners, eventfds, its log
        c2.request({"op": "ping"})
        # the shell's own fds, listed by ls (which adds its own only to itself)
        r = run(c, sh("ls /proc/$$/fd"))["result"]
        check(r["stdout"].split() == ["0", "1", "2"], "fds open in the child: %r", r["stdout"])
    print("checked: only fds 0, 1, 2 are open in the child of a daemon with many fds")


def test_missing_program():
    with Daemon() as d:
        c = d.client()
        done = run(c, exec_task(["tpd-no-such-program", "arg"]))
        check(done["state"] == "failed" and done["error"] == {
            "code": "spawn_failed", "message": "no such program: tpd-no-such-program"}, "%r", done)
        done = run(c, exec_task(["/no/such/path/prog"]))
        check(done["error"]["message"] == "no such program: /no/such/path/prog", "%r", done)
        # streaming: no "started" for a program that never started
        events, done = stream(c, exec_task(["tpd-no-such-program"]))
        check(events == [] and done["error"]["code"] == "spawn_failed", "%r %r", events, done)
    print("checked: missing programs (PATH lookup and path) are spawn_failed naming them")


def test_bad_requests_name_the_field():
    with Daemon() as d:
        c = d.client()
        cases = [
            (exec_task(["true"], bogus=1), "task.bogus"),
            (dict(kind="exec"), "task.argv"),
            (exec_task([]), "task.argv"),
            (exec_task(["true", 5]), "task.argv[1]"),
            (exec_task(["true"], env={"A": 1}), "task.env.A"),
            (exec_task(["true"], output_limit=0), "task.output_limit"),
            (exec_task(["true"], output_limit=17 * 1024 * 1024), "task.output_limit"),
        ]
        for task, field in cases:
            rid, ev = c.submit(task)
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request", "%r -> %r", task, ev)
            check(field in ev["error"]["message"], "%r does not name %s", ev, field)
        check(c.request({"op": "ping"})["event"] == "pong", "connection still usable")
    print("checked: %d bad exec tasks get bad_request naming the field" % len(cases))


def test_timeout_kills_process_tree():
    with daemon_with("[exec]\nkill_grace = 300ms\n") as d:
        c = d.client()
        # The leader waits for a child that ignores SIGTERM and prints its pid.
        start = time.monotonic()
        done = run(c, sh("sh -c 'trap \"\" TERM; echo $$; exec sleep 1000' & wait",
                         timeout_ms=1000))
        took = time.monotonic() - start
        check(done["state"] == "timed_out" and done["error"]["code"] == "timed_out", "%r", done)
        check(done["result"]["signal"] == 15, "the leader dies of SIGTERM: %r", done)
        grandchild = int(done["result"]["stdout"])
        check(exited(grandchild, d.proc.pid), "grandchild %d survived: %r", grandchild,
              proc_stat(grandchild))
        check(took < 1 + 10 * SLOW, "took %.1fs", took)

        # A leader that ignores SIGTERM itself: SIGKILL after the grace period.
        start = time.monotonic()
        done = run(c, sh("trap '' TERM; echo $$; sleep 1000", timeout_ms=200))
        took = time.monotonic() - start
        check(done["state"] == "timed_out" and done["result"]["signal"] == 9, "%r", done)
        check(took >= 0.5, "SIGKILL came before the grace period: %.2fs", took)
        check(exited(int(done["result"]["stdout"]), d.proc.pid), "leader survived")
        check(tpd_children(d.proc.pid) == [], "tpd has children: %r", tpd_children(d.proc.pid))
    print("checked: timeout -> SIGTERM to the group, SIGKILL after grace; TERM-ignoring grandchild gone")


def test_leftover_background_processes_die_with_the_task():
    with Daemon() as d:
        c = d.client()
        start = time.monotonic()
        done = run(c, sh("sleep 1000 & echo $!"))
        check(done["state"] == "succeeded", "%r", done)
        check(time.monotonic() - start < 5 * SLOW, "done waited for the background sleep")
        check(exited(int(done["result"]["stdout"]), d.proc.pid), "background sleep survived")
    print("checked: a background process holding stdout neither delays done nor survives it")


def test_truncation_at_limit_with_large_writer():
    with Daemon() as d:
        c = d.client()
        done = run(c, exec_task(["head", "-c", "5000000", "/dev/zero"], output_limit=1000))
        check(done["state"] == "succeeded", "the writer must be drained, not killed: %r", done)
        r = done["result"]
        check(r["truncated"] is True and "stdout" not in r, "%r", r)
        check(base64.b64decode(r["stdout_base64"]) == b"\0" * 1000, "kept bytes")

        # the default limit, 1 MiB, on text
        r = run(c, sh("head -c 5000000 /dev/zero | tr '\\0' a"))["result"]
        check(r["truncated"] is True and r["stdout"] == "a" * 1048576,
              "default limit: %d bytes kept", len(r.get("stdout", "")))
        check(r["stderr"] == "", "%r", r["stderr"])
    print("checked: 5 MB writer cut at 1000 bytes and at the default 1 MiB, drained, truncated: true")


def test_binary_output_as_base64():
    with Daemon() as d:
        c = d.client()
        r = run(c, sh("printf '\\377\\376binary'; printf 'text\\n' >&2"))["result"]
        check(base64.b64decode(r["stdout_base64"]) == b"\xff\xfebinary" and "stdout" not in r, "%r", r)
        check(r["stderr"] == "text\n" and "stderr_base64" not in r, "%r", r)
        events, done = stream(c, sh("printf 'ok\\n'; printf '\\200' >&2"))
        out = [e for e in events if e["event"] == "output"]
        check([e["data"] for e in out if e["stream"] == "stdout"] == ["ok\n"], "%r", events)
        check([e["data_base64"] for e in out if e["stream"] == "stderr"] == ["gA=="], "%r", events)
    print("checked: invalid UTF-8 goes as stdout_base64 / data_base64, text stays text")


def test_spool_file_only_for_a_task_with_output():
    """The spool file is made at the first output: none for a task that wrote nothing
    (its wait from the start is its done), one for a task that wrote (replayed whole,
    past output_limit, also when the follower comes while the task runs)."""
    with Daemon() as d:
        c = d.client()
        spool = os.path.join(d.dir, "state", "spool")
        rid, ev = c.submit({"kind": "exec", "argv": ["true"]})
        quiet = ev["task"]
        check(c.done(rid)["state"] == "succeeded", "true failed")
        check(str(quiet) not in os.listdir(spool), "a task without output made a spool file")
        f = d.client()
        rid = f.send({"op": "wait", "task": quiet, "stream": True, "from": "start"})
        ev = f.recv_id(rid)
        check(ev["event"] == "done" and ev["state"] == "succeeded" and
              ev["result"]["stdout"] == "", "wait from the start of a quiet task: %r", ev)
        # waits, then writes 3000 bytes with output_limit 100: a follower from the start
        # that comes first gets every byte
        rid, ev = c.submit({"kind": "exec", "output_limit": 100, "argv": [
            "sh", "-c", "sleep 0.3; head -c 3000 /dev/zero | tr '\\0' y; sleep 0.3"]})
        loud = ev["task"]
        check(str(loud) not in os.listdir(spool), "a spool file before any output")
        frid = f.send({"op": "wait", "task": loud, "stream": True, "from": "start"})
        data = ""
        while True:
            ev = f.recv_id(frid)
            if ev["event"] == "done":
                break
            if ev["event"] == "output":
                data += ev["data"]
        check(data == "y" * 3000, "the follower got %d bytes" % len(data))
        check(c.done(rid)["result"]["truncated"] is True, "not truncated")
        check(str(loud) in os.listdir(spool), "a task with output has no spool file")


def test_streaming_order():
    with Daemon() as d:
        c = d.client()
        script = ("i=0; while [ $i -lt 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done;"
                  "head -c 30000 /dev/zero | tr '\\0' x | sed 's/x/\u20ac/g' | dd bs=999 2>/dev/null")
        events, done = stream(c, sh(script))
        check(done["state"] == "succeeded", "%r", done)
        check(events[0]["event"] == "started" and events[0]["task"] == done["task"], "%r", events[0])
        check(isinstance(events[0].get("pid"), int), "started carries the pid: %r", events[0])
        out = "".join(e["data"] for e in events[1:] if e["stream"] == "stdout")
        err = "".join(e["data"] for e in events[1:] if e["stream"] == "stderr")
        check(all(e["event"] == "output" and e["task"] == done["task"] for e in events[1:]),
              "only output events between started and done")
        want_out = "".join("out%d\n" % i for i in range(200)) + "\u20ac" * 30000
        check(out == want_out, "stdout events out of order or changed")
        check(err == "".join("err%d\n" % i for i in range(200)), "stderr events out of order")
        check(done["result"]["stdout"] == out and done["result"]["stderr"] == err,
              "the result is the full capture, the same as the events")
    print("checked: started, then %d output events in order per stream, equal to the result"
          % (len(events) - 1))


def test_cancel_running_command():
    with daemon_with("[exec]\nkill_grace = 5s\n") as d:
        c = d.client()
        rid, acc = c.submit(sh("echo running; exec sleep 1000"), stream=True)
        started = c.recv_id(rid, "started")
        c.recv_id(rid, "output")   # the shell is running its script
        start = time.monotonic()
        ok = c.request({"op": "cancel", "task": acc["task"]})
        check(ok["event"] == "ok", "%r", ok)
        done = c.done(rid)
        check(done["state"] == "cancelled" and done["error"]["code"] == "cancelled", "%r", done)
        check(done["result"]["signal"] == 15 and done["result"]["stdout"] == "running\n", "%r", done)
        check(time.monotonic() - start < 4, "cancel waited for the grace period")
        check(exited(started["pid"], d.proc.pid), "the cancelled process survived")
        again = c.request({"op": "cancel", "task": acc["task"]})
        check(again["event"] == "ok", "cancel of a finished task: %r", again)
        check(c.request({"op": "wait", "task": acc["task"]}, "done")["state"] == "cancelled",
              "a finished task is left as it was")
    print("checked: cancel SIGTERMs a running command: cancelled with its result; idempotent")


def test_shutdown_now_kills_running_commands():
    with Daemon() as d:
        c = d.client()
        rid, acc = c.submit(exec_task(["sleep", "1000"]), stream=True)
        pid = c.recv_id(rid, "started")["pid"]
        c.request({"op": "shutdown", "mode": "now"})
        done = c.done(rid)
        check(done["state"] == "cancelled", "%r", done)
        check(d.wait_exit() == 0, "tpd exit status")
        check(exited(pid, d.proc.pid), "the command outlived the daemon")
    print("checked: shutdown now cancels running commands and kills them")


def test_a_client_that_does_not_read_paces_its_stream_and_then_gets_every_byte():
    # 2.5 MB of output events for a client that reads nothing at first, past
    # its 1 MiB max_output_buffer: the events wait for it (the task's output
    # is paced: the command blocks in write), it is not disconnected, and
    # once it reads it gets every byte, in order, and then its done.
    size = 2500000
    conf = "[daemon]\nmax_output_buffer = 1M\n[exec]\nstream_budget = 64k\n"
    with daemon_with(conf) as d:
        slow = d.client()
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        task = sh("head -c %d /dev/zero | tr '\\0' y" % size)
        task["output_limit"] = 3000000
        rid, acc = slow.submit(task, stream=True)
        w = d.client()
        # Unpaced, the command would end in a few milliseconds; paced, it
        # waits for the reader (the check only fails if it was not paced).
        for _ in range(20):
            # (queued until a worker has taken it: the check is that it does not finish)
            state = w.request({"op": "status", "task": acc["task"]})["state"]
            check(state in ("queued", "running"),
                  "the task %s while its client read nothing: output not paced", state)
            time.sleep(0.02)
        got, events = [], 0
        while True:
            ev = slow.recv_id(rid)
            if ev["event"] == "done":
                break
            events += 1
            if ev["event"] == "output":
                got.append(ev["data"])
        check("".join(got) == "y" * size, "the stream came whole and in order (%d bytes)",
              sum(map(len, got)))
        check(ev["state"] == "succeeded" and ev["result"]["stdout"] == "y" * size, "%r",
              ev.get("error"))
        check("passed max_output_buffer" not in d.read_log(), "the client was cut off")
    print("checked: a client reading nothing pauses its task's stream; it then gets all "
          "%d bytes in %d events, then the done" % (size, events))


def test_no_zombies_or_children_after_many_tasks():
    with daemon_with("[exec]\nkill_grace = 100ms\n", workers=4, queue=256) as d:
        c = d.client()
        tasks = []
        for i in range(40):
            tasks.append(exec_task(["true"]))
            tasks.append(sh("exit 3"))
            tasks.append(sh("sleep 1000 & echo $!"))
            tasks.append(sh("kill -9 $$"))
            tasks.append(sh("trap '' TERM; sleep 1000", timeout_ms=50))
        rids = [c.send(dict(op="submit", task=t)) for t in tasks]
        states = {}
        for rid in rids:
            done = c.done(rid, timeout=TIMEOUT * 4)
            states[done["state"]] = states.get(done["state"], 0) + 1
        check(states == {"succeeded": 80, "failed": 80, "timed_out": 40}, "%r", states)
        check(tpd_children(d.proc.pid) == [], "children of tpd left: %r", tpd_children(d.proc.pid))
        zombies = [p for p in os.listdir("/proc") if p.isdigit() and
                   (proc_stat(int(p)) or ("", 0))[1] == d.proc.pid]
        check(zombies == [], "processes with tpd as parent: %r", zombies)
    print("checked: after 200 mixed tasks (exits, signals, leftovers, timeouts) tpd has no children")


def test_1000_true_tasks_with_2_workers():
    with Daemon(workers=2, queue=1000) as d:
        c = d.client()
        rids = [c.send(dict(op="submit", task=exec_task(["true"]))) for _ in range(1000)]
        bad = []
        for rid in rids:
            done = c.done(rid, timeout=TIMEOUT * 4)
            if done["state"] != "succeeded":
                bad.append(done)
        check(bad == [], "%d failed, e.g. %r", len(bad), bad[:1])
        st = c.stats()
        check(st["succeeded"] >= 1000, "%r", st)
        check(tpd_children(d.proc.pid) == [], "children of tpd left")
    print("checked: 1000 pipelined true tasks on 2 workers all succeed")


if __name__ == "__main__":
    run_tests(globals())
