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

from tpdtest import TPD, TPCTL, TIMEOUT, Daemon, Skip, as_user, check, eventually, run_tests


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
    tpd = subprocess.Popen([TPD, "-f", "--journal", "off", "-w", "1"], env=env,
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
            p = subprocess.run([TPD, "-f", "--journal", "off", "-s", os.path.join(d, "tpd.sock")],
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


run_tests(globals())
