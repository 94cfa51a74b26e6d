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
        env = clean_env(XDG_RUNTIME_DIR=own.dir, TPCTL_SYSTEM_SOCKET=system.sock)
        p = expect(tpctl(None, "ping", env=env, user="nobody"), 0, "ping")
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


if __name__ == "__main__":
    run_tests(globals())
