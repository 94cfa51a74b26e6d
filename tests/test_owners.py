#!/usr/bin/env python3
"""A task is for its owner and for admins: wait, status, cancel and its streamed output,
over the Unix socket (uid:N) and over TCP (token:NAME); and no TCP listener without a
token unless tcp_auth = none. Real daemons, clients as other users (nobody) and tokens."""
import json
import os
import pwd
import re
import signal
import subprocess
import sys

from tpdtest import TPD, TPCTL, TIMEOUT, Daemon, Skip, check, eventually, run_tests

# A client run as another user: sends each request of argv[2] (JSON) and prints, as
# JSON, the first answer carrying its id (events without one, such as output, skipped).
CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(float(sys.argv[3]))
s.connect(sys.argv[1])
f = s.makefile("rwb")
out = []
for i, req in enumerate(json.loads(sys.argv[2])):
    req.setdefault("id", 1000 + i)
    f.write((json.dumps(req) + "\n").encode())
    f.flush()
    while True:
        ev = json.loads(f.readline())
        if ev.get("id") == req["id"]:
            out.append(ev)
            break
print(json.dumps(out))
"""


def need_root():
    if os.geteuid() != 0:
        raise Skip("needs root to run a client as nobody")


def python_for(user):
    """A python3 that user may run (this one may live under root's home)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        path = os.path.realpath(exe)
        parts = path.split(os.sep)
        # every directory on the way must be searchable by others, the file runnable
        if all(os.stat(os.sep.join(parts[:i]) or "/").st_mode & 0o001
               for i in range(1, len(parts))) and os.stat(path).st_mode & 0o001:
            return exe
    raise Skip("no python3 that %s may run" % user)


def as_user(user, sock, requests):
    """The answers to requests sent by a client that runs as user, on one connection."""
    pw = pwd.getpwnam(user)

    def become():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    r = subprocess.run([python_for(user), "-c", CLIENT, sock, json.dumps(requests), str(TIMEOUT)],
                       preexec_fn=become, capture_output=True, text=True, timeout=TIMEOUT * 2,
                       cwd="/")
    check(r.returncode == 0, "the client as %s: %r", user, r.stderr)
    return json.loads(r.stdout)


def unix_daemon(*args):
    """A daemon whose socket any user may reach (0666, in a directory they may enter)."""
    d = Daemon("--socket-mode", "0666", *args, start=False)
    os.chmod(d.dir, 0o755)
    d.start()
    return d


def forbidden(ev, task):
    return (ev["event"] == "error" and ev["error"]["code"] == "forbidden" and
            ev["error"]["message"].startswith("task %d is not yours" % task))


def sleeper(c, ms=60000):
    """Submits a sleep task, detached; returns its id once it runs."""
    acc = c.request({"op": "submit", "detach": True, "task": {"kind": "sleep", "ms": ms}})
    check(acc["event"] == "accepted", "%r", acc)
    eventually(lambda: c.request({"op": "status", "task": acc["task"]})["state"] == "running",
               "task %d runs" % acc["task"])
    return acc["task"]


def stream_refused(answer, task):
    """wait with stream: true by another: forbidden (a daemon without it: skipped)."""
    if answer["event"] == "error" and answer["error"]["code"] == "bad_request" and \
            "stream" in answer["error"]["message"]:
        return None     # this build's wait takes no stream: nothing streams to others
    return forbidden(answer, task)


# ---------------------------------------------------------------- Unix peers

def test_nobody_cannot_read_roots_output_nor_cancel_its_task():
    """The finding: nobody waited on root's exec task and read its stdout, and cancelled it."""
    need_root()
    with unix_daemon() as d:
        c = d.client()
        rid, acc = c.submit({"kind": "exec", "argv": ["sh", "-c", "echo root-secret-$((6*7))"]})
        done = c.done(rid)
        check(done["result"]["stdout"] == "root-secret-42\n", "%r", done)
        finished = acc["task"]
        running = sleeper(c)
        answers = as_user("nobody", d.sock, [
            {"op": "wait", "task": finished},
            {"op": "status", "task": finished},
            {"op": "wait", "task": finished, "stream": True},
            {"op": "cancel", "task": running},
            {"op": "wait", "task": running},
            {"op": "status", "task": running},
            {"op": "wait", "task": running, "stream": True, "from": "start"},
        ])
        for a, t in zip(answers, [finished, finished, None, running, running, running, None]):
            if t is not None:
                check(forbidden(a, t), "nobody got: %r", a)
        for a, t in ((answers[2], finished), (answers[6], running)):
            check(stream_refused(a, t) is not False, "streamed to nobody: %r", a)
        text = json.dumps(answers)
        check("root-secret" not in text, "nobody read root's output: %s", text)
        check("uid:0" not in text, "the answers name the owner: %s", text)
        st = c.request({"op": "status", "task": running})
        check(st["state"] == "running", "nobody's cancel stopped root's task: %r", st)
        log = d.read_log()
        for op, t in (("wait", finished), ("status", finished), ("cancel", running)):
            check(re.search(r"\(uid 65534 pid \d+, uid:65534\): %s task %d forbidden: owned by "
                            r"uid:0" % (op, t), log), "the refusal is not logged:\n%s",
                  log[-3000:])
        check(c.request({"op": "cancel", "task": running})["event"] == "ok", "root cancels")


def test_owner_sees_its_own_and_admins_see_all():
    need_root()
    with unix_daemon() as d:
        uid = pwd.getpwnam("nobody").pw_uid
        mine = as_user("nobody", d.sock, [
            {"op": "submit", "detach": True, "task": {"kind": "echo", "value": "n1"}},
            {"op": "submit", "detach": True, "task": {"kind": "sleep", "ms": 60000}},
        ])
        echo, sleep = mine[0]["task"], mine[1]["task"]
        c = d.client()
        eventually(lambda: c.request({"op": "status", "task": sleep})["state"] == "running",
                   "nobody's sleep runs")
        # the owner, on another connection: wait, status, cancel its own
        again = as_user("nobody", d.sock, [
            {"op": "wait", "task": echo},
            {"op": "status", "task": echo},
            {"op": "status", "task": sleep},
        ])
        check(again[0]["event"] == "done" and again[0]["result"]["value"] == "n1", "%r", again[0])
        check(again[1]["owner"] == "uid:%d" % uid, "%r", again[1])
        check(again[2]["state"] == "running", "%r", again[2])
        # root (an admin) acts on nobody's tasks
        st = c.request({"op": "status", "task": sleep})
        check(st["owner"] == "uid:%d" % uid, "status shows the owner to an admin: %r", st)
        check(c.request({"op": "wait", "task": echo})["event"] == "done", "root waits")
        rid = c.send({"op": "wait", "task": sleep})
        check(c.request({"op": "cancel", "task": sleep})["event"] == "ok", "root cancels")
        check(c.done(rid)["state"] == "cancelled", "the wait sees the cancel")
        # a task that does not exist is no_such_task for anyone (no forbidden then)
        a = as_user("nobody", d.sock, [{"op": "status", "task": 99999}])[0]
        check(a["error"]["code"] == "no_such_task", "%r", a)


def test_admin_group_member_sees_others_tasks():
    need_root()
    with unix_daemon("--admin-group", "nogroup") as d:
        c = d.client()
        t = sleeper(c)
        a = as_user("nobody", d.sock, [{"op": "status", "task": t},
                                       {"op": "cancel", "task": t}])
        check(a[0]["event"] == "status" and a[0]["owner"] == "uid:0", "%r", a[0])
        check(a[1]["event"] == "ok", "a member of the admin group cancels: %r", a[1])


def test_a_second_user_is_not_an_owner_of_the_firsts_tasks():
    # two non-root users: daemon (uid 1) submits, nobody is refused, and the reverse
    need_root()
    with unix_daemon() as d:
        mine = as_user("daemon", d.sock, [
            {"op": "submit", "detach": True, "task": {"kind": "sleep", "ms": 60000}}])[0]
        t = mine["task"]
        c = d.client()
        eventually(lambda: c.request({"op": "status", "task": t})["state"] == "running", "runs")
        a = as_user("nobody", d.sock, [{"op": "cancel", "task": t}, {"op": "wait", "task": t}])
        check(forbidden(a[0], t) and forbidden(a[1], t), "%r", a)
        check(c.request({"op": "status", "task": t})["state"] == "running", "still running")
        b = as_user("daemon", d.sock, [{"op": "cancel", "task": t}])[0]
        check(b["event"] == "ok", "its owner cancels: %r", b)


# ---------------------------------------------------------------- TCP tokens

def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def tcp_client(d, token):
    c = d.client(tcp=True)
    ev = c.request({"op": "hello", "token": token})
    check(ev["event"] == "hello", "%r", ev)
    return c


def test_each_token_sees_its_own_tasks_and_the_admin_token_all():
    with Daemon(tcp=True, tcp_auth="token", start=False) as d:
        tok = write(os.path.join(d.dir, "tokens"), "ci tok-ci\nalice tok-alice\n")
        adm = write(os.path.join(d.dir, "admin"), "boss tok-boss\n")
        d.args += ["--token-file", tok, "--admin-token-file", adm]
        d.start()
        ci, alice, boss = (tcp_client(d, "tok-" + n) for n in ("ci", "alice", "boss"))
        t_ci = sleeper(ci)
        rid, acc = alice.submit({"kind": "exec", "argv": ["echo", "alice-private"]})
        check(alice.done(rid)["result"]["stdout"] == "alice-private\n", "alice's task ran")
        t_alice = acc["task"]
        # each is refused the other's, on every op
        for c, t in ((alice, t_ci), (ci, t_alice)):
            for op in ("wait", "status", "cancel"):
                ev = c.request({"op": op, "task": t})
                check(forbidden(ev, t), "%s on %d: %r", op, t, ev)
            ev = c.request({"op": "wait", "task": t, "stream": True})
            check(stream_refused(ev, t) is not False, "streamed: %r", ev)
        check("alice-private" not in json.dumps(ci.request({"op": "wait", "task": t_alice})),
              "ci read alice's output")
        check(ci.request({"op": "status", "task": t_ci})["state"] == "running", "not cancelled")
        # the same token on another connection is the same owner
        ci2 = tcp_client(d, "tok-ci")
        st = ci2.request({"op": "status", "task": t_ci})
        check(st["owner"] == "token:ci", "%r", st)
        check(alice.request({"op": "status", "task": t_alice})["owner"] == "token:alice", "alice")
        # the admin token, and root on the Unix socket, see and act on all
        check(boss.request({"op": "wait", "task": t_alice})["result"]["stdout"] ==
              "alice-private\n", "the admin token waits on alice's task")
        check(d.client().request({"op": "status", "task": t_ci})["owner"] == "token:ci", "root")
        check(boss.request({"op": "cancel", "task": t_ci})["event"] == "ok", "boss cancels")
        _, acc = boss.submit({"kind": "echo", "value": 1})
        st = boss.request({"op": "status", "task": acc["task"]})
        check(st["owner"] == "token:boss", "an admin's task is its token's: %r", st)
        check(forbidden(ci.request({"op": "status", "task": acc["task"]}), acc["task"]),
              "ci sees boss's task")
        log = d.read_log()
        check(re.search(r"\(127\.0\.0\.1:\d+, token:alice\): wait task %d forbidden: owned by "
                        r"token:ci" % t_ci, log), "not logged:\n%s", log[-3000:])


def test_refused_hellos_are_logged_with_the_peer():
    with Daemon(tcp=True, tcp_auth="token", start=False) as d:
        d.args += ["--token-file", write(os.path.join(d.dir, "tokens"), "ci tok-ci\n")]
        d.start()
        c = d.client(tcp=True)
        check(c.request({"op": "hello", "token": "guess"})["error"]["code"] == "unauthenticated",
              "a wrong token")
        check(c.request({"op": "hello"})["error"]["code"] == "unauthenticated", "no token")
        log = d.read_log()
        check(re.search(r"notice: connection \d+ \(127\.0\.0\.1:\d+\): hello refused: a token "
                        r"that is not accepted", log), "%s", log[-2000:])
        check(re.search(r"notice: connection \d+ \(127\.0\.0\.1:\d+\): hello refused: no token",
                        log), "%s", log[-2000:])
        check("guess" not in log, "the log shows the token")


# ---------------------------------------------------------------- tcp_auth

def test_a_tcp_listener_without_a_token_file_stops_the_start():
    with Daemon(start=False) as d:
        args = ["-s", d.sock, "-l", "127.0.0.1:0"]
        r = subprocess.run([TPD, "-f", "-c", "none"] + args, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=TIMEOUT)
        lines = r.stderr.strip().splitlines()
        check(r.returncode != 0 and len(lines) == 1, "one line and a failure: %r", r)
        check("tcp 127.0.0.1:0: a TCP listener needs a token" in lines[0] and
              "token_file" in lines[0] and "tcp_auth = none" in lines[0], "%r", lines[0])
        check(not os.path.exists(d.sock), "it listened on its socket")
        r = subprocess.run([TPD, "-n", "-c", "none"] + args, capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 1 and r.stdout == "" and
              r.stderr.startswith("tpd: -l 127.0.0.1:0: tcp 127.0.0.1:0: a TCP listener needs "
                                  "a token") and
              len(r.stderr.splitlines()) == 1, "tpd -n: %r", r)
        # the same from the file, with the address it names
        conf = write(os.path.join(d.dir, "tpd.conf"), "[daemon]\nlisten = 127.0.0.1:7\n")
        r = subprocess.run([TPD, "-n", "-c", conf], capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(r.returncode == 1 and "tcp 127.0.0.1:7: a TCP listener needs a token" in r.stderr,
              "tpd -n -c: %r", r)
        # an admin token file alone is a token too; tcp_auth = none passes -n silently
        adm = write(os.path.join(d.dir, "admin"), "boss tok-boss\n")
        for extra in (["--admin-token-file", adm], ["--tcp-auth", "none"]):
            r = subprocess.run([TPD, "-n", "-c", "none"] + args + extra, capture_output=True, text=True,
                               timeout=TIMEOUT)
            check((r.returncode, r.stdout, r.stderr) ==
                  (0, "configuration OK: no file (-c none)\n", ""),
                  "tpd -n %r: %r", extra, r)


def test_tcp_auth_none_starts_warns_and_says_so_in_stats():
    with Daemon(tcp=True, tcp_auth="none") as d:
        log = d.read_log()
        check(re.search(r"warning: tcp 127\.0\.0\.1:0: tcp_auth = none: anyone who can connect "
                        r"may submit tasks, without a token", log), "%s", log[-2000:])
        t = d.client(tcp=True)
        check(t.request({"op": "stats"})["tcp_auth"] == "none", "stats says none")
        _, acc = t.submit({"kind": "echo", "value": 1})
        check(t.request({"op": "status", "task": acc["task"]})["owner"] == "tcp:anonymous",
              "anonymous")
        # every anonymous TCP client is the same owner; a Unix peer that is not admin is not
        t2 = d.client(tcp=True)
        check(t2.request({"op": "status", "task": acc["task"]})["event"] == "status", "same owner")
        out = tpctl_stats(d)
        check("tpctl: warning: the daemon lets TCP clients in without a token (tcp_auth = none)\n"
              in out, "%s", out)
    with Daemon() as d:
        check(d.client().request({"op": "stats"})["tcp_auth"] == "token", "the default: token")
        out = tpctl_stats(d)
        check("tcp_auth" not in out and
              re.search(r"^tpd \S+: (\w+, )?up \S+, \d+ connections?, tasks contained by (cgroup|process)$",
                        out.splitlines()[0]), "%s", out)


def tpctl_stats(d):
    """tpctl stats as the admin sees it, on the daemon's Unix socket"""
    p = subprocess.run([TPCTL, "-s", d.sock, "stats"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=TIMEOUT)
    check(p.returncode == 0, "tpctl stats: %r", p.stdout)
    return p.stdout.decode()


def test_tcp_auth_none_with_tokens_takes_both():
    with Daemon(tcp=True, tcp_auth="none", start=False) as d:
        d.args += ["--token-file", write(os.path.join(d.dir, "tokens"), "ci tok-ci\n")]
        d.start()
        anon = d.client(tcp=True)
        _, acc = anon.submit({"kind": "sleep", "ms": 60000})
        ci = tcp_client(d, "tok-ci")
        check(forbidden(ci.request({"op": "cancel", "task": acc["task"]}), acc["task"]),
              "a token is not anonymous")
        check(anon.request({"op": "cancel", "task": acc["task"]})["event"] == "ok", "its owner")


def test_a_reload_may_not_leave_a_tcp_listener_without_a_token():
    with Daemon(tcp=True, tcp_auth=None, start=False) as d:
        tok = write(os.path.join(d.dir, "tokens"), "ci tok-ci\n")
        conf = write(os.path.join(d.dir, "tpd.conf"), "[daemon]\ntoken_file = %s\n" % tok)
        d.args += ["-c", conf]
        d.start()
        write(conf, "[daemon]\n")
        d.signal(signal.SIGHUP)
        eventually(lambda: "reload refused" in d.read_log(), "the reload is refused")
        check(re.search(r"tcp 127\.0\.0\.1:\d+: a TCP listener needs a token", d.read_log()),
              "%s", d.read_log()[-2000:])
        c = d.client(tcp=True)
        check(c.request({"op": "stats"})["error"]["code"] == "unauthenticated", "still a token")
        write(conf, "[daemon]\ntcp_auth = none\n")
        d.signal(signal.SIGHUP)
        eventually(lambda: "configuration reloaded" in d.read_log(), "the reload is taken")
        check(d.client(tcp=True).request({"op": "stats"})["tcp_auth"] == "none", "now none")


run_tests(globals())
