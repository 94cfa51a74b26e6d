#!/usr/bin/env python3
"""A hostile local user against tpd and tpctl: each test plays one attack
against the real daemon and client, as another user (nobody, or a uid of
no one) where it needs one; skipped, with the reason, where the machine
cannot (not root, no nobody)."""
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from tpdtest import (SLOW, TPD, TPCTL, TIMEOUT, Daemon, Skip, as_user, check, eventually,
                     run_tests)


def nobody():
    if os.geteuid() != 0:
        raise Skip("needs root to play another user (runs as uid %d)" % os.geteuid())
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        raise Skip("no user named nobody on this machine")


def victim_uid():
    """A uid of no one (no passwd entry), for a victim whose default socket is /tmp/tpd-UID."""
    for uid in range(42420 + os.getpid() % 1000, 60000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if not os.path.exists("/tmp/tpd-%d" % uid):
                return uid
    raise Skip("no free uid for a victim")


def drop_to(uid, gid):
    def f():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return f


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TPD_SOCKET", "TPD_HOST", "TPD_TOKEN_FILE", "RUNTIME_DIRECTORY",
                        "XDG_RUNTIME_DIR", "TPCTL_SYSTEM_SOCKET")}
    env.update(extra)
    return env


FAKE_DAEMON = r'''
import json, os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(8)
os.chmod(path, 0o777)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    f = c.makefile("rwb")
    for line in f:
        sys.stdout.write("GOT " + line.decode(errors="replace"))
        sys.stdout.flush()
        req = json.loads(line)
        if req.get("op") == "submit":
            f.write(b'{"event":"accepted","id":%s,"task":1}\n' % json.dumps(req.get("id")).encode())
            f.write(b'{"event":"done","id":%s,"task":1,"state":"succeeded","result":'
                    b'{"exit_code":0,"stdout":"deployed OK\\n","stderr":""}}\n'
                    % json.dumps(req.get("id")).encode())
        else:
            f.write(b'{"event":"pong","id":%s}\n' % json.dumps(req.get("id")).encode())
        f.flush()
'''


def start_fake(path, uid, gid):
    p = subprocess.Popen(["python3", "-c", FAKE_DAEMON, path], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, preexec_fn=drop_to(uid, gid))
    line = p.stdout.readline()
    check(line.strip() == "listening", "fake daemon did not start: %r", line)
    return p


def stop_fake(p):
    p.kill()
    out = p.stdout.read()
    p.wait()
    return out


def test_planted_tmp_runtime_dir_gets_nothing():
    """nobody makes /tmp/tpd-UID first and listens there: the victim's tpctl
    (no XDG_RUNTIME_DIR) refuses it, sends neither command nor environment."""
    nb = nobody()
    uid = victim_uid()
    d = "/tmp/tpd-%d" % uid
    os.mkdir(d)
    os.chmod(d, 0o755)
    os.chown(d, nb.pw_uid, nb.pw_gid)
    fake = None
    try:
        fake = start_fake(os.path.join(d, "tpd.sock"), nb.pw_uid, nb.pw_gid)
        p = subprocess.run([TPCTL, "run", "-e", "DB_PASSWORD=hunter2", "--", "make", "deploy"],
                           env=clean_env(TPCTL_SYSTEM_SOCKET="/nonexistent/tpd.sock"),
                           capture_output=True, text=True, timeout=TIMEOUT,
                           preexec_fn=drop_to(uid, uid))
    finally:
        got = stop_fake(fake) if fake else ""
        shutil.rmtree(d, ignore_errors=True)
    check(p.returncode == 77, "exit %d: %r", p.returncode, p)
    check("deployed OK" not in p.stdout, "the fake daemon's answer was shown: %r", p.stdout)
    check("%s belongs to uid %d, not to you" % (d, nb.pw_uid) in p.stderr, "%r", p.stderr)
    check("GOT" not in got and "hunter2" not in got, "the fake daemon got: %r", got)


def test_daemon_of_another_user_on_own_socket_refused():
    """The directory is the victim's, but another user's program answers on
    the socket there: SO_PEERCRED names it and tpctl sends nothing."""
    nb = nobody()
    top = tempfile.mkdtemp(prefix="tpdtest-xdg-")
    os.chmod(top, 0o755)
    run = os.path.join(top, "run")
    os.mkdir(run, 0o755)
    os.chown(run, nb.pw_uid, nb.pw_gid)
    fake = None
    try:
        # root (not nobody) listens in nobody's own directory
        fake = start_fake(os.path.join(run, "tpd.sock"), 0, 0)
        p = subprocess.run([TPCTL, "run", "-e", "DB_PASSWORD=hunter2", "--", "make", "deploy"],
                           env=clean_env(XDG_RUNTIME_DIR=run,
                                         TPCTL_SYSTEM_SOCKET="/nonexistent/tpd.sock"),
                           capture_output=True, text=True, timeout=TIMEOUT,
                           preexec_fn=drop_to(nb.pw_uid, nb.pw_gid))
    finally:
        got = stop_fake(fake) if fake else ""
        shutil.rmtree(top, ignore_errors=True)
    check(p.returncode == 77, "exit %d: %r", p.returncode, p)
    check("runs as uid 0, not as you (uid %d)" % nb.pw_uid in p.stderr, "%r", p.stderr)
    check("GOT" not in got, "the fake daemon got: %r", got)


def test_own_daemon_on_default_socket_still_served():
    """The rule's path, made by the user's own tpd: tpctl checks and goes on."""
    nb = nobody()
    top = tempfile.mkdtemp(prefix="tpdtest-xdg-")
    os.chmod(top, 0o755)
    run = os.path.join(top, "run")
    os.mkdir(run, 0o700)
    os.chown(run, nb.pw_uid, nb.pw_gid)
    env = clean_env(XDG_RUNTIME_DIR=run, TPCTL_SYSTEM_SOCKET="/nonexistent/tpd.sock")
    tpd = subprocess.Popen([TPD, "-f", "-c", "none", "--journal", "off", "-w", "1"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           preexec_fn=drop_to(nb.pw_uid, nb.pw_gid))
    try:
        eventually(lambda: os.path.exists(os.path.join(run, "tpd.sock")) or
                   tpd.poll() is not None, "tpd listens")
        p = subprocess.run([TPCTL, "run", "--", "echo", "hi"], env=env, capture_output=True,
                           text=True, timeout=TIMEOUT, preexec_fn=drop_to(nb.pw_uid, nb.pw_gid))
        check(p.returncode == 0 and p.stdout == "hi\n", "%r", p)
    finally:
        tpd.terminate()
        out = tpd.communicate(timeout=TIMEOUT)[0]
        shutil.rmtree(top, ignore_errors=True)
    check(tpd.returncode == 0, "tpd: %r", out)


def test_tpd_refuses_socket_dir_of_another_user():
    """tpd does not listen in a directory another user made (or may write)."""
    nb = nobody()
    top = tempfile.mkdtemp(prefix="tpdtest-dir-")
    try:
        theirs = os.path.join(top, "theirs")
        os.mkdir(theirs, 0o755)
        os.chown(theirs, nb.pw_uid, nb.pw_gid)
        open_dir = os.path.join(top, "open")
        os.mkdir(open_dir)
        os.chmod(open_dir, 0o777)
        sticky = os.path.join(top, "sticky")
        os.mkdir(sticky)
        os.chmod(sticky, 0o1777)
        for d, want in ((theirs, "belongs to uid %d, not to tpd's user" % nb.pw_uid),
                        (open_dir, "is writable by others (mode 0777)")):
            p = subprocess.run([TPD, "-f", "-c", "none", "--journal", "off", "-s", os.path.join(d, "tpd.sock")],
                               capture_output=True, text=True, timeout=TIMEOUT)
            check(p.returncode != 0 and want in p.stderr, "%s: %r", d, p)
            check(not os.path.exists(os.path.join(d, "tpd.sock")), "socket made in %s", d)
        # a root-owned sticky directory (as /tmp) is fine: nobody else can replace the socket
        with Daemon("--journal", "off", "-s", os.path.join(sticky, "tpd.sock")) as dm:
            cl = socket.socket(socket.AF_UNIX)
            cl.connect(os.path.join(sticky, "tpd.sock"))
            cl.close()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def nobody_socket(d):
    """Lets nobody reach d's socket (its temp dir is root's, mode 0700)."""
    os.chmod(d.dir, 0o755)


def connect_as(user, path, ids=None):
    """A raw connection made by a child that became user, or the (uid, gid) ids."""
    pw = pwd.getpwnam(user) if ids is None else pwd.struct_passwd(
        ("", "", ids[0], ids[1], "", "/", "/bin/sh"))
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            a.close()
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            socket.send_fds(b, [b"x"], [s.fileno()])
        finally:
            os._exit(0)
    b.close()
    _, fds, _, _ = socket.recv_fds(a, 1, 1)
    os.waitpid(pid, 0)
    a.close()
    return socket.socket(fileno=fds[0])


def test_followers_that_never_read_stay_bounded():
    """nobody keeps one reader and 20 followers that never read on a task of its own
    writing fast: tpd's memory stays bounded, and each follower gets follow_dropped."""
    nb = nobody()
    with Daemon("--max-output-buffer", "64k", "--journal", "off", "--socket-mode", "0666") as d:
        nobody_socket(d)
        sub = connect_as("nobody", d.sock)
        sub.sendall(json.dumps({"op": "submit", "id": "s", "stream": True, "task": {
            "kind": "exec", "output_limit": 1024,
            "argv": ["sh", "-c", "head -c 100000000 /dev/zero | tr '\\0' a; echo"]}})
            .encode() + b"\n")
        f = sub.makefile("rb")
        acc = json.loads(f.readline())
        check(acc.get("event") == "accepted", "%r", acc)
        followers = []
        for i in range(20):
            fs = connect_as("nobody", d.sock)
            fs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            fs.sendall(json.dumps({"op": "wait", "id": "f%d" % i, "task": acc["task"],
                                   "stream": True}).encode() + b"\n")
            followers.append(fs)
        base = d.rss_kib()
        # the one reader reads everything, as fast as it can
        got, peak = 0, 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = f.readline()
            if not line:
                break
            got += len(line)
            if got % (1 << 22) < 70000:
                peak = max(peak, d.rss_kib() - base)
            if b'"event":"done"' in line[:64]:
                break
        check(got > 100000000, "the reader got the whole output: %d bytes", got)
        print("tpd grew %d KiB at most while 20 followers did not read" % peak)
        if SLOW == 1:   # a sanitizer's quarantine of freed memory makes RSS meaningless
            check(peak < 64 * 1024, "tpd grew %d KiB while 20 followers did not read", peak)
        for i, fs in enumerate(followers):
            ff = fs.makefile("rb")
            while True:
                ev = json.loads(ff.readline())
                if ev["event"] not in ("output", "started"):
                    break
            check(ev["event"] == "error" and ev["error"]["code"] == "follow_dropped" and
                  ev["id"] == "f%d" % i and "max_output_buffer" in ev["error"]["message"],
                  "follower %d: %r", i, ev)
            fs.close()
        sub.close()
        check("stopped following task %d" % acc["task"] in d.read_log(), "logged")


def test_follower_that_never_reads_does_not_slow_the_task():
    """A detached task with one follower that never reads runs at full speed (it is
    not held until output_stall_timeout)."""
    with Daemon("--journal", "off", "--output-stall-timeout", "60s") as d:
        c = d.client()
        _, acc = c.submit({"kind": "exec", "output_limit": 1024, "argv": [
            "sh", "-c", "head -c 100000000 /dev/zero | tr '\\0' a"]}, detach=True)
        lazy = socket.socket(socket.AF_UNIX)
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        lazy.connect(d.sock)
        lazy.sendall(json.dumps({"op": "wait", "id": 1, "task": acc["task"],
                                 "stream": True}).encode() + b"\n")
        start = time.monotonic()
        done = c.request({"op": "wait", "task": acc["task"]}, "done", timeout=30)
        took = time.monotonic() - start
        check(done["state"] == "succeeded", "%r", done)
        check(took < 20 * SLOW, "the task took %.1f s behind a follower that does not read",
              took)
        lazy.close()


def test_follow_from_start_while_writing_gets_each_byte_once():
    """Followers attach with from: start while the task writes (its submitter streams,
    so events are on their way): each gets every line exactly once."""
    n = 30000
    with Daemon("--journal", "off") as d:
        c = d.client()
        rid = c.send({"op": "submit", "stream": True, "task": {"kind": "exec", "argv": [
            "sh", "-c", "i=0; while [ $i -lt %d ]; do echo line$i; i=$((i+1)); "
            "[ $((i %% 1000)) = 0 ] && sleep 0.1; done" % n]}})
        acc = c.recv_id(rid, "accepted")
        want = "".join("line%d\n" % i for i in range(n))
        socks = []
        for i in range(40):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(TIMEOUT)
            s.connect(d.sock)
            s.sendall(json.dumps({"op": "wait", "id": i, "task": acc["task"], "stream": True,
                                  "from": "start"}).encode() + b"\n")
            socks.append(s)
            time.sleep(0.01)
        # the submitter reads its own stream
        while c.recv_id(rid).get("event") != "done":
            pass
        bad = late = 0
        for i, s in enumerate(socks):
            f = s.makefile("rb")
            out = []
            while True:
                line = f.readline()
                check(line, "follower %d: no done", i)
                ev = json.loads(line)
                if ev["event"] in ("done", "error"):
                    check(ev["event"] == "done", "follower %d: %r", i, ev)
                    if not out:
                        # it came after the end: the done alone, with the whole output
                        out.append(ev["result"]["stdout"])
                        late += 1
                    break
                if ev["event"] == "output" and ev["stream"] == "stdout":
                    out.append(ev["data"])
            got = "".join(out)
            if got != want:
                bad += 1
                lines = got.splitlines()
                dup = len(lines) - len(set(lines))
                print("follower %d: %d lines of %d, %d twice; first differing at %d" % (
                    i, len(lines), n, dup, next((k for k in range(min(len(got), len(want)))
                                                 if got[k] != want[k]), -1)))
            s.close()
        check(bad == 0, "%d of 40 followers from the start did not get each byte once", bad)
        check(late < 20, "%d of 40 followers came after the end: the test proves little", late)


ESC_LABEL = "\x1b]2;pwned-label\x07\x1b[2J"
OSC52 = "\x1b]52;c;cHduZWQ=\x07"


def tpctl_out(d, *args, user=None):
    pre = None
    if user is not None:
        pw = pwd.getpwnam(user)
        pre = drop_to(pw.pw_uid, pw.pw_gid)
    return subprocess.run([TPCTL, "-s", d.sock] + list(args), capture_output=True,
                          timeout=TIMEOUT, preexec_fn=pre)


def no_raw_controls(p, what):
    for stream, data in (("stdout", p.stdout), ("stderr", p.stderr)):
        bad = [b for b in data if b < 0x20 and b not in (0x0a,) or b == 0x7f]
        check(not bad and b"\xc2\x9b" not in data,
              "%s: raw control bytes on %s: %r", what, stream, data)


def test_escape_sequences_from_another_user_reach_no_terminal():
    """nobody labels its tasks, fails them and names programs with terminal escapes; the
    admin's tpctl list --all, status and wait show them escaped, never raw."""
    nobody()
    with Daemon("--journal", "off", "--socket-mode", "0666") as d:
        nobody_socket(d)
        answers = as_user("nobody", d.sock, [
            {"op": "submit", "id": 1, "label": ESC_LABEL, "detach": True,
             "task": {"kind": "fail", "message": "bad " + OSC52 + "\u009b2J end"}},
            {"op": "submit", "id": 2, "label": "x\u009b31m", "detach": True,
             "task": {"kind": "exec", "argv": ["\x1b[2Jnosuchprog"]}},
        ])
        t1, t2 = answers[0]["task"], answers[1]["task"]
        c = d.client()
        c.request({"op": "wait", "task": t1}, "done")
        c.request({"op": "wait", "task": t2}, "done")
        for args in (["list", "--all"], ["status", str(t1), str(t2)], ["wait", str(t1)],
                     ["wait", str(t2)], ["wait", "--output", str(t1)]):
            p = tpctl_out(d, *args)
            no_raw_controls(p, " ".join(args))
            out = p.stdout + p.stderr
            if args[0] == "list":
                check(b"\\x1b]2;pwned-label\\x07\\x1b[2J" in out and b"x\\u009b31m" in out,
                      "the label is shown escaped: %r", out)
            if args[-1] == str(t1) and args[0] == "wait":
                check(b"bad \\x1b]52;c;cHduZWQ=\\x07\\u009b2J end" in out, "%r", out)
            if args[-1] == str(t2) and args[0] == "wait":
                check(b"\\x1b[2Jnosuchprog" in out, "%r", out)
        # --json stays exact: the label comes back as the daemon sent it
        p = tpctl_out(d, "--json", "list", "--all")
        labels = [json.loads(l).get("tasks", [{}]) for l in p.stdout.splitlines()]
        check(any(t.get("label") == ESC_LABEL for ts in labels for t in ts), "%r", p.stdout)


def test_task_output_stays_byte_exact():
    """A task's own output is the user's data: run streams it unchanged."""
    with Daemon("--journal", "off") as d:
        p = tpctl_out(d, "run", "--", "printf", "\\033[31mred\\007\\r\\n")
        check(p.returncode == 0 and p.stdout == b"\x1b[31mred\x07\r\n", "%r", p)


def test_fake_daemon_pool_names_and_errors_are_escaped():
    """A (fake) daemon's pool names and error messages reach tpctl's user escaped."""
    top = tempfile.mkdtemp(prefix="tpdtest-fake-")
    path = os.path.join(top, "tpd.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(4)
    answers = {
        "stats": {"event": "stats", "version": "1\x1b]2;v\x07", "phase": "running",
                  "uptime_ms": 5, "connections": 1, "pools": [
                      {"name": "\x1b]2;pwned-pool\x07", "target": 1, "workers": 1}]},
        "cancel": {"event": "error", "error": {"code": "bad_request",
                                               "message": "no \x1b[2J way"}},
    }

    def serve():
        for _ in range(2):
            conn, _ = srv.accept()
            f = conn.makefile("rwb")
            for line in f:
                req = json.loads(line)
                ans = dict(answers.get(req["op"], {"event": "pong"}), id=req.get("id"))
                f.write(json.dumps(ans).encode() + b"\n")
                f.flush()
            conn.close()
    import threading
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        for args in (["stats"], ["cancel", "7"]):
            p = subprocess.run([TPCTL, "-s", path] + args, capture_output=True, timeout=TIMEOUT)
            no_raw_controls(p, args[0])
            out = p.stdout + p.stderr
            want = b"\\x1b]2;pwned-pool\\x07" if args[0] == "stats" else b"no \\x1b[2J way"
            check(want in out, "%s: %r", args[0], out)
    finally:
        srv.close()
        shutil.rmtree(top, ignore_errors=True)


FORGED = "2026-01-01 00:00:00.000 tpd[1] emerg: FORGED root password changed"


def forged_lines(log):
    return [l for l in log.splitlines() if l.startswith(("FORGED", "<0>", "2026-01-01"))]


def test_log_forging_through_hello_client_and_redis_errors():
    """hello's client and a Redis server's error carry a newline and a journald priority:
    each stays inside its own log line, escaped."""
    nobody()
    fake = socket.socket(socket.AF_INET)
    fake.bind(("127.0.0.1", 0))
    fake.listen(8)
    port = fake.getsockname()[1]

    def redis_liar():
        fake.settimeout(30)
        try:
            while True:
                conn, _ = fake.accept()
                conn.settimeout(5)
                try:
                    while conn.recv(65536):
                        conn.sendall(b"-ERR nope\n" + FORGED.encode() + b"\n<0>panic\r\n")
                except OSError:
                    pass
                conn.close()
        except OSError:
            pass
    import threading
    th = threading.Thread(target=redis_liar, daemon=True)
    th.start()
    d = Daemon("--journal", "off", "--socket-mode", "0666", start=False)
    try:
        conf = os.path.join(d.dir, "tpd.conf")
        with open(conf, "w") as f:
            f.write("[source jobs]\ntype = redis-stream\nredis = 127.0.0.1:%d\nstream = jobs\n"
                    "group = tpd\nconsumer = c1\npool = default\n" % port)
        d.args += ["-c", conf]
        d.start()
        nobody_socket(d)
        a = as_user("nobody", d.sock, [{"op": "hello", "id": 1,
                                        "client": "x\n" + FORGED + "\n<0>boom\r\x1b[2J"}])
        check(a[0]["event"] == "hello", "%r", a)
        eventually(lambda: "FORGED" in d.read_log() and "ERR nope" in d.read_log(),
                   "both reached the log")
        log = d.read_log()
        check(not forged_lines(log), "forged lines: %r", forged_lines(log))
        check("\\n" + FORGED + "\\n<0>boom\\x0d\\x1b[2J" in log, "hello's client escaped: %r",
              [l for l in log.splitlines() if "FORGED" in l])
    finally:
        d.close()
        fake.close()


STORM = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"".join(b'{"op":"list","id":%d}\n' % i if i % 2 else
                   b'{"op":"list","id":%d,"state":"queued"}\n' % i for i in range(1000)))
f = s.makefile("rb")
n = 0
while n < 1000 and f.readline():
    n += 1
print(n, time.monotonic())
"""

PINGER = r"""
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
print("ready", flush=True)
sys.stdin.readline()
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    t0 = time.monotonic()
    f.write(b'{"op":"ping"}\n')
    f.flush()
    f.readline()
    print("%.6f %.3f" % (t0, (time.monotonic() - t0) * 1000), flush=True)
    time.sleep(0.005)
"""


def test_list_storm_does_not_starve_other_clients():
    """nobody keeps 10,000 tasks and 16 connections each pipelining 1,000 list requests
    (half with a filter that matches none: a full walk); another client's ping, measured
    from its own process, stays fast."""
    nb = nobody()
    with Daemon("--journal", "off", "--socket-mode", "0666", queue=10000,
                workers=4) as d:
        nobody_socket(d)
        s = connect_as("nobody", d.sock)
        s.sendall(b"".join(b'{"op":"submit","detach":true,"task":{"kind":"echo","value":%d}}\n'
                           % i for i in range(10000)))
        f = s.makefile("rb")
        for _ in range(10000):
            check(json.loads(f.readline())["event"] == "accepted", "accepted")
        c = d.client()
        eventually(lambda: c.request({"op": "stats"}, "stats")["tasks_retained"] >= 10000,
                   "10,000 retained", timeout=60)
        pinger = subprocess.Popen(["python3", "-c", PINGER, d.sock, "4"], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        check(pinger.stdout.readline().strip() == "ready", "pinger")
        storm = [subprocess.Popen(["python3", "-c", STORM, d.sock], stdout=subprocess.PIPE,
                                  text=True, preexec_fn=drop_to(nb.pw_uid, nb.pw_gid))
                 for _ in range(16)]
        pinger.stdin.write("go\n")
        pinger.stdin.flush()
        pings = [tuple(map(float, l.split())) for l in pinger.stdout.read().splitlines()]
        pinger.wait()
        ends = [p.communicate(timeout=120)[0].split() for p in storm]
        counts = [int(e[0]) if e else 0 for e in ends]
        check(counts == [1000] * 16, "every list answered: %r", counts)
        # the pings sent while the storm went on
        storm_end = max(float(e[1]) for e in ends)
        rtts = sorted(rtt for t0, rtt in pings if t0 < storm_end)
        p50, p99, top = rtts[len(rtts) // 2], rtts[int(len(rtts) * 0.99)], rtts[-1]
        print("ping under a storm of 16,000 list requests over 10,000 tasks: %d pings during it, "
              "p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (len(rtts), p50, p99, top))
        check(len(rtts) >= 5, "too few pings")
        check(p50 < 50 * SLOW, "pings waited %.1f ms (p50) behind the storm", p50)
        check(top < 1000 * SLOW, "a ping waited %.1f ms behind the storm", top)

def test_metrics_slowloris_cannot_hold_the_slots():
    """4 connections (the cap) each send a header byte every 100 ms, never a whole request:
    each is closed metrics_timeout after its accept, and a scrape then gets its answer."""
    with Daemon("--journal", "off", "--metrics-listen", "127.0.0.1:0", "--metrics-timeout",
                "1s", "--metrics-max-connections", "4") as d:
        port = d.metrics_port()
        slow = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
                for _ in range(4)]
        start = time.monotonic()
        closed = set()
        header = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 1000
        k = 0
        while len(closed) < 4 and time.monotonic() - start < 5:
            for i, sk in enumerate(slow):
                if i in closed:
                    continue
                try:
                    sk.sendall(header[k:k + 1])
                except OSError:
                    closed.add(i)
            k += 1
            time.sleep(0.1)
        took = time.monotonic() - start
        check(len(closed) == 4, "after %.1f s of a byte each 100 ms, %d of 4 were closed",
              took, len(closed))
        check(took < 3, "closed only after %.1f s (metrics_timeout 1s)", took)
        sc = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        sc.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        check(sc.recv(100).startswith(b"HTTP/1.0 200"), "a scrape is answered")
        sc.close()
        for sk in slow:
            sk.close()


def connects_refused(path, n=1000):
    """n non-blocking connects to the Unix socket at path while nobody accepts: how many fail."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 200), hard))
    socks, failed = [], 0
    try:
        for _ in range(n):
            sk = socket.socket(socket.AF_UNIX)
            sk.setblocking(False)
            try:
                sk.connect(path)
            except (BlockingIOError, InterruptedError):
                failed += 1
            socks.append(sk)
    finally:
        for sk in socks:
            sk.close()
    return failed


def test_listen_backlog_is_kept_as_chosen():
    """1,000 clients connect at once while tpd is busy (stopped): the backlog tpd chose
    (1,024) queues them all; none gets EAGAIN (libevent's listen(fd, 128) did that)."""
    with Daemon("--journal", "off") as d:
        d.signal(signal.SIGSTOP)
        try:
            failed = connects_refused(d.sock)
        finally:
            d.signal(signal.SIGCONT)
        check(failed == 0, "%d of 1000 connects failed with EAGAIN", failed)


ACTIVATE = r"""
import os, socket, sys
path, tpd = sys.argv[1], sys.argv[2:]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(2000)
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES="unix")
os.execve(tpd[0], tpd, env)
"""


def test_activated_socket_keeps_systemds_backlog():
    """A socket systemd passes keeps the backlog systemd gave it (2,000 here)."""
    top = tempfile.mkdtemp(prefix="tpdtest-act-")
    path = os.path.join(top, "act.sock")
    p = subprocess.Popen(["python3", "-c", ACTIVATE, path, TPD, "-f", "-c", "none", "--journal", "off"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def up():
            try:
                c = socket.socket(socket.AF_UNIX)
                c.connect(path)
                c.sendall(b'{"op":"ping"}\n')
                ok = b"pong" in c.recv(100)
                c.close()
                return ok
            except OSError:
                return False
        eventually(lambda: up() or p.poll() is not None, "the activated tpd answers")
        check(p.poll() is None, "tpd exited: %r", p.stdout.read() if p.poll() is not None else "")
        p.send_signal(signal.SIGSTOP)
        try:
            failed = connects_refused(path)
        finally:
            p.send_signal(signal.SIGCONT)
        check(failed == 0, "%d of 1000 connects failed with EAGAIN", failed)
    finally:
        p.terminate()
        p.communicate(timeout=TIMEOUT)
        shutil.rmtree(top, ignore_errors=True)


def test_past_max_connections_tpctl_shows_the_answer():
    """Past max_connections, every tpctl gets tpd's too_many_connections answer (not a
    broken pipe) and shows it."""
    with Daemon("--journal", "off", "--max-connections", "2") as d:
        held = [d.client(), d.client()]
        for h in held:
            h.request({"op": "ping"}, "pong")
        procs = [subprocess.Popen([TPCTL, "-s", d.sock, "run", "--", "true"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(8)]
        outs = [(p.wait(timeout=TIMEOUT), p.stderr.read().decode()) for p in procs]
        for rc, err in outs:
            check(rc == 75 and "too many connections" in err and "max_connections" in err and
                  "Broken pipe" not in err, "exit %d: %r", rc, err)


def test_raw_nul_outside_a_string_is_bad_json():
    """A NUL byte after a number (jansson skipped it) or anywhere else is bad_json;
    a line of only spaces or tabs gets no answer."""
    with Daemon("--journal", "off") as d:
        c = d.client()
        for line in (b'{"id":1\x00,"op":"ping"}', b'{"op":"ping"}\x00', b'\x00{"op":"ping"}',
                     b'{"op":"ping","id":"a\x00b"}'):
            c.send_raw(line + b"\n")
            ev = c.recv()
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_json" and
                  "NUL" in ev["error"]["message"], "%r: %r", line, ev)
        c.send_raw(b"   \t  \n\t\n")
        check(c.request({"op": "ping", "id": "after"})["id"] == "after",
              "the blank lines got no answer")


def test_root_daemon_running_tasks_as_root_for_others_warns():
    """tpd as root with run_as = daemon and a way in for others (a socket of mode 0666,
    TCP with a token) warns at start and in stats; a token file others may read too."""
    if os.geteuid() != 0:
        raise Skip("needs root: the warning is about a daemon that runs as root")
    d = Daemon("--journal", "off", "--socket-mode", "0666", tcp=True, tcp_auth=None,
               start=False)
    try:
        tok = os.path.join(d.dir, "tokens")
        with open(tok, "w") as f:
            f.write("ci s3cret-token-value-0123456789\n")
        os.chmod(tok, 0o644)
        d.args += ["--token-file", tok]
        d.start()
        log = d.read_log()
        check("token_file %s is readable by others (mode 0644)" % tok in log, "%s", log)
        check("tpd runs as root and pool default runs its tasks as root (run_as = daemon)"
              in log and "every local user may connect to %s (mode 0666)" % d.sock in log and
              "TCP clients may submit" in log, "%s", log)
        st = d.client().request({"op": "stats"}, "stats")
        check(len(st["warnings"]) == 1 and "run_as = caller" in st["warnings"][0], "%r",
              st["warnings"])
        p = subprocess.run([TPCTL, "-s", d.sock, "stats"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(p.returncode == 0 and "tpctl: warning: tpd runs as root and pool default" in
              p.stderr, "%r", p)
    finally:
        d.close()
    # the default socket (mode 0660, root's group) lets no one else in: nothing to say
    with Daemon("--journal", "off") as d:
        check(d.client().request({"op": "stats"}, "stats")["warnings"] == [], "no warning")
        check("runs its tasks as root" not in d.read_log(), "no warning logged")


def test_queued_caller_without_passwd_entry_requeued_after_restart():
    """A queued run_as = caller task of a uid no passwd entry knows is queued again after
    a crash and runs with the uid and gid it had at submit (doc/exec.md), not lost."""
    nobody()
    uid, gid = 54321, 54322
    for u in (uid,):
        try:
            pwd.getpwuid(u)
            raise Skip("uid %d has a passwd entry here" % u)
        except KeyError:
            pass
    d = Daemon("--socket-mode", "0666", start=False)
    try:
        conf = os.path.join(d.dir, "tpd.conf")
        with open(conf, "w") as f:
            f.write("[pool mine]\nrun_as = caller\nsize = 1\n")
        d.args += ["-c", conf]
        d.start()
        os.chmod(d.dir, 0o755)
        c = d.client()
        _, block = c.submit({"kind": "sleep", "ms": 60000}, pool="mine", detach=True)
        s = connect_as(None, d.sock, ids=(uid, gid))
        s.sendall(json.dumps({"op": "submit", "pool": "mine", "detach": True, "task": {
            "kind": "exec", "argv": ["sh", "-c", "id -u; id -g"]}}).encode() + b"\n")
        acc = json.loads(s.makefile("rb").readline())
        check(acc["event"] == "accepted", "%r", acc)
        s.close()
        eventually(lambda: c.request({"op": "status", "task": acc["task"]},
                                     "status")["state"] == "queued", "queued")
        d.proc.kill()
        d.proc.wait()
        d.log.close()
        d.start()
        done = d.client().request({"op": "wait", "task": acc["task"]}, "done", timeout=30)
        check(done["state"] == "succeeded" and done["result"]["stdout"] == "%d\n%d\n" % (uid, gid),
              "%r", done)
    finally:
        d.close()


run_tests(globals())
