#!/usr/bin/env python3
"""tpctl enqueue and tpctl results against a private redis-server: the entry enqueue
writes (every field, every option), results printed as wait prints a done and their exit
codes, --wait and a results follower that see a result written after they started
(known to be reading by Redis's CLIENT LIST, not by a sleep), an interrupt, and the
errors: Redis unreachable (69), usage (64). The results are written by the test itself,
as a tpd would write them (tests/test_redis.py has the daemon's side)."""
import json
import signal
import subprocess
import time

from redistest import Redis, fields
from tpdtest import TPCTL, TIMEOUT, check, eventually, run_tests


def tpctl(*args, input=None, env=None):
    return subprocess.run([TPCTL] + list(args), input=input, capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)


def expect(p, code, what):
    check(p.returncode == code, "%s: exit %d, expected %d\nstdout: %r\nstderr: %r",
          what, p.returncode, code, p.stdout[-2000:], p.stderr[-2000:])
    return p


def done(state="succeeded", task=7, result=None, error=None, run_ms=2.5, queued_ms=0.25):
    d = {"event": "done", "task": task, "pool": "default", "state": state,
         "queued_ms": queued_ms, "run_ms": run_ms}
    if result is not None:
        d["result"] = result
    if error is not None:
        d["error"] = error
    return json.dumps(d, separators=(",", ":"))


def exec_result(code, out="", err=""):
    return {"exit_code": code, "signal": None, "stdout": out, "stderr": err,
            "truncated": False, "usage": {"user_ms": 0, "system_ms": 0, "max_rss_bytes": 0}}


def add_result(c, stream, entry, done_text, cid=None, consumer="host-a", attempt=1):
    args = ["XADD", stream, "*", "done", done_text, "entry", entry]
    if cid is not None:
        args += ["id", cid]
    args += ["consumer", consumer, "attempt", str(attempt)]
    return c.call(*args)


def test_enqueue_writes_the_entry():
    with Redis() as r:
        c = r.client()
        p = expect(tpctl("enqueue", "--redis", r.addr, "--stream", "jobs", "--id", "job-1",
                         "--label", "nightly", "--queue-timeout", "2s", "--timeout", "5s",
                         "-e", "A=1", "-C", "/tmp", "--output-limit", "64k", "--",
                         "echo", "hi"), 0, "enqueue")
        entry = p.stdout.strip()
        got = c.call("XRANGE", "jobs", "-", "+")
        check(len(got) == 1 and got[0][0] == entry, "the entry printed is the one added: %r %r",
              entry, got)
        f = fields(got[0][1])
        check(set(f) == {"task", "id", "label", "queue_timeout_ms"}, "fields %r", f)
        check(json.loads(f["task"]) == {"kind": "exec", "argv": ["echo", "hi"],
                                        "timeout_ms": 5000, "env": {"A": "1"}, "cwd": "/tmp",
                                        "output_limit": 65536}, "task %r", f["task"])
        check(f["id"] == "job-1" and f["label"] == "nightly" and f["queue_timeout_ms"] == "2000",
              "fields %r", f)
        # --task, --stdin, TPD_REDIS, and --json
        p = expect(tpctl("--json", "enqueue", "-S", "jobs", "--task",
                         '{"kind":"echo","value":[1,2]}',
                         env={"TPD_REDIS": r.addr, "PATH": "/usr/bin:/bin"}), 0, "--task")
        ev = json.loads(p.stdout)
        check(ev["stream"] == "jobs" and ev["entry"] > entry, "json %r", ev)
        p = expect(tpctl("enqueue", "--redis", r.addr, "-S", "jobs", "--stdin", "--", "wc",
                         "-c", input="abc"), 0, "--stdin")
        f = fields(c.call("XRANGE", "jobs", p.stdout.strip(), p.stdout.strip())[0][1])
        check(json.loads(f["task"])["stdin"] == "abc" and set(f) == {"task"}, "%r", f)


def test_enqueue_usage_and_unreachable():
    with Redis() as r:
        expect(tpctl("enqueue", "-S", "jobs", "--", "true", env={"PATH": "/usr/bin:/bin"}), 64,
               "no --redis")
        expect(tpctl("enqueue", "--redis", r.addr, "--", "true"), 64, "no --stream")
        p = expect(tpctl("enqueue", "--redis", r.addr, "-S", "j", "-p", "io", "--", "true"), 64,
                   "--pool")
        check("the source's own pool" in p.stderr, "%r", p.stderr)
        expect(tpctl("enqueue", "--redis", r.addr, "-S", "j"), 64, "no command")
        expect(tpctl("enqueue", "--redis", r.addr, "-S", "j", "--results", "x", "--", "true"),
               64, "--results without --wait")
        # a host alone is Redis's own port 6379 (test_tpctl_polish); a bad port is not
        expect(tpctl("enqueue", "--redis", "localhost:", "-S", "j", "--", "true"), 64,
               "a bad address")
        expect(tpctl("enqueue", "--redis", "localhost:99999", "-S", "j", "--", "true"), 64,
               "a port out of range")
        p = expect(tpctl("enqueue", "--redis", "unix:" + r.dir + "/nope.sock", "-S", "j", "--",
                         "true"), 69, "no redis there")
        check("cannot connect to redis at unix:" in p.stderr, "%r", p.stderr)
        c = r.client()
        c.call("SET", "notastream", "x")
        p = expect(tpctl("enqueue", "--redis", r.addr, "-S", "notastream", "--", "true"), 1,
                   "a key of another type")
        check("WRONGTYPE" in p.stderr, "%r", p.stderr)


def test_results_printed_as_wait_prints_and_exit_codes():
    with Redis() as r:
        c = r.client()
        add_result(c, "jobs:results", "100-0", done(result=exec_result(0, "hi\n")), cid="job-1")
        add_result(c, "jobs:results", "101-0", done("failed", result=exec_result(3),
                   error={"code": "exit_status", "message": "exit status 3"}), attempt=2)
        add_result(c, "jobs:results", "102-0", done("failed", task=None, run_ms=0,
                   error={"code": "bad_request", "message": "field \"task\" is not JSON"}))
        p = expect(tpctl("results", "--redis", r.addr, "--stream", "jobs:results", "--from", "0",
                         "--count", "3"), 0, "results --count")
        lines = p.stdout.splitlines()
        check(lines == [
            "entry 100-0 (id job-1): succeeded in 2.5ms, queued 0.25ms (consumer host-a, "
            "attempt 1)",
            "entry 101-0: failed with exit status 3 after 2.5ms, queued 0.25ms (consumer "
            "host-a, attempt 2)",
            "entry 102-0: failed: field \"task\" is not JSON, queued 0.25ms (consumer host-a, "
            "attempt 1)"], "lines %r", lines)
        # one entry: its task's exit code; several: 0 only if all succeeded
        expect(tpctl("results", "--redis", r.addr, "-S", "jobs:results", "100-0"), 0, "100-0")
        expect(tpctl("results", "--redis", r.addr, "-S", "jobs:results", "101-0"), 3, "101-0")
        expect(tpctl("results", "--redis", r.addr, "-S", "jobs:results", "102-0"), 1, "102-0")
        expect(tpctl("results", "--redis", r.addr, "-S", "jobs:results", "100-0", "102-0"), 1,
               "two")
        p = expect(tpctl("results", "--redis", r.addr, "-S", "jobs:results", "--output",
                         "100-0"), 0, "--output")
        check(p.stdout == "hi\n", "output %r", p.stdout)
        p = expect(tpctl("--json", "results", "--redis", r.addr, "-S", "jobs:results",
                         "101-0"), 3, "--json")
        o = json.loads(p.stdout)
        check(o["entry"] == "101-0" and o["attempt"] == 2 and o["consumer"] == "host-a" and
              o["done"]["result"]["exit_code"] == 3 and "id" not in o, "json %r", o)
        expect(tpctl("results", "--redis", r.addr, "-S", "jobs:results", "nope"), 64,
               "a bad entry id")
        expect(tpctl("results", "--redis", r.addr, "-S", "x", "--from", "soon"), 64, "--from")
        expect(tpctl("results", "--redis", r.addr), 64, "no --stream")


def blocked_in_xread(c, n=1):
    """True once n clients are blocked in XREAD (Redis's own view: CLIENT LIST)."""
    lines = c.call("CLIENT", "LIST").splitlines()
    return sum(1 for l in lines if "cmd=xread" in l and "flags=b" in l) >= n


def test_enqueue_wait_gets_its_result_written_later():
    with Redis() as r:
        c = r.client()
        p = subprocess.Popen([TPCTL, "enqueue", "--redis", r.addr, "-S", "jobs", "--wait",
                              "--id", "mine", "--", "false"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            entry = p.stdout.readline().strip()
            eventually(lambda: blocked_in_xread(c), "tpctl waits in XREAD")
            # another entry's result first: not the one it waits for
            add_result(c, "jobs:results", "1-0", done(result=exec_result(0)))
            add_result(c, "jobs:results", entry, done("failed", result=exec_result(1),
                       error={"code": "exit_status", "message": "exit status 1"}), cid="mine")
            out, err = p.communicate(timeout=TIMEOUT)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        check(p.returncode == 1, "exit %r (stderr %r)", p.returncode, err)
        check(out.strip() == "entry %s (id mine): failed with exit status 1 after 2.5ms, queued "
              "0.25ms (consumer host-a, attempt 1)" % entry, "stdout %r", out)


def test_results_follows_new_ones_until_count_or_interrupt():
    with Redis() as r:
        c = r.client()
        add_result(c, "jobs:results", "1-0", done())     # before it starts: not shown
        p = subprocess.Popen([TPCTL, "results", "--redis", r.addr, "-S", "jobs:results",
                              "--count", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        eventually(lambda: blocked_in_xread(c), "tpctl follows")
        add_result(c, "jobs:results", "2-0", done())
        add_result(c, "jobs:results", "3-0", done())
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 0, "exit %r %r", p.returncode, err)
        check([l.split(":")[0] for l in out.splitlines()] == ["entry 2-0", "entry 3-0"],
              "stdout %r", out)
        p = subprocess.Popen([TPCTL, "results", "--redis", r.addr, "-S", "jobs:results"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        eventually(lambda: blocked_in_xread(c), "tpctl follows")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 130, "interrupted: exit %r %r", p.returncode, err)


def test_results_lost_redis_exits_69():
    r = Redis()
    try:
        c = r.client()
        p = subprocess.Popen([TPCTL, "results", "--redis", r.addr, "-S", "jobs:results"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        eventually(lambda: blocked_in_xread(c), "tpctl follows")
        r.stop()
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 69 and "connection to redis at" in err, "exit %r %r",
              p.returncode, err)
    finally:
        r.close()


def test_bash_completion_knows_them():
    from test_tpctl import complete
    check(complete(["en"]) == ["enqueue"] and complete(["res"]) == ["resize", "results"],
          "commands: %r %r", complete(["en"]), complete(["res"]))
    check("--redis" in complete(["enqueue", "--r"]) and "--results" in complete(["enqueue",
          "--r"]), "enqueue's options: %r", complete(["enqueue", "--r"]))
    check(complete(["results", "--c"]) == ["--count"], "%r", complete(["results", "--c"]))


if __name__ == "__main__":
    run_tests(globals())
