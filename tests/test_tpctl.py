#!/usr/bin/env python3
"""tpctl against the real daemon: every command and every exit code.

Tasks of the built-in kinds go through --task; the exec tests are skipped,
saying why, only while the daemon answers that exec is not built yet. A
small fake daemon (FakeTpd) plays back crafted events where the real one
cannot be made to send them on demand (a daemon that speaks garbage, exact
figures for the human formatting).
"""
import json
import os
import pty
import pwd
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from tpdtest import SLOW, TPCTL, TIMEOUT, Client, Daemon, Skip, check, eventually, run_tests

LONG_MS = 60000     # a task that outlives any test unless cancelled


def tpctl(d, *args, input=None, env=None, user=None, timeout=None, sock=None):
    """Runs tpctl against d (a Daemon, a FakeTpd or None); returns the CompletedProcess."""
    cmd = [TPCTL]
    if sock is not None:
        cmd += ["-s", sock]
    elif d is not None:
        cmd += ["-s", d.sock]
    cmd += list(args)
    try:
        return subprocess.run(cmd, input=input, capture_output=True, env=env,
                              timeout=timeout or TIMEOUT, preexec_fn=become(user))
    except PermissionError as e:
        if user is None:
            raise
        raise Skip("%s cannot run %s here: %s" % (user, TPCTL, e))


def become(user):
    if user is None:
        return None
    pw = pwd.getpwnam(user)

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    return drop


def expect(p, code, what):
    check(p.returncode == code, "%s: exit %d, expected %d\nstdout: %r\nstderr: %r",
          what, p.returncode, code, p.stdout[-2000:], p.stderr[-2000:])
    return p


def json_lines(out):
    """Every line of --json output parsed on its own."""
    events = []
    for line in out.decode().splitlines():
        ev = json.loads(line)
        check(isinstance(ev, dict) and "event" in ev, "not an event: %r", line)
        events.append(ev)
    return events


def need_exec(d):
    """Skips the test (with the daemon's reason) when exec tasks are not built yet."""
    c = d.client()
    _, ev = c.submit({"kind": "exec", "argv": ["true"]})
    if ev["event"] == "error" and "not built yet" in ev["error"]["message"]:
        raise Skip("the daemon answers exec with: %s" % ev["error"]["message"])
    check(ev["event"] == "accepted", "exec true: %r", ev)


def sleep_task(ms=LONG_MS):
    return json.dumps({"kind": "sleep", "ms": ms})


def task_state(d, task):
    c = Client(d.sock)
    try:
        return c.request({"op": "status", "task": task}, "status")["state"]
    finally:
        c.close()


# ---------------------------------------------------------------- usage (64)

def test_help_and_version():
    p = expect(tpctl(None, "--help"), 0, "--help")
    for name in ("run", "submit", "wait", "status", "cancel", "stats", "resize", "shutdown",
                 "ping", "batch"):
        check(("  %s " % name) in p.stdout.decode(), "--help lists %s", name)
        h = expect(tpctl(None, name, "--help"), 0, name + " --help")
        check(h.stdout.decode().startswith("usage: tpctl %s" % name), "%s --help: %r",
              name, h.stdout)
    expect(tpctl(None, "help", "batch"), 0, "help batch")
    v = expect(tpctl(None, "--version"), 0, "--version")
    check(v.stdout.decode().startswith("tpctl "), "version: %r", v.stdout)


def test_usage_errors_exit_64():
    missing = os.path.join(tempfile.gettempdir(), "tpctl-no-such-dir", "none.sock")
    cases = [
        ((), "usage: tpctl"),
        (("frobnicate",), "unknown command 'frobnicate'"),
        (("--frob", "ping"), "unknown option --frob"),
        (("ping", "--frob"), "unknown option --frob"),
        (("run",), "a command to run is needed"),
        (("run", "--timeout", "5", "--", "true"), "--timeout: 5: add a unit, as 5s or 5ms"),
        (("run", "--timeout", "0.5ms", "--", "true"), "not a whole number of milliseconds"),
        (("--connect-timeout", "5", "ping"), "--connect-timeout: 5: add a unit"),
        (("run", "--timeout"), "needs a value"),
        (("run", "--task", "{nope", ), "--task: not JSON"),
        (("run", "--task", '{"ms":1}'), "a task object with a \"kind\""),
        (("run", "--task", sleep_task(1), "--", "true"), "not both"),
        (("run", "--env", "=x", "--", "true"), "NAME=VALUE"),
        (("submit", "--output-limit", "lots", "--", "true"), "not a size"),
        (("submit", "--output-limit", "1.1k", "--", "true"), "not a whole number of bytes"),
        (("wait",), "a task id is needed"),
        (("wait", "abc"), "'abc' is not a task id"),
        (("status", "7x"), "'7x' is not a task id"),
        (("cancel",), "a task id is needed"),
        (("resize",), "the new size is needed"),
        (("resize", "many"), "not a number of workers"),
        (("stats", "extra"), "no arguments expected"),
        (("ping", "--timeout", "soon"), "not a duration"),
        (("batch",), "one FILE"),
        (("batch", "-j", "0", "-"), "-j: '0'"),
        (("--connect-timeout", "x", "ping"), "--connect-timeout"),
    ]
    for args, message in cases:
        p = expect(tpctl(None, *args, sock=missing), 64, "tpctl %s" % " ".join(args))
        check(message in p.stderr.decode(), "tpctl %s: stderr %r lacks %r",
              " ".join(args), p.stderr, message)
    p = expect(subprocess.run([TPCTL, "-s", missing, "-H", "127.0.0.1:1", "ping"],
                              capture_output=True, timeout=TIMEOUT), 64, "-s with -H")
    check(b"give one" in p.stderr, "%r", p.stderr)
    env = dict(os.environ, TPD_SOCKET=missing, TPD_HOST="127.0.0.1:1")
    p = expect(subprocess.run([TPCTL, "ping"], capture_output=True, env=env,
                              timeout=TIMEOUT), 64, "TPD_SOCKET with TPD_HOST")
    check(b"both set" in p.stderr, "%r", p.stderr)


# ---------------------------------------------------------------- unreachable (69)

def test_unreachable_daemon_exit_69():
    d = tempfile.mkdtemp(prefix="tpctl-")
    try:
        path = os.path.join(d, "none.sock")
        p = expect(tpctl(None, "ping", sock=path), 69, "no socket")
        check(("cannot connect to %s: No such file or directory (is tpd running?" % path)
              in p.stderr.decode(), "names cause and fix: %r", p.stderr)
        # a socket file nobody listens on any more
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()
        p = expect(tpctl(None, "stats", sock=path), 69, "stale socket")
        check(b"Connection refused" in p.stderr, "%r", p.stderr)
        # the environment names the socket too
        env = dict(os.environ, TPD_SOCKET=path)
        p = expect(subprocess.run([TPCTL, "ping"], capture_output=True, env=env,
                                  timeout=TIMEOUT), 69, "TPD_SOCKET")
        check(path.encode() in p.stderr, "TPD_SOCKET used: %r", p.stderr)
    finally:
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
    # TCP: a port with no listener
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = expect(subprocess.run([TPCTL, "-H", "127.0.0.1:%d" % port, "ping"],
                              capture_output=True, timeout=TIMEOUT), 69, "TCP refused")
    check(("cannot connect to 127.0.0.1:%d" % port).encode() in p.stderr, "%r", p.stderr)


def test_connect_timeout():
    """A listener that never accepts, its backlog full: the connect gives up in time."""
    d = tempfile.mkdtemp(prefix="tpctl-")
    path = os.path.join(d, "busy.sock")
    listener = socket.socket(socket.AF_UNIX)
    held = []
    try:
        listener.bind(path)
        listener.listen(0)
        while True:
            c = socket.socket(socket.AF_UNIX)
            c.setblocking(False)
            held.append(c)
            try:
                c.connect(path)
            except BlockingIOError:
                break   # the backlog is full: the next connect would block
            check(len(held) < 64, "the backlog never filled")
        start = time.monotonic()
        p = expect(tpctl(None, "--connect-timeout", "300ms", "ping", sock=path), 69,
                   "connect timeout")
        took = time.monotonic() - start
        check(0.25 < took < 0.25 + 2 * SLOW, "gave up after the timeout: %.2fs", took)
        check(b"Connection timed out" in p.stderr and b"--connect-timeout" in p.stderr,
              "names cause and fix: %r", p.stderr)
    finally:
        for c in held:
            c.close()
        listener.close()
        os.unlink(path)
        os.rmdir(d)


def test_connection_lost_while_waiting_exit_69():
    with Daemon() as d:
        task = int(expect(tpctl(d, "submit", "--detach", "--task", sleep_task()), 0,
                          "submit").stdout)
        c = d.client()
        w = subprocess.Popen([TPCTL, "-s", d.sock, "--json", "wait", str(task)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        eventually(lambda: c.request({"op": "stats"}, "stats")["connections"] >= 2,
                   "the waiting tpctl is connected")
        d.proc.kill()
        d.proc.wait()
        out, err = w.communicate(timeout=TIMEOUT)
        check(w.returncode == 69, "lost connection: exit %d, %r", w.returncode, err)
        # killed before or after the wait request went out
        check(b"closed the connection" in err or b"lost the connection" in err, "%r", err)
        check(d.sock.encode() in err, "names the daemon: %r", err)


# ---------------------------------------------------------------- commands

def test_ping_and_stats():
    with Daemon(workers=3, queue=5) as d:
        p = expect(tpctl(d, "ping"), 0, "ping")
        check(p.stdout.startswith(b"pong from " + d.sock.encode()), "%r", p.stdout)
        check(b"tpd " in p.stdout and b"role admin" in p.stdout, "%r", p.stdout)
        p = expect(tpctl(d, "stats"), 0, "stats")
        lines = p.stdout.decode().splitlines()
        check(lines[0].startswith("tpd ") and ": running, up " in lines[0], "%r", lines)
        header = lines[1].split()
        check(header[:10] == ["POOL", "STATE", "TARGET", "MIN-MAX", "WORKERS", "BUSY",
                              "QUEUED", "HELD", "CAPACITY", "LIMIT"], "%r", header)
        row = dict(zip(header, lines[2].split()))
        check(row["POOL"] == "default" and row["TARGET"] == "3" and row["CAPACITY"] == "5",
              "%r", row)
        # the columns line up: every row as wide as the header where it is right-aligned
        check(len(lines[2].rstrip()) == len(lines[1].rstrip()), "aligned: %r", lines)
        for args in (("--json", "stats"), ("stats", "--json")):
            evs = json_lines(expect(tpctl(d, *args), 0, " ".join(args)).stdout)
            check(len(evs) == 1 and evs[0]["event"] == "stats", "%r", evs)
            check(evs[0]["pools"][0]["capacity"] == 5, "%r", evs)
        evs = json_lines(expect(tpctl(d, "--json", "ping"), 0, "--json ping").stdout)
        check([e["event"] for e in evs] == ["pong", "hello"], "%r", evs)


def test_default_socket_from_environment():
    with Daemon() as d:
        env = dict(os.environ, RUNTIME_DIRECTORY=d.dir)
        env.pop("TPD_SOCKET", None)
        expect(subprocess.run([TPCTL, "ping"], capture_output=True, env=env,
                              timeout=TIMEOUT), 0, "RUNTIME_DIRECTORY rule")
        env = dict(os.environ, TPD_SOCKET=d.sock)
        expect(subprocess.run([TPCTL, "ping"], capture_output=True, env=env,
                              timeout=TIMEOUT), 0, "TPD_SOCKET")


def test_submit_status_cancel_wait():
    with Daemon(workers=1) as d:
        p = expect(tpctl(d, "submit", "--detach", "--task", sleep_task()), 0, "submit")
        long_task = int(p.stdout)
        eventually(lambda: task_state(d, long_task) == "running", "the sleep runs")
        p = expect(tpctl(d, "status", str(long_task)), 0, "status")
        lines = p.stdout.decode().splitlines()
        # list's columns: TASK LABEL POOL STATE QUEUED RUN OWNER, "-" for none
        check(lines[0].split()[:4] == ["TASK", "LABEL", "POOL", "STATE"], "%r", lines)
        row = lines[1].split()
        check([row[0], row[1], row[3]] == [str(long_task), "-", "running"], "%r", lines)
        check(row[5] != "-", "a running task's time so far: %r", lines)
        expect(tpctl(d, "cancel", str(long_task)), 0, "cancel")
        p = expect(tpctl(d, "wait", str(long_task)), 1, "wait for a cancelled task")
        check(b"cancelled" in p.stdout, "%r", p.stdout)
        check(task_state(d, long_task) == "cancelled", "cancelled")

        # submit without --detach prints the id at once, then waits for the done
        p = expect(tpctl(d, "submit", "--task", '{"kind":"echo","value":7}'), 0, "submit echo")
        echo_task = int(p.stdout)
        p = expect(tpctl(d, "submit", "--task", '{"kind":"fail","message":"no luck"}'), 1,
                   "submit fail")
        fail_task = int(p.stdout)
        check(b"no luck" in p.stderr, "%r", p.stderr)

        p = expect(tpctl(d, "wait", str(echo_task)), 0, "wait one")
        check(("task %d: succeeded" % echo_task).encode() in p.stdout, "%r", p.stdout)
        expect(tpctl(d, "wait", str(echo_task), str(fail_task)), 1, "wait, one failed")
        expect(tpctl(d, "wait", str(echo_task), str(echo_task)), 0, "wait, all succeeded")
        p = expect(tpctl(d, "wait", "999999"), 1, "wait for no such task")
        check(b"no_such_task" in p.stderr, "%r", p.stderr)
        p = expect(tpctl(d, "status", str(echo_task), str(fail_task)), 0, "status of two")
        rows = [l.split() for l in p.stdout.decode().splitlines()[1:]]
        check([[r[0], r[3]] for r in rows] == [[str(echo_task), "succeeded"],
                                                [str(fail_task), "failed"]], "%r", rows)
        expect(tpctl(d, "cancel", "999999"), 1, "cancel no such task")
        expect(tpctl(d, "cancel", str(echo_task)), 0, "cancel a finished task: idempotent")
        check(task_state(d, echo_task) == "succeeded", "left as it was")


def test_json_output_line_by_line():
    with Daemon() as d:
        p = expect(tpctl(d, "--json", "submit", "--task", '{"kind":"echo","value":[1,"x"]}'),
                   0, "--json submit")
        evs = json_lines(p.stdout)
        check([e["event"] for e in evs] == ["accepted", "done"], "%r", evs)
        check(evs[0]["id"] == evs[1]["id"] and evs[0]["task"] == evs[1]["task"], "%r", evs)
        check(evs[1]["result"] == {"value": [1, "x"]}, "%r", evs)
        p = expect(tpctl(d, "--json", "run", "--task", '{"kind":"echo","value":3}'), 0,
                   "--json run")
        evs = json_lines(p.stdout)
        check([e["event"] for e in evs] == ["accepted", "started", "done"], "%r", evs)
        p = expect(tpctl(d, "--json", "wait", str(evs[0]["task"])), 0, "--json wait")
        check([e["event"] for e in json_lines(p.stdout)] == ["done"], "%r", p.stdout)
        p = expect(tpctl(d, "--json", "status", str(evs[0]["task"])), 0, "--json status")
        check(json_lines(p.stdout)[0]["state"] == "succeeded", "%r", p.stdout)


def test_resize_and_shutdown():
    with Daemon(workers=2) as d:
        p = expect(tpctl(d, "resize", "4"), 0, "resize")
        check(p.stdout.startswith(b"pool default: target 4, 4 workers now\n(kept until"),
              "%r", p.stdout)
        p = expect(tpctl(d, "resize", "--pool", "nope", "2"), 1, "resize unknown pool")
        check(b"no_such_pool" in p.stderr, "%r", p.stderr)
        p = expect(tpctl(d, "resize", "0"), 1, "resize to 0")
        check(b"bad_request" in p.stderr, "%r", p.stderr)
        check(d.client().stats()["target"] == 4, "target")
        expect(tpctl(d, "shutdown", "--wait"), 0, "shutdown --wait")
        check(d.wait_exit() == 0, "tpd exited 0")
        expect(tpctl(d, "ping"), 69, "ping after shutdown")


def test_run_exit_codes_of_builtin_tasks():
    with Daemon() as d:
        expect(tpctl(d, "run", "--task", '{"kind":"echo","value":1}'), 0, "echo")
        p = expect(tpctl(d, "run", "--task", '{"kind":"fail","message":"on purpose"}'), 1,
                   "fail")
        check(b"on purpose" in p.stderr, "%r", p.stderr)
        start = time.monotonic()
        p = expect(tpctl(d, "run", "--timeout", "200ms", "--task", sleep_task()), 124,
                   "timed out")
        check(time.monotonic() - start < 10 * TIMEOUT / 15, "ended by the timeout")
        check(b"timed out after" in p.stderr, "%r", p.stderr)
        p = expect(tpctl(d, "run", "--pool", "nope", "--task", sleep_task(1)), 1,
                   "no such pool")
        check(b"no_such_pool" in p.stderr, "%r", p.stderr)


# ---------------------------------------------------------------- rejected (75)

def test_rejected_submit_exit_75():
    with Daemon(workers=1, queue=1) as d:
        c = d.client()
        for _ in range(2):  # one runs, one waits: the pool is full
            _, ev = c.submit({"kind": "sleep", "ms": LONG_MS})
            check(ev["event"] == "accepted", "%r", ev)
        # --no-wait-for-room: refused at once (by default they wait for room)
        for cmd in ("submit", "run"):
            p = expect(tpctl(d, cmd, "--no-wait-for-room", "--task", sleep_task(1)), 75,
                       cmd + " to a full pool")
            check(b"queue_full" in p.stderr, "%r", p.stderr)
        evs = json_lines(expect(tpctl(d, "--json", "submit", "--no-wait-for-room", "--task",
                                      sleep_task(1)), 75, "--json submit").stdout)
        check(evs[0]["event"] == "rejected" and evs[0]["error"]["code"] == "queue_full",
              "%r", evs)


def test_submit_while_draining_exit_75():
    with Daemon(workers=1) as d:
        c = d.client()
        rid, ev = c.submit({"kind": "sleep", "ms": int(1000 * SLOW)})
        check(ev["event"] == "accepted", "%r", ev)
        check(c.request({"op": "shutdown"})["event"] == "ok", "drain")
        p = expect(tpctl(d, "submit", "--task", sleep_task(1)), 75, "submit while draining")
        check(b"(closed)" in p.stderr, "%r", p.stderr)
        c.done(rid)


# ---------------------------------------------------------------- not permitted (77)

def test_forbidden_admin_ops_exit_77():
    if os.geteuid() != 0:
        raise Skip("needs root to run tpctl as nobody")
    with Daemon("--socket-mode", "0666") as d:
        os.chmod(d.dir, 0o755)
        for args in (("resize", "3"), ("shutdown",), ("shutdown", "--now")):
            p = expect(tpctl(d, *args, user="nobody"), 77, "%s as nobody" % " ".join(args))
            check(b"(forbidden)" in p.stderr, "%r", p.stderr)
        expect(tpctl(d, "stats", user="nobody"), 0, "stats as nobody")
        expect(tpctl(d, "submit", "--task", '{"kind":"echo","value":1}', user="nobody"), 0,
               "submit as nobody")
        check(d.client().stats()["target"] == 2, "no resize happened")


def test_tcp_tokens_exit_77():
    d_tmp = tempfile.mkdtemp(prefix="tpctl-tok-")
    submit_tok = os.path.join(d_tmp, "submit")
    admin_tok = os.path.join(d_tmp, "admin")
    wrong_tok = os.path.join(d_tmp, "wrong")
    for path, text in ((submit_tok, "s3cret-submit\n"), (admin_tok, "s3cret-admin\n"),
                       (wrong_tok, "guess\n")):
        with open(path, "w") as f:
            f.write(text)
    try:
        with Daemon("--token-file", submit_tok, "--admin-token-file", admin_tok, tcp=True,
                    tcp_auth="token") as d:
            host = "127.0.0.1:%d" % d.port

            def over_tcp(*args):
                return subprocess.run([TPCTL, "-H", host] + list(args), capture_output=True,
                                      timeout=TIMEOUT)
            p = expect(over_tcp("stats"), 77, "no token")
            check(b"unauthenticated" in p.stderr, "%r", p.stderr)
            p = expect(over_tcp("--token-file", wrong_tok, "stats"), 77, "wrong token")
            check(b"refused the token" in p.stderr, "%r", p.stderr)
            expect(over_tcp("--token-file", submit_tok, "stats"), 0, "submit token")
            expect(over_tcp("--token-file", submit_tok, "run", "--task", sleep_task(1)), 0,
                   "run with the submit token")
            p = expect(over_tcp("--token-file", submit_tok, "resize", "3"), 77,
                       "admin op with the submit token")
            check(b"forbidden" in p.stderr, "%r", p.stderr)
            expect(over_tcp("--token-file", admin_tok, "resize", "3"), 0, "admin token")
            env = dict(os.environ, TPD_HOST=host, TPD_TOKEN_FILE=admin_tok)
            env.pop("TPD_SOCKET", None)
            expect(subprocess.run([TPCTL, "resize", "2"], capture_output=True, env=env,
                                  timeout=TIMEOUT), 0, "TPD_HOST and TPD_TOKEN_FILE")
            missing = os.path.join(d_tmp, "missing")
            p = expect(over_tcp("--token-file", missing, "ping"), 66, "unreadable token file")
            check(missing.encode() in p.stderr, "%r", p.stderr)
    finally:
        for f in os.listdir(d_tmp):
            os.unlink(os.path.join(d_tmp, f))
        os.rmdir(d_tmp)


# ---------------------------------------------------------------- interrupts

def read_events_until(proc, event):
    """Reads --json lines from proc's stdout until one is event; returns them all."""
    seen = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(json.loads(line))
        if seen[-1]["event"] == event:
            return seen
    raise AssertionError("no %s event; saw %r" % (event, seen))


def test_ctrl_c_during_run_cancels_the_task():
    with Daemon() as d:
        p = subprocess.Popen([TPCTL, "-s", d.sock, "--json", "run", "--task", sleep_task()],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = read_events_until(p, "started")
        task = seen[0]["task"]
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 130, "exit %d after Ctrl-C: %r", p.returncode, err)
        rest = [json.loads(l) for l in out.decode().splitlines()]
        done = [e for e in rest if e["event"] == "done"]
        check(len(done) == 1 and done[0]["state"] == "cancelled", "waited for the done: %r",
              rest)
        check(b"cancelling task %d" % task in err, "%r", err)
        check(task_state(d, task) == "cancelled", "status says cancelled")


def test_ctrl_c_during_wait_leaves_the_task():
    with Daemon() as d:
        task = int(expect(tpctl(d, "submit", "--detach", "--task", sleep_task()), 0,
                          "submit").stdout)
        c = d.client()
        p = subprocess.Popen([TPCTL, "-s", d.sock, "wait", str(task)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # tpctl catches SIGINT before it connects
        eventually(lambda: c.request({"op": "stats"}, "stats")["connections"] >= 2,
                   "the waiting tpctl is connected")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 130, "exit %d: %r", p.returncode, err)
        check(task_state(d, task) == "running", "wait's Ctrl-C leaves the task running")


# ---------------------------------------------------------------- batch

def write_file(d, name, text):
    path = os.path.join(d.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_batch_with_failures():
    with Daemon(workers=2) as d:
        path = write_file(d, "jobs", "\n".join([
            "# builtin tasks as NDJSON",
            '{"kind":"echo","value":1}',
            "",
            '{"kind":"sleep","ms":20}',
            '{"kind":"fail","message":"first failure"}',
            '   {"kind":"echo","value":"indented"}',
            '{"kind":"fail","message":"second failure"}',
            '{"kind":"sleep","ms":10}',
        ]) + "\n")
        p = expect(tpctl(d, "batch", "-j", "3", path), 1, "batch with failures")
        err = p.stderr.decode()
        check("%s:5: task" % path in err and "first failure" in err, "names the line: %r", err)
        check("%s:7: task" % path in err, "%r", err)
        check("6 tasks in" in err and "4 succeeded, 2 failed" in err, "summary: %r", err)
        check(d.client().stats()["accepted"] == 6, "all six submitted")

        ok = write_file(d, "ok", '{"kind":"echo","value":1}\n' * 40)
        p = expect(tpctl(d, "batch", ok), 0, "batch all succeeded")
        check(b"40 succeeded, 0 failed" in p.stderr, "%r", p.stderr)

        # from stdin, with --json: every event on its own line
        p = expect(tpctl(d, "--json", "batch", "-j", "4", "-",
                         input=b'{"kind":"echo","value":2}\n' * 10), 0, "--json batch -")
        evs = json_lines(p.stdout)
        done = [e for e in evs if e["event"] == "done"]
        check(len(done) == 10 and sorted(e["id"] for e in done) == list(range(1, 11)),
              "a done per line: %r", done)


def test_batch_bad_line_submits_nothing():
    with Daemon() as d:
        path = write_file(d, "bad", 'echo fine\necho "unclosed\n{"kind": 3}\n')
        p = expect(tpctl(d, "batch", path), 65, "bad lines")
        err = p.stderr.decode()
        check("%s:2: a double quote is not closed" % path in err, "%r", err)
        check("%s:3: a task object needs a \"kind\"" % path in err, "%r", err)
        check(d.client().stats()["accepted"] == 0, "nothing submitted")
        expect(tpctl(d, "batch", os.path.join(d.dir, "missing")), 66, "missing file")


def test_batch_backs_off_on_queue_full():
    with Daemon(workers=1, queue=1) as d:
        path = write_file(d, "jobs", '{"kind":"sleep","ms":100}\n' * 6)
        p = expect(tpctl(d, "batch", "--no-wait-for-room", "-j", "6", path), 0,
                   "batch into a small pool")
        check(b"6 succeeded, 0 failed" in p.stderr, "%r", p.stderr)
        st = d.client().stats()
        check(st["succeeded"] == 6, "%r", st)
        check(st["rejected"] > 0, "the window met queue_full and retried: %r", st)


def test_batch_progress_line_on_a_terminal():
    with Daemon(workers=2) as d:
        path = write_file(d, "jobs", '{"kind":"sleep","ms":30}\n' * 8)
        master, slave = pty.openpty()
        p = subprocess.Popen([TPCTL, "-s", d.sock, "batch", "-j", "2", path],
                             stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        seen = b""
        while True:
            r, _, _ = select.select([master], [], [], TIMEOUT)
            check(r, "the terminal stayed silent")
            try:
                chunk = os.read(master, 4096)
            except OSError:     # EIO: the last writer is gone
                break
            if not chunk:
                break
            seen += chunk
        os.close(master)
        check(p.wait(timeout=TIMEOUT) == 0, "exit %r", p.returncode)
        check(b"\r\x1b[K[8/8] 100%" in seen, "progress reaches 8/8: %r", seen)
        check(b"ETA" in seen and b"/s" in seen, "rate and ETA: %r", seen)
        check(b"8 succeeded, 0 failed" in seen, "summary: %r", seen)


def test_ctrl_c_during_batch_cancels_in_flight():
    with Daemon(workers=2) as d:
        path = write_file(d, "jobs", (sleep_task() + "\n") * 5)
        p = subprocess.Popen([TPCTL, "-s", d.sock, "batch", "-j", "2", path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        c = d.client()
        eventually(lambda: c.stats()["busy"] == 2, "two tasks run")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 130, "exit %d: %r", p.returncode, err)
        check(b"cancelling 2 tasks" in err, "%r", err)
        check(b"0 succeeded, 0 failed, 2 cancelled, 3 not submitted" in err, "summary: %r", err)
        check(b"task 1 cancelled" not in err and b"task 2 cancelled" not in err,
              "its own cancels get no line each: %r", err)
        st = c.stats()
        check(st["accepted"] == 2 and st["cancelled"] == 2, "%r", st)


# ---------------------------------------------------------------- exec tasks

def test_run_exec_streams_and_exits_with_its_code():
    with Daemon() as d:
        need_exec(d)
        p = expect(tpctl(d, "run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"), 3,
                   "exit 3")
        check(p.stdout == b"out\n", "%r", p.stdout)
        check(b"err\n" in p.stderr, "%r", p.stderr)
        expect(tpctl(d, "run", "true"), 0, "true, without --")
        p = expect(tpctl(d, "run", "--timeout", "300ms", "--", "sleep", "30"), 124, "timeout")
        check(b"timed out" in p.stderr, "%r", p.stderr)
        p = expect(tpctl(d, "run", "--", "sh", "-c", "kill -TERM $$"), 128 + signal.SIGTERM,
                   "killed by SIGTERM")
        check(b"signal 15" in p.stderr, "%r", p.stderr)
        p = expect(tpctl(d, "run", "--", "/nonexistent/program"), 1, "spawn failed")
        check(b"/nonexistent/program" in p.stderr, "names the program: %r", p.stderr)
        p = expect(tpctl(d, "run", "-i", "--", "cat", input=b"from stdin\n"), 0, "--stdin")
        check(p.stdout == b"from stdin\n", "%r", p.stdout)
        p = expect(tpctl(d, "run", "-e", "GREETING=hi there", "--cwd", "/", "--", "sh", "-c",
                         'echo "$GREETING"; pwd'), 0, "--env --cwd")
        check(p.stdout == b"hi there\n/\n", "%r", p.stdout)
        p = expect(tpctl(d, "run", "--", "printf", "\\377\\376\\n"), 0, "binary output")
        check(p.stdout == b"\xff\xfe\n", "data_base64 decoded: %r", p.stdout)
        p = expect(tpctl(d, "run", "--", "seq", "1", "50000"), 0, "much output")
        check(p.stdout == "".join("%d\n" % i for i in range(1, 50001)).encode(),
              "every line in order")


def test_submit_and_wait_output_of_exec():
    with Daemon() as d:
        need_exec(d)
        task = int(expect(tpctl(d, "submit", "--detach", "--", "sh", "-c", "echo hello; exit 4"),
                          0, "submit exec").stdout)
        p = expect(tpctl(d, "wait", "--output", str(task)), 4, "wait --output")
        check(p.stdout == b"hello\n", "%r", p.stdout)
        p = expect(tpctl(d, "submit", "--", "false"), 1, "submit waits and exits like run")


def test_ctrl_c_during_exec_run():
    with Daemon() as d:
        need_exec(d)
        p = subprocess.Popen([TPCTL, "-s", d.sock, "--json", "run", "--", "sleep", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = read_events_until(p, "started")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 130, "exit %d: %r", p.returncode, err)
        check(task_state(d, seen[0]["task"]) == "cancelled", "cancelled")


def test_second_ctrl_c_exits_at_once():
    d = Daemon(start=False)
    conf = os.path.join(d.dir, "tpd.conf")
    with open(conf, "w") as f:
        f.write("[exec]\nkill_grace = %dms\n" % int(3000 * SLOW))
    d.args += ["-c", conf]
    d.start()
    with d:
        need_exec(d)
        # the command ignores SIGTERM: the cancel waits for the kill grace
        p = subprocess.Popen([TPCTL, "-s", d.sock, "--json", "run", "--", "sh", "-c",
                              "trap '' TERM; echo ready; sleep 30"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = read_events_until(p, "output")
        p.send_signal(signal.SIGINT)
        line = p.stderr.readline()
        check(b"cancelling task" in line, "%r", line)
        start = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=TIMEOUT)
        check(p.returncode == 130, "exit %d", p.returncode)
        check(time.monotonic() - start < 1.5 * SLOW, "the second interrupt does not wait")
        c = d.client()
        done = c.done(c.send({"op": "wait", "task": seen[0]["task"]}))
        check(done["state"] == "cancelled", "the task was cancelled all the same: %r", done)


def test_batch_of_command_lines():
    with Daemon(workers=2) as d:
        need_exec(d)
        path = write_file(d, "jobs", "\n".join([
            "printf '%s|' 'single quoted' \"double \\\"quoted\\\"\" back\\ slash  # comment",
            "sh -c 'exit 2'",
            "echo $HOME ~ '*'",
        ]) + "\n")
        p = expect(tpctl(d, "batch", "-j", "1", path), 1, "batch of commands")
        check(b"single quoted|double \"quoted\"|back slash|" in p.stdout, "%r", p.stdout)
        check(b"$HOME ~ *\n" in p.stdout, "nothing expanded: %r", p.stdout)
        check(b":2: task" in p.stderr and b"exit status 2" in p.stderr, "%r", p.stderr)
        p = expect(tpctl(d, "batch", "-q", path), 1, "batch -q")
        check(p.stdout == b"", "quiet: %r", p.stdout)


def test_broken_stdout_cancels_the_run():
    with Daemon() as d:
        need_exec(d)
        c = d.client()
        for json_flag in ([], ["--json"]):
            r, w = os.pipe()
            p = subprocess.Popen([TPCTL, "-s", d.sock] + json_flag + ["run", "--", "yes"],
                                 stdout=w, stderr=subprocess.PIPE)
            os.close(w)
            check(len(os.read(r, 4)) == 4, "output flows")
            os.close(r)
            p.communicate(timeout=TIMEOUT)
            check(p.returncode == 128 + signal.SIGPIPE, "%s: exit %d", json_flag, p.returncode)
            eventually(lambda: c.stats()["busy"] == 0, "the task was cancelled")
        check(c.stats()["cancelled"] == 2, "both cancelled: %r", c.stats())
        # batch stops submitting too, and cancels what is in flight
        path = write_file(d, "jobs", "sh -c 'echo x; sleep 0.1'\n" * 50)
        r, w = os.pipe()
        p = subprocess.Popen([TPCTL, "-s", d.sock, "batch", "-j", "2", path], stdout=w,
                             stderr=subprocess.PIPE)
        os.close(w)
        check(os.read(r, 2) == b"x\n", "output flows")
        os.close(r)
        _, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 128 + signal.SIGPIPE, "batch: exit %d: %r", p.returncode, err)
        check(err == b"", "stops quietly: %r", err)
        eventually(lambda: c.stats()["busy"] == 0, "nothing left running")
        check(c.stats()["accepted"] < 2 + 50, "stopped early: %r", c.stats())


# ---------------------------------------------------------------- a daemon tpctl cannot trust

class FakeTpd:
    """A Unix socket that answers each request line with the events handler returns."""

    def __init__(self, handler):
        self.dir = tempfile.mkdtemp(prefix="tpctl-fake-")
        self.sock = os.path.join(self.dir, "fake.sock")
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(self.sock)
        self.listener.listen(4)
        self.handler = handler
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            f = conn.makefile("rwb")
            try:
                for line in f:
                    out = self.handler(json.loads(line))
                    if out is None:
                        break
                    for ev in out:
                        f.write(ev if isinstance(ev, bytes) else (json.dumps(ev) + "\n").encode())
                    f.flush()
            except OSError:
                pass
            finally:
                f.close()
                conn.close()

    def close(self):
        # Wake the accept() and wait for the thread before the descriptor is freed:
        # a thread still entering accept() on a reused fd number would serve the
        # next FakeTpd's clients.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.thread.join(timeout=TIMEOUT)
        self.listener.close()
        os.unlink(self.sock)
        os.rmdir(self.dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_exit_codes_from_crafted_done_events():
    import base64

    def done_for(req, **fields):
        ev = {"event": "done", "id": req["id"], "task": 5, "queued_ms": 0.5, "run_ms": 2100.0}
        ev.update(fields)
        return ev

    outcomes = {
        "three": ({"state": "failed", "error": {"code": "exit_status", "message": "exit 3"},
                   "result": {"exit_code": 3, "signal": None}}, 3),
        "killed": ({"state": "failed", "error": {"code": "signal", "message": "signal 9"},
                    "result": {"exit_code": None, "signal": 9}}, 137),
        "slow": ({"state": "timed_out", "error": {"code": "timed_out", "message": "too slow"}},
                 124),
        "nope": ({"state": "failed", "error": {"code": "spawn_failed",
                                               "message": "cannot run nope"}}, 1),
        "late": ({"state": "expired", "error": {"code": "expired", "message": "waited"}}, 1),
    }

    def handler(req):
        if req["op"] != "submit":
            return []
        name = req["task"]["argv"][0]
        out = [{"event": "accepted", "id": req["id"], "task": 5, "pool": "default", "queued": 0},
               {"event": "started", "id": req["id"], "task": 5},
               {"event": "output", "id": req["id"], "task": 5, "stream": "stdout",
                "data_base64": base64.b64encode(b"\x00\xffbin\n").decode()},
               {"event": "output", "id": req["id"], "task": 5, "stream": "stderr",
                "data": "text\u0000nul\n"}]
        fields, _ = outcomes.get(name, ({"state": "succeeded", "result": {"exit_code": 0}}, 0))
        return out + [done_for(req, **fields)]

    with FakeTpd(handler) as f:
        for name, (_, code) in outcomes.items():
            p = expect(tpctl(f, "run", "--", name), code, "run %s" % name)
            check(p.stdout == b"\x00\xffbin\n", "base64 output decoded: %r", p.stdout)
            check(p.stderr.startswith(b"text\x00nul\n"), "NUL kept: %r", p.stderr)
        p = expect(tpctl(f, "run", "--", "slow"), 124, "timed out")
        check(b"task 5 timed out after 2.1s" in p.stderr, "human duration: %r", p.stderr)
        p = expect(tpctl(f, "run", "--", "killed"), 137, "signal")
        check(b"killed by signal 9 (SIGKILL)" in p.stderr, "named as elsewhere: %r", p.stderr)


def test_stats_shows_the_loops_longest_pause():
    # a line of a million array items: jansson parses it in one callback, a pause
    with Daemon("--max-request-bytes", "16000000") as d:
        c = d.client()
        c.send_raw(b'{"op":"ping","id":1,"items":[' + b",".join([b"1"] * 1000000) + b"]}\n")
        check(c.recv().get("id") == 1, "the long line is answered")
        loop = c.request({"op": "stats"}, "stats")["loop"]
        lines = expect(tpctl(d, "stats"), 0, "stats").stdout.decode().splitlines()
        line = [x for x in lines if x.startswith("loop: ")]
        check(loop["pauses"] >= 1 and len(line) == 1 and
              line[0].startswith("loop: longest pause %.1f ms since the start; "
                                 % loop["longest_pause_ms"]) and
              line[0].endswith(" over 10 ms"), "%r %r", loop, lines)


def test_stats_table_formatting():
    def handler(req):
        return [{"event": "stats", "id": req["id"], "connections": 1, "uptime_ms": 192000,
                 "pools": [
                     {"name": "default", "target": 4, "workers": 4, "busy": 4, "queued": 120,
                      "capacity": 1024, "limit": 64, "accepted": 123456, "rejected": 7,
                      "succeeded": 123000, "failed": 3, "oldest_queued_ms": 2100.4},
                     {"name": "io", "target": 16, "workers": 12, "busy": 0, "queued": 0,
                      "capacity": 8, "limit": 64, "accepted": 0, "rejected": 0,
                      "succeeded": 0, "failed": 0, "oldest_queued_ms": 0}]}]
    with FakeTpd(handler) as f:
        p = expect(tpctl(f, "stats"), 0, "stats")
        lines = p.stdout.decode().splitlines()
        check(lines[0] == "tpd: up 3m12s, 1 connection", "%r", lines[0])
        check(lines[1].split() == ["POOL", "STATE", "TARGET", "MIN-MAX", "WORKERS", "BUSY",
                                   "QUEUED", "HELD", "CAPACITY", "LIMIT", "OLDEST", "SCHEDULED",
                                   "WAITING"], "%r", lines[1])
        # an older daemon's stats: what it does not say is "-"
        check(lines[2].split() == ["default", "-", "4", "-", "4", "4", "120", "-", "1024", "64",
                                   "2.1s", "-", "-"], "%r", lines[2])
        check(lines[3].split()[-3] == "-", "no queue, no age: %r", lines[3])
        check(lines[4] == "", "a blank line between the tables: %r", lines)
        check(lines[5].split() == ["POOL", "ACCEPTED", "QUEUED", "RUNNING", "SUCCEEDED",
                                   "FAILED", "TIMED_OUT", "CANCELLED", "EXPIRED", "DISPLACED",
                                   "REJECTED", "QUOTA", "LOST", "SKIPPED", "RETRIED"], "%r", lines[5])
        check(lines[6].split() == ["default", "123456", "120", "4", "123000", "3", "-", "-",
                                   "-", "-", "7", "-", "-", "-", "-"],
              "fields this daemon lacks are -: %r",
              lines[6])
        for table in (lines[1:4], lines[5:8]):
            widths = {len(l) for l in table}
            check(len(widths) == 1, "right-aligned columns end together: %r", table)


def test_daemon_speaking_garbage():
    with FakeTpd(lambda req: [b"HTTP/1.0 400 Bad Request\r\n"]) as f:
        p = expect(tpctl(f, "ping"), 76, "not JSON")
        check(b"not JSON" in p.stderr and b"is it a tpd socket?" in p.stderr, "%r", p.stderr)
    with FakeTpd(lambda req: None) as f:
        p = expect(tpctl(f, "stats"), 69, "closed at once")
        check(b"closed the connection" in p.stderr, "%r", p.stderr)
    with FakeTpd(lambda req: [b'{"event":"pong","id":1']) as f:
        # half a line, then the handler waits for more input that never comes
        p = expect(tpctl(f, "ping", "--timeout", "300ms"), 69, "no whole answer in time")
        check(b"no answer from" in p.stderr and b"300ms" in p.stderr, "%r", p.stderr)
    with FakeTpd(lambda req: [{"event": "error", "error": {"code": "internal",
                                                           "message": "too many clients"}}]) as f:
        p = expect(tpctl(f, "stats"), 1, "an error without an id")
        check(b"too many clients (internal)" in p.stderr, "%r", p.stderr)


# ---------------------------------------------------------------- bash completion

COMPLETION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client",
                          "tpctl.bash-completion")


def complete(words, sock=None):
    """What the completion offers for the last of words (bash, without bash-completion)."""
    if shutil.which("bash") is None:
        raise Skip("no bash to load the completion in")
    script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
              '_tpctl; printf "%s\\n" "${COMPREPLY[@]}"')
    p = subprocess.run(["bash", "-c", script, "bash", COMPLETION, TPCTL] + list(words),
                       capture_output=True, timeout=TIMEOUT)
    check(p.returncode == 0, "bash: %r", p.stderr)
    return sorted(w for w in p.stdout.decode().splitlines() if w)


def test_bash_completion():
    check(complete(["st"]) == ["stats", "status"], "commands: %r", complete(["st"]))
    check(complete(["--js"]) == ["--json"], "global options")
    check(complete(["shutdown", "--"]) == ["--help", "--json", "--now", "--wait"],
          "%r", complete(["shutdown", "--"]))
    check("--detach" in complete(["submit", "--d"]), "submit's options")
    with Daemon("--pool", "io:2") as d:
        pools = complete(["-s", d.sock, "resize", "--pool", ""])
        check(pools == ["default", "io"], "pool names from the daemon: %r", pools)


if __name__ == "__main__":
    run_tests(globals())
