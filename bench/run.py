#!/usr/bin/env python3
"""run.py: what `make bench` runs after pool-bench. It starts the built tpd,
the floor and the peers privately (Unix sockets in a temp dir), runs every
measurement once per round in a fixed interleaved order (so tpd and the thing
it is compared with alternate: A B A B), takes the median of each over the
rounds, and prints one table: workload, tpd's figure, the floor's or peer's,
the ratio, the target and whether it is met.

The journal's rows (part "journal", one tpd -w 2 per journal_sync mode, and
--journal off), echo 64 B:
  1 conn x 64 in flight: commit (the defaults) vs the durable floor
  (bench/floor -D: one write + one fdatasync per loop pass, to a preallocated
  file in this run's temp dir, before that pass's answers), >= 0.9x; the
  same at 1 x 256, reported, and both p50 round trips side by side: a
  difference that stays the same at both windows is a fixed cost per round
  trip, which weighs more the faster this machine's fdatasync is;
  interval vs off, >= 0.85x (at most 15% below); none vs off and commit vs
  off, reported; interval vs the written floor (bench/floor -W: the durable
  floor without its fdatasync, one write per loop pass before that pass's
  answers) and that floor vs the jansson floor, reported: what a write per
  pass costs a one-thread server here. 50 conns x 1: none, interval and commit vs off.
  --journal off, 50 x 1 and 1 x 64, vs the jansson floor (bench/floor -j: one
  thread parsing each line with jansson), >= 0.9x each; the rows "vs floor"
  of part throughput hold tpd to the textual floor (bench/floor, no JSON
  parse), a lower bar of its own.
Exec `true`, 2 workers (part "exec"): the defaults (journal on, commit) vs
  --journal off, >= 0.9x; the defaults vs the durable spawn floor
  (bench/spawn-loop -P 2 -D: one write + one fdatasync for the starts of
  each pass of a bare spawn loop, before they run, to a preallocated file in
  this run's temp dir), >= 0.9x; that floor vs spawn-loop -P 2, reported:
  what a start recorded on disk before it runs costs on this machine, the
  cost under which the first row stays (a design that records each start
  before it runs can beat the floor only by sharing syncs between starts);
  journal_sync interval vs --journal off, reported; --journal off vs
  bench/spawn-loop -P 2, >= 0.9x; and, reported, --journal off's CPU per
  task (tpd's own threads) vs spawn-loop's own (both without their
  children's): the steadier figure.
The loop's pause under compaction (part "compaction"): a fresh tpd per round
  with a small journal (journal_max_bytes 2M, result_retain 100), so that
  compaction runs many times, under echo 1 conn x 64 (commit); the row gives
  the longest pause its loop recorded (stats' loop.longest_pause_ms, measured
  on the loop: tpd(8), tpd_loop_pause_seconds) over the load, its warm-up
  included, <= 10 ms (the side lines add the pauses over 10 ms), with
  the compactions that ran and, as the peer, the same figure of a
  --journal off tpd under the same load (what the machine itself costs: on a
  loaded 2-CPU machine the loop thread waiting for a CPU is a pause too);
  and, reported, that of a tpd on the defaults (a journal too big to compact
  in the run): what compaction adds to the commit path's own pauses.

Machines here are shared and noisy: quote ratios, not absolute figures.

usage: run.py --build DIR [--rounds N] [--duration S] [--warmup S]
              [--idle N] [--only NAME,...] [--json FILE] [--keep]
Parts (--only): throughput, journal, exec, compaction, idle, resize, validate,
sched, redis. `make bench BENCH_ARGS="--rounds 1 --duration 1"`: a quick look.
Needs: DIR/tpd, DIR/bench/{tpbench,floor,spawn-loop,beanstalk-cycle,redis-floor};
beanstalkd (Debian package beanstalkd) for the beanstalkd row; redis-server
(Debian package redis-server) for the Redis source's rows; xargs.
Processes it starts are stopped by pid, always.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.tmp = tempfile.mkdtemp(prefix="tpd-bench-")
        self.procs = []          # (name, Popen), stopped in reverse order
        self.results = {}        # measurement name -> list of per-round dicts
        self.notes = []
        self.cgroups = []        # cgroup roots made for a tpd, removed at the end

    # ------------------------------------------------------------ processes
    def prog(self, name):
        path = os.path.join(self.build, name)
        if not os.access(path, os.X_OK):
            sys.exit("run.py: %s is not built (run make first)" % path)
        return path

    def start(self, name, argv, sock):
        """Starts a server, waits until it answers on sock (by connecting)."""
        logf = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                             stderr=subprocess.STDOUT, cwd=self.tmp)
        self.procs.append((name, p))
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            if p.poll() is not None or time.monotonic() > deadline:
                self.fail_start(name)
            time.sleep(0.01)
        return p

    def fail_start(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            sys.exit("run.py: %s did not start:\n%s" % (name, f.read()))

    def stop(self, p):
        for i, (name, q) in enumerate(self.procs):
            if q is p:
                del self.procs[i]
                break
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self):
        while self.procs:
            self.stop(self.procs[-1][1])

    def tpd(self, name, workers, extra=()):
        sock = os.path.join(self.tmp, name + ".sock")
        # each tpd its own state_dir (the journal: on, journal_sync commit, by default), and
        # no configuration file: the machine's $sysconfdir/tpd/tpd.conf would change the figures
        argv = [self.prog("tpd"), "-f", "-c", "none", "-s", sock, "-w", str(workers),
                "-q", "4096", "--limit", "64", "--max-connections", "20000",
                "--log-level", "warning",
                "--state-dir", os.path.join(self.tmp, name + ".state")] + list(extra)
        p = self.start(name, argv, sock)
        self.tpbench(sock, ["--op", "ping", "-n", "1", "--connect-timeout", "10000"])
        return p, sock

    def conf(self, name, text):
        path = os.path.join(self.tmp, name + ".conf")
        with open(path, "w") as f:
            f.write(text)
        return path

    def cgroup_root(self):
        """A fresh cgroup2 subtree for a tpd with containment cgroup, or None (noted)."""
        mnt = None
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.startswith("cgroup2 ") and left.split()[3] == "/":
                    mnt = left.split()[4]
                    break
        if mnt is None:
            self.notes.append("no cgroup2 mount: the exec row with containment cgroup is missing")
            return None
        path = os.path.join(mnt, "tpd-bench-%d" % os.getpid())
        try:
            os.mkdir(path)
        except OSError as e:
            self.notes.append("cannot make a cgroup (%s): the exec row with containment "
                              "cgroup is missing" % e)
            return None
        self.cgroups.append(path)
        return path

    def remove_cgroups(self):
        roots, self.cgroups = self.cgroups, []
        for root in roots:
            for sub in ("tasks", "daemon", ""):
                try:
                    os.rmdir(os.path.join(root, sub) if sub else root)
                except OSError as e:
                    log("run.py: cannot remove %s/%s: %s" % (root, sub, e))

    def floor(self, name, mode=()):
        """bench/floor: textual; mode ["-j"]: jansson; ["-D", FILE]: durable."""
        sock = os.path.join(self.tmp, name + ".sock")
        p = self.start(name, [self.prog("bench/floor")] + list(mode) + ["-s", sock], sock)
        self.tpbench(sock, ["--op", "ping", "-n", "1", "--connect-timeout", "10000"])
        return p, sock

    # ------------------------------------------------------------ measuring
    @staticmethod
    def cpu_s(pid):
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    @staticmethod
    def rss_kib(pid):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS for pid %d" % pid)

    def tpbench(self, sock, args, server=None):
        """Runs tpbench --json; adds the server's CPU seconds per request."""
        before = self.cpu_s(server.pid) if server else None
        out = subprocess.run([self.prog("bench/tpbench"), "-s", sock, "--json"] + args,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError("tpbench %s: %s" % (" ".join(args), out.stderr.strip()))
        r = json.loads(out.stdout)
        r["stderr"] = out.stderr.strip()
        if server:
            r["server_cpu_s"] = self.cpu_s(server.pid) - before
        return r

    def load(self, sock, what, conns, window, server=None):
        a = self.args
        # what goes last: --exec takes every argument after it
        return self.tpbench(sock, ["-c", str(conns), "-w", str(window),
                                   "-d", str(a.duration), "--warmup", str(a.warmup)] + what,
                            server)

    def record(self, name, fig):
        self.results.setdefault(name, []).append(fig)

    def median(self, name, key="rate"):
        vals = [r[key] for r in self.results.get(name, []) if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    def median_p50(self, name):
        """The median over the rounds of a load's p50 latency (us)."""
        vals = [r["latency_us"]["p50"] for r in self.results.get(name, []) if "latency_us" in r]
        return statistics.median(vals) if vals else None

    # ------------------------------------------------------------ workloads
    def round_throughput(self):
        echo = ["--echo", "64"]
        self.record("tpd echo 1x64", self.load(self.tpd2s, echo, 1, 64, self.tpd2))
        self.record("floor echo 1x64", self.load(self.floors, echo, 1, 64, self.floorp))
        if self.bs:
            self.record("beanstalkd cycle", self.beanstalk())
        self.record("tpd -w 64 echo 1x64", self.load(self.tpd64s, echo, 1, 64, self.tpd64))
        self.record("tpd echo 50x1", self.load(self.tpd2s, echo, 50, 1, self.tpd2))
        self.record("floor echo 50x1", self.load(self.floors, echo, 50, 1, self.floorp))
        ping = ["--op", "ping"]
        self.record("tpd ping 1x1", self.load(self.tpd2s, ping, 1, 1, self.tpd2))
        self.record("floor ping 1x1", self.load(self.floors, ping, 1, 1, self.floorp))
        self.record("tpd echo 1x1", self.load(self.tpd2s, echo, 1, 1, self.tpd2))
        self.record("floor echo 1x1", self.load(self.floors, echo, 1, 1, self.floorp))
        self.record("tpd ping 1x64", self.load(self.tpd2s, ping, 1, 64, self.tpd2))
        self.record("floor ping 1x64", self.load(self.floors, ping, 1, 64, self.floorp))

    def beanstalk(self):
        """beanstalkd's best cycle: the better of its two shapes this round."""
        best = None
        for shape in (["-m", "pipe", "-w", "64", "-C", "4"], ["-m", "conn", "-c", "64"]):
            out = subprocess.run([self.prog("bench/beanstalk-cycle"), "-s", self.bss,
                                  "--json", "-b", "64", "-d", str(self.args.duration),
                                  "--warmup", str(self.args.warmup)] + shape,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, timeout=600)
            if out.returncode != 0:
                raise RuntimeError("beanstalk-cycle: " + out.stderr.strip())
            r = json.loads(out.stdout)
            r["shape"] = " ".join(shape)
            if best is None or r["rate"] > best["rate"]:
                best = r
        return best

    @staticmethod
    def stats(sock):
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(b'{"op":"stats"}\n')
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        s.close()
        return json.loads(buf)

    def journal_stats(self, sock):
        return self.stats(sock)["journal"]

    def round_journal(self):
        """Echo through tpd -w 2 with journal off, none, interval and commit, side by side;
        after off, the jansson floor, after interval, the written floor, and after commit,
        the durable floor (A B A B)."""
        for mode, (p, sock) in self.jtpds.items():
            for conns, window in ((1, 64), (50, 1)):
                before = self.journal_stats(sock)
                t0 = time.monotonic()
                fig = self.load(sock, ["--echo", "64"], conns, window, p)
                el = time.monotonic() - t0
                after = self.journal_stats(sock)
                if after.get("state") != "off":
                    syncs = after["syncs"] - before["syncs"]
                    recs = after["records_written"] - before["records_written"]
                    fig["records_per_sync"] = recs / syncs if syncs else None
                    fig["syncs_per_s"] = syncs / el
                self.record("journal %s echo %dx%d" % (mode, conns, window), fig)
                if mode == "off":
                    self.record("jansson floor echo %dx%d" % (conns, window),
                                self.load(self.jfloors, ["--echo", "64"], conns, window,
                                          self.jfloorp))
                if mode == "interval":
                    self.record("written floor echo %dx%d" % (conns, window),
                                self.load(self.wfloors, ["--echo", "64"], conns, window,
                                          self.wfloorp))
                if mode == "commit" and (conns, window) == (1, 64):
                    self.record("durable floor echo 1x64",
                                self.load(self.dfloors, ["--echo", "64"], 1, 64,
                                          self.dfloorp))
            if mode == "commit":
                # a deeper window: how much of the gap at 64 is a fixed cost per round trip
                self.record("journal commit echo 1x256",
                            self.load(sock, ["--echo", "64"], 1, 256, p))
                self.record("durable floor echo 1x256",
                            self.load(self.dfloors, ["--echo", "64"], 1, 256, self.dfloorp))

    @staticmethod
    def preemptions(pid):
        """The loop thread's (the first one's) involuntary context switches so far."""
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    return int(line.split()[1])
        return 0

    def round_compaction(self):
        """The loop's longest pause under echo 1x64 (commit) while compaction runs: a fresh
        tpd with a small journal; then a fresh --journal off tpd under the same load."""
        for name, extra in (("compaction", ["--journal-max-bytes", "2M",
                                            "--result-retain", "100"]),
                            ("compaction-default", []),
                            ("compaction-off", ["--journal", "off"])):
            p, sock = self.tpd("tpd-" + name, 2, extra)
            try:
                before = self.stats(sock)
                preempted = self.preemptions(p.pid)
                fig = self.load(sock, ["--echo", "64"], 1, 64, p)
                fig["preempted"] = self.preemptions(p.pid) - preempted
                after = self.stats(sock)
            finally:
                self.stop(p)
                shutil.rmtree(os.path.join(self.tmp, "tpd-" + name + ".state"),
                              ignore_errors=True)
            loop = after["loop"]
            fig["longest_pause_ms"] = loop["longest_pause_ms"]
            fig["max_latency_ms"] = fig["latency_us"]["max"] / 1000.0
            fig["pauses"] = loop["pauses"] - before["loop"]["pauses"]
            fig["pauses_over_10ms"] = (loop["pauses"] - loop["pauses_le_ms"]["10"]) - \
                (before["loop"]["pauses"] - before["loop"]["pauses_le_ms"]["10"])
            if after["journal"].get("state") != "off":
                fig["compactions"] = after["journal"]["compactions"] - \
                    before["journal"]["compactions"]
            self.record("loop pause, " + name, fig)

    def spawn_loop(self, extra):
        """bench/spawn-loop -P 2 true for the run's duration: its --json figures."""
        out = subprocess.run([self.prog("bench/spawn-loop"), "-P", "2", "-d",
                              str(self.args.duration)] + extra + ["--json", "true"],
                             stdout=subprocess.PIPE, text=True, timeout=600, check=True)
        return json.loads(out.stdout)

    def round_exec(self):
        self.record("tpd exec true -w 2", self.load(self.tpd2s, ["--exec", "true"], 1, 8,
                                                    self.tpd2))
        self.record("tpd exec true -w 2 journal off", self.load(
            self.tpd2offs, ["--exec", "true"], 1, 8, self.tpd2off))
        if self.tpdcg is not None:
            self.record("tpd exec true -w 2 cgroup", self.load(self.tpdcgs, ["--exec", "true"],
                                                               1, 8, self.tpdcg))
        self.record("spawn-loop -P2", self.spawn_loop([]))
        self.record("spawn-loop -P2 durable", self.spawn_loop(
            ["-D", os.path.join(self.tmp, "spawn-durable.log")]))
        self.record("tpd exec true -w 2 interval", self.load(
            self.tpd2int_s, ["--exec", "true"], 1, 8, self.tpd2int))
        n = max(200, int(800 * self.args.duration))
        t0 = time.monotonic()
        subprocess.run("seq %d | xargs -P2 -n1 true" % n, shell=True, check=True,
                       timeout=600)
        self.record("xargs -P2", {"rate": n / (time.monotonic() - t0), "ok": n})

    def idle(self, name, start):
        """Daemon RSS per connection with N idle connections held."""
        n = self.args.idle
        p, sock = start(name)
        before = self.rss_kib(p.pid)
        hold = subprocess.Popen([self.prog("bench/tpbench"), "-s", sock, "--json",
                                 "--idle", str(n)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = hold.stdout.readline()
            if not line:
                raise RuntimeError("tpbench --idle: " + hold.stderr.read().strip())
            held = json.loads(line)["idle"]
            after = self.rss_kib(p.pid)
        finally:
            hold.stdin.close()
            hold.wait(timeout=60)
        self.stop(p)
        return {"rate": (after - before) * 1024.0 / held, "before_kib": before,
                "after_kib": after, "held": held}

    def round_idle(self):
        self.record("tpd idle", self.idle("tpd-idle", lambda n: self.tpd(n, 2)))
        self.record("floor idle", self.idle("floor-idle", self.floor))

    def round_resize(self):
        """Resize 1 -> 64 -> 1 while echo load runs; each answer's time."""
        p, sock = self.tpd("tpd-resize", 1)
        loadp = subprocess.Popen([self.prog("bench/tpbench"), "-s", sock, "--json",
                                  "--echo", "64", "-w", "64", "-d", "60"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        times = []
        try:
            time.sleep(0.3)
            for _ in range(5):
                for size in (64, 1):
                    r = self.tpbench(sock, ["--raw", '{"op":"resize","size":%d}' % size,
                                            "-n", "1"])
                    if r["ok"] != 1:
                        raise RuntimeError("resize %d not ok: %s" % (size, r))
                    times.append(r["latency_us"]["max"] / 1000.0)
                    time.sleep(0.1)
            stats = self.tpbench(sock, ["--raw", '{"op":"stats"}', "-n", "1"])
        finally:
            loadp.send_signal(signal.SIGTERM)
            loadp.wait(timeout=60)
            self.stop(p)
        self.record("tpd resize", {"rate": max(times), "median_ms": statistics.median(times),
                                   "all_ms": times, "stats_ok": stats["ok"]})

    # ------------------------------------------------------------ scheduling
    @staticmethod
    def client(sock):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(sock)
        return c, c.makefile("rb")

    def ping_p99(self, sock, seconds):
        """tpbench ping, 1 in flight, for seconds: the p99 round trip in us."""
        r = self.tpbench(sock, ["-c", "1", "-w", "1", "-d", str(seconds), "--op", "ping"])
        return r["latency_us"]["p99"]

    def round_sched(self):
        """100,000 tasks scheduled over 10 s (RSS per task, ping p99 while they wait and
        while they come due), and a fan of 10,000 dependents released by one task."""
        n, spread_ms, start_ms = 100000, 10000, 6000
        p, sock = self.tpd("tpd-sched", 2, ["--journal", "off", "-q", "20000", "-c", self.conf(
            "sched", "[daemon]\nmax_scheduled = 200000\n")])
        try:
            c, f = self.client(sock)
            idle_p99 = self.ping_p99(sock, 1)
            before = self.rss_kib(p.pid)
            t0 = time.monotonic()
            lines = b"".join(b'{"op":"submit","detach":true,"delay_ms":%d,'
                             b'"task":{"kind":"echo","value":%d}}\n'
                             % (start_ms + i * spread_ms // n, i) for i in range(n))
            c.sendall(lines)
            for _ in range(n):
                if b'"accepted"' not in f.readline():
                    raise RuntimeError("a scheduled submit was not accepted")
            submit_s = time.monotonic() - t0
            after = self.rss_kib(p.pid)
            waiting_p99 = self.ping_p99(sock, 2)
            left = start_ms / 1000.0 - (time.monotonic() - t0)
            if left > 0:
                time.sleep(left)
            due_p99 = self.ping_p99(sock, 8)
            c.close()
            # the fan: one parent, 10,000 dependents that stream (their started events)
            m = 10000
            c, f = self.client(sock)
            c.sendall(b'{"op":"submit","id":"parent","task":{"kind":"sleep","ms":1000}}\n')
            parent = json.loads(f.readline())["task"]
            c.sendall(b"".join(b'{"op":"submit","id":%d,"stream":true,"after":[%d],'
                               b'"task":{"kind":"echo","value":%d}}\n' % (i, parent, i)
                               for i in range(m)))
            done_at, started, first, last = None, 0, None, None
            while started < m:
                ev = json.loads(f.readline())
                if ev.get("id") == "parent" and ev["event"] == "done":
                    done_at = time.monotonic()
                elif ev["event"] == "started":
                    started += 1
                    last = time.monotonic()
                    first = first or last
            c.close()
            # the same 10,000 tasks with no dependency, sent at once: how long the pool
            # takes to start them all, which bounds the fan from below
            c, f = self.client(sock)
            t1 = time.monotonic()
            c.sendall(b"".join(b'{"op":"submit","id":%d,"stream":true,'
                               b'"task":{"kind":"echo","value":%d}}\n' % (i, i)
                               for i in range(m)))
            started = 0
            while started < m:
                if b'"started"' in f.readline():
                    started += 1
            plain_ms = (time.monotonic() - t1) * 1000.0
            c.close()
        finally:
            self.stop(p)
        self.record("sched 100k", {"rate": (after - before) * 1024.0 / n,
                                   "submit_s": submit_s, "idle_p99_us": idle_p99,
                                   "waiting_p99_us": waiting_p99, "due_p99_us": due_p99})
        self.record("sched fan 10k", {"rate": (last - done_at) * 1000.0,
                                      "first_ms": (first - done_at) * 1000.0})
        self.record("sched plain 10k", {"rate": plain_ms})

    # ------------------------------------------------------------ redis
    def redis_start(self):
        """A private redis-server and three tpds reading its streams: tpd-r1 the stream
        "one" alone, tpd-r1..3 together the stream "three"."""
        self.rs = None
        exe = shutil.which("redis-server")
        if exe is None:
            self.notes.append("redis-server not installed (apt-get install redis-server): "
                              "the Redis source's rows are missing")
            return
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "tests"))
        from redistest import RedisClient
        self.rsock = os.path.join(self.tmp, "redis.sock")
        self.raddr = "unix:" + self.rsock
        self.start("redis", [exe, "--port", "0", "--unixsocket", self.rsock, "--save", "",
                             "--appendonly", "no", "--dir", self.tmp], self.rsock)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.rs = RedisClient(self.rsock, timeout=60)
                self.rs.call("PING")
                break
            except (OSError, EOFError):
                if time.monotonic() > deadline:
                    self.fail_start("redis")
                time.sleep(0.01)
        self.rtpds = []
        for i in (1, 2, 3):
            text = ""
            for stream in (["one"] if i == 1 else []) + ["three"]:
                text += ("[source %s]\ntype = redis-stream\nredis = %s\nstream = %s\n"
                         "group = tpd\nconsumer = tpd-r%d\nresults_maxlen = 0\n" %
                         (stream, self.raddr, stream, i))
            self.rtpds.append(self.tpd("tpd-r%d" % i, 2, ["-c", self.conf("r%d" % i, text)]))

    def redis_run(self, stream, n, task, tpds):
        """n entries through stream, filled while its tpds are stopped (SIGSTOP, so
        that they start on a full stream, as the floor does); the rate from the first
        result to the last (the results' own ids are Redis's clock, in ms)."""
        rs = self.rs
        results = stream + ":results"
        rpid = [q for name, q in self.procs if name == "redis"][0].pid
        cpu0 = [self.cpu_s(p.pid) for p, _ in tpds] + [self.cpu_s(rpid)]
        for p, _ in tpds:
            p.send_signal(signal.SIGSTOP)
        try:
            subprocess.run([self.prog("bench/redis-floor"), "fill", self.raddr, stream,
                            str(n), task], check=True, timeout=600)
        finally:
            for p, _ in tpds:
                p.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 600
        while int(rs.call("XLEN", results)) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("%s: %s of %d results" % (stream, rs.call("XLEN", results),
                                                             n))
            time.sleep(0.05)
        first = rs.call("XRANGE", results, "-", "+", "COUNT", 1)[0][0]
        last = rs.call("XREVRANGE", results, "+", "-", "COUNT", 1)[0][0]
        ms = lambda eid: int(eid.split("-")[0])
        span = max(ms(last) - ms(first), 1) / 1000.0
        bad = 0
        for _, flat in rs.call("XRANGE", results, "-", "+") or []:
            d = dict(zip(flat[::2], flat[1::2]))
            bad += json.loads(d["done"]).get("state") != "succeeded"
        cpu = [b - a for a, b in zip(cpu0, [self.cpu_s(p.pid) for p, _ in tpds] +
                                      [self.cpu_s(rpid)])]
        rs.call("XTRIM", stream, "MAXLEN", 0)
        rs.call("DEL", results)
        return {"rate": (n - 1) / span, "ok": n, "failed": bad,
                "tpd_cpu_us": sum(cpu[:-1]) / n * 1e6, "redis_cpu_us": cpu[-1] / n * 1e6}

    def redis_floor(self, n, results=False):
        """The bare consumer's rate; with results, it also writes each entry's result."""
        rs = self.rs
        rpid = [q for name, q in self.procs if name == "redis"][0].pid
        cpu0 = self.cpu_s(rpid)
        subprocess.run([self.prog("bench/redis-floor"), "fill", self.raddr, "floor", str(n),
                        '{"kind":"echo","value":"x"}'], check=True, timeout=600)
        mode = ["results", self.raddr, "floor", "g", "floor:results"] if results else \
            ["loop", self.raddr, "floor", "g"]
        out = subprocess.run([self.prog("bench/redis-floor")] + mode + [str(n), "100"],
                             stdout=subprocess.PIPE, text=True, check=True, timeout=600)
        rs.call("XTRIM", "floor", "MAXLEN", 0)
        rs.call("DEL", "floor:results")
        fig = json.loads(out.stdout)
        fig["redis_cpu_us"] = (self.cpu_s(rpid) - cpu0) / n * 1e6
        fig["tpd_cpu_us"] = 0.0
        return fig

    def print_redis(self):
        """The CPU each entry cost tpd and Redis, per Redis row."""
        for key, figs in self.results.items():
            if figs and "redis_cpu_us" in figs[0]:
                print("CPU per entry (the fill's XADD included), %s: tpd %.2f us, "
                      "redis-server %.2f us" % (key,
                      statistics.median(f["tpd_cpu_us"] for f in figs),
                      statistics.median(f["redis_cpu_us"] for f in figs)))

    def round_redis(self):
        if self.rs is None:
            return
        n = max(2000, int(10000 * self.args.duration))
        echo = '{"kind":"echo","value":"x"}'
        true = '{"kind":"exec","argv":["true"]}'
        nexec = max(200, int(800 * self.args.duration))
        self.record("redis floor", self.redis_floor(n))
        self.record("redis floor with results", self.redis_floor(n, results=True))
        self.record("redis echo, 1 tpd", self.redis_run("one", n, echo, self.rtpds[:1]))
        self.record("redis echo, 3 tpds", self.redis_run("three", n, echo, self.rtpds))
        p, sock = self.rtpds[0]
        self.record("local echo 1x64, tpd-r1", self.load(sock, ["--echo", "64"], 1, 64, p))
        if self.exec_ok:
            self.record("redis exec true, 1 tpd", self.redis_run("one", nexec, true,
                                                               self.rtpds[:1]))
            self.record("redis exec true, 3 tpds", self.redis_run("three", nexec, true,
                                                                  self.rtpds))
            self.record("local exec true 1x8, tpd-r1", self.load(sock, ["--exec", "true"], 1,
                                                                 8, p))

    def round_validate(self):
        """
        Is tpbench the bottleneck? The same load on the floor (2 connections x
        64 in flight) from one tpbench and from two at once (one connection each).
        """
        self.record("floor echo 2x64, 1 tpbench", self.load(self.floors, ["--echo", "64"],
                                                              2, 64, self.floorp))
        a = self.args
        argv = [self.prog("bench/tpbench"), "-s", self.floors, "--json", "--echo", "64",
                "-c", "1", "-w", "64", "-d", str(a.duration), "--warmup", str(a.warmup)]
        ps = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        rates = [json.loads(p.communicate(timeout=600)[0])["rate"] for p in ps]
        self.record("floor echo 2x64, 2 tpbench", {"rate": sum(rates)})

    # ------------------------------------------------------------ the run
    def run(self):
        a = self.args
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(
                resource.RLIMIT_NOFILE)[1],) * 2)
        except (ValueError, OSError):
            pass
        # exec rows: containment process here, and cgroup in a subtree made for it
        process = self.conf("process", "[daemon]\ncontainment = process\n")
        self.tpd2, self.tpd2s = self.tpd("tpd", 2, ["-c", process])
        self.tpd2off, self.tpd2offs = self.tpd("tpd-off", 2, ["-c", process,
                                                              "--journal", "off"])
        self.tpd2int, self.tpd2int_s = self.tpd("tpd-interval", 2, ["-c", process,
                                                                    "--journal-sync", "interval"])
        root = self.cgroup_root()
        self.tpdcg = None
        if root is not None:
            self.tpdcg, self.tpdcgs = self.tpd("tpd-cgroup", 2, ["-c", self.conf(
                "cgroup", "[daemon]\ncontainment = cgroup\ncgroup_root = %s\n" % root)])
        self.tpd64, self.tpd64s = self.tpd("tpd-w64", 64)
        self.floorp, self.floors = self.floor("floor")
        self.jfloorp, self.jfloors = self.floor("floor-jansson", ["-j"])
        # the durable floor's file: in the temp dir, on the file system of tpd's state_dirs
        self.dfloorp, self.dfloors = self.floor("floor-durable", [
            "-D", os.path.join(self.tmp, "floor-durable.log")])
        self.wfloorp, self.wfloors = self.floor("floor-written", [
            "-W", os.path.join(self.tmp, "floor-written.log")])
        self.bs = shutil.which("beanstalkd")
        if self.bs:
            self.bss = os.path.join(self.tmp, "beanstalkd.sock")
            self.start("beanstalkd", [self.bs, "-l", "unix:" + self.bss], self.bss)
        else:
            self.notes.append("beanstalkd not installed (apt-get install beanstalkd): "
                              "its row is missing")
        probe = self.tpbench(self.tpd2s, ["-n", "1", "--drain", "5", "--exec", "true"])
        self.exec_ok = probe["ok"] == 1
        if not self.exec_ok:
            self.notes.append("exec tasks do not run in this tpd (a probe got %d errors, "
                              "%d failed): the exec rows are missing" %
                              (probe["errors"], probe["failed"]))
        self.jtpds = {}
        for mode in ("off", "none", "interval", "commit"):
            extra = ["--journal", "off"] if mode == "off" else ["--journal-sync", mode]
            self.jtpds[mode] = self.tpd("tpd-journal-" + mode, 2, extra)
        parts = [("throughput", self.round_throughput), ("journal", self.round_journal),
                 ("exec", self.round_exec), ("compaction", self.round_compaction),
                 ("idle", self.round_idle), ("resize", self.round_resize),
                 ("validate", self.round_validate), ("sched", self.round_sched),
                 ("redis", self.round_redis)]
        only = set(a.only.split(",")) if a.only else None
        if not only or "redis" in only:
            self.redis_start()
        for rnd in range(a.rounds):
            for name, fn in parts:
                if only and name not in only:
                    continue
                if name == "exec" and not self.exec_ok:
                    continue
                log("run.py: round %d/%d: %s" % (rnd + 1, a.rounds, name))
                fn()
        self.stop_all()
        self.remove_cgroups()

    def print_round_trips(self):
        """The commit path's round trip against the durable floor's, at 64 and 256 in
        flight: a difference that stays the same at both windows is a fixed cost per
        round trip (tpd's hand-offs between threads), which weighs more the faster the
        disk's fdatasync is; one that grows with the window is a cost per request."""
        parts = []
        for window in (64, 256):
            t, f = (self.median_p50("%s echo 1x%d" % (who, window))
                    for who in ("journal commit", "durable floor"))
            if t is not None and f is not None:
                parts.append("1x%d: tpd %.0f us, floor %.0f us (%+.0f us)" %
                             (window, t, f, t - f))
        if parts:
            print("p50 round trip, journal_sync commit vs the durable floor: " +
                  "; ".join(parts))

    # ------------------------------------------------------------ the table
    def rows(self):
        m = self.median
        rows = []

        def ratio(x, y):
            return x / y if x is not None and y else None

        def add(name, tpd, peer, r, target, met, unit):
            rows.append((name, tpd, peer, r, target, met, unit))

        def more(name, tkey, pkey, target, unit="/s", key="rate"):
            """tpd's figure against a floor's or peer's: at least target x (None: report)."""
            t, p = m(tkey, key), m(pkey, key)
            r = ratio(t, p)
            if target is None:
                add(name, t, p, r, "report", None, unit)
            else:
                add(name, t, p, r, ">= %.2fx" % target, None if r is None else r >= target,
                    unit)

        def less(name, tkey, pkey, target, key, unit="us"):
            """tpd's figure against a floor's or peer's: at most target x (None: report)."""
            t, p = m(tkey, key), m(pkey, key)
            r = ratio(t, p)
            if target is None:
                add(name, t, p, r, "report", None, unit)
            else:
                add(name, t, p, r, "<= %.1fx" % target, None if r is None else r <= target,
                    unit)

        for fig in self.results.get("tpd ping 1x1", []) + self.results.get("floor ping 1x1", []) \
                + self.results.get("tpd echo 1x1", []):
            fig["p50"] = fig["latency_us"]["p50"]
        more("echo 64B, 1 conn x 64 in flight, vs floor (textual)", "tpd echo 1x64",
             "floor echo 1x64", 0.30)
        more("echo 64B, 1 conn x 64 in flight, vs beanstalkd", "tpd echo 1x64",
             "beanstalkd cycle", 3.0)
        more("echo 64B, 50 conns x 1 in flight, vs floor (textual)", "tpd echo 50x1",
             "floor echo 50x1", 0.5)
        less("ping p50, 1 in flight, vs floor ping", "tpd ping 1x1", "floor ping 1x1", 1.2, "p50")
        less("echo p50, 1 in flight, vs floor ping", "tpd echo 1x1", "floor ping 1x1", 2.0, "p50")
        more("exec true, 2 workers, vs spawn-loop -P2", "tpd exec true -w 2", "spawn-loop -P2", 0.9)
        more("exec true, 2 workers: journal on (commit, the defaults) vs journal off",
             "tpd exec true -w 2", "tpd exec true -w 2 journal off", 0.9)
        more("exec true, 2 workers: journal on (commit) vs the durable spawn floor",
             "tpd exec true -w 2", "spawn-loop -P2 durable", 0.9)
        more("exec true: the durable spawn floor vs spawn-loop -P2 (the bound here)",
             "spawn-loop -P2 durable", "spawn-loop -P2", None)
        more("exec true, 2 workers: journal_sync interval vs journal off",
             "tpd exec true -w 2 interval", "tpd exec true -w 2 journal off", None)
        more("exec true, 2 workers, journal off, vs spawn-loop -P2",
             "tpd exec true -w 2 journal off", "spawn-loop -P2", 0.9)
        more("exec true, 2 workers, vs xargs -P2", "tpd exec true -w 2", "xargs -P2", 1.4)
        more("exec true, 2 workers: containment cgroup vs process",
             "tpd exec true -w 2 cgroup", "tpd exec true -w 2", 0.9)
        # the daemon's own CPU per task: steadier than tasks/s on a shared machine
        for fig in self.results.get("tpd exec true -w 2", []) + \
                self.results.get("tpd exec true -w 2 cgroup", []) + \
                self.results.get("tpd exec true -w 2 journal off", []):
            if fig.get("server_cpu_s") is not None and fig.get("ok"):
                # the server's CPU covers the warm-up too, ok only the measured part: the
                # tasks of the warm-up are counted at the measured rate
                tasks = fig["ok"] + fig["rate"] * self.args.warmup
                fig["cpu_us"] = fig["server_cpu_s"] / tasks * 1e6
        for fig in self.results.get("spawn-loop -P2", []):
            if fig.get("cpu_s") is not None and fig.get("ok"):
                fig["cpu_us"] = fig["cpu_s"] / fig["ok"] * 1e6
        less("exec true: tpd CPU per task, containment cgroup vs process",
             "tpd exec true -w 2 cgroup", "tpd exec true -w 2", 1.1, "cpu_us")
        # what tpd spends per task beyond a bare spawn and wait (its children's CPU left
        # out of both); a report, the rate row above is the goal
        less("exec true, journal off: tpd CPU per task vs spawn-loop -P2's own",
             "tpd exec true -w 2 journal off", "spawn-loop -P2", None, "cpu_us")
        t, p = m("tpd idle"), m("floor idle")
        add("%d idle conns: daemon RSS per conn" % self.args.idle, t, p, ratio(t, p),
            "<= 1024 B", None if t is None else t <= 1024, "B")
        t = m("tpd resize")
        add("resize 1->64->1 under load, slowest answer", t, None, None, "<= 10 ms",
            None if t is None else t <= 10, "ms")
        t = m("sched 100k")
        add("100k tasks scheduled (delay_ms): RSS per task", t, None, None, "<= 2048 B",
            None if t is None else t <= 2048, "B")
        for key, what in (("idle_p99_us", "before"), ("waiting_p99_us", "while they wait"),
                          ("due_p99_us", "while they come due")):
            t = m("sched 100k", key)
            add("ping p99, 100k scheduled, %s" % what, t, None, None, "<= 5000 us",
                None if t is None else t <= 5000, "us")
        t, pl = m("sched fan 10k"), m("sched plain 10k")
        add("10k dependents: parent's done to the last started, vs 10k sent at once",
            t, pl, ratio(t, pl), "<= 1.5x", None if ratio(t, pl) is None else
            ratio(t, pl) <= 1.5, "ms")
        t = m("sched fan 10k", "first_ms")
        add("10k dependents: parent's done to the first started", t, None, None, "<= 50 ms",
            None if t is None else t <= 50, "ms")
        more("echo 1x64: 64 workers vs 2 workers", "tpd -w 64 echo 1x64", "tpd echo 1x64", 0.8)
        more("redis stream, echo, 1 tpd -w 2, vs bare XREADGROUP/XACK loop",
             "redis echo, 1 tpd", "redis floor", 0.5)
        more("redis stream, echo, 1 tpd -w 2, vs a bare loop that also writes results",
             "redis echo, 1 tpd", "redis floor with results", 0.5)
        more("redis stream, echo, 3 tpds vs 1", "redis echo, 3 tpds", "redis echo, 1 tpd", 1.0)
        more("redis stream, echo, 1 tpd, vs its local socket (1 conn x 64)",
             "redis echo, 1 tpd", "local echo 1x64, tpd-r1", 0.3)
        more("redis stream, exec true, 1 tpd -w 2, vs its local socket (1 conn x 8)",
             "redis exec true, 1 tpd", "local exec true 1x8, tpd-r1", 0.8)
        more("redis stream, exec true, 3 tpds vs 1", "redis exec true, 3 tpds",
             "redis exec true, 1 tpd", 1.0)
        more("echo 1x64: journal_sync commit (defaults) vs the durable floor",
             "journal commit echo 1x64", "durable floor echo 1x64", 0.9)
        more("echo 1x256: journal_sync commit (defaults) vs the durable floor",
             "journal commit echo 1x256", "durable floor echo 1x256", None)
        for shape in ("1x64", "50x1"):
            more("echo %s: journal_sync interval vs journal off" % shape,
                 "journal interval echo " + shape, "journal off echo " + shape, 0.85)
            more("echo %s: journal_sync interval vs the written floor" % shape,
                 "journal interval echo " + shape, "written floor echo " + shape, None)
            more("echo %s: the written floor vs the jansson floor" % shape,
                 "written floor echo " + shape, "jansson floor echo " + shape, None)
            more("echo %s: journal_sync none vs journal off" % shape,
                 "journal none echo " + shape, "journal off echo " + shape,
                 None if shape == "1x64" else 0.85)
            more("echo %s: journal_sync commit vs journal off" % shape,
                 "journal commit echo " + shape, "journal off echo " + shape,
                 None if shape == "1x64" else 0.0)
        for shape in ("1x64", "50x1"):
            more("echo %s: journal off vs the jansson floor" % shape,
                 "journal off echo " + shape, "jansson floor echo " + shape, 0.9)
        t, p = m("loop pause, compaction", "longest_pause_ms"), \
            m("loop pause, compaction-off", "longest_pause_ms")
        n = m("loop pause, compaction", "compactions")
        add("echo 1x64 (commit), compaction running (%s compactions/run): the loop's "
            "longest pause; peer: journal off" % ("-" if n is None else "%.0f" % n),
            t, p, ratio(t, p), "<= 10 ms", None if t is None else t <= 10, "ms")
        t = m("loop pause, compaction-default", "longest_pause_ms")
        n = m("loop pause, compaction-default", "compactions")
        add("the same, the default journal size (%s compactions/run); peer: journal off"
            % ("-" if n is None else "%.0f" % n), t, p, ratio(t, p), "report", None, "ms")
        return rows

    @staticmethod
    def fmt(v, unit):
        if v is None:
            return "-"
        if unit == "/s":
            return "%.0f/s" % v
        if unit == "us":
            return "%.1f us" % v
        if unit == "ms":
            return "%.2f ms" % v
        if unit == "B":
            return "%.0f B" % v
        return "%.3g" % v

    def print_table(self):
        a = self.args
        rows = self.rows()
        head = ("workload", "tpd", "floor/peer", "ratio", "target", "met?")
        if a.only:
            # the rows of the parts left out have no figures: left out too
            rows = [row for row in rows if row[1] is not None or row[2] is not None]
        body = [(n, self.fmt(t, u), self.fmt(p, u), "-" if r is None else "%.3fx" % r, tg,
                 "-" if met is None else ("yes" if met else "NO"))
                for n, t, p, r, tg, met, u in rows]
        widths = [max(len(x[i]) for x in body + [head]) for i in range(len(head))]
        print()
        print("tpd benchmark: medians of %d rounds, %.1f s each (+%.1f s warm-up), "
              "runs alternating; %d CPUs" % (a.rounds, a.duration, a.warmup, os.cpu_count()))
        line = "  ".join(h.ljust(w) for h, w in zip(head, widths))
        print(line)
        print("-" * len(line))
        for row in body:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths)))

        # the one-connection figures, and the checks on the load generator
        print()
        print("one Unix connection (tpd -w 2): ping 1 in flight %s, 64 in flight %s; "
              "echo 1 in flight %s, 64 in flight %s" % tuple(
                  self.fmt(self.median(k), "/s") for k in
                  ("tpd ping 1x1", "tpd ping 1x64", "tpd echo 1x1", "tpd echo 1x64")))
        print("floor, same: ping %s / %s; echo %s / %s" % tuple(
            self.fmt(self.median(k), "/s") for k in
            ("floor ping 1x1", "floor ping 1x64", "floor echo 1x1", "floor echo 1x64")))
        one, two = self.median("floor echo 2x64, 1 tpbench"), \
            self.median("floor echo 2x64, 2 tpbench")
        if one and two:
            print("load generator check: floor echo, 2 conns x 64 in flight, from one "
                  "tpbench %s, from two at once %s (sum)" %
                  (self.fmt(one, "/s"), self.fmt(two, "/s")))
        for key in ("tpd echo 1x64", "floor echo 1x64", "tpd echo 50x1", "floor echo 50x1",
                    "journal off echo 1x64", "jansson floor echo 1x64",
                    "journal commit echo 1x64", "durable floor echo 1x64",
                    "journal interval echo 1x64", "written floor echo 1x64"):
            figs = self.results.get(key, [])
            if figs and figs[0].get("server_cpu_s") is not None:
                per = statistics.median(
                    [(f["server_cpu_s"] / f["ok"] * 1e6) if f["ok"] else 0 for f in figs])
                gen = statistics.median(
                    [((f["cpu_user_s"] + f["cpu_sys_s"]) / f["ok"] * 1e6) if f["ok"] else 0
                     for f in figs])
                print("CPU per request, %s: server %.2f us, tpbench %.2f us" % (key, per, gen))
        self.print_redis()
        self.print_round_trips()
        for key, figs in self.results.items():
            if key.startswith("journal ") and figs and figs[0].get("syncs_per_s") is not None:
                rps = [f["records_per_sync"] for f in figs if f.get("records_per_sync")]
                print("%s: %s fdatasyncs/s, %s records per fdatasync" % (
                    key, "%.0f" % statistics.median([f["syncs_per_s"] for f in figs]),
                    "%.1f" % statistics.median(rps) if rps else "-"))
        for key in ("loop pause, compaction", "loop pause, compaction-default",
                    "loop pause, compaction-off"):
            figs = self.results.get(key, [])
            if figs:
                print("%s: longest pause per run %s ms (slowest answer %s ms); pauses of "
                      "1 ms or more per run %s, over 10 ms %s; the loop thread preempted "
                      "%s times; compactions per run %s" % (
                          key, " ".join("%.1f" % f["longest_pause_ms"] for f in figs),
                          " ".join("%.1f" % f["max_latency_ms"] for f in figs),
                          " ".join(str(f["pauses"]) for f in figs),
                          " ".join(str(f["pauses_over_10ms"]) for f in figs),
                          " ".join(str(f["preempted"]) for f in figs),
                          " ".join(str(f.get("compactions", "-")) for f in figs)))
        rs = self.results.get("tpd resize", [])
        if rs:
            every = sorted(t for r in rs for t in r["all_ms"])
            print("resize answers under load: median %.2f ms, slowest %.2f ms, of %d "
                  "(tpd -w 1 --limit 64, echo 1 conn x 64 in flight running)" %
                  (statistics.median(every), every[-1], len(every)))
        print("per round (figure of each run, in run order):")
        for key, figs in self.results.items():
            vals = [f.get("rate") for f in figs]
            p50s = [f["latency_us"]["p50"] for f in figs if "latency_us" in f]
            print("  %-28s %s%s" % (key, "  ".join("%.0f" % v for v in vals),
                                   ("   p50 us " + "  ".join("%.1f" % v for v in p50s))
                                   if p50s else ""))
        bad = []
        for key, figs in self.results.items():
            for f in figs:
                for field in ("errors", "rejected", "lost", "failed", "unmatched"):
                    if f.get(field):
                        bad.append("%s: %s %d" % (key, field, f[field]))
        for b in sorted(set(bad)):
            print("warning: " + b)
        for n in self.notes:
            print("note: " + n)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"results": self.results,
                           "rows": [dict(zip(("workload", "tpd", "peer", "ratio", "target",
                                              "met", "unit"), r)) for r in rows]},
                          f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="the build directory")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds of every run, alternated; the table gives medians (default 5)")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds measured per run")
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds before measuring")
    ap.add_argument("--idle", type=int, default=10000, help="idle connections to hold")
    ap.add_argument("--only", help="comma-separated parts: throughput,journal,exec,"
                    "compaction,idle,resize,validate,sched,redis")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = ap.parse_args()
    if args.rounds < 1 or args.duration <= 0 or args.idle < 1:
        sys.exit("run.py: --rounds and --idle at least 1, --duration above 0")
    b = Bench(args)
    try:
        b.run()
        b.print_table()
    finally:
        b.stop_all()
        b.remove_cgroups()
        if args.keep:
            log("run.py: logs kept in " + b.tmp)
        else:
            shutil.rmtree(b.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
