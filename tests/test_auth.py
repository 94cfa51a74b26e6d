#!/usr/bin/env python3
"""Who may do what: peer credentials on the Unix socket, tokens over TCP."""
import json
import os
import pwd
import socket

from tpdtest import Daemon, Skip, check, run_tests


def as_user(user, sock_path, requests):
    """Runs requests over a fresh connection in a child that became user; returns the answers."""
    pw = pwd.getpwnam(user)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock_path)
            f = s.makefile("rwb")
            out = []
            for req in requests:
                f.write((json.dumps(req) + "\n").encode())
                f.flush()
                out.append(json.loads(f.readline()))
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def test_admin_ops_refused_to_non_admin_peer():
    if os.geteuid() != 0:
        raise Skip("needs root to run a client as nobody")
    with Daemon("--socket-mode", "0666") as d:
        os.chmod(d.dir, 0o755)
        answers = as_user("nobody", d.sock, [
            {"op": "hello", "id": 1},
            {"op": "resize", "id": 2, "size": 3},
            {"op": "shutdown", "id": 3},
            {"op": "submit", "id": 4, "task": {"kind": "echo", "value": 5}},
        ])
        check(answers[0]["role"] == "submit", "%r", answers[0])
        for a in answers[1:3]:
            check(a["event"] == "error" and a["error"]["code"] == "forbidden", "%r", a)
            check("uid" in a["error"]["message"], "names who may: %r", a)
        check(answers[3]["event"] == "accepted", "nobody may submit: %r", answers[3])
        c = d.client()
        check(c.stats()["target"] == 2, "the resize did not happen")


def test_admin_group_member_may_resize():
    if os.geteuid() != 0:
        raise Skip("needs root to run a client as nobody")
    with Daemon("--socket-mode", "0666", "--admin-group", "nogroup") as d:
        os.chmod(d.dir, 0o755)
        answers = as_user("nobody", d.sock, [{"op": "resize", "id": 1, "size": 3}])
        check(answers[0]["event"] == "ok", "nobody is in nogroup, the admin group: %r", answers[0])


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def test_tcp_token_required_when_configured():
    with Daemon(tcp=True, start=False) as d:
        tok = write(os.path.join(d.dir, "token"), "s3cret\n")
        adm = write(os.path.join(d.dir, "admin"), "r00t-token\n")
        d.args += ["--token-file", tok, "--admin-token-file", adm]
        d.start()
        c = d.client(tcp=True)
        check(c.request({"op": "ping"})["event"] == "pong", "ping needs no token")
        ev = c.request({"op": "stats"})
        check(ev["error"]["code"] == "unauthenticated", "%r", ev)
        ev = c.request({"op": "hello", "token": "wrong"})
        check(ev["error"]["code"] == "unauthenticated", "%r", ev)
        ev = c.request({"op": "hello", "token": "s3cret"})
        check(ev["role"] == "submit", "%r", ev)
        check(c.request({"op": "stats"})["event"] == "stats", "submit role may read stats")
        ev = c.request({"op": "resize", "size": 3})
        check(ev["error"]["code"] == "forbidden", "%r", ev)
        a = d.client(tcp=True)
        ev = a.request({"op": "hello", "token": "r00t-token"})
        check(ev["role"] == "admin", "%r", ev)
        check(a.request({"op": "resize", "size": 3})["event"] == "ok", "admin token resizes")


def test_tcp_without_token_file_allows_submit_but_never_admin():
    with Daemon(tcp=True) as d:
        c = d.client(tcp=True)
        check(c.request({"op": "hello"})["role"] == "submit", "submit role")
        _, ev = c.submit({"kind": "echo", "value": 1})
        check(ev["event"] == "accepted", "%r", ev)
        ev = c.request({"op": "shutdown"})
        check(ev["error"]["code"] == "forbidden", "%r", ev)


run_tests(globals())
