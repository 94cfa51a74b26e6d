#!/usr/bin/env python3
"""tpctl top: the live view in a real terminal (tmux, 100x30 and 40 columns, read back
with capture-pane), q and Ctrl-C, the screen given back, a lost daemon's message after it,
and one plain snapshot when stdout is not a terminal. Skipped without tmux, saying why."""
import os
import re
import shutil
import subprocess
import tempfile

from tpdtest import TPCTL, TIMEOUT, Daemon, Skip, check, eventually, run_tests

LONG_MS = 60000


class Tmux:
    """A private tmux server (its own socket directory) with one detached window of
    width x height running cmd; always closed by the caller."""

    def __init__(self, cmd, width=100, height=30):
        if shutil.which("tmux") is None:
            raise Skip("tmux is not installed (Debian package tmux)")
        self.dir = tempfile.mkdtemp(prefix="tpctl-top-")
        self.env = dict(os.environ, TMUX_TMPDIR=self.dir)
        self.env.pop("TMUX", None)
        self.base = ["tmux", "-L", "top", "-f", "/dev/null"]
        subprocess.run(self.base + ["new-session", "-d", "-x", str(width), "-y", str(height),
                                    "-s", "t", cmd], check=True, env=self.env, timeout=TIMEOUT)

    def screen(self):
        p = subprocess.run(self.base + ["capture-pane", "-p", "-t", "t"],
                           capture_output=True, env=self.env, timeout=TIMEOUT)
        return p.stdout.decode(errors="replace")

    def wait_for(self, pred, what):
        eventually(lambda: pred(self.screen()), what)
        return self.screen()

    def keys(self, *keys):
        subprocess.run(self.base + ["send-keys", "-t", "t"] + list(keys), check=True,
                       env=self.env, timeout=TIMEOUT)

    def close(self):
        subprocess.run(self.base + ["kill-server"], capture_output=True, env=self.env,
                       timeout=TIMEOUT)
        shutil.rmtree(self.dir, ignore_errors=True)


def top_cmd(d, extra=""):
    # "read x" keeps the window after tpctl exits, so its last screen can be read
    return "%s -s %s top%s; echo EXIT=$?; read x" % (TPCTL, d.sock, extra)


def row(screen, name):
    for line in screen.splitlines():
        if line.split()[:1] == [name]:
            return line.split()
    raise AssertionError("no row %s on the screen:\n%s" % (name, screen))


def test_top_shows_the_pools_live_and_q_leaves():
    with Daemon("--pool", "io:3:5", workers=2, queue=8) as d:
        t = Tmux(top_cmd(d))
        try:
            screen = t.wait_for(lambda s: "POOL" in s and "q: quit" in s, "the view")
            check(re.search(r"^tpd \S+  running  up \S+  1 connection  \d\d:\d\d:\d\d",
                            screen, re.M), "the daemon's line:\n%s", screen)
            cells = row(screen, "default")
            check(cells[1:5] == ["2", "2", "0", "0/8"], "default: %r", cells)
            check(row(screen, "io")[1:5] == ["3", "3", "0", "0/5"], "io:\n%s", screen)
            # a busy worker and a queued task show at the next refresh
            c = d.client()
            c.submit({"kind": "sleep", "ms": LONG_MS}, pool="io")
            for _ in range(4):
                c.submit({"kind": "sleep", "ms": LONG_MS})
            screen = t.wait_for(lambda s: row(s, "default")[3:5] == ["2", "2/8"] and
                                row(s, "io")[3] == "1", "the new figures")
            print(screen.rstrip())
            t.keys("q")
            screen = t.wait_for(lambda s: "EXIT=" in s, "tpctl exits")
            check("EXIT=0" in screen, "q exits 0:\n%s", screen)
            check("POOL" not in screen, "the screen is given back:\n%s", screen)
        finally:
            t.close()


def test_top_ctrl_c_exits_130():
    with Daemon() as d:
        t = Tmux(top_cmd(d))
        try:
            t.wait_for(lambda s: "POOL" in s, "the view")
            t.keys("C-c")
            screen = t.wait_for(lambda s: "EXIT=" in s, "tpctl exits")
            check("EXIT=130" in screen and "POOL" not in screen, "Ctrl-C:\n%s", screen)
        finally:
            t.close()


def test_top_fits_a_narrow_terminal():
    with Daemon("--pool", "io:1", workers=1) as d:
        t = Tmux(top_cmd(d), width=40, height=12)
        try:
            screen = t.wait_for(lambda s: "q: quit" in s, "the view")
            rows = [r for r in screen.splitlines() if r.strip()]
            # no line wrapped: the daemon's line, headers, two pools, the journal's line,
            # the notes, the key
            check(len(rows) == 7 and rows[1].startswith("POOL") and
                  rows[4].startswith("journal: ok") and
                  rows[2].startswith("default") and rows[3].startswith("io"),
                  "rows at 40 columns:\n%s", screen)
            t.keys("q")
            check("EXIT=0" in t.wait_for(lambda s: "EXIT=" in s, "tpctl exits"), "exit 0")
        finally:
            t.close()


def test_top_says_why_when_the_daemon_goes():
    with Daemon() as d:
        t = Tmux(top_cmd(d))
        try:
            t.wait_for(lambda s: "POOL" in s, "the view")
            d.client().request({"op": "shutdown", "mode": "now"})
            screen = t.wait_for(lambda s: "EXIT=" in s, "tpctl exits")
            check("EXIT=69" in screen and "lost the connection" in screen and
                  "POOL" not in screen, "the message after the screen:\n%s", screen)
        finally:
            t.close()


def test_top_prints_one_snapshot_into_a_pipe():
    with Daemon("--pool", "io:3", workers=2) as d:
        p = subprocess.run([TPCTL, "-s", d.sock, "top"], capture_output=True,
                           timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        out = p.stdout.decode()
        check(p.returncode == 0, "exit %d: %r", p.returncode, p.stderr)
        check("\033" not in out and "q: quit" not in out, "plain text: %r", out)
        lines = out.splitlines()
        check(lines[2].split()[:5] == ["POOL", "TARGET", "WORKERS", "BUSY", "QUEUED"],
              "headers: %r", lines)
        check(row(out, "default")[1:5] == ["2", "2", "0", "0/16"] and
              row(out, "io")[1] == "3", "rows: %r", out)
        # a pool that ran nothing lately has no quantiles: "-", not "0us"
        check(row(out, "io")[6:10] == ["-", "-", "-", "-"], "idle quantiles: %r", out)
        p = subprocess.run([TPCTL, "-s", d.sock, "top", "--once", "extra"],
                           capture_output=True, timeout=TIMEOUT)
        check(p.returncode == 64, "a stray argument: %d", p.returncode)


def test_top_shows_tasks_not_yet_due_apart_from_the_queue():
    # One task due in a minute (scheduled) and one after it (waiting): both
    # accepted, neither in QUEUED, each in its own column.
    with Daemon() as d:
        c = d.client()
        _, a = c.submit({"kind": "echo", "value": "later"}, delay_ms=LONG_MS)
        _, b = c.submit({"kind": "echo", "value": "then"}, after=[a["task"]])
        check(a["event"] == "accepted" and b["event"] == "accepted", "%r %r", a, b)
        p = subprocess.run([TPCTL, "-s", d.sock, "top", "--once"], capture_output=True,
                           timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        out = p.stdout.decode()
        check(p.returncode == 0, "exit %d: %r", p.returncode, p.stderr)
        header = [l for l in out.splitlines() if l.startswith("POOL")][0].split()
        check(header[-2:] == ["SCHEDULED", "WAITING"], "headers: %r", header)
        # the row's last three cells: HELD, SCHEDULED, WAITING
        check(row(out, "default")[4] == "0/16" and row(out, "default")[-3:] == ["0", "1", "1"],
              "row: %r", out)


run_tests(globals())
