#!/usr/bin/env python3
"""label on submit, the list op (filters, paging, who sees what), and the recent figures
of each pool in stats."""
import json
import os
import pwd
import subprocess

from tpdtest import TPCTL, TIMEOUT, Daemon, Skip, as_user, check, eventually, run_tests


def tpctl(d, *args):
    p = subprocess.run([TPCTL, "-s", d.sock] + list(args), capture_output=True, text=True,
                       timeout=TIMEOUT)
    return p.returncode, p.stdout, p.stderr


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def test_label_is_kept_and_shown_by_status():
    with Daemon() as d:
        c = d.client()
        rid, acc = c.submit({"kind": "echo", "value": 1}, label="nightly build")
        check(acc["event"] == "accepted", "%r", acc)
        c.done(rid)
        st = c.request({"op": "status", "task": acc["task"]})
        check(st.get("label") == "nightly build", "status shows the label: %r", st)
        _, acc = c.submit({"kind": "echo", "value": 1}, detach=True)
        st = c.request({"op": "status", "task": acc["task"]})
        check(st.get("label") == "", "no label: an empty one: %r", st)


def test_label_bounds():
    with Daemon() as d:
        c = d.client()
        _, ev = c.submit({"kind": "echo", "value": 1}, label="x" * 128, detach=True)
        check(ev["event"] == "accepted", "128 bytes is the limit, allowed: %r", ev)
        _, ev = c.submit({"kind": "echo", "value": 1}, label="x" * 129)
        check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
              "label" in ev["error"]["message"] and "128" in ev["error"]["message"],
              "a label of 129 bytes: %r", ev)
        _, ev = c.submit({"kind": "echo", "value": 1}, label=5)
        check(ev["event"] == "error" and "label" in ev["error"]["message"], "%r", ev)
        check(c.request({"op": "list"})["tasks"][0]["label"] == "x" * 128,
              "only the accepted one is listed")


def test_list_newest_first_with_every_field():
    with Daemon() as d:
        c = d.client()
        ids = []
        for i in range(3):
            rid, acc = c.submit({"kind": "echo", "value": i}, label="l%d" % i)
            c.done(rid)
            ids.append(acc["task"])
        ev = c.request({"op": "list"})
        check(ev["event"] == "list" and ev["more"] is False, "%r", ev)
        check([t["task"] for t in ev["tasks"]] == ids[::-1], "newest first: %r", ev)
        t = ev["tasks"][0]
        # attempt: counted with the journal on
        check(set(t) == {"task", "pool", "owner", "label", "kind", "state", "priority",
                         "queued_ms", "run_ms", "command", "attempt"}, "the fields: %r", t)
        check(t["command"] == "echo", "a built-in kind's command is its name: %r", t)
        check(t["pool"] == "default" and t["owner"] == "uid:%d" % os.geteuid() and
              t["label"] == "l2" and t["kind"] == "echo" and t["state"] == "succeeded",
              "%r", t)
        check(isinstance(t["queued_ms"], float) and isinstance(t["run_ms"], float), "%r", t)


def test_list_filters():
    with Daemon("--pool", "batch:1") as d:
        c = d.client()
        r1, a1 = c.submit({"kind": "echo", "value": 1}, label="a")
        r2, a2 = c.submit({"kind": "fail"}, label="b")
        r3, a3 = c.submit({"kind": "echo", "value": 3}, label="a", pool="batch")
        for r in (r1, r2, r3):
            c.done(r)
        # one running (it streams its start), one queued behind it in batch
        r4, a4 = c.submit({"kind": "sleep", "ms": 60000}, pool="batch", stream=True,
                          label="long")
        c.recv_id(r4, "started")
        r5, a5 = c.submit({"kind": "echo", "value": 5}, pool="batch", label="a b")

        def ids(**f):
            ev = c.request(dict(op="list", **f))
            check(ev["event"] == "list", "list %r: %r", f, ev)
            return [t["task"] for t in ev["tasks"]]
        T = lambda *a: [x["task"] for x in a]
        check(ids(label="a") == T(a3, a1), "label, exact: %r", ids(label="a"))
        check(ids(label="a b") == T(a5), "a label with a space")
        check(ids(label="") == [], "no task has an empty label")
        check(ids(pool="batch") == T(a5, a4, a3), "pool")
        check(ids(state="failed") == T(a2), "one state")
        check(ids(state="running") == T(a4), "running")
        check(ids(state="queued") == T(a5), "queued")
        check(ids(state=["queued", "running"]) == T(a5, a4), "an array of states")
        check(ids(state="succeeded", pool="default") == T(a1), "filters together")
        check(ids(owner="uid:%d" % os.geteuid()) == T(a5, a4, a3, a2, a1), "owner")
        check(ids(owner="token:nobody") == [], "another owner")
        # times so far: a queued task's wait and a running task's run grow
        first = {t["task"]: t for t in c.request({"op": "list", "pool": "batch"})["tasks"]}

        def grew():
            now = {t["task"]: t for t in c.request({"op": "list", "pool": "batch"})["tasks"]}
            return (now[a5["task"]]["queued_ms"] > first[a5["task"]]["queued_ms"] and
                    now[a4["task"]]["run_ms"] > first[a4["task"]]["run_ms"])
        eventually(grew, "the queued wait and the run so far grow")
        check(first[a5["task"]]["run_ms"] == 0, "a queued task has not run: %r", first)
        c.request({"op": "cancel", "task": a4["task"]})
        c.done(r4)
        c.done(r5)


def test_list_pages():
    with Daemon() as d:
        c = d.client()
        ids = []
        for i in range(7):
            rid, acc = c.submit({"kind": "echo", "value": i})
            c.done(rid)
            ids.append(acc["task"])
        ids.reverse()
        ev = c.request({"op": "list", "limit": 3})
        check([t["task"] for t in ev["tasks"]] == ids[:3] and ev["more"] is True, "%r", ev)
        ev = c.request({"op": "list", "limit": 3, "before": ids[2]})
        check([t["task"] for t in ev["tasks"]] == ids[3:6] and ev["more"] is True, "%r", ev)
        ev = c.request({"op": "list", "limit": 3, "before": str(ids[5])})
        check([t["task"] for t in ev["tasks"]] == ids[6:] and ev["more"] is False, "%r", ev)
        # before an id the registry does not have (never submitted): the older ones
        ev = c.request({"op": "list", "before": ids[0] + 1000})
        check([t["task"] for t in ev["tasks"]] == ids, "%r", ev)
        ev = c.request({"op": "list", "limit": 7})
        check(ev["more"] is False and len(ev["tasks"]) == 7, "exactly the limit: %r", ev)


def test_list_bad_fields():
    with Daemon() as d:
        c = d.client()
        for req, want in [({"limit": 0}, "out of range 1..1000"),
                          ({"limit": 1001}, "out of range 1..1000"),
                          ({"state": "sleeping"}, 'no state "sleeping"'),
                          ({"state": []}, "non-empty array"),
                          ({"state": ["queued", 3]}, "element 1"),
                          ({"before": 0}, "task id"),
                          ({"pool": 1}, '"pool" must be a string'),
                          ({"sort": "id"}, '"sort"')]:
            ev = c.request(dict(op="list", **req))
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
                  want in ev["error"]["message"], "%r: %r", req, ev)


def test_list_shows_a_non_admin_its_own_tasks_only():
    d = Daemon(tcp=True, tcp_auth="token", start=False)
    tok = write(os.path.join(d.dir, "tokens"), "ci tok-ci\nalice tok-alice\n")
    adm = write(os.path.join(d.dir, "admin"), "root tok-root\n")
    d.args += ["--token-file", tok, "--admin-token-file", adm]
    with d:
        d.start()
        mine = {}
        for name in ("ci", "alice"):
            c = d.client(tcp=True)
            check(c.request({"op": "hello", "token": "tok-" + name})["event"] == "hello", name)
            rid, acc = c.submit({"kind": "echo", "value": name})
            c.done(rid)
            mine[name] = (c, acc["task"])
        for name, (c, task) in mine.items():
            ev = c.request({"op": "list"})
            check([t["task"] for t in ev["tasks"]] == [task], "%s sees its own: %r", name, ev)
            other = "alice" if name == "ci" else "ci"
            ev = c.request({"op": "list", "owner": "token:" + other})
            check(ev["tasks"] == [], "%s asks for %s's: nothing: %r", name, other, ev)
        a = d.client(tcp=True)
        check(a.request({"op": "hello", "token": "tok-root"})["role"] == "admin", "admin")
        ev = a.request({"op": "list"})
        check(sorted(t["task"] for t in ev["tasks"]) == sorted(t for _, t in mine.values()),
              "the admin sees every task: %r", ev)
        ev = a.request({"op": "list", "owner": "token:alice"})
        check([t["task"] for t in ev["tasks"]] == [mine["alice"][1]], "%r", ev)


def test_list_on_the_unix_socket_shows_a_user_its_own():
    if os.geteuid() != 0:
        raise Skip("needs root to act as nobody")
    with Daemon("--socket-mode", "0666") as d:
        os.chmod(d.dir, 0o755)
        c = d.client()
        _, mine = c.submit({"kind": "echo", "value": "root's"}, detach=True)
        acc, lst = as_user("nobody", d.sock, [
            {"op": "submit", "task": {"kind": "echo", "value": 1}, "detach": True,
             "label": "nobody's"},
            {"op": "list"}])
        nobody = "uid:%d" % pwd.getpwnam("nobody").pw_uid
        check([(t["task"], t["owner"], t["label"]) for t in lst["tasks"]] ==
              [(acc["task"], nobody, "nobody's")], "nobody sees its own only: %r", lst)
        ev = c.request({"op": "list"})
        check([t["task"] for t in ev["tasks"]] == [acc["task"], mine["task"]],
              "root, an admin, sees both: %r", ev)
        r = subprocess.run([TPCTL, "-s", d.sock, "list"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        check([l.split()[0] for l in r.stdout.splitlines()[1:]] == [str(mine["task"])],
              "tpctl list without --all: root's own: %r", r.stdout)
        r = subprocess.run([TPCTL, "-s", d.sock, "list", "--all"], capture_output=True,
                           text=True, timeout=TIMEOUT)
        check(len(r.stdout.splitlines()) == 3, "--all: both: %r", r.stdout)


def test_batch_labels_every_task():
    with Daemon() as d:
        path = os.path.join(d.dir, "jobs")
        write(path, "echo a\necho b\n")
        r = subprocess.run([TPCTL, "-s", d.sock, "batch", "--label", "nightly", path],
                           capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 0, "%r", r)
        ev = d.client().request({"op": "list", "label": "nightly"})
        check(len(ev["tasks"]) == 2, "both lines labelled: %r", ev)


def test_stats_has_the_recent_rate_and_quantiles():
    with Daemon() as d:
        c = d.client()
        p = c.stats()
        for k in ("rate_per_s", "queued_p50_ms", "queued_p99_ms", "run_p50_ms", "run_p99_ms"):
            check(k in p, "stats has %s: %r", k, p)
        check(p["rate_per_s"] == 0 and p["run_p99_ms"] == 0, "nothing run yet: %r", p)
        rids = [c.send({"op": "submit", "task": {"kind": "sleep", "ms": 20}})
                for _ in range(4)]
        for rid in rids:
            c.done(rid)
        p = c.stats()
        check(p["rate_per_s"] > 0, "tasks ran in the last seconds: %r", p)
        check(p["run_p50_ms"] >= 20 and p["run_p99_ms"] >= p["run_p50_ms"],
              "20 ms sleeps: %r", p)
        check(p["queued_p99_ms"] >= p["queued_p50_ms"] >= 0, "%r", p)


def test_tpctl_label_and_list_table():
    with Daemon("--pool", "batch:1") as d:
        code, out, err = tpctl(d, "run", "--label", "first one", "echo", "hi")
        check(code == 0 and out == "hi\n", "run --label: %d %r %r", code, out, err)
        code, out, err = tpctl(d, "submit", "--detach", "-p", "batch", "--label", "long",
                               "sleep", "60")
        check(code == 0, "%r", err)
        long_id = out.strip()
        c = d.client()
        eventually(lambda: c.request({"op": "status", "task": int(long_id)})["state"] ==
                   "running", "the sleep runs")
        code, out, err = tpctl(d, "submit", "--detach", "-p", "batch", "true")
        queued_id = out.strip()
        code, out, err = tpctl(d, "list")
        check(code == 0, "%r", err)
        lines = out.splitlines()
        print(out)
        check(lines[0].split() == ["TASK", "LABEL", "POOL", "STATE", "QUEUED", "RUN",
                                   "OWNER", "PRI", "COMMAND"], "the header: %r", lines)
        rows = [l.split() for l in lines[1:]]
        check([r[0] for r in rows] == [queued_id, long_id, "1"], "newest first: %r", rows)
        check(rows[0][1:4] == ["-", "batch", "queued"] and rows[0][5] == "-",
              "a queued task, no label, not run: %r", rows[0])
        check(rows[1][1:4] == ["long", "batch", "running"], "%r", rows[1])
        check(lines[3].split()[1:3] == ["first", "one"], "a label with a space: %r", lines[3])
        check(all(("uid:%d" % os.getuid()) in r and "0" in r for r in rows),
              "owners, priorities: %r", rows)
        check(" ".join(rows[1][-2:]) == "sleep 60" and " ".join(rows[2][-2:]) == "echo hi",
              "the commands, last: %r", rows)
        code, out, err = tpctl(d, "list", "--state", "running,queued", "--limit", "1")
        check(out.splitlines()[1].split()[0] == queued_id and
              "tpctl list --before %s" % queued_id in out, "a page and the next: %r", out)
        code, out, err = tpctl(d, "list", "--label", "long", "--json")
        ev = json.loads(out)
        check([t["task"] for t in ev["tasks"]] == [int(long_id)], "--json: %r", out)
        code, out, err = tpctl(d, "list", "--state", "sleeping")
        check(code == 64 and 'no state "sleeping"' in err, "%d %r", code, err)
        code, out, err = tpctl(d, "status", long_id)
        check("long" in out.splitlines()[1].split(), "status shows the label: %r", out)
        c.request({"op": "cancel", "task": int(long_id)})


run_tests(globals())
