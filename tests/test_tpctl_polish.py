#!/usr/bin/env python3
"""tpctl as a new user meets it: finding the socket, the stats table, batch
on a narrow terminal and into a closed pipe, timeouts of 0, binary stdin,
results of built-in kinds, the order of output and messages, signal names
and token hints. Each test runs the built tpctl against the real tpd.

Terminal tests drive tpctl inside tmux (a 40-column window) and read the
screen back with capture-pane; they are skipped, saying why, without tmux.
Tests that run tpctl as another user (nobody) need root to switch to it.
"""
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time

from tpdtest import TPCTL, TIMEOUT, Client, Daemon, Skip, check, eventually, run_tests

LONG_MS = 60000     # a task that outlives any test unless cancelled


def clean_env(**extra):
    """The environment without anything that names a daemon, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TPD_SOCKET", "TPD_HOST", "TPD_TOKEN_FILE", "RUNTIME_DIRECTORY",
                        "XDG_RUNTIME_DIR", "TPCTL_SYSTEM_SOCKET")}
    env.update(extra)
    return env


def become(user):
    if user is None:
        return None
    if os.geteuid() != 0:
        raise Skip("switching to %s needs root" % user)
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise Skip("no user %s here" % user)

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    return drop


def tpctl(d, *args, input=None, env=None, user=None, timeout=None):
    """Runs tpctl (against d's socket unless d is None); returns the CompletedProcess."""
    cmd = [TPCTL] + (["-s", d.sock] if d is not None else []) + list(args)
    try:
        return subprocess.run(cmd, input=input, capture_output=True, env=env,
                              timeout=timeout or TIMEOUT, preexec_fn=become(user))
    except PermissionError as e:
        raise Skip("%s cannot run %s here: %s" % (user, TPCTL, e))


def expect(p, code, what):
    check(p.returncode == code, "%s: exit %d, expected %d\nstdout: %r\nstderr: %r",
          what, p.returncode, code, p.stdout[-2000:], p.stderr[-2000:])
    return p


def open_dir(prefix):
    """A fresh directory that every user may enter (for tpctl run as nobody)."""
    path = tempfile.mkdtemp(prefix=prefix)
    os.chmod(path, 0o755)
    return path


def need_exec(d):
    c = d.client()
    _, ev = c.submit({"kind": "exec", "argv": ["true"]})
    check(ev["event"] == "accepted", "exec true: %r", ev)
    c.done(_)


# ---------------------------------------------------------------- the socket rule

def shared_daemon(**kw):
    """A daemon whose socket anyone may reach: the system daemon of these tests."""
    d = Daemon("--socket-mode", "0666", **kw)
    os.chmod(d.dir, 0o755)
    return d


def test_nobody_finds_the_system_socket():
    """A user whose own default socket does not exist uses the system one."""
    empty = open_dir("tpctl-xdg-")
    try:
        with shared_daemon() as system:
            env = clean_env(XDG_RUNTIME_DIR=empty, TPCTL_SYSTEM_SOCKET=system.sock)
            p = expect(tpctl(None, "ping", env=env, user="nobody"), 0, "ping as nobody")
            check(p.stdout.startswith(("pong from %s " % system.sock).encode()),
                  "the system socket answered: %r", p.stdout)
            p = expect(tpctl(None, "run", "--task", '{"kind":"echo","value":1}', env=env,
                             user="nobody"), 0, "run as nobody")
            # without XDG_RUNTIME_DIR the rule's /tmp/tpd-UID/tpd.sock, likewise
            uid = pwd.getpwnam("nobody").pw_uid
            if not os.path.exists("/tmp/tpd-%d/tpd.sock" % uid):
                env = clean_env(TPCTL_SYSTEM_SOCKET=system.sock)
                expect(tpctl(None, "ping", env=env, user="nobody"), 0, "ping, /tmp rule")
    finally:
        os.rmdir(empty)


def test_system_socket_fallback_as_root():
    """RUNTIME_DIRECTORY names a directory with no socket: the system one is used."""
    empty = tempfile.mkdtemp(prefix="tpctl-rt-")
    try:
        with Daemon() as system:
            env = clean_env(RUNTIME_DIRECTORY=empty, TPCTL_SYSTEM_SOCKET=system.sock)
            p = expect(tpctl(None, "ping", env=env), 0, "ping")
            check(p.stdout.startswith(("pong from %s " % system.sock).encode()), "%r",
                  p.stdout)
            # --help says where it will look
            h = expect(tpctl(None, "--help", env=env), 0, "--help").stdout.decode()
            check(os.path.join(empty, "tpd.sock") in h and system.sock in h,
                  "help names both paths: %r", h)
    finally:
        os.rmdir(empty)


def test_own_socket_wins_over_the_system_one():
    with shared_daemon() as system, shared_daemon() as own:
        # the rule's own socket must be a daemon of tpctl's user (root's here: nobody's
        # XDG_RUNTIME_DIR would have to be nobody's, with a tpd of nobody's in it)
        env = clean_env(RUNTIME_DIRECTORY=own.dir, TPCTL_SYSTEM_SOCKET=system.sock)
        p = expect(tpctl(None, "ping", env=env), 0, "ping")
        check(p.stdout.startswith(("pong from %s " % own.sock).encode()), "own socket: %r",
              p.stdout)


def test_neither_socket_names_both_paths():
    empty = open_dir("tpctl-xdg-")
    missing = os.path.join(empty, "no-system.sock")
    try:
        env = clean_env(XDG_RUNTIME_DIR=empty, TPCTL_SYSTEM_SOCKET=missing)
        p = expect(tpctl(None, "ping", env=env, user="nobody"), 69, "nothing listens")
        err = p.stderr.decode()
        check(err.count("\n") == 1, "one line: %r", err)
        check(os.path.join(empty, "tpd.sock") in err and missing in err,
              "names both paths tried: %r", err)
        check("is tpd running?" in err, "and what to do: %r", err)
    finally:
        os.rmdir(empty)


def test_named_socket_has_no_fallback():
    """-s and TPD_SOCKET name the socket: nothing else is tried."""
    empty = tempfile.mkdtemp(prefix="tpctl-rt-")
    named = os.path.join(empty, "named.sock")
    try:
        with Daemon() as system:
            env = clean_env(RUNTIME_DIRECTORY=empty, TPCTL_SYSTEM_SOCKET=system.sock)
            for args, e in ((["-s", named], env), ([], dict(env, TPD_SOCKET=named))):
                p = expect(tpctl(None, *(args + ["ping"]), env=e), 69, "named %r" % args)
                err = p.stderr.decode()
                check(named in err and system.sock not in err, "%r", err)
            # a stale socket of the rule's is reported, not passed over
            import socket
            s = socket.socket(socket.AF_UNIX)
            s.bind(os.path.join(empty, "tpd.sock"))
            s.close()
            p = expect(tpctl(None, "ping", env=env), 69, "stale default socket")
            check(b"Connection refused" in p.stderr, "%r", p.stderr)
    finally:
        shutil.rmtree(empty)


# ---------------------------------------------------------------- stats

def stats_tables(out):
    """tpctl stats' text: its first line, and each table as a list of {header: cell}."""
    lines = out.decode().splitlines()
    tables, rows, header = [], None, None
    for line in lines[1:]:
        if not line.strip():
            rows = None
            continue
        if line.startswith(("loop: ", "journal: ", "spool: ")):
            break               # the loop's, the journal's and the spool's lines, after the tables
        if rows is None:
            header, rows = line.split(), []
            tables.append(rows)
            continue
        rows.append(dict(zip(header, line.split())))
    return lines[0], tables


def test_stats_table_adds_up():
    """Every end has its column, and ACCEPTED is the sum of where the tasks are."""
    with Daemon(workers=1, queue=8) as d:
        c = d.client()
        for task in ({"kind": "echo", "value": 1}, {"kind": "fail", "message": "no"},
                     {"kind": "sleep", "ms": LONG_MS, "timeout_ms": 20}):
            rid, ev = c.submit(task)
            check(ev["event"] == "accepted", "%r", ev)
            c.done(rid)
        c.submit({"kind": "sleep", "ms": LONG_MS})
        eventually(lambda: c.stats()["busy"] == 1, "the long sleep runs")
        _, ev = c.submit({"kind": "sleep", "ms": 1})
        check(c.request({"op": "cancel", "task": ev["task"]})["event"] == "ok", "cancel")
        rid, _ = c.submit({"kind": "sleep", "ms": 1}, queue_timeout_ms=20)
        check(c.done(rid)["state"] == "expired", "expired")
        c.submit({"kind": "sleep", "ms": 1})
        p = expect(tpctl(d, "stats"), 0, "stats")
        first, tables = stats_tables(p.stdout)
        check(first.startswith("tpd ") and ": running, up " in first, "%r", first)
        check(len(tables) == 2, "two tables: %r", p.stdout)
        last = p.stdout.decode().splitlines()[-3:]
        check(last[0].startswith("loop: ") and last[1].startswith("journal: ok, ") and
              last[2].startswith("spool: 0 task outputs, 0 B of "),
              "the loop's, the journal's and the spool's lines: %r", p.stdout)
        now, tasks = tables[0][0], tables[1][0]
        check(now["POOL"] == "default" and now["STATE"] == "open", "%r", now)
        check(now["BUSY"] == "1" and now["QUEUED"] == "1", "%r", now)
        ends = ["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "EXPIRED"]
        for col in ends:
            check(tasks.get(col) == "1", "%s: %r", col, tasks)
        check(int(tasks["ACCEPTED"]) == sum(int(tasks[col]) for col in ends) == 7,
              "the row adds up: %r", tasks)
        check(tasks["REJECTED"] == "0", "%r", tasks)


def test_stats_marks_removed_pools_and_draining():
    tmp = tempfile.mkdtemp(prefix="tpctl-conf-")
    conf = os.path.join(tmp, "tpd.conf")
    try:
        with open(conf, "w") as f:
            f.write("[pool io]\nsize = 1\n")
        with Daemon("-c", conf) as d:
            c = d.client()
            c.submit({"kind": "sleep", "ms": LONG_MS}, pool="io")
            _, ev = c.submit({"kind": "sleep", "ms": LONG_MS})
            eventually(lambda: c.stats("io")["busy"] == 1, "the io task runs")
            with open(conf, "w") as f:
                f.write("# io is gone\n")
            d.signal(signal.SIGHUP)
            eventually(lambda: c.stats("io")["removed"], "io is removed, draining")
            _, tables = stats_tables(expect(tpctl(d, "stats"), 0, "stats").stdout)
            states = {row["POOL"]: row["STATE"] for row in tables[0]}
            check(states == {"default": "open", "io": "removed"}, "%r", states)
            # a drain: the phase is in the first line, the pools are closed
            expect(tpctl(d, "shutdown"), 0, "shutdown (drain)")
            first, tables = stats_tables(expect(tpctl(d, "stats"), 0, "stats").stdout)
            check(" draining " in first, "the phase shows: %r", first)
            states = {row["POOL"]: row["STATE"] for row in tables[0]}
            check(states["default"] == "closed", "%r", states)
    finally:
        shutil.rmtree(tmp)


# ---------------------------------------------------------------- batch

def write_file(d, name, text):
    path = os.path.join(d.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def sleep_task(ms=LONG_MS):
    return json.dumps({"kind": "sleep", "ms": ms})


class Tmux:
    """A private tmux server (its own socket directory) with one detached
    window of width x height running cmd; always closed by the caller."""

    def __init__(self, cmd, width=40, height=10):
        if shutil.which("tmux") is None:
            raise Skip("tmux is not installed (Debian package tmux)")
        self.dir = tempfile.mkdtemp(prefix="tpctl-tmux-")
        self.env = dict(os.environ, TMUX_TMPDIR=self.dir)
        self.env.pop("TMUX", None)
        self.base = ["tmux", "-L", "test", "-f", "/dev/null"]
        subprocess.run(self.base + ["new-session", "-d", "-x", str(width), "-y", str(height),
                                    "-s", "t", cmd], check=True, env=self.env, timeout=TIMEOUT)

    def screen(self, join=False):
        """The window's rows, scrollback included (joined where they wrapped, with join)."""
        p = subprocess.run(self.base + ["capture-pane", "-p", "-t", "t", "-S", "-1000"] +
                           (["-J"] if join else []),
                           capture_output=True, env=self.env, timeout=TIMEOUT)
        return p.stdout.decode(errors="replace")

    def wait_for(self, text):
        eventually(lambda: text in self.screen(join=True), "%r shows in tmux" % text)

    def close(self):
        subprocess.run(self.base + ["kill-server"], capture_output=True, env=self.env,
                       timeout=TIMEOUT)
        shutil.rmtree(self.dir, ignore_errors=True)


def test_batch_progress_fits_a_narrow_terminal():
    """At 40 columns the progress line is redrawn in place, never wrapped."""
    with Daemon(workers=4) as d:
        path = write_file(d, "jobs", (sleep_task(2) + "\n") * 1000)
        t = Tmux("%s -s %s batch -j 8 %s; echo EXIT=$?; read x" % (TPCTL, d.sock, path))
        try:
            t.wait_for("EXIT=")
            screen = t.screen(join=True)
            check("EXIT=0" in screen and "1000 succeeded" in screen, "%r", screen)
            # a line that wrapped leaves its first row behind at each redraw
            left = re.findall(r"\[\d+/1000\][^\n]*", screen)
            check(not left, "progress lines left on the screen: %r\n%s", left, screen)
        finally:
            t.close()


def test_batch_progress_line_is_cut_to_the_width():
    """While it runs, the line is narrower than the window, the least useful parts left out."""
    with Daemon(workers=1) as d:
        path = write_file(d, "jobs", (sleep_task(1) + "\n") * 5 + sleep_task() + "\n")
        t = Tmux("%s -s %s batch -j 1 %s; echo EXIT=$?; read x" % (TPCTL, d.sock, path),
                 width=24)
        try:
            t.wait_for("[5/6]")
            rows = [r for r in t.screen().splitlines() if "[5/6]" in r]
            check(len(rows) == 1 and len(rows[0].rstrip()) < 24, "%r", rows)
            check(rows[0].rstrip() == "[5/6]  83%  0 failed", "%r", rows)
        finally:
            t.close()


def find_running(c, upto=20):
    for task in range(1, upto):
        ev = c.request({"op": "status", "task": task})
        if ev.get("state") == "running":
            return task
    raise AssertionError("no running task")


def test_batch_counts_cancelled_apart():
    with Daemon(workers=2) as d:
        path = write_file(d, "jobs", '{"kind":"echo","value":1}\n%s\n' % sleep_task())
        p = subprocess.Popen([TPCTL, "-s", d.sock, "batch", path], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        c = d.client()
        eventually(lambda: c.stats()["busy"] == 1 and c.stats()["succeeded"] == 1,
                   "the echo ended and the sleep runs")
        task = find_running(c)
        check(c.request({"op": "cancel", "task": task})["event"] == "ok", "cancel")
        _, err = p.communicate(timeout=TIMEOUT)
        err = err.decode()
        check(p.returncode == 1, "not all succeeded: exit %d: %r", p.returncode, err)
        check("1 succeeded, 0 failed, 1 cancelled" in err, "summary: %r", err)
        check("%s:2: task %d cancelled" % (path, task) in err,
              "a cancel from elsewhere is named: %r", err)


def test_batch_into_a_closed_pipe_stops_quietly():
    with Daemon(workers=2) as d:
        need_exec(d)
        c = d.client()
        # head -2: reads two lines and leaves
        path = write_file(d, "jobs", "sh -c 'echo x; sleep 0.2'\n" * 40)
        p = subprocess.Popen([TPCTL, "-s", d.sock, "batch", "-j", "4", path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        head = subprocess.Popen(["head", "-2"], stdin=p.stdout, stdout=subprocess.PIPE)
        p.stdout.close()
        out, _ = head.communicate(timeout=TIMEOUT)
        err = p.stderr.read()
        p.wait(timeout=TIMEOUT)
        check(out == b"x\nx\n", "%r", out)
        check(p.returncode == 141, "exit 141 (as by SIGPIPE): %d", p.returncode)
        check(err == b"", "nothing on stderr: %r", err)
        eventually(lambda: c.stats()["busy"] == 0, "what was in flight is cancelled")
        check(c.stats()["accepted"] < 40, "it stopped submitting: %r", c.stats())
        # a pipe closed from the start: the first output meets it
        path = write_file(d, "jobs2", "echo x\n" * 40)
        r, w = os.pipe()
        os.close(r)
        p = subprocess.Popen([TPCTL, "-s", d.sock, "batch", path], stdout=w,
                             stderr=subprocess.PIPE)
        os.close(w)
        _, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 141 and err == b"", "exit %d: %r", p.returncode, err)


def test_closed_stdout_is_exit_141_without_a_word():
    """Any command whose output meets a closed pipe leaves as if by SIGPIPE."""
    with Daemon() as d:
        for args in (["stats"], ["ping"], ["run", "--task", '{"kind":"echo","value":1}'],
                     ["batch", write_file(d, "echo", '{"kind":"echo","value":1}\n' * 3)]):
            r, w = os.pipe()
            os.close(r)
            p = subprocess.Popen([TPCTL, "-s", d.sock] + args, stdout=w,
                                 stderr=subprocess.PIPE)
            os.close(w)
            _, err = p.communicate(timeout=TIMEOUT)
            check(p.returncode == 141 and err == b"", "%s: exit %d: %r", args, p.returncode,
                  err)


# ---------------------------------------------------------------- 0 is no limit

def test_timeout_zero_means_no_timeout():
    with Daemon() as d:
        task = json.dumps({"kind": "sleep", "ms": 30})
        for opt in ("--timeout", "--queue-timeout"):
            expect(tpctl(d, "run", opt, "0", "--task", task), 0, "run %s 0" % opt)
            p = expect(tpctl(d, "submit", opt, "0", "--task", task), 0, "submit %s 0" % opt)
            check(p.stdout.strip().isdigit(), "%r", p.stdout)
        # batch: 0 is no default; a line's own timeout_ms still holds
        path = write_file(d, "jobs", "%s\n%s\n" % (
            task, json.dumps({"kind": "sleep", "ms": LONG_MS, "timeout_ms": 20})))
        p = expect(tpctl(d, "batch", "--timeout", "0", path), 1, "batch --timeout 0")
        check(b"1 succeeded, 1 failed" in p.stderr and b"timed out" in p.stderr,
              "%r", p.stderr)


def tcp_states(port):
    """The states (hex, as /proc/net/tcp has them) of the sockets connecting to port."""
    states = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[2].endswith(":%04X" % port):
                states.append(fields[3])
    return states


def test_connect_timeout_zero_waits_over_tcp():
    """--connect-timeout 0 waits for a TCP connect as long as it takes."""
    import socket
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    held = []
    p = None
    try:
        # fill the backlog: further SYNs are dropped, their connects stay pending
        while "02" not in tcp_states(port):
            c = socket.socket()
            c.setblocking(False)
            held.append(c)
            try:
                c.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            check(len(held) < 64, "the backlog never filled")
        pending = tcp_states(port).count("02")      # SYN_SENT
        p = subprocess.Popen([TPCTL, "--connect-timeout", "0", "-H", "127.0.0.1:%d" % port,
                              "ping"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        eventually(lambda: p.poll() is not None or tcp_states(port).count("02") > pending,
                   "tpctl's connect is pending")
        check(p.poll() is None, "tpctl gave up at once: exit %r, %r", p.returncode,
              p.stderr.read() if p.returncode is not None else "")
        # make room: the connect gets through when its SYN is sent again
        for c in held:
            c.close()
        first, _ = listener.accept()
        first.close()
        listener.settimeout(TIMEOUT)
        conn, _ = listener.accept()
        f = conn.makefile("rwb")
        for line in f:
            req = json.loads(line)
            ev = {"event": "pong"} if req["op"] == "ping" else \
                {"event": "hello", "server": "fake", "version": "0", "protocol": 1,
                 "role": "submit"}
            f.write((json.dumps(dict(ev, id=req["id"])) + "\n").encode())
            f.flush()
            if req["op"] == "hello":
                break
        out, err = p.communicate(timeout=TIMEOUT)
        conn.close()
        check(p.returncode == 0 and out.startswith(b"pong from "), "exit %d: %r %r",
              p.returncode, out, err)
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        for c in held:
            c.close()
        listener.close()


# ---------------------------------------------------------------- binary stdin

def test_binary_stdin_reaches_the_command():
    with Daemon() as d:
        need_exec(d)
        for data, what in ((bytes(range(256)) * 40, "every byte value"),
                           (b"text\x00with a NUL\n", "UTF-8 with a NUL"),
                           (b"\xff\xfe not UTF-8", "not UTF-8"),
                           ("plain text, \u00e9t\u00e9\n".encode(), "text")):
            p = expect(tpctl(d, "run", "--stdin", "--", "cat", input=data), 0, "run " + what)
            check(p.stdout == data, "%s: %r", what, p.stdout[:100])
            p = expect(tpctl(d, "run", "--stdin", "--", "wc", "-c", input=data), 0, "wc")
            check(int(p.stdout) == len(data), "%s: %r", what, p.stdout)
        # submit, then wait --output: the same bytes
        data = b"\x00\x01\x80binary\xff"
        task = int(expect(tpctl(d, "submit", "--stdin", "--", "cat", input=data), 0,
                          "submit").stdout)
        p = expect(tpctl(d, "wait", "--output", str(task)), 0, "wait --output")
        check(p.stdout == data, "%r", p.stdout)


# ---------------------------------------------------------------- what a task returned

def test_run_prints_a_builtin_tasks_result():
    with Daemon() as d:
        value = {"a": [1, 2.5, None], "s": "\u00e9t\u00e9"}
        p = expect(tpctl(d, "run", "--task", json.dumps({"kind": "echo", "value": value})), 0,
                   "run echo")
        check(p.stdout.count(b"\n") == 1, "one line: %r", p.stdout)
        check(json.loads(p.stdout) == {"value": value}, "its result: %r", p.stdout)
        check(p.stderr == b"", "%r", p.stderr)
        # a null result prints nothing; a failure says why on stderr
        p = expect(tpctl(d, "run", "--task", sleep_task(1)), 0, "run sleep")
        check(p.stdout == b"", "%r", p.stdout)
        p = expect(tpctl(d, "run", "--task", '{"kind":"fail","message":"as asked"}'), 1, "fail")
        check(p.stdout == b"" and b"as asked" in p.stderr, "%r %r", p.stdout, p.stderr)
        # wait --output and batch print it too
        task = int(expect(tpctl(d, "submit", "--task", '{"kind":"echo","value":7}'), 0,
                          "submit").stdout)
        p = expect(tpctl(d, "wait", "--output", str(task)), 0, "wait --output")
        check(p.stdout == b'{"value":7}\n', "%r", p.stdout)
        path = write_file(d, "jobs", '{"kind":"echo","value":1}\n{"kind":"echo","value":2}\n')
        p = expect(tpctl(d, "batch", "-j", "1", path), 0, "batch")
        check(p.stdout == b'{"value":1}\n{"value":2}\n', "%r", p.stdout)
        # --json is unchanged: the events only
        p = expect(tpctl(d, "--json", "run", "--task", '{"kind":"echo","value":3}'), 0, "json")
        check([json.loads(l)["event"] for l in p.stdout.splitlines()] ==
              ["accepted", "started", "done"], "%r", p.stdout)


def test_wait_output_comes_before_the_failure_line():
    with Daemon() as d:
        need_exec(d)
        task = int(expect(tpctl(d, "submit", "--detach", "--", "sh", "-c",
                                "echo out; echo err >&2; exit 3"), 0, "submit").stdout)
        p = expect(tpctl(d, "wait", "--output", str(task)), 3, "wait --output")
        check(p.stdout == b"out\n", "%r", p.stdout)
        check(p.stderr.startswith(b"err\n") and
              b"tpctl: task %d failed with exit status 3" % task in p.stderr,
              "the task's stderr, then tpctl's line: %r", p.stderr)
        # one stream, as on a terminal: out, err, then the line
        both = subprocess.run([TPCTL, "-s", d.sock, "wait", "--output", str(task)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=TIMEOUT).stdout
        check(both.startswith(b"out\nerr\ntpctl: task %d failed" % task), "%r", both)


# ---------------------------------------------------------------- signal names

def test_signals_are_named_as_in_the_docs():
    """killed by signal 9 (SIGKILL), as doc/exec.md and the daemon write it."""
    with Daemon() as d:
        need_exec(d)
        for sig, name in ((9, "SIGKILL"), (15, "SIGTERM"), (6, "SIGABRT")):
            script = "kill -%d $$" % sig
            p = expect(tpctl(d, "run", "--", "sh", "-c", script), 128 + sig, "run " + name)
            check(("killed by signal %d (%s) after " % (sig, name)).encode() in p.stderr,
                  "%r", p.stderr)
            task = int(expect(tpctl(d, "submit", "--detach", "--", "sh", "-c", script), 0,
                              "submit").stdout)
            p = expect(tpctl(d, "wait", str(task)), 128 + sig, "wait")
            check(("killed by signal %d (%s) after " % (sig, name)).encode() in p.stdout,
                  "%r", p.stdout)


# ---------------------------------------------------------------- tokens

def test_token_messages_say_what_to_do_in_one_line():
    tmp = tempfile.mkdtemp(prefix="tpctl-tok-")
    good, wrong = os.path.join(tmp, "good"), os.path.join(tmp, "wrong")
    for path, text in ((good, "s3cret\n"), (wrong, "guess\n")):
        with open(path, "w") as f:
            f.write(text)
    try:
        with Daemon("--token-file", good, tcp=True, tcp_auth="token") as d:
            host = "127.0.0.1:%d" % d.port
            env = clean_env()
            jobs = write_file(d, "jobs", '{"kind":"echo","value":1}\n' * 5)
            for args in (["stats"], ["run", "--task", '{"kind":"echo","value":1}'],
                         ["status", "1", "2", "3"], ["cancel", "1", "2"], ["wait", "1", "2"],
                         ["batch", "--no-progress", jobs]):
                p = expect(tpctl(None, "-H", host, *args, env=env), 77, " ".join(args))
                lines = [l for l in p.stderr.decode().splitlines()
                         if not l.startswith("batch: ")]
                check(len(lines) == 1, "%s: one line: %r", args, lines)
                check("--token-file" in lines[0] and "TPD_TOKEN_FILE" in lines[0] and
                      "hello" not in lines[0], "%s: says what to do: %r", args, lines)
            p = expect(tpctl(None, "-H", host, "--token-file", wrong, "stats", env=env), 77,
                       "wrong token")
            lines = p.stderr.decode().splitlines()
            check(len(lines) == 1, "one line: %r", lines)
            check("refused the token in %s" % wrong in lines[0] and host in lines[0],
                  "names the file and the daemon: %r", lines)
            expect(tpctl(None, "-H", host, "--token-file", good, "stats", env=env), 0, "good")
    finally:
        shutil.rmtree(tmp)


# ---------------------------------------------------------------- words that name the cause

def test_duration_hint_suggests_only_forms_that_are_taken():
    """--timeout 1.5 suggested 1.5ms, which is then refused (not a whole ms)."""
    p = expect(tpctl(None, "-s", "/nonexistent", "run", "--timeout", "1.5", "--", "true"), 64,
               "--timeout 1.5")
    check(b"1.5s" in p.stderr and b"1.5ms" not in p.stderr, "%r", p.stderr)
    expect(tpctl(None, "-s", "/nonexistent", "run", "--timeout", "1.5ms", "--", "true"), 64,
           "and 1.5ms is refused")


def test_timeout_then_sigkill_says_both_times():
    """A task that outlived SIGTERM said "timed out after 6s" for --timeout 1s."""
    with Daemon(start=False) as d:
        d.args += ["-c", write_file(d, "tpd.conf", "[exec]\nkill_grace = 1s\n")]
        d.start()
        p = expect(tpctl(d, "run", "--timeout", "1s", "--", "sh", "-c", "trap '' TERM; sleep 30"),
                   124, "ignores SIGTERM")
        check(b"timed out after 1s; killed (SIGKILL) 1s later" in p.stderr, "%r", p.stderr)
        p = expect(tpctl(d, "run", "--timeout", "1s", "--", "sleep", "30"), 124, "SIGTERM ends it")
        check(p.stderr.endswith(b"timed out after 1s\n"), "%r", p.stderr)


def test_output_limit_refusal_names_the_option_and_the_max():
    """--output-limit 17M answered with raw bytes and no option name."""
    with Daemon() as d:
        p = expect(tpctl(d, "run", "--output-limit", "17M", "--", "true"), 1, "17M")
        line = p.stderr.decode()
        check(line.startswith("tpctl: --output-limit 17M:") and "16M" in line and
              "output_limit_max" in line and "16777216" not in line, "%r", line)


def test_forgotten_task_names_the_limit_that_applied():
    with Daemon(start=False) as d:
        d.args += ["-c", write_file(d, "tpd.conf", "[daemon]\nresult_retain = 1\n")]
        d.start()
        expect(tpctl(d, "run", "--", "true"), 0, "one")
        expect(tpctl(d, "run", "--", "true"), 0, "two")
        p = expect(tpctl(d, "wait", "1"), 1, "forgotten")
        msg = p.stderr.decode()
        check("result_retain keeps the last 1" in msg and "result_ttl" not in msg and
              "result_retain_bytes" not in msg, "%r", msg)


def test_a_regular_file_as_socket_says_not_a_socket():
    with tempfile.NamedTemporaryFile() as f:
        p = expect(tpctl(None, "-s", f.name, "ping"), 69, "a file")
        check(b"not a socket but a regular file" in p.stderr and
              b"is left" not in p.stderr, "%r", p.stderr)


def test_unknown_pool_lists_the_pools():
    with Daemon() as d:
        p = expect(tpctl(d, "run", "--pool", "nopool", "--", "true"), 1, "unknown pool")
        check(b'no pool named "nopool" (pools: default)' in p.stderr, "%r", p.stderr)


def test_redis_host_without_a_port_takes_6379():
    import socket
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", 6379))
    except OSError as e:
        s.close()
        raise Skip("127.0.0.1:6379 is taken (%s): cannot stand in for Redis there" % e)
    s.listen(1)
    try:
        p = subprocess.Popen([TPCTL, "enqueue", "--redis", "127.0.0.1", "--stream", "s", "--",
                              "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        s.settimeout(TIMEOUT)
        conn, _ = s.accept()        # it came to 6379
        conn.close()
        _, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode != 64 and b"expected" not in err, "%d %r", p.returncode, err)
    finally:
        s.close()


def test_a_queued_run_says_so_after_a_second():
    """A run waiting for a worker showed nothing for seconds."""
    with Daemon(workers=1) as d:
        busy = subprocess.Popen([TPCTL, "-s", d.sock, "run", "--", "sleep", "2"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            c = d.client()
            eventually(lambda: c.stats()["busy"] == 1, "the worker is busy")
            p = expect(tpctl(d, "run", "--", "true"), 0, "queued")
            check(b"is queued (0 ahead of it when accepted)" in p.stderr, "%r", p.stderr)
            p = expect(tpctl(d, "run", "--", "true"), 0, "not queued")
            check(b"queued" not in p.stderr, "%r", p.stderr)
        finally:
            busy.wait(TIMEOUT)


def test_peak_under_process_containment_is_an_upper_bound():
    """Under process containment the peak of `true` was the daemon's own (72-89 MiB)."""
    with Daemon() as d:
        containment = d.client().request({"op": "stats"})["containment"]
        p = expect(tpctl(d, "run", "-v", "--", "true"), 0, "run -v")
        if containment == "process":
            check(b", peak at most " in p.stderr, "%r", p.stderr)
        else:
            check(b", peak at most " not in p.stderr and b", peak " in p.stderr, "%r", p.stderr)


def test_batch_checks_kinds_and_fields_before_submitting_anything():
    """Only the daemon checked kinds and fields: the lines before a bad one ran."""
    with Daemon() as d:
        path = write_file(d, "jobs", "true\n" + sleep_task(1) + "\n"
                          '{"kind":"sleep","msx":5}\n{"kind":"nope"}\n'
                          '{"kind":"exec"}\necho fine\n')
        p = expect(tpctl(d, "batch", "--no-progress", path), 65, "bad lines")
        err = p.stderr.decode()
        check(':3: "msx" is not a field of a sleep task' in err and
              ':4: unknown task kind "nope" (kinds: exec, echo, sleep, spin, fail)' in err and
              ':5: an exec task needs "argv"' in err and "nothing submitted" in err, "%r", err)
        check(d.client().stats()["accepted"] == 0, "nothing was submitted")


def display_width(text):
    """The columns a terminal gives text: East Asian wide and emoji 2, combining marks 0."""
    import unicodedata
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def test_tables_pad_by_display_width_and_status_has_lists_columns():
    """A label with "é" and an emoji shifted the columns (bytes were counted);
    status and list had different columns (RUN and RAN, blank and -, no times)."""
    with Daemon() as d:
        labels = ["plain", "\u00e9t\u00e9", "\U0001F600 smile", "e\u0301"]
        for label in labels:
            expect(tpctl(d, "run", "--label", label, "--", "true"), 0, label)
        expect(tpctl(d, "submit", "--detach", "--task", sleep_task()), 0, "a sleep")
        out_list = expect(tpctl(d, "list"), 0, "list").stdout.decode().splitlines()
        ids = [str(i) for i in range(1, 6)]
        out_status = expect(tpctl(d, "status", *ids), 0, "status").stdout.decode().splitlines()
        for out in (out_list, out_status):
            cols = {display_width(line[:line.index("default")]) for line in out[1:]}
            check(len(cols) == 1, "the POOL column moves: %r\n%s", cols, "\n".join(out))
            check(out[0].split()[:7] == ["TASK", "LABEL", "POOL", "STATE", "QUEUED", "RUN",
                                         "OWNER"], "%r", out[0])
        sleeping = [l for l in out_status if "sleep" in l or l.split()[0] == "5"][0].split()
        check(sleeping[1] == "-" and sleeping[3] in ("running", "queued"), "%r", sleeping)
        check(sleeping[3] == "queued" or sleeping[5] != "-", "a running task's time: %r",
              sleeping)


def test_batch_names_a_missing_program_once():
    """batch said "no such program: nosuchprog: nosuchprog"."""
    with Daemon() as d:
        path = write_file(d, "jobs", "nosuchprog\nsh -c 'exit 3'\n")
        p = expect(tpctl(d, "batch", "--no-progress", path), 1, "failures")
        err = p.stderr.decode()
        check(":1: task 1 failed: no such program: nosuchprog\n" in err, "%r", err)
        check(":2: task 2 failed with exit status 3" in err and "sh -c 'exit 3'" in err,
              "the line where the message does not name it: %r", err)


if __name__ == "__main__":
    run_tests(globals())
