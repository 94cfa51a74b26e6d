#!/usr/bin/env python3
"""Who may do what: peer credentials on the Unix socket, tokens over TCP."""
import os
import signal
import subprocess

from tpdtest import TPD, TIMEOUT, Daemon, Skip, as_user, check, eventually, run_tests


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
    with Daemon(tcp=True, tcp_auth="token", start=False) as d:
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


# ---------------------------------------------------------------- token files

def token_daemon(token_text=None, admin_text=None, conf=False):
    """A TCP daemon with the given token files (and, with conf, a file naming them)."""
    d = Daemon(tcp=True, tcp_auth="token", start=False)
    d.tok = os.path.join(d.dir, "tokens")
    d.adm = os.path.join(d.dir, "admin-tokens")
    if token_text is not None:
        write(d.tok, token_text)
    if admin_text is not None:
        write(d.adm, admin_text)
    if conf:
        d.conf = os.path.join(d.dir, "tpd.conf")
        lines = ["[daemon]"]
        if token_text is not None:
            lines.append("token_file = " + d.tok)
        if admin_text is not None:
            lines.append("admin_token_file = " + d.adm)
        write(d.conf, "\n".join(lines) + "\n")
        d.args += ["-c", d.conf]
    else:
        if token_text is not None:
            d.args += ["--token-file", d.tok]
        if admin_text is not None:
            d.args += ["--admin-token-file", d.adm]
    return d


def hello(d, token):
    c = d.client(tcp=True)
    ev = c.request({"op": "hello", "token": token})
    c.close()
    return ev.get("role") if ev["event"] == "hello" else ev["error"]["code"]


def start_fails(args):
    """Runs tpd with args, which must stop it at start; returns its stderr."""
    r = subprocess.run([TPD, "-f", "-c", "none"] + args, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=TIMEOUT)
    check(r.returncode != 0, "tpd started: %r", r.stderr)
    return r.stderr


def test_token_of_4096_bytes_works_and_its_prefix_does_not():
    token = "".join(chr(ord("a") + i % 26) for i in range(4096))
    with token_daemon("ci " + token + "\n") as d:
        d.start()
        check(hello(d, token) == "submit", "the whole 4096-byte token")
        check(hello(d, token[:4095]) == "unauthenticated", "its first 4095 bytes")
        check(hello(d, token[:511]) == "unauthenticated", "its first 511 bytes")
        check(hello(d, token + "a") == "unauthenticated", "one byte more")
        check(token not in d.read_log(), "the log shows the token")
    # a bare token of 4096 bytes too
    with token_daemon(token + "\n") as d:
        d.start()
        check(hello(d, token) == "submit", "the whole bare 4096-byte token")
        check(hello(d, token[:4095]) == "unauthenticated", "its first 4095 bytes")


def test_token_longer_than_4096_bytes_stops_the_start_naming_file_and_line():
    with token_daemon("# ci\nci " + "k" * 4097 + "\n") as d:
        err = start_fails(d.args + ["-s", d.sock])
        check("%s:2: " % d.tok in err and "4097 bytes" in err and "4096" in err, "%r", err)
        check("kkkk" not in err, "the error shows the token: %r", err)
        check(len(err.strip().splitlines()) == 1, "one line: %r", err)
        r = subprocess.run([TPD, "-n"] + d.args, capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 1 and "%s:2: " % d.tok in r.stderr, "tpd -n: %r", r)


def test_token_file_errors_stop_the_start():
    cases = [
        ("", None, "tokens: no token"),
        ("# nothing\n\n", None, "tokens: no token"),
        ("ci a\nops b\nci c\n", None, 'tokens:3: the name "ci" is given twice'),
        ("ci a\nlonely\n", None, "tokens:2: a name without a token"),
        ("ci a\n", "ci b\n", 'admin-tokens:1: the name "ci" is given twice'),
        ("ci same\n", "root same\n", "admin-tokens:1: the token of \"root\" is also"),
        ("default a\n", "default b\n", "given twice"),
    ]
    for tok, adm, want in cases:
        with token_daemon(tok, adm) as d:
            err = start_fails(d.args + ["-s", d.sock])
            check(want in err, "%r: %r", want, err)
            check(not os.path.exists(d.sock), "it listened")


def test_token_files_with_several_names_give_their_roles_and_log_the_name():
    with token_daemon("# CI and people\nci tok-ci\n\nalice\ttok-alice\r\n",
                      "root tok-root\n") as d:
        d.start()
        check(hello(d, "tok-ci") == "submit", "ci")
        check(hello(d, "tok-alice") == "submit", "alice")
        check(hello(d, "tok-root") == "admin", "root")
        for wrong in ("ci", "tok-c", "tok-ci tok-alice", "ci tok-ci", "root"):
            check(hello(d, wrong) == "unauthenticated", "%r", wrong)
        log = d.read_log()
        for name, role in (("ci", "submit"), ("alice", "submit"), ("root", "admin")):
            check("hello with token %s, role %s" % (name, role) in log, "%s not logged:\n%s",
                  name, log[-2000:])
        for token in ("tok-ci", "tok-alice", "tok-root"):
            check(token not in log, "the log shows %s" % token)
        check("2 with the submit role, 1 with the admin role" in log, "%s", log[-2000:])


def test_a_task_belongs_to_its_submitter_as_status_shows():
    # uid:N on the Unix socket, token:NAME over TCP with a token, as status says
    with token_daemon("ci tok-ci\nalice tok-alice\n") as d:
        d.start()
        u = d.client()
        _, acc = u.submit({"kind": "echo", "value": 1})
        st = u.request({"op": "status", "task": acc["task"]})
        check(st["owner"] == "uid:%d" % os.geteuid(), "%r", st)
        for name in ("ci", "alice"):
            c = d.client(tcp=True)
            check(c.request({"op": "hello", "token": "tok-" + name})["event"] == "hello", name)
            _, acc = c.submit({"kind": "echo", "value": 1})
            st = c.request({"op": "status", "task": acc["task"]})
            check(st["owner"] == "token:" + name, "%r", st)


def test_a_task_submitted_over_tcp_without_tokens_is_anonymous():
    with Daemon(tcp=True) as d:
        c = d.client(tcp=True)
        _, acc = c.submit({"kind": "echo", "value": 1})
        st = c.request({"op": "status", "task": acc["task"]})
        check(st["owner"] == "tcp:anonymous", "%r", st)


def test_bare_token_files_still_work():
    with token_daemon("s3cret\n", "r00t-token\n") as d:
        d.start()
        check(hello(d, "s3cret") == "submit", "bare submit token")
        check(hello(d, "r00t-token") == "admin", "bare admin token")
        log = d.read_log()
        check("hello with token default, role submit" in log, "%s", log[-2000:])
        check("hello with token admin, role admin" in log, "%s", log[-2000:])


def hup_and_wait(d, marker):
    before = d.read_log().count(marker)
    d.signal(signal.SIGHUP)
    eventually(lambda: d.read_log().count(marker) > before, "the reload logged " + marker)


def test_sighup_reads_the_token_files_again_and_refuses_broken_ones():
    with token_daemon("ci tok-1\n", conf=True) as d:
        d.start()
        check(hello(d, "tok-1") == "submit", "before")
        write(d.tok, "ci tok-2\nops tok-3\n")
        hup_and_wait(d, "configuration reloaded")
        check(hello(d, "tok-1") == "unauthenticated", "the old token after the reload")
        check(hello(d, "tok-2") == "submit" and hello(d, "tok-3") == "submit", "the new ones")
        write(d.tok, "ci tok-4\nci tok-5\n")
        hup_and_wait(d, "reload refused")
        log = d.read_log()
        check('%s:2: the name "ci" is given twice' % d.tok in log, "%s", log[-2000:])
        check(hello(d, "tok-2") == "submit", "the running tokens stay")
        check(hello(d, "tok-4") == "unauthenticated", "nothing of the broken file")
        write(d.tok, "ci " + "x" * 4097 + "\n")
        hup_and_wait(d, "reload refused")
        check("%s:1: " % d.tok in d.read_log(), "%s", d.read_log()[-2000:])
        check(hello(d, "tok-3") == "submit", "the running tokens stay")


run_tests(globals())
