#!/usr/bin/env python3
"""run_as against the real daemon: a pool's tasks run as the daemon, as the
submitting Unix peer (caller) or as a named user, with that user's uid, gid,
supplementary groups (initgroups'), HOME, USER, LOGNAME and SHELL, and its
home as the default cwd. A TCP submit to a caller pool is forbidden, and a
daemon without the privileges refuses such a configuration (tpd -n and at
start). Clients run as other users through a child process that drops its
own credentials (setgroups, setgid, setuid) before connecting."""
import grp
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys

from tpdtest import TIMEOUT, TPD, Daemon, Skip, check, run_tests

TASK = ("echo uid=$(id -u) gid=$(id -g) groups=$(id -G | tr ' ' ,); pwd; "
        "echo HOME=$HOME USER=$USER LOGNAME=$LOGNAME SHELL=$SHELL")

# Run as another user: connect to SOCK, submit TASK to POOL, print the done.
CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((json.dumps({"op": "submit", "id": 1, "pool": sys.argv[2],
                       "task": json.loads(sys.argv[3])}) + "\n").encode())
f = s.makefile()
for line in f:
    ev = json.loads(line)
    if ev["event"] in ("done", "error", "rejected"):
        print(line.strip())
        break
"""


def need_root():
    if os.geteuid() != 0:
        raise Skip("switching users needs root")


def a_user():
    """A user with a home that exists and more than one group (initgroups'), if any."""
    best = None
    for pw in pwd.getpwall():
        if pw.pw_uid == 0 or pw.pw_name in ("daemon", "caller") or not os.path.isdir(pw.pw_dir):
            continue
        groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
        if best is None or len(groups) > len(os.getgrouplist(best.pw_name, best.pw_gid)):
            best = pw
    if best is None:
        raise Skip("no user with an existing home directory on this machine")
    return best


def client_python():
    """A python3 that another user may run (the test's own may be in root's home)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        st = os.stat(exe)
        if st.st_mode & 0o001 and all(os.stat(p).st_mode & 0o001 for p in
                                      [os.path.dirname(exe)] + parents(exe)):
            return exe
    raise Skip("no python3 that other users may run")


def parents(path):
    out = []
    path = os.path.dirname(os.path.realpath(path))
    while path != "/":
        out.append(path)
        path = os.path.dirname(path)
    return out


def tpd_for_others(d):
    """tpd where another user may run it: a copy in d's directory, since the build
    may be in a directory that others cannot traverse (a checkout in a mode 0700 dir)."""
    path = os.path.join(d.dir, "tpd")
    shutil.copy2(TPD, path)
    os.chmod(path, 0o755)
    for p in parents(path):
        if not os.stat(p).st_mode & 0o001:
            raise Skip("other users cannot reach %s: %s is not searchable by them" % (path, p))
    return path


def as_user(uid, gid, groups, d, pool, task):
    """Submits task to pool as uid:gid (with its own groups) and returns the done/error."""
    def drop():
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
    p = subprocess.run([client_python(), "-c", CLIENT, d.sock, pool, json.dumps(task)],
                       preexec_fn=drop, capture_output=True, text=True, timeout=TIMEOUT,
                       cwd="/")
    check(p.returncode == 0 and p.stdout, "client as uid %d: %r", uid, p)
    return json.loads(p.stdout)


def parse(out):
    lines = out.split("\n")
    vals = dict(kv.split("=", 1) for kv in (lines[0] + " " + lines[2]).split())
    vals["cwd"] = lines[1]
    return vals


def start(conf, **kw):
    d = Daemon(start=False, **kw)
    os.chmod(d.dir, 0o755)   # other users reach the socket
    path = os.path.join(d.dir, "tpd.conf")
    with open(path, "w") as f:
        f.write(conf)
    d.args += ["-c", path, "--socket-mode", "0666"]
    d.start()
    return d


def sh(script, **fields):
    return dict(kind="exec", argv=["sh", "-c", script], **fields)


def test_run_as_caller():
    need_root()
    u = a_user()
    with start("[pool mine]\nrun_as = caller\n") as d:
        # the client's own groups are not the task's: those come from initgroups
        done = as_user(u.pw_uid, u.pw_gid, [u.pw_gid], d, "mine", sh(TASK))
        check(done["state"] == "succeeded", "%r", done)
        v = parse(done["result"]["stdout"])
        want_groups = sorted(set(os.getgrouplist(u.pw_name, u.pw_gid)))
        check(v["uid"] == str(u.pw_uid) and v["gid"] == str(u.pw_gid), "%r", v)
        check(sorted(int(g) for g in v["groups"].split(",")) == want_groups,
              "groups %s, initgroups gives %r", v["groups"], want_groups)
        check(v["HOME"] == u.pw_dir and v["USER"] == u.pw_name and v["LOGNAME"] == u.pw_name and
              v["SHELL"] == (u.pw_shell or "/bin/sh"), "%r", v)
        check(v["cwd"] == os.path.realpath(u.pw_dir), "cwd is the home: %r", v)
        # nobody's home does not exist: the task starts in /
        nb = pwd.getpwnam("nobody")
        done = as_user(nb.pw_uid, nb.pw_gid, [nb.pw_gid], d, "mine", sh(TASK))
        v = parse(done["result"]["stdout"])
        check(v["uid"] == str(nb.pw_uid) and v["HOME"] == nb.pw_dir and v["cwd"] == "/", "%r", v)
        # a cwd and an env given by the request win
        done = as_user(u.pw_uid, u.pw_gid, [u.pw_gid], d, "mine",
                       sh(TASK, cwd="/tmp", env={"HOME": "/elsewhere"}))
        v = parse(done["result"]["stdout"])
        check(v["cwd"] == "/tmp" and v["HOME"] == "/elsewhere" and v["USER"] == u.pw_name, "%r", v)
        # a uid without a passwd entry: its uid and gid, no variables, in /
        done = as_user(54321, 54321, [54321], d, "mine", sh(TASK))
        v = parse(done["result"]["stdout"])
        check(v["uid"] == "54321" and v["groups"] == "54321" and v["HOME"] == "" and
              v["cwd"] == "/", "%r", v)
        # the default pool still runs as the daemon
        done = as_user(u.pw_uid, u.pw_gid, [u.pw_gid], d, "default", sh("id -u"))
        check(done["result"]["stdout"] == "%d\n" % os.geteuid(), "%r", done)
    print("checked: run_as caller: uid, gid, initgroups' groups, HOME/USER/LOGNAME/SHELL, "
          "home or / as cwd")


def test_run_as_named_user():
    need_root()
    u = a_user()
    with start("[pool as]\nrun_as = %s\n" % u.pw_name) as d:
        c = d.client()
        rid, ev = c.submit(sh(TASK), pool="as")
        done = c.done(rid)
        check(done["state"] == "succeeded", "%r", done)
        v = parse(done["result"]["stdout"])
        check(v["uid"] == str(u.pw_uid) and v["gid"] == str(u.pw_gid) and
              sorted(int(g) for g in v["groups"].split(",")) ==
              sorted(set(os.getgrouplist(u.pw_name, u.pw_gid))), "%r", v)
        check(v["HOME"] == u.pw_dir and v["USER"] == u.pw_name and
              v["cwd"] == os.path.realpath(u.pw_dir), "%r", v)
        # a cwd the user may not enter is refused as that user, not entered as root
        private = os.path.join(d.dir, "private")
        os.mkdir(private, 0o700)
        rid, ev = c.submit(sh("pwd", cwd=private), pool="as")
        done = c.done(rid)
        check(done["state"] == "failed" and done["error"]["code"] == "spawn_failed" and
              "cannot chdir to %s: Permission denied" % private in done["error"]["message"],
              "%r", done)
    print("checked: run_as USER: its uid, gid, groups, variables and home")


def test_tcp_submit_to_caller_pool_is_forbidden():
    with start("[pool mine]\nrun_as = caller\n", tcp=True) as d:
        c = d.client(tcp=True)
        ev = c.request({"op": "submit", "pool": "mine", "task": sh("touch %s/ran" % d.dir)})
        check(ev["event"] == "error" and ev["error"]["code"] == "forbidden" and
              "run_as = caller" in ev["error"]["message"], "%r", ev)
        ev = c.request({"op": "submit", "pool": "mine", "task": {"kind": "echo", "value": 1}})
        check(ev["error"]["code"] == "forbidden", "every kind: %r", ev)
        check(not os.path.exists(os.path.join(d.dir, "ran")), "the task ran")
        check(re.search(r"\(127\.0\.0\.1:\d+\): submit to pool mine forbidden: run_as = caller",
                        d.read_log()), "the refusal is not logged: %s", d.read_log()[-2000:])
        # over the Unix socket it runs
        u = d.client()
        rid, ev = u.submit({"kind": "echo", "value": 1}, pool="mine")
        check(u.done(rid)["state"] == "succeeded", "Unix submit")
    print("checked: TCP submit to a run_as caller pool: forbidden, nothing runs")


def test_unknown_user_is_a_config_error():
    d = Daemon(start=False)
    try:
        path = os.path.join(d.dir, "tpd.conf")
        with open(path, "w") as f:
            f.write("[pool x]\nrun_as = no-such-user-tpd\n")
        p = subprocess.run([TPD, "-n", "-c", path], capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(p.returncode == 1 and "%s:2: [pool x] run_as: no user named \"no-such-user-tpd\"" %
              path in p.stderr, "%r", p)
    finally:
        d.close()
    print("checked: tpd -n: run_as names a user that does not exist")


def test_unprivileged_daemon_refuses_run_as():
    need_root()
    nb = pwd.getpwnam("nobody")
    d = Daemon(start=False)
    try:
        os.chmod(d.dir, 0o777)
        path = os.path.join(d.dir, "tpd.conf")
        tpd = tpd_for_others(d)

        def drop():
            os.setgroups([])
            os.setgid(nb.pw_gid)
            os.setuid(nb.pw_uid)
        for run_as in ("caller", "root"):
            with open(path, "w") as f:
                f.write("[pool x]\nrun_as = %s\n" % run_as)
            os.chmod(path, 0o644)
            p = subprocess.run([tpd, "-n", "-c", path], preexec_fn=drop, capture_output=True,
                               text=True, timeout=TIMEOUT)
            check(p.returncode == 1 and ("run_as: %s needs root or the capabilities CAP_SETUID "
                                         "and CAP_SETGID" % run_as) in p.stderr, "%r", p)
            p = subprocess.run([tpd, "-f", "-c", path, "-s", os.path.join(d.dir, "s")],
                               preexec_fn=drop, capture_output=True, text=True, timeout=TIMEOUT)
            check(p.returncode != 0 and "CAP_SETUID" in p.stderr, "start refused: %r", p)
        with open(path, "w") as f:
            f.write("[pool x]\nrun_as = daemon\n")
        p = subprocess.run([tpd, "-n", "-c", path], preexec_fn=drop, capture_output=True,
                           text=True, timeout=TIMEOUT)
        check(p.returncode == 0, "run_as daemon needs nothing: %r", p)
    finally:
        d.close()
    print("checked: tpd as nobody: tpd -n and the start refuse run_as caller and a user")


run_tests(globals())
