#!/usr/bin/env python3
"""The configuration file: `tpd -n -c` on a table of broken files (every error with
its file:line, all of them, in order), good files, and SIGHUP reloads that resize and
add pools live, drain removed ones, keep connections, and change nothing on errors."""
import grp
import os
import signal
import subprocess
import tempfile

from tpdtest import TPD, Daemon, check, eventually, run_tests

SRCDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (what, file text, expected stderr lines with F for the file's path)
BROKEN = [
    ("a misspelt key gets a suggestion",
     "[daemon]\nmax_conections = 5\n",
     ["F:2: [daemon] max_conections: unknown key (did you mean max_connections?)"]),
    ("a key in the wrong section says where it belongs",
     "[daemon]\nsize = 3\n",
     ["F:2: [daemon] size: unknown key here (it belongs in [pool NAME])"]),
    ("an unknown key without a near one",
     "[exec]\nfrobnicate = 1\n",
     ["F:2: [exec] frobnicate: unknown key"]),
    ("an unknown section, whose keys are not reported again",
     "[deamon]\nsocket = /x\nbogus = 1\n",
     ["F:1: [deamon]: unknown section (expected [daemon], [exec], [pool NAME] or [source NAME])"]),
    ("a key before any section",
     "socket = /x\n[daemon]\n",
     ["F:1: socket: key outside any section (keys go under [daemon], [exec], [pool NAME] or [source NAME])"]),
    ("a line that is not key = value",
     "[daemon]\njust some words\nname: value\n",
     ['F:2: expected "key = value", a [section] or a comment',
      'F:3: expected "key = value", a [section] or a comment']),
    ("broken section headers",
     "[daemon\n[daemon] junk\n",
     ['F:1: section header without "]"',
      'F:2: text after the section header: " junk"']),
    ("a value without a key",
     "[daemon]\n= 5\n",
     ["F:2: a value without a key"]),
    ("an empty value",
     "[daemon]\nmax_connections =\n",
     ["F:2: [daemon] max_connections: empty value"]),
    ("not a number",
     "[daemon]\nmax_connections = 12abc\nresult_retain = -1\n",
     ['F:2: [daemon] max_connections: "12abc" is not a whole number',
      'F:3: [daemon] result_retain: "-1" is not a whole number']),
    ("a count out of range",
     "[daemon]\nmax_connections = 0\nresult_retain = 99999999999999999999999\n",
     ["F:2: [daemon] max_connections: 0 is out of range (1 to 1048576)",
      "F:3: [daemon] result_retain: 99999999999999999999999 is out of range (0 to 10000000)"]),
    ("sizes: not one, and out of range",
     "[daemon]\nmax_request_bytes = lots\nmax_output_buffer = 2G\n[exec]\nstream_budget = 1k\n",
     ['F:2: [daemon] max_request_bytes: "lots" is not a size (a number of bytes, or with k, M or G)',
      "F:3: [daemon] max_output_buffer: 2G is out of range (64k to 1G)",
      "F:5: [exec] stream_budget: 1k is out of range (4k to 1G)"]),
    ("durations: not one, and out of range",
     "[daemon]\nresult_ttl = 5 minutes\nshutdown_timeout = 8d\n[exec]\nkill_grace = 2h\n",
     ['F:2: [daemon] result_ttl: "5 minutes" is not a duration (like 500ms, 5s, 2min, 1h, 1d)',
      "F:3: [daemon] shutdown_timeout: 8d is out of range (0ms to 7d)",
      "F:5: [exec] kill_grace: 2h is out of range (0ms to 1h)"]),
    ("modes that are not octal or too wide",
     "[daemon]\nsocket_mode = 0999\n",
     ['F:2: [daemon] socket_mode: "0999" is not an octal mode like 0660']),
    ("a mode with setuid bits",
     "[daemon]\nsocket_mode = 4755\n",
     ['F:2: [daemon] socket_mode: "4755" is not an octal mode like 0660']),
    ("a group that does not exist",
     "[daemon]\nsocket_group = no-such-group-tpdtest\nadmin_group = nor-this-one\n",
     ['F:2: [daemon] socket_group: no group named "no-such-group-tpdtest"',
      'F:3: [daemon] admin_group: no group named "nor-this-one"']),
    ("token files that cannot be read",
     "[daemon]\ntoken_file = /nonexistent/token\n",
     ["F:2: [daemon] token_file: cannot read /nonexistent/token: No such file or directory"]),
    ("a log level that does not exist",
     "[daemon]\nlog_level = loud\n",
     ['F:2: [daemon] log_level: "loud" is not a level (error, warning, notice, info or debug)']),
    ("listen addresses: each bad one named, good ones on the same line kept",
     "[daemon]\nlisten = 127.0.0.1 127.0.0.1:7420 ::1:80\nlisten = [::1]:99999 127.0.0.1:7420\n"
     "tcp_auth = none\n",
     ['F:2: [daemon] listen: "127.0.0.1" is not HOST:PORT',
      'F:2: [daemon] listen: "::1:80": an IPv6 address goes in brackets, as [::1]:PORT',
      'F:3: [daemon] listen: "[::1]:99999": port must be a number from 0 to 65535',
      "F:3: [daemon] listen: 127.0.0.1:7420 given twice"]),
    ("a socket path too long for a Unix socket",
     "[daemon]\nsocket = /" + "s" * 120 + "\n",
     ["F:2: [daemon] socket: path longer than 107 bytes"]),
    ("environment entries",
     "[exec]\nenv = 1BAD=x\nenv = NOEQUALS\nenv = FOO=1\nenv = FOO=2\n",
     ['F:2: [exec] env: "1BAD" is not a variable name (letters, digits, _)',
      'F:3: [exec] env: "NOEQUALS" is not NAME=value',
      "F:5: [exec] env: FOO already set at line 4"]),
    ("output_limit above output_limit_max, at the line that set it",
     "[exec]\noutput_limit = 32M\n",
     ["F:2: [exec] output_limit: 32M is above output_limit_max 16M"]),
    ("a key given twice in one section",
     "[pool io]\nsize = 2\nsize = 3\n[daemon]\nsocket = /a\nsocket = /b\n",
     ["F:3: [pool io] size: already set at line 2",
      "F:6: [daemon] socket: already set at line 5"]),
    ("a section given twice",
     "[pool io]\nsize = 2\n[pool io]\ncapacity = 3\n",
     ["F:3: [pool io]: section repeated (first at line 1)"]),
    ("pool names",
     "[pool]\nsize = 1\n[pool a/b]\n[pool " + "n" * 33 + "]\n",
     ["F:1: [pool]: a pool section needs a name, as [pool NAME]",
      "F:3: [pool a/b]: a pool name is 1 to 32 letters, digits, '_', '.' or '-'",
      "F:4: [pool " + "n" * 33 + "]: a pool name is 1 to 32 letters, digits, '_', '.' or '-'"]),
    ("pool figures out of range",
     "[pool io]\nsize = 0\nlimit = 2000\ncapacity = 0\n",
     ["F:2: [pool io] size: 0 is out of range (1 to 1024)",
      "F:3: [pool io] limit: 2000 is out of range (1 to 1024)",
      "F:4: [pool io] capacity: 0 is out of range (1 to 1000000)"]),
    ("size above the limit, reported at the size line whatever the order",
     "[pool io]\nlimit = 5\nsize = 10\n[pool big]\nsize = 80\n",
     ["F:3: [pool io] size: 10 is above limit 5",
      "F:5: [pool big] size: 80 is above limit 64"]),
    ("a line too long for the parser",
     "[daemon]\nsocket = /" + "x" * 200 + "\n",
     ["F:2: line too long (at most 198 characters without comments)"]),
    ("a source without what it needs, each missing key named at its header",
     "[source jobs]\nclaim_idle = 2s\n",
     ["F:1: [source jobs] type: missing (type = redis-stream)",
      "F:1: [source jobs] redis: missing: where Redis listens, unix:PATH or HOST[:PORT]",
      "F:1: [source jobs] stream: missing: the stream to read tasks from",
      "F:1: [source jobs] group: missing: the consumer group to read as (created if missing)"]),
    ("a source's values, each bad one named",
     "[source jobs]\ntype = kafka\nredis = localhost:redis\nstream = a b\ngroup = g\n"
     "claim_idle = 5\nmax_deliveries = 0\nresults_maxlen = many\npool = no/pool\n"
     "timeout = 1h\nstrem = x\n",
     ['F:2: [source jobs] type: "kafka" is not a source type (the one type is redis-stream)',
      'F:3: [source jobs] redis: "localhost:redis": the port must be a number from 1 to 65535',
      'F:4: [source jobs] stream: "a b": a name without white space or control characters',
      "F:6: [source jobs] claim_idle: 5: add a unit, as 5s or 5ms",
      "F:7: [source jobs] max_deliveries: 0 is out of range (1 to 1000)",
      'F:8: [source jobs] results_maxlen: "many" is not a whole number',
      "F:9: [source jobs] pool: \"no/pool\" is not a pool name (1 to 32 letters, digits, "
      "'_', '.' or '-')",
      "F:10: [source jobs] timeout: 1h is out of range (100ms to 10min)",
      "F:11: [source jobs] strem: unknown key (did you mean stream?)"]),
    ("a source's redis address, its pool, and streams of its own",
     "[source a]\ntype = redis-stream\nredis = unix:\nstream = s\ngroup = g\npool = io\n"
     "results = s\n[source b]\ntype = redis-stream\nredis = 127.0.0.1:0\nstream = t\n"
     "group = g\ndead_letter = t\n[source c]\ntype = redis-stream\nredis = *:6379\n"
     "stream = u\ngroup = g\nresults = r\ndead_letter = r\n[source d/e]\n[source]\n"
     "[daemon]\npool = x\n",
     ["F:3: [source a] redis: unix: needs the socket's path, as unix:PATH",
      'F:6: [source a] pool: no pool named "io" (a [pool io] section makes one)',
      'F:7: [source a] results: "s" is the stream tasks are read from: results need a '
      "stream of their own",
      'F:10: [source b] redis: "127.0.0.1:0": the port must be a number from 1 to 65535',
      'F:13: [source b] dead_letter: "t" is the stream tasks are read from: dead letters '
      "need a stream of their own",
      'F:16: [source c] redis: "*:6379": "*" is not a host name or address (expected '
      "unix:PATH, HOST[:PORT] or [IPV6][:PORT])",
      'F:20: [source c] dead_letter: "r" is the results stream too: dead letters need a '
      "stream of their own",
      "F:21: [source d/e]: a source name is 1 to 32 letters, digits, '_', '.' or '-'",
      "F:22: [source]: a source section needs a name, as [source NAME]",
      "F:24: [daemon] pool: unknown key here (it belongs in [source NAME])"]),
    ("a source cannot feed a pool that runs tasks as their caller",
     "[pool mine]\nrun_as = caller\n[source s]\ntype = redis-stream\nredis = unix:/r\n"
     "stream = s\ngroup = g\npool = mine\n",
     None),
    ("every error of a file, in line order",
     "[daemon]\nsockt = /x\nmax_connections = many\n[pool io]\nsize = 80\n[nope]\n"
     "[exec]\nkill_grace = soon\n",
     ["F:2: [daemon] sockt: unknown key (did you mean socket?)",
      'F:3: [daemon] max_connections: "many" is not a whole number',
      "F:5: [pool io] size: 80 is above limit 64",
      "F:6: [nope]: unknown section (expected [daemon], [exec], [pool NAME] or [source NAME])",
      'F:8: [exec] kill_grace: "soon" is not a duration (like 500ms, 5s, 2min, 1h, 1d)']),
]


def check_file(text):
    """Runs tpd -n -c on text; returns (exit status, stdout, stderr, path)."""
    fd, path = tempfile.mkstemp(prefix="tpdconf-", suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        r = subprocess.run([TPD, "-n", "-c", path], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(path)
    return r.returncode, r.stdout, r.stderr, path


def test_broken_files_name_file_line_and_key():
    for what, text, want in BROKEN:
        if want is None:
            continue  # needs privileges to say anything but that: see the test below
        rc, out, err, path = check_file(text)
        want = [w.replace("F:", path + ":", 1) for w in want]
        got = err.rstrip("\n").split("\n")
        check(rc == 1, "%s: exit 1, got %d (stdout %r)", what, rc, out)
        check(got == want, "%s:\n want %r\n got  %r", what, want, got)
        check("configuration OK" not in out, "%s: no OK", what)
    print("checked %d broken files" % len(BROKEN))


def test_source_pool_running_as_caller_is_refused():
    text = [t for w, t, want in BROKEN if want is None][0]
    rc, out, err, path = check_file(text)
    want = ("%s:8: [source s] pool: pool mine runs tasks as their caller (run_as = caller), "
            "and a task from a stream has none" % path)
    check(rc == 1 and want in err.split("\n"), "want %r in %r", want, err)


def test_good_files_are_ok():
    with open(os.path.join(SRCDIR, "conf", "tpd.conf")) as f:
        shipped = f.read()
    # the shipped file with every documented default uncommented must be valid too,
    # except keys whose example needs this machine's groups or files, or cgroup
    # controllers (limits only cgroup containment can enforce)
    lines = []
    for line in shipped.split("\n"):
        key = line[1:].split("=")[0].strip() if line.startswith("#") and "=" in line else None
        if key in ("socket_group", "admin_group", "token_file", "admin_token_file",
                   "limit_pids", "limit_cpu_cores"):
            continue
        if key is not None and " " not in key:
            line = line[1:]
        if key == "tcp_auth":
            # the example listen needs a token file (left out above) or tcp_auth = none
            line = "tcp_auth = none"
        if line.startswith("#[pool ") or line.startswith("#[source "):
            line = line[1:]
        lines.append(line)
    uncommented = "\n".join(lines)
    check("\nmax_connections = 1024\n" in uncommented, "the defaults were uncommented")
    group = grp.getgrgid(os.getgid()).gr_name
    for what, text in [("the shipped tpd.conf", shipped),
                       ("the shipped tpd.conf, every key uncommented", uncommented),
                       ("an empty file", ""),
                       ("comments, blank lines, indentation, a BOM, CRLF",
                        "\ufeff# c\r\n; c\r\n\r\n  [daemon]   # c\r\n   max_connections = 5 ; c\r\n"),
                       ("an empty pool section", "[pool empty]\n"),
                       ("this machine's group", "[daemon]\nsocket_group = %s\n" % group)]:
        rc, out, err, _ = check_file(text)
        check(rc == 0 and out.startswith("configuration OK: ") and err == "",
              "%s: rc %d out %r err %r", what, rc, out, err)


def test_redis_address_without_port_is_accepted():
    # a bare host is Redis's own port, 6379, as tpctl --redis reads it; a socket by its path
    forms = ["127.0.0.1", "redis.example.net", "[::1]", "/run/redis.sock", "unix:/r.sock",
             "127.0.0.1:6380", "[::1]:6380"]
    text = "".join("[source s%d]\ntype = redis-stream\nredis = %s\nstream = s\ngroup = g\n"
                   % (i, f) for i, f in enumerate(forms))
    rc, out, err, _ = check_file(text)
    check(rc == 0 and out.startswith("configuration OK: ") and err == "",
          "rc %d out %r err %r", rc, out, err)


def test_missing_file_is_one_clear_error():
    r = subprocess.run([TPD, "-n", "-c", "/nonexistent/tpd.conf"], capture_output=True,
                       text=True, timeout=30)
    check(r.returncode == 1, "exit 1")
    check(r.stderr == "/nonexistent/tpd.conf: cannot open: No such file or directory\n",
          "%r", r.stderr)


def test_bad_file_stops_the_daemon_at_start():
    fd, path = tempfile.mkstemp(suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write("[daemon]\nmax_connections = 0\n")
    try:
        r = subprocess.run([TPD, "-f", "-c", path, "-s", path + ".sock"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    finally:
        os.unlink(path)
    check(r.returncode == 1, "exit 1, got %d", r.returncode)
    check(r.stderr == "%s:2: [daemon] max_connections: 0 is out of range (1 to 1048576)\n"
          % path, "%r", r.stderr)
    check(not os.path.exists(path + ".sock"), "never listened")


def write(path, text):
    """Replaces the file at once (rename), as an editor or a package upgrade would."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.rename(path + ".new", path)


def pools(client):
    ev = client.request({"op": "stats"}, "stats")
    return {p["name"]: p for p in ev["pools"]}


def reloads(d):
    return d.read_log().count("SIGHUP: reading")


def hup_and_wait(d, marker):
    """Sends SIGHUP and waits until the log says the reload ended (marker), by polling the log."""
    before = d.read_log().count(marker)
    d.signal(signal.SIGHUP)
    eventually(lambda: d.read_log().count(marker) > before, "the reload logged " + marker)


def daemon_with_conf(text):
    d = Daemon(start=False)
    d.conf = os.path.join(d.dir, "tpd.conf")
    write(d.conf, text)
    d.args += ["-c", d.conf]
    d.start()
    return d


def test_sighup_resizes_and_adds_pools_and_keeps_connections():
    with daemon_with_conf("[pool io]\nsize = 1\nlimit = 8\ncapacity = 4\n") as d:
        c = d.client()
        p = pools(c)
        check(p["io"]["target"] == 1 and p["io"]["capacity"] == 4, "%r", p["io"])
        write(d.conf, "[pool io]\nsize = 3\nlimit = 8\ncapacity = 6\n[pool extra]\nsize = 2\n")
        hup_and_wait(d, "configuration reloaded")
        p = pools(c)        # the same connection, kept across the reload
        check(p["io"]["target"] == 3 and p["io"]["workers"] == 3, "grown live: %r", p["io"])
        check(p["io"]["capacity"] == 6 and p["io"]["limit"] == 8, "%r", p["io"])
        check("extra" in p and p["extra"]["target"] == 2, "pool added: %r", sorted(p))
        rid, ans = c.submit({"kind": "echo", "value": 42}, pool="extra")
        check(ans["event"] == "accepted", "%r", ans)
        check(c.done(rid)["result"]["value"] == 42, "the new pool runs tasks")
        # shrink: the target follows at once, workers leave when idle
        write(d.conf, "[pool io]\nsize = 1\nlimit = 2\ncapacity = 6\n[pool extra]\nsize = 2\n")
        hup_and_wait(d, "configuration reloaded")
        eventually(lambda: pools(c)["io"]["workers"] == 1, "io shrank to 1 worker")
        check(pools(c)["io"]["limit"] == 2, "limit lowered after the shrink")


def test_sighup_with_errors_changes_nothing():
    with daemon_with_conf("[pool io]\nsize = 2\ncapacity = 4\n") as d:
        c = d.client()
        before = pools(c)
        write(d.conf, "[pool io]\nsize = 5\ncapacity = zero\n[pool new]\n[bogus]\n")
        hup_and_wait(d, "reload refused")
        log = d.read_log()
        check('%s:3: [pool io] capacity: "zero" is not a whole number' % d.conf in log, log)
        check("%s:5: [bogus]: unknown section" % d.conf in log, "every error logged: %s" % log)
        after = pools(c)
        check(sorted(after) == sorted(before), "no pool added: %r", sorted(after))
        check(after["io"]["target"] == 2 and after["io"]["capacity"] == 4, "%r", after["io"])
        check(c.request({"op": "ping"})["event"] == "pong", "still serving")
        # and a good file after a bad one applies
        write(d.conf, "[pool io]\nsize = 3\ncapacity = 4\n")
        hup_and_wait(d, "configuration reloaded")
        check(pools(c)["io"]["target"] == 3, "applied")


def test_sighup_removed_pool_drains_then_goes():
    with daemon_with_conf("[pool slow]\nsize = 2\n") as d:
        c = d.client()
        long_id, long_ans = c.submit({"kind": "sleep", "ms": 600000}, pool="slow", stream=True)
        check(long_ans["event"] == "accepted", "%r", long_ans)
        short_id, ans = c.submit({"kind": "sleep", "ms": int(300 * d_slow())}, pool="slow")
        check(ans["event"] == "accepted", "%r", ans)
        c.recv_id(long_id, "started")
        write(d.conf, "# slow is gone\n")
        hup_and_wait(d, "configuration reloaded")
        p = pools(c)
        check(p["slow"].get("removed") is True, "still there, draining: %r", p.get("slow"))
        _, rej = c.submit({"kind": "echo", "value": 1}, pool="slow")
        check(rej["event"] in ("rejected", "error") and
              rej["error"]["code"] == "no_such_pool", "no new work: %r", rej)
        check(c.done(short_id)["state"] == "succeeded", "accepted tasks run to their end")
        check("slow" in pools(c), "kept while a task is left")
        check(c.request({"op": "cancel", "task": long_ans["task"]})["event"] == "ok", "cancel")
        check(c.done(long_id)["state"] == "cancelled", "cancelled")
        eventually(lambda: "slow" not in pools(c), "the drained pool went away")
        check("default" in pools(c), "default stays")


def test_sighup_flags_still_override_the_file():
    # Daemon passes -w 2 -q 16: the file's figures for default must not win on reload
    with daemon_with_conf("[pool default]\nsize = 1\ncapacity = 2\n") as d:
        c = d.client()
        check(pools(c)["default"]["target"] == 2, "flag at start")
        write(d.conf, "[pool default]\nsize = 3\ncapacity = 5\n[daemon]\nlog_level = debug\n")
        hup_and_wait(d, "configuration reloaded")
        p = pools(c)["default"]
        check(p["target"] == 2 and p["capacity"] == 16, "flags kept: %r", p)


def test_debug_lines_follow_the_level_set_at_start_and_by_sighup():
    # log_debug checks the level where it is called: each line must follow the level
    # the daemon runs with now, from the flag, the file, and a reload
    def accepted_lines(d):
        return d.read_log().count("accepted into pool default")

    with daemon_with_conf("[daemon]\nlog_level = info\n") as d:
        # the file says info; the test daemon's --log-level debug flag wins
        c = d.client()
        echo = {"kind": "echo", "value": 1}
        c.done(c.submit(echo)[0])
        check(accepted_lines(d) == 1, "the flag's debug level: one debug line per task, "
              "got %d", accepted_lines(d))
    d = Daemon(start=False)
    d.conf = os.path.join(d.dir, "tpd.conf")
    write(d.conf, "[daemon]\nlog_level = info\n")
    d.args = [a for a in d.args if a not in ("--log-level", "debug")] + ["-c", d.conf]
    d.start()
    with d:
        c = d.client()
        c.done(c.submit(echo)[0])
        check(accepted_lines(d) == 0, "no debug line at info: %d", accepted_lines(d))
        write(d.conf, "[daemon]\nlog_level = debug\n")
        hup_and_wait(d, "configuration reloaded")
        c.done(c.submit(echo)[0])
        eventually(lambda: accepted_lines(d) == 1, "a debug line once the reload set debug")
        write(d.conf, "[daemon]\nlog_level = info\n")
        hup_and_wait(d, "configuration reloaded")
        c.done(c.submit(echo)[0])
        check(accepted_lines(d) == 1, "no more debug lines back at info: %d",
              accepted_lines(d))


def test_sighup_applies_exec_settings_to_new_tasks():
    with daemon_with_conf("[exec]\nenv = GREETING=before\n") as d:
        c = d.client()

        def greeting():
            rid, ans = c.submit({"kind": "exec", "argv": ["sh", "-c", "echo $GREETING"]})
            check(ans["event"] == "accepted", "%r", ans)
            return c.done(rid)["result"]["stdout"]

        check(greeting() == "before\n", "the file's base environment")
        write(d.conf, "[exec]\nenv = GREETING=after\n")
        hup_and_wait(d, "configuration reloaded")
        check(greeting() == "after\n", "the reloaded base environment")


def test_sighup_applies_daemon_limits():
    with daemon_with_conf("[daemon]\nmax_connections = 4\n") as d:
        first = d.client()
        check(first.request({"op": "ping"})["event"] == "pong", "serving")
        write(d.conf, "[daemon]\nmax_connections = 1\n")
        hup_and_wait(d, "configuration reloaded")
        second = d.client()
        ev = second.recv()
        check(ev["event"] == "error" and "max_connections" in ev["error"]["message"],
              "the new limit refuses a second client: %r", ev)
        check(first.request({"op": "ping"})["event"] == "pong", "the first one is kept")


def test_sighup_without_a_file_changes_nothing():
    with Daemon() as d:
        hup_and_wait(d, "no configuration file (-c) to read again")
        check(d.client().request({"op": "ping"})["event"] == "pong", "still serving")


def d_slow():
    return float(os.environ.get("TPD_TEST_SLOW", "1"))


if __name__ == "__main__":
    run_tests(globals())
