#!/usr/bin/env python3
"""tpctl's answer timeout (--timeout-answer), against a real tpd.

A daemon stopped with SIGSTOP still completes connects (the kernel queues
them in the listen backlog) but answers nothing: every command that waits
for an answer the daemon owes at once must give up after --timeout-answer
with exit 69 and one line saying what it waited for, how long, and what to
try. The subprocess timeout is the guard against a hang, not a measure of
speed. The daemon is continued afterwards so that it is reaped cleanly.

Waiting for a task's end is not bounded: wait, run and submit outlive the
answer timeout while a task runs, and the pong that wait uses to learn the
daemon is alive is never printed.
"""
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import tempfile
import termios
import time

from tpdtest import SLOW, TPCTL, TIMEOUT, Client, Daemon, check, eventually, run_tests

GUARD = TIMEOUT     # far above the 1s answer timeout: a hang, not slowness


@contextlib.contextmanager
def stopped(d):
    """d, stopped (SIGSTOP) for the block, continued after it."""
    d.signal(signal.SIGSTOP)
    try:
        yield d
    finally:
        d.signal(signal.SIGCONT)


def gives_up(address, *args, what, option="--timeout-answer", within="1s", summary=False):
    """Runs tpctl ADDRESS... ARGS; checks it gave up with exit 69 and one clear line
    (then, with summary, batch's closing line)."""
    cmd = [TPCTL] + list(address) + list(args)
    try:
        p = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, timeout=GUARD)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s: still waiting after %ss (no answer timeout)"
                             % (" ".join(args), GUARD))
    err = p.stderr.decode()
    check(p.returncode == 69, "%s: exit %d, expected 69: %r", " ".join(args), p.returncode, err)
    lines = err.splitlines()
    check(len(lines) == 1 + summary, "%s: one line on stderr: %r", " ".join(args), err)
    if summary:
        check(lines[1].startswith("batch: ") and "without an answer" in lines[1],
              "batch's summary: %r", lines[1])
    for part in ("no answer", "to %s" % what, "within %s" % within, "stopped",
                 "try a longer %s" % option):
        check(part in lines[0], "%s: %r names %r", " ".join(args), lines[0], part)
    check(p.stdout == b"", "%s: nothing on stdout: %r", " ".join(args), p.stdout)
    return lines[0]


def on_stopped_daemon(*args, what):
    with Daemon() as d, stopped(d):
        line = gives_up(["-s", d.sock, "--timeout-answer", "1s"], *args, what=what)
        check(d.sock in line, "names the daemon: %r", line)


def test_stats_gives_up():
    on_stopped_daemon("stats", what="stats")


def test_status_gives_up():
    on_stopped_daemon("status", "1", what="status")


def test_cancel_gives_up():
    on_stopped_daemon("cancel", "1", what="cancel")


def test_resize_gives_up():
    on_stopped_daemon("resize", "2", what="resize")


def test_shutdown_gives_up():
    on_stopped_daemon("shutdown", what="shutdown")
    on_stopped_daemon("shutdown", "--now", "--wait", what="shutdown")


def test_run_gives_up_before_accepted():
    on_stopped_daemon("run", "--", "true", what="submit")


def test_submit_gives_up_before_accepted():
    on_stopped_daemon("submit", "--", "true", what="submit")
    on_stopped_daemon("submit", "--detach", "--", "true", what="submit")


def test_wait_gives_up_when_the_daemon_does_not_answer():
    # an unknown id: the daemon would answer no_such_task at once
    on_stopped_daemon("wait", "1", what="wait")


def test_batch_gives_up():
    with Daemon() as d:
        path = os.path.join(d.dir, "jobs")
        with open(path, "w") as f:
            f.write("true\ntrue\n")
        with stopped(d):
            gives_up(["-s", d.sock, "--timeout-answer", "1s"], "batch", "--no-progress", path,
                     what="submit", summary=True)


def test_ping_gives_up():
    with Daemon() as d, stopped(d):
        # ping's own --timeout, and the global option when that is not given
        gives_up(["-s", d.sock], "ping", "--timeout", "1s", what="ping", option="--timeout")
        gives_up(["-s", d.sock, "--timeout-answer", "1s"], "ping", what="ping",
                 option="--timeout")


def test_hello_gives_up():
    tok_dir = tempfile.mkdtemp(prefix="tpctl-tok-")
    tok = os.path.join(tok_dir, "token")
    with open(tok, "w") as f:
        f.write("s3cret\n")
    try:
        with Daemon("--token-file", tok, tcp=True, tcp_auth="token") as d, stopped(d):
            gives_up(["-H", "127.0.0.1:%d" % d.port, "--token-file", tok,
                      "--timeout-answer", "1s"], "stats", what="hello")
    finally:
        os.unlink(tok)
        os.rmdir(tok_dir)


def test_wait_gets_a_done_larger_than_the_output_buffer():
    """The ping that bounds wait goes first: after a large done, the daemon
    disconnects a client with that much unsent when the next answer is due."""
    with Daemon(conf="[daemon]\nmax_output_buffer = 1M\n") as d:
        size = 3 * 1024 * 1024
        c = d.client()
        rid = c.send({"op": "submit", "task": {
            "kind": "exec", "argv": ["sh", "-c", "yes 0123456789abcdef | head -c %d" % size],
            "output_limit": size}})
        done = c.done(rid)
        check(done["state"] == "succeeded", "%r", {k: v for k, v in done.items()
                                                   if k != "result"})
        p = subprocess.run([TPCTL, "-s", d.sock, "wait", "--output", str(done["task"])],
                           capture_output=True, timeout=GUARD)
        check(p.returncode == 0, "exit %d: %r", p.returncode, p.stderr)
        want = (b"0123456789abcdef\n" * (size // 17 + 1))[:size]
        check(p.stdout == want, "the whole output: %d bytes of %d", len(p.stdout), size)


def test_a_busy_tpctl_is_not_a_silent_daemon():
    """tpctl blocked on its own stdout past the answer timeout, the answer
    waiting in its socket: it reads the answer, it does not give up. (The
    timeout is 1 s, not less: a loaded machine may keep the fake daemon, a
    Python process, from writing its first bytes for a few hundred ms.)"""
    from test_tpctl import FakeTpd

    def handler(req):
        ev = {"event": "status", "id": req["id"], "task": req["task"], "state": "running",
              "pool": "default"}
        if req["task"] == 1:
            ev["note"] = "x" * (1 << 20)    # far more than a pipe holds
        return [ev]
    with FakeTpd(handler) as f:
        r, w = os.pipe()
        p = subprocess.Popen([TPCTL, "-s", f.sock, "--timeout-answer", "1s", "--json",
                              "status", "1", "2"], stdout=w, stderr=subprocess.PIPE)
        os.close(w)
        try:
            size = fcntl.fcntl(r, 1032)     # F_GETPIPE_SZ
            deadline = time.monotonic() + GUARD
            while int.from_bytes(fcntl.ioctl(r, termios.FIONREAD, b"\0" * 4), "little") < size:
                check(p.poll() is None and time.monotonic() < deadline,
                      "tpctl never filled its stdout: %r", p.poll())
                time.sleep(0.01)    # polling the pipe's fill, not synchronising on time
            # the condition under test: tpctl stays busy longer than its answer timeout
            time.sleep(2.5)
            out = b""
            while True:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                out += chunk
            err = p.stderr.read()
            p.wait(timeout=GUARD)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()
            os.close(r)
        check(p.returncode == 0, "exit %d: %r", p.returncode, err)
        evs = [json.loads(line) for line in out.splitlines()]
        check([e["task"] for e in evs] == [1, 2], "both answers: %r", [e["task"] for e in evs])


def test_bad_timeout_answer_is_a_usage_error():
    p = subprocess.run([TPCTL, "--timeout-answer", "soon", "stats"], capture_output=True,
                       timeout=GUARD)
    check(p.returncode == 64, "exit %d: %r", p.returncode, p.stderr)
    check(b"--timeout-answer" in p.stderr and b"'soon'" in p.stderr, "%r", p.stderr)


def test_completion_knows_the_option():
    from test_tpctl import complete
    check(complete(["--timeout-a"]) == ["--timeout-answer"], "%r", complete(["--timeout-a"]))
    # its value is skipped when looking for the command
    check(complete(["--timeout-answer", "1s", "shutdown", "--n"]) == ["--now"],
          "%r", complete(["--timeout-answer", "1s", "shutdown", "--n"]))


def test_a_task_may_outlive_the_answer_timeout():
    """wait, run and submit wait for a task's end for as long as it takes."""
    answer = "%dms" % (500 * SLOW)
    with Daemon() as d:
        c = d.client()
        rid = c.send({"op": "submit", "detach": True,
                      "task": {"kind": "sleep", "ms": 600000}})
        ev = c.recv_id(rid)
        check(ev["event"] == "accepted", "%r", ev)
        task = ev["task"]
        base = [TPCTL, "-s", d.sock, "--timeout-answer", answer]
        procs = {
            "wait": subprocess.Popen(base + ["--json", "wait", str(task)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE),
            "run": subprocess.Popen(base + ["run", "--task", '{"kind":"sleep","ms":600000}'],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE),
            "submit": subprocess.Popen(base + ["submit", "--task",
                                               '{"kind":"sleep","ms":600000}'],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE),
        }
        try:
            # every task is running and each tpctl is waiting on it
            eventually(lambda: c.stats()["busy"] == 2 and c.stats()["queued"] == 1,
                       "both tasks running, one queued")
            # three answer timeouts pass: none of them may give up
            for name, p in procs.items():
                try:
                    p.wait(timeout=1.5 * SLOW if name == "wait" else 0.01)
                    raise AssertionError("%s gave up while its task ran: exit %d, %r"
                                         % (name, p.returncode, p.stderr.read()))
                except subprocess.TimeoutExpired:
                    pass
            c.request({"op": "cancel", "task": task}, "ok")
            out, err = procs["wait"].communicate(timeout=GUARD)
            check(procs["wait"].returncode == 1, "wait: exit %d, %r",
                  procs["wait"].returncode, err)
            evs = [json.loads(line) for line in out.decode().splitlines()]
            check([e["event"] for e in evs] == ["done"], "only the done, no pong: %r", evs)
            check(evs[0]["state"] == "cancelled", "%r", evs)
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                p.wait()
                p.stdout.close()
                p.stderr.close()


if __name__ == "__main__":
    run_tests(globals())
