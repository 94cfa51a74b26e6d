#!/usr/bin/env python3
"""Input and output of any size: a streamed stdin (stdin_stream, input
requests, tpctl run -i, tpctl send) paced by a per-task buffer, whole
outputs spooled under state_dir (tpctl log, wait --output, across a
restart, within their bounds and saying what was cut), and the working
directory tpctl sends. Each test drives the real tpd and tpctl."""
import base64
import hashlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

from tpdtest import SLOW, TPCTL, TIMEOUT, Client, Daemon, Skip, check, eventually, run_tests


def tpctl(d, *args, input=None, stdin=None, cwd=None, host=False, timeout=None):
    addr = ["-H", "127.0.0.1:%d" % d.port] if host else ["-s", d.sock]
    kw = {"input": input} if stdin is None else {"stdin": stdin}
    return subprocess.run([TPCTL] + addr + list(args), capture_output=True, cwd=cwd,
                          timeout=timeout or TIMEOUT * 2, **kw)


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def conf_file(d, text):
    path = os.path.join(d.dir, "tpd.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


# ---------------------------------------------------------------- stdin

def test_run_stdin_of_20mb_streams_at_steady_memory():
    """run -i once read all of stdin into one request: past ~1 MiB it was
    request_too_large. Now 20 MB of binary input reach sha256sum whole, and
    neither tpd nor tpctl grows with the input (RSS measured while it runs)."""
    with Daemon() as d, tempfile.NamedTemporaryFile() as f:
        data = os.urandom(20 * 1024 * 1024)
        f.write(data)
        f.flush()
        f.seek(0)
        base = d.rss_kib()
        p = subprocess.Popen([TPCTL, "-s", d.sock, "run", "-i", "--", "sha256sum"], stdin=f,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        peak_tpd = peak_tpctl = 0
        start = time.monotonic()
        while p.poll() is None:
            peak_tpd = max(peak_tpd, d.rss_kib())
            peak_tpctl = max(peak_tpctl, rss_kib(p.pid))
            time.sleep(0.01)
        out, err = p.communicate()
        took = time.monotonic() - start
        check(p.returncode == 0, "exit %d: %r", p.returncode, err)
        check(out.split()[0].decode() == hashlib.sha256(data).hexdigest(),
              "sha256 differs: %r", out)
        print("20 MB via run -i: %.2fs; tpd RSS %d KiB at start, peak %d KiB (+%d); "
              "tpctl peak RSS %d KiB" % (took, base, peak_tpd, peak_tpd - base, peak_tpctl))
        if SLOW != 1:
            print("(a sanitizer build keeps freed memory in quarantine: RSS not checked)")
            return
        # the input is 20480 KiB: a copy of it on either side would show
        check(peak_tpd - base < 12 * 1024, "tpd grew by %d KiB", peak_tpd - base)
        check(peak_tpctl < 12 * 1024, "tpctl peaked at %d KiB", peak_tpctl)


def test_stdin_buffer_full_holds_the_connection_until_the_task_reads():
    """Past stdin_buffer the daemon stops reading the connection: a ping
    sent behind 3 MiB of input is answered only once the task reads."""
    with Daemon() as d:
        c = d.client()
        rid = c.send({"op": "submit", "task": {"kind": "exec", "stdin_stream": True,
                      "argv": ["sh", "-c", "sleep 1; wc -c"]}})
        acc = c.recv_id(rid)
        check(acc["event"] == "accepted", "%r", acc)
        chunk = base64.b64encode(b"\x00" * 256 * 1024).decode()
        sent = time.monotonic()
        for _ in range(12):
            c.send({"op": "input", "task": acc["task"], "data_base64": chunk})
        pid = c.send({"op": "ping"})
        pong = c.recv_id(pid, "pong")
        waited = time.monotonic() - sent
        check(waited > 0.5, "the ping was answered after %.2fs: the input was not held", waited)
        c.send({"op": "input", "task": acc["task"], "eof": True})
        done = c.done(rid)
        check(done["state"] == "succeeded" and done["result"]["stdout"].strip() ==
              str(12 * 256 * 1024), "%r", done)


def test_send_feeds_a_running_cat():
    """tpctl send ID [FILE] feeds a task submitted with an open stdin; --eof ends it."""
    with Daemon() as d, tempfile.NamedTemporaryFile() as f:
        p = tpctl(d, "submit", "-d", "-i", "--stdin-open", "--", "cat", input=b"one\n")
        check(p.returncode == 0, "%r", p)
        task = p.stdout.decode().split()[0]
        f.write(b"two\n")
        f.flush()
        p = tpctl(d, "send", task, f.name)
        check(p.returncode == 0 and p.stderr == b"", "%r", p)
        p = tpctl(d, "send", task, input=b"three\n")
        check(p.returncode == 0, "%r", p)
        check(tpctl(d, "status", task).returncode == 0, "status")
        p = tpctl(d, "send", "--eof", task, "/dev/null")
        check(p.returncode == 0, "%r", p)
        p = tpctl(d, "wait", "--output", task)
        check(p.returncode == 0 and p.stdout == b"one\ntwo\nthree\n", "%r", p)


def test_input_after_eof_or_end_or_to_a_task_without_it_is_refused():
    with Daemon() as d:
        c = d.client()
        acc = c.request({"op": "submit", "detach": True, "task": {
            "kind": "exec", "argv": ["sh", "-c", "cat; sleep 30"], "stdin_stream": True}})
        t = acc["task"]
        ok = c.request({"op": "input", "task": t, "data": "x", "eof": True})
        check(ok["event"] == "ok" and ok["task"] == t, "%r", ok)
        ev = c.request({"op": "input", "task": t, "data": "y"})
        check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
              ("task %d" % t) in ev["error"]["message"] and "eof" in ev["error"]["message"],
              "input after eof: %r", ev)
        c.request({"op": "cancel", "task": t})
        eventually(lambda: c.request({"op": "status", "task": t})["state"] == "cancelled",
                   "the task ends")
        ev = c.request({"op": "input", "task": t, "data": "z"})
        check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
              ("task %d has ended" % t) in ev["error"]["message"], "after the end: %r", ev)
        for task in ({"kind": "sleep", "ms": 30000}, {"kind": "exec", "argv": ["sleep", "30"]}):
            acc = c.request({"op": "submit", "detach": True, "task": task})
            ev = c.request({"op": "input", "task": acc["task"], "data": "z"})
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request" and
                  "stdin_stream" in ev["error"]["message"], "%r", ev)
            c.request({"op": "cancel", "task": acc["task"]})
        ev = c.request({"op": "submit", "task": {"kind": "exec", "argv": ["cat"],
                        "stdin_stream": True, "stdin": "x"}})
        check(ev["event"] == "error" and "stdin_stream" in ev["error"]["message"], "%r", ev)


def test_input_to_another_owners_task_is_forbidden():
    with Daemon(tcp=True, tcp_auth="token", start=False) as d:
        tok = os.path.join(d.dir, "tokens")
        with open(tok, "w") as f:
            f.write("alice tok-alice\nbob tok-bob\n")
        d.args += ["--token-file", tok]
        d.start()
        a, b = d.client(tcp=True), d.client(tcp=True)
        check(a.request({"op": "hello", "token": "tok-alice"})["event"] == "hello", "alice")
        check(b.request({"op": "hello", "token": "tok-bob"})["event"] == "hello", "bob")
        acc = a.request({"op": "submit", "detach": True, "task": {
            "kind": "exec", "argv": ["cat"], "stdin_stream": True}})
        ev = b.request({"op": "input", "task": acc["task"], "data": "bob's", "eof": True})
        check(ev["event"] == "error" and ev["error"]["code"] == "forbidden", "%r", ev)
        check(a.request({"op": "input", "task": acc["task"], "data": "mine",
                         "eof": True})["event"] == "ok", "the owner's input")
        done = a.request({"op": "wait", "task": acc["task"]}, "done")
        check(done["result"]["stdout"] == "mine", "%r", done)


# ---------------------------------------------------------------- output

def test_5mb_output_whole_through_wait_output_and_log_after_a_restart():
    """wait --output printed the first 1 MiB of a 5 MB output, exit 0, no word."""
    with Daemon() as d:
        p = tpctl(d, "submit", "--", "sh", "-c",
                  "head -c 5000000 /dev/zero | tr '\\0' x; echo tail; echo err >&2")
        check(p.returncode == 0, "%r", p)
        task = p.stdout.decode().split()[0]
        p = tpctl(d, "wait", "--output", task)
        check(p.returncode == 0 and len(p.stdout) == 5000005 and p.stdout.endswith(b"xtail\n")
              and p.stderr == b"err\n", "wait --output: %d bytes, %r", len(p.stdout), p.stderr)
        path = os.path.join(d.dir, "state", "spool", task)
        check(os.stat(path).st_mode & 0o777 == 0o600, "mode %o", os.stat(path).st_mode)
        d.signal(signal.SIGTERM)
        check(d.wait_exit() == 0, "clean stop")
        d.log.close()
        d.start()
        p = tpctl(d, "log", task)
        check(p.returncode == 0 and len(p.stdout) == 5000005 and p.stderr == b"err\n",
              "log after a restart: %d bytes, %r", len(p.stdout), p.stderr)
        # the result alone still says it was cut, on stderr
        p = tpctl(d, "--json", "wait", task)
        done = json.loads(p.stdout.splitlines()[-1])
        check(done["result"]["truncated"] is True, "%r", done["result"].keys())


def test_follow_from_start_replays_a_running_tasks_whole_output():
    with Daemon() as d:
        p = tpctl(d, "submit", "-d", "--", "sh", "-c",
                  "head -c 3000000 /dev/zero | tr '\\0' y; sleep 1; echo end")
        task = p.stdout.decode().split()[0]
        c = d.client()
        eventually(lambda: os.path.exists(os.path.join(d.dir, "state", "spool", task)) and
                   os.path.getsize(os.path.join(d.dir, "state", "spool", task)) > 3000000,
                   "the output is spooled")
        p = tpctl(d, "follow", "--from-start", task)
        check(p.returncode == 0 and p.stdout == b"y" * 3000000 + b"end\n",
              "follow -a: %d bytes %r", len(p.stdout), p.stdout[-10:])


def test_spool_bounds_drop_the_oldest_finished_and_say_so():
    with Daemon(start=False) as d:
        d.args += ["-c", conf_file(d, "[exec]\noutput_spool_task_bytes = 100k\n"
                                      "output_spool_bytes = 300k\n")]
        d.start()
        ids = []
        for ch in "abcd":
            p = tpctl(d, "submit", "--", "sh", "-c", "head -c 90000 /dev/zero | tr '\\0' " + ch)
            ids.append(p.stdout.decode().split()[0])
        p = tpctl(d, "log", ids[0])
        check(p.returncode == 0 and p.stdout == b"a" * 90000 and
              b"removed to make room" in p.stderr and b"output_spool_bytes" in p.stderr,
              "the oldest: %r", p.stderr)
        p = tpctl(d, "log", ids[3])
        check(p.stdout == b"d" * 90000 and p.stderr == b"", "the newest: %r", p.stderr)
        check("removed the output of task %s" % ids[0] in d.read_log(), "logged")
        p = tpctl(d, "submit", "--", "sh", "-c", "head -c 150000 /dev/zero | tr '\\0' z")
        task = p.stdout.decode().split()[0]
        p = tpctl(d, "log", task)
        check(p.stdout == b"z" * 102400 and b"102400 of 150000" in p.stderr and
              b"output_spool_task_bytes" in p.stderr, "per task: %r", p.stderr)
        # a forgotten task's file goes
        c = d.client()
        spool = os.path.join(d.dir, "state", "spool")
        check(ids[3] in os.listdir(spool), "kept")


def test_spool_figures_in_stats_tpctl_and_metrics_match_the_files():
    # Three tasks of 90 kB under a 200k bound: the first file is removed for
    # the third. stats' "spool", tpctl stats' line and the tpd_spool_*
    # series all say what the directory holds.
    with Daemon("--metrics-listen", "127.0.0.1:0",
                conf="[exec]\noutput_spool_bytes = 200k\n") as d:
        spool = os.path.join(d.dir, "state", "spool")
        c = d.client()
        st = c.request({"op": "stats"}, "stats")["spool"]
        check(st == {"bytes": 0, "max_bytes": 204800, "files": 0, "dropped": 0}, "at start: %r", st)
        for ch in "abc":
            p = tpctl(d, "submit", "--", "sh", "-c", "head -c 90000 /dev/zero | tr '\\0' " + ch)
            check(p.returncode == 0, "%r", p.stderr)
        names = os.listdir(spool)
        size = sum(os.path.getsize(os.path.join(spool, n)) for n in names)
        st = c.request({"op": "stats"}, "stats")["spool"]
        check(len(names) == 2, "files in the spool: %r", names)
        check(st == {"bytes": size, "max_bytes": 204800, "files": 2, "dropped": 1},
              "after three: %r, files %r of %d bytes", st, names, size)
        out = tpctl(d, "stats").stdout.decode()
        check("spool: 2 task outputs, " in out and ", 1 removed to make room" in out,
              "tpctl stats: %r", out)
        got = dict(l.split(" ") for l in d.metrics().splitlines() if l.startswith("tpd_spool_"))
        check(got == {"tpd_spool_bytes": str(size), "tpd_spool_max_bytes": "204800",
                      "tpd_spool_files": "2", "tpd_spool_dropped_total": "1"}, "%r", got)
    with Daemon("--journal", "off") as d:
        check("spool" not in d.client().request({"op": "stats"}, "stats"),
              "spooling is off with the journal: no spool object")


def test_spool_file_goes_with_the_forgotten_task():
    with Daemon("--journal", "on", start=False) as d:
        d.args += ["-c", conf_file(d, "[daemon]\nresult_retain = 1\n")]
        d.start()
        spool = os.path.join(d.dir, "state", "spool")
        first = tpctl(d, "submit", "--", "echo", "one").stdout.decode().split()[0]
        check(first in os.listdir(spool), "spooled")
        tpctl(d, "submit", "--", "echo", "two")
        eventually(lambda: first not in os.listdir(spool), "the forgotten task's file goes")


def test_journal_off_keeps_what_the_result_kept_and_says_a_cut():
    with Daemon("--journal", "off") as d:
        p = tpctl(d, "submit", "--output-limit", "1000", "--", "sh", "-c",
                  "head -c 5000 /dev/zero | tr '\\0' q")
        task = p.stdout.decode().split()[0]
        p = tpctl(d, "wait", "--output", task)
        check(p.stdout == b"q" * 1000 and b"output limit" in p.stderr, "%r", p.stderr)
        check("journal is off" in d.read_log(), "the log says spooling is off")


def test_batch_says_when_a_result_was_cut():
    """batch printed the first output_limit bytes, exit 0, without a word."""
    with Daemon() as d:
        path = os.path.join(d.dir, "jobs")
        with open(path, "w") as f:
            f.write("sh -c \"head -c 5000 /dev/zero | tr '\\\\0' b\"\n")
        p = tpctl(d, "batch", "--no-progress", "--output-limit", "1000", path)
        check(p.returncode == 0 and p.stdout == b"b" * 1000, "%r", p.stdout[-50:])
        check(b"cut at the output limit" in p.stderr and b"tpctl log 1" in p.stderr,
              "%r", p.stderr)
        p = tpctl(d, "log", "1")
        check(p.stdout == b"b" * 5000, "the spool has it all: %d", len(p.stdout))


# ---------------------------------------------------------------- cwd

def test_run_sends_its_own_directory_and_resolves_a_relative_c():
    with Daemon(tcp=True) as d, tempfile.TemporaryDirectory() as here:
        here = os.path.realpath(here)
        os.mkdir(os.path.join(here, "sub"))
        p = tpctl(d, "run", "--", "pwd", cwd=here)
        check(p.returncode == 0 and p.stdout.decode().strip() == here, "%r", p)
        p = tpctl(d, "run", "-C", "sub", "--", "pwd", cwd=here)
        check(p.stdout.decode().strip() == os.path.join(here, "sub"), "%r", p)
        p = tpctl(d, "run", "-C", ".", "--", "pwd", cwd=here)
        check(p.stdout.decode().strip() == here, "%r", p)
        p = tpctl(d, "run", "-C", "sub", "--", "pwd", cwd=here, host=True)
        check(p.returncode == 64 and b"relative" in p.stderr and b"TCP" in p.stderr, "%r", p)
        p = tpctl(d, "run", "-C", "/", "--", "pwd", cwd=here, host=True)
        check(p.returncode == 0 and p.stdout == b"/\n", "%r", p)


def test_a_piped_stdin_without_i_gets_a_hint():
    with Daemon() as d:
        p = tpctl(d, "run", "--", "cat", input=b"lost\n")
        check(p.returncode == 0 and p.stdout == b"" and p.stderr.count(b"\n") == 1 and
              b"-i" in p.stderr and b"pipe" in p.stderr, "%r", p)
        p = tpctl(d, "run", "-i", "--", "cat", input=b"kept\n")
        check(p.stdout == b"kept\n" and p.stderr == b"", "%r", p)
        p = tpctl(d, "run", "--", "true", stdin=subprocess.DEVNULL)
        check(p.stderr == b"", "no hint for /dev/null: %r", p)


run_tests(globals())
