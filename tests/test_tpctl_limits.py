#!/usr/bin/env python3
"""tpctl's limit options and usage figures against the real tpd.

run, submit and batch take --memory, --cpus, --pids, --open-files,
--cpu-seconds and --file-size; the limits must reach the task's processes
(read back with ulimit and /proc/self/limits). A limit the daemon refuses
(one it cannot enforce here, or above the pool's maximum) is one line naming
the option. wait, status and run -v show what a task used. A task killed for
passing its memory limit (error oom) is said in one line: the real daemon
sends oom only with a cgroup memory controller, so the line is also checked
against crafted done events from a fake daemon.
"""
import json
import os
import re
import secrets
import subprocess
import time

from tpdtest import SLOW, TPCTL, TIMEOUT, Daemon, Skip, check, remove_cgroup, run_tests
from test_tpctl import FakeTpd

# Burns at least 200 ms of user CPU (as the program itself counts it), then
# touches 64 MiB: figures a usage line must show.
BURN = ("import os\n"
        "while os.times().user < 0.2:\n"
        "    sum(range(2000))\n"
        "b = b'x' * (64 << 20)\n")


def tpctl(d, *args, input=None):
    """Runs tpctl against d (a Daemon or a FakeTpd); returns the CompletedProcess."""
    return subprocess.run([TPCTL, "-s", d.sock] + list(args), input=input,
                          capture_output=True, timeout=TIMEOUT)


def expect(p, code, what):
    check(p.returncode == code, "%s: exit %d, expected %d\nstdout: %r\nstderr: %r",
          what, p.returncode, code, p.stdout[-2000:], p.stderr[-2000:])
    return p


def lines(data):
    return data.decode().splitlines()


def conf_daemon(conf, **kw):
    d = Daemon(start=False, **kw)
    path = os.path.join(d.dir, "tpd.conf")
    with open(path, "w") as f:
        f.write(conf)
    d.args += ["-c", path]
    d.start()
    return d


def write_file(d, name, text):
    path = os.path.join(d.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def proc_limit(text, name):
    """The soft value of a line of /proc/self/limits ("Max open files")."""
    for line in text.splitlines():
        if line.startswith(name):
            return line[len(name):].split()[0]
    raise AssertionError("no %r in %r" % (name, text))


def containment(d):
    return d.client().request({"op": "stats"}, "stats").get("containment")


# ---------------------------------------------------------------- the limits reach the task

def test_limits_reach_the_task():
    with Daemon() as d:
        p = expect(tpctl(d, "run", "--open-files", "16", "--", "sh", "-c", "ulimit -n"), 0,
                   "--open-files")
        check(p.stdout == b"16\n", "ulimit -n: %r", p.stdout)
        # ulimit -f counts 512-byte blocks (POSIX sh) or 1024 (bash); /proc says bytes
        p = expect(tpctl(d, "run", "--file-size", "1M", "--cpu-seconds", "7", "--",
                         "sh", "-c", "ulimit -f; ulimit -t; cat /proc/self/limits"), 0,
                   "--file-size --cpu-seconds")
        out = lines(p.stdout)
        check(out[0] in ("2048", "1024"), "ulimit -f: %r", out)
        check(out[1] == "7", "ulimit -t: %r", out)
        limits = "\n".join(out[2:])
        check(proc_limit(limits, "Max file size") == "1048576", "file size: %r", limits)
        check(proc_limit(limits, "Max cpu time") == "7", "cpu time: %r", limits)
        # a duration for --cpu-seconds, in whole seconds
        p = expect(tpctl(d, "run", "--cpu-seconds", "2min", "--", "sh", "-c", "ulimit -t"), 0,
                   "--cpu-seconds 2min")
        check(p.stdout == b"120\n", "%r", p.stdout)
        if containment(d) == "process":
            # without a cgroup memory controller, memory_bytes is RLIMIT_AS (doc/exec.md)
            p = expect(tpctl(d, "run", "--memory", "512M", "--", "cat", "/proc/self/limits"),
                       0, "--memory")
            check(proc_limit(p.stdout.decode(), "Max address space") == str(512 << 20),
                  "address space: %r", p.stdout)

        # submit: the task carries the limits; its output comes with wait --output
        p = expect(tpctl(d, "submit", "--detach", "--open-files", "20", "--",
                         "sh", "-c", "ulimit -n"), 0, "submit --open-files")
        task = p.stdout.decode().strip()
        p = expect(tpctl(d, "wait", "--output", task), 0, "wait --output")
        check(p.stdout == b"20\n", "submit's task: %r", p.stdout)

        # batch: the option applies to every exec line that does not set the limit itself
        path = write_file(d, "jobs", "sh -c 'ulimit -n'\n"
                          '{"kind":"exec","argv":["sh","-c","ulimit -n"],'
                          '"limits":{"open_files":24}}\n'
                          "sh -c 'ulimit -n'\n")
        p = expect(tpctl(d, "batch", "--no-progress", "-j", "1", "--open-files", "18", path), 0,
                   "batch --open-files")
        check(sorted(lines(p.stdout)) == ["18", "18", "24"], "batch: %r", p.stdout)

        # --json: the request's limits as sent
        p = expect(tpctl(d, "--json", "submit", "--open-files", "30", "--file-size", "64k",
                         "--cpu-seconds", "9", "--", "true"), 0, "--json submit")
        evs = [json.loads(l) for l in lines(p.stdout)]
        check([e["event"] for e in evs] == ["accepted", "done"], "%r", evs)


def test_cpus_and_pids_are_refused_here_in_one_line():
    with Daemon() as d:
        c = d.client()
        for args, option in ((["--pids", "8"], "--pids 8"), (["--cpus", "0.5"], "--cpus 0.5")):
            for cmd in ("run", "submit"):
                p = tpctl(d, cmd, *args, "--", "true")
                if p.returncode == 0:
                    raise Skip("the daemon accepts %s (containment %s, with the controller "
                               "it needs): nothing to refuse here" % (option, containment(d)))
                expect(p, 1, "%s %s" % (cmd, option))
                err = lines(p.stderr)
                check(len(err) == 1, "%s %s: one line: %r", cmd, option, err)
                check(err[0].startswith("tpctl: %s: task.limits." % option) and
                      "cannot be enforced here" in err[0] and err[0].endswith("(bad_request)"),
                      "%s %s: names the option and the daemon's reason: %r", cmd, option, err)
                check(p.stdout == b"", "%s: no task id: %r", cmd, p.stdout)
        # batch says it once and submits no more
        path = write_file(d, "jobs", "true\n" * 40)
        p = expect(tpctl(d, "batch", "--no-progress", "-j", "2", "--pids", "8", path), 1,
                   "batch --pids")
        err = lines(p.stderr)
        check(len(err) == 2 and err[0].startswith("tpctl: --pids 8: task.limits.pids") and
              err[1].startswith("batch: 40 tasks") and "not submitted" in err[1],
              "one line, then the summary: %r", err)
        check(c.stats()["accepted"] == 0, "nothing ran: %r", c.stats())


def test_a_limit_above_the_pools_maximum_is_one_line():
    with conf_daemon("[pool default]\nmax_limit_open_files = 100\n") as d:
        expect(tpctl(d, "run", "--open-files", "100", "--", "true"), 0, "at the maximum")
        p = expect(tpctl(d, "run", "--open-files", "101", "--", "true"), 1, "above it")
        err = lines(p.stderr)
        check(err == ["tpctl: --open-files 101: task.limits.open_files is 101, above the maximum "
                      "100 of pool default (max_limit_open_files) (bad_request)"], "%r", err)
        # a task's own limit (--task) wins over the option: the daemon's words as they are
        p = expect(tpctl(d, "run", "--open-files", "50", "--task",
                         '{"kind":"exec","argv":["true"],"limits":{"open_files":200}}'), 1,
                   "the task's own limit")
        err = lines(p.stderr)
        check(len(err) == 1 and err[0].startswith("tpctl: submit: task.limits.open_files is 200"),
              "%r", err)


# ---------------------------------------------------------------- bad values

def test_bad_values_are_usage_errors():
    bad = [
        ("--memory", "0"), ("--memory", "lots"), ("--memory", "1.1k"), ("--memory", "-5"),
        ("--memory", "99999999999G"),
        ("--cpus", "0"), ("--cpus", "0.001"), ("--cpus", "1025"), ("--cpus", ".5"),
        ("--cpus", "1e2"), ("--cpus", "0.3333"), ("--cpus", "half"), ("--cpus", "-1"),
        ("--pids", "0"), ("--pids", "x"), ("--pids", "1.5"),
        ("--open-files", "2"), ("--open-files", "many"),
        ("--cpu-seconds", "0"), ("--cpu-seconds", "1.5s"), ("--cpu-seconds", "500ms"),
        ("--cpu-seconds", "soon"),
        ("--file-size", "big"), ("--file-size", "-1"),
    ]
    with Daemon() as d:
        c = d.client()
        jobs = write_file(d, "jobs", "true\n")
        for option, value in bad:
            for cmd in (["run", option, value, "--", "true"],
                        ["submit", option, value, "--", "true"],
                        ["batch", option, value, jobs]):
                p = expect(tpctl(d, *cmd), 64, " ".join(cmd))
                err = p.stderr.decode()
                check(err.startswith("tpctl %s: %s: " % (cmd[0], option)) and value in err,
                      "%s: names the option and the value: %r", cmd, err)
        # a value is needed
        p = expect(tpctl(d, "run", "true", "--pids"), 0, "after the command: its argument")
        p = expect(tpctl(d, "run", "--pids"), 64, "no value")
        check(b"--pids needs a value" in p.stderr, "%r", p.stderr)
        # limits are for exec tasks: never dropped from another kind
        p = expect(tpctl(d, "run", "--memory", "1M", "--task", '{"kind":"sleep","ms":1}'), 64,
                   "a sleep with a limit")
        check(b"--memory: only exec tasks take limits" in p.stderr, "%r", p.stderr)
        check(c.stats()["accepted"] == 1, "only the run of true ran: %r", c.stats())
        # the edges that are good
        for option, value in (("--cpus", "0.01"), ("--cpus", "1024"), ("--cpus", "0.500"),
                              ("--open-files", "3"), ("--file-size", "0"), ("--memory", "1G")):
            p = tpctl(d, "--json", "submit", "--detach", option, value, "--", "true")
            check(p.returncode in (0, 1), "%s %s: exit %d: %r", option, value, p.returncode,
                  p.stderr)
            ev = json.loads(lines(p.stdout)[0])
            check(ev["event"] == "accepted" or "cannot be enforced" in ev["error"]["message"],
                  "%s %s: taken by tpctl: %r", option, value, ev)


# ---------------------------------------------------------------- usage

USAGE_RE = re.compile(r"cpu (\d+\.\d\d)s user, (\d+\.\d\d)s system, peak (?:at most )?([\d.]+) (B|KiB|MiB|GiB)")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_usage(text, what):
    """(user s, system s, peak bytes, the peak's rounding in bytes) of a usage line."""
    m = USAGE_RE.search(text)
    check(m is not None, "%s: no usage in %r", what, text)
    unit = UNITS[m.group(4)]
    return (float(m.group(1)), float(m.group(2)), float(m.group(3)) * unit,
            0.05 * unit if "." in m.group(3) else 0.5 * unit)


def check_plausible(usage, what):
    user, system, peak, _ = usage
    check(user >= 0.15, "%s: the burn's user time: %r", what, usage)
    check(user + system < 60 * SLOW, "%s: not absurd: %r", what, usage)
    check(64 << 20 <= peak < 64 << 30, "%s: the peak holds the 64 MiB: %r", what, usage)


def test_usage_in_wait_status_and_run_verbose():
    with Daemon() as d:
        p = expect(tpctl(d, "submit", "--", "python3", "-c", BURN), 0, "submit the burn")
        task = p.stdout.decode().strip()
        p = expect(tpctl(d, "wait", task), 0, "wait")
        out = p.stdout.decode()
        check(out.startswith("task %s: succeeded in " % task) and out.count("\n") == 1,
              "one line: %r", out)
        usage = parse_usage(out, "wait")
        check_plausible(usage, "wait")
        # --json prints the usage as the daemon sent it; the line is its rounding
        p = expect(tpctl(d, "--json", "wait", task), 0, "--json wait")
        raw = json.loads(p.stdout)["result"]["usage"]
        check(set(raw) == {"user_ms", "system_ms", "max_rss_bytes", "max_rss_upper_bound"},
              "%r", raw)
        check(abs(raw["user_ms"] / 1000 - usage[0]) <= 0.005 and
              abs(raw["system_ms"] / 1000 - usage[1]) <= 0.005, "%r vs %r", raw, usage)
        check(abs(raw["max_rss_bytes"] - usage[2]) <= usage[3] + 1, "%r vs %r", raw, usage)

        # status: a USAGE column for a finished exec task, none for others
        p = expect(tpctl(d, "submit", "--detach", "--task", '{"kind":"sleep","ms":%d}'
                         % int(60000 * SLOW)), 0, "a long sleep")
        sleeper = p.stdout.decode().strip()
        p = expect(tpctl(d, "status", task, sleeper), 0, "status")
        rows = lines(p.stdout)
        check(rows[0].split()[-1] == "USAGE", "the column: %r", rows)
        check([rows[1].split()[0], rows[1].split()[3]] == [task, "succeeded"], "%r", rows)
        check(parse_usage(rows[1], "status") == usage, "status shows wait's figures: %r", rows)
        # the sleep may not have left the queue yet: either way it has no usage
        check(rows[2].split()[0] == sleeper and rows[2].split()[3] in ("queued", "running")
              and "cpu" not in rows[2] and rows[2] == rows[2].rstrip(),
              "an unfinished task has none: %r", rows)
        p = expect(tpctl(d, "--json", "status", task), 0, "--json status")
        evs = [json.loads(l) for l in lines(p.stdout)]
        check([e["event"] for e in evs] == ["status", "done"], "%r", evs)
        check(evs[1]["result"]["usage"] == raw, "the usage as it is: %r", evs)
        expect(tpctl(d, "cancel", sleeper), 0, "cancel")

        # run -v: one line on stderr after the task; run without -v: nothing new
        p = expect(tpctl(d, "run", "-v", "--", "python3", "-c", BURN + "print('out')"), 0,
                   "run -v")
        check(p.stdout == b"out\n", "%r", p.stdout)
        err = lines(p.stderr)
        check(len(err) == 1 and re.match(r"tpctl: task \d+: cpu ", err[0]), "%r", err)
        check_plausible(parse_usage(err[0], "run -v"), "run -v")
        p = expect(tpctl(d, "run", "--", "python3", "-c", BURN + "print('out')"), 0, "run")
        check(p.stdout == b"out\n" and p.stderr == b"", "nothing new: %r %r", p.stdout, p.stderr)
        # a task that failed: its own line first, the usage last
        p = expect(tpctl(d, "run", "--verbose", "--timeout", "%dms" % int(300 * SLOW), "--",
                         "sleep", "60"), 124, "run -v of a task that times out")
        err = lines(p.stderr)
        check(len(err) == 2 and "timed out" in err[0] and "cpu " in err[1], "%r", err)
        # a kind without usage: nothing to say
        p = expect(tpctl(d, "run", "-v", "--task", '{"kind":"echo","value":1}'), 0, "echo -v")
        check(p.stderr == b"", "%r", p.stderr)


# ---------------------------------------------------------------- oom

def oom_done(req, limit=536870912):
    return {"event": "done", "id": req["id"], "task": 9, "pool": "default", "state": "failed",
            "queued_ms": 0.1, "run_ms": 812.0,
            "error": {"code": "oom",
                      "message": "killed for passing its memory limit (memory_bytes %d)" % limit},
            "result": {"exit_code": None, "signal": 9, "signal_name": "SIGKILL", "stdout": "",
                       "stderr": "", "truncated": False,
                       "usage": {"user_ms": 250.0, "system_ms": 12.5,
                                 "max_rss_bytes": 536870912}}}


def test_oom_is_one_line_and_exit_1():
    def handler(req):
        if req["op"] == "submit":
            ev = oom_done(req)
            return [{"event": "accepted", "id": req["id"], "task": 9, "pool": "default",
                     "queued": 0}, ev]
        if req["op"] == "wait":
            return [oom_done(req, limit=3 << 29)]
        if req["op"] == "ping":
            return [{"event": "pong", "id": req["id"]}]
        return []
    want = "killed: it passed its memory limit of 512 MiB"
    with FakeTpd(handler) as f:
        p = expect(tpctl(f, "run", "--memory", "512M", "--", "big"), 1, "run")
        check(lines(p.stderr) == ["tpctl: task 9 " + want], "%r", p.stderr)
        p = expect(tpctl(f, "run", "-v", "--memory", "512M", "--", "big"), 1, "run -v")
        check(lines(p.stderr) == ["tpctl: task 9 " + want, "tpctl: task 9: cpu 0.25s user, "
                                  "0.01s system, peak 512 MiB"], "%r", p.stderr)
        p = expect(tpctl(f, "submit", "--", "big"), 1, "submit")
        check(lines(p.stderr) == ["tpctl: task 9 " + want], "%r", p.stderr)
        p = expect(tpctl(f, "wait", "9"), 1, "wait")
        check(lines(p.stdout) == ["task 9: killed: it passed its memory limit of 1.5 GiB, "
                                  "queued 0.10ms, cpu 0.25s user, 0.01s system, peak 512 MiB"],
              "%r", p.stdout)


def cgroup2_memory_root():
    """A fresh cgroup2 subtree with the memory controller, or Skip saying why not."""
    mnt = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.startswith("cgroup2 ") and left.split()[3] == "/":
                mnt = left.split()[4]
    why = ("a memory limit is then RLIMIT_AS, whose failed allocation is the program's own "
           "exit_status, never oom (tpctl's oom line is checked on crafted events)")
    if mnt is None:
        raise Skip("no cgroup2 file system is mounted: " + why)
    with open(os.path.join(mnt, "cgroup.subtree_control")) as f:
        if "memory" not in f.read().split():
            raise Skip("cgroup2 at %s offers no memory controller to its children: %s"
                       % (mnt, why))
    if os.geteuid() != 0:
        raise Skip("making a cgroup needs root here: " + why)
    path = os.path.join(mnt, "tpdtest-" + secrets.token_hex(4))
    try:
        os.mkdir(path)
    except OSError as e:
        raise Skip("cannot make a cgroup under %s (%s): %s" % (mnt, e, why))
    return path


def test_oom_from_the_real_daemon():
    root = cgroup2_memory_root()
    try:
        with conf_daemon("[daemon]\ncontainment = cgroup\ncgroup_root = %s\n" % root) as d:
            p = expect(tpctl(d, "run", "--memory", "64M", "--", "python3", "-c",
                             "x = bytearray(300 << 20); x[::4096] = b'1' * len(x[::4096])"),
                       1, "run past --memory")
            check(lines(p.stderr)[-1].endswith(
                "killed: it passed its memory limit of 64 MiB"), "%r", p.stderr)
    finally:
        remove_cgroup(root)


# ---------------------------------------------------------------- completion

def test_completion_knows_the_limit_options():
    from test_tpctl import complete
    check(complete(["run", "--op"]) == ["--open-files"], "%r", complete(["run", "--op"]))
    check(complete(["submit", "--cpu"]) == ["--cpu-seconds", "--cpus"], "%r",
          complete(["submit", "--cpu"]))
    check(complete(["run", "--verb"]) == ["--verbose"], "run -v: %r", complete(["run", "--verb"]))
    check(complete(["submit", "--verb"]) == [], "run's only: %r", complete(["submit", "--verb"]))
    # their values are skipped when looking for the command to run
    got = complete(["run", "--memory", "1G", "--file-size", "1M", "--pi"])
    check(got == ["--pids"], "%r", got)
    got = complete(["batch", "--pids", "3", "--no-p"])
    check(got == ["--no-progress"], "%r", got)


if __name__ == "__main__":
    run_tests(globals())
