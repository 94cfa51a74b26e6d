#!/usr/bin/env python3
"""kill -9 at random moments under a mixed load, over and over: every id ever
accepted ends in exactly one done, no id is reused, nothing runs twice
unless on_lost rerun asked for it.

TPD_STRESS_CRASHES=N sets the number of kills (20; 6 in sanitizer builds),
TPD_STRESS_TASKS=N the number of submissions (10,000; 3,000 in sanitizer
builds), TPD_STRESS_SEED=N the seed (printed, so a failure can be replayed).
"""
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time

from tpdtest import SLOW, TIMEOUT, Client, Daemon, check, run_tests

CONNECTIONS = 8
IN_FLIGHT = 16
MODES = ("commit", "interval", "none")


class Load:
    """What the clients sent and heard, across every daemon of the run."""

    def __init__(self, total, seed, ran):
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.total = total
        self.next_token = 0
        self.ran = ran
        self.spec = {}          # token -> (kind, rerun)
        self.accepted = {}      # task id -> token (from accepted events)
        self.dones = {}         # task id -> the done received live (first one)
        self.extra_dones = []   # (task id, done) received twice live: a failure
        self.rejected = 0
        self.reject_codes = {}

    def new_task(self):
        """A submit request for a fresh token, or None once all were sent."""
        with self.lock:
            if self.next_token >= self.total:
                return None
            t = self.next_token
            self.next_token += 1
            r = self.rng.random()
            rerun = self.rng.random() < 0.2
        if r < 0.55:
            task, kind = {"kind": "echo", "value": {"t": t}}, "echo"
        elif r < 0.85:
            # the first thing it does is to say it ran; then it says which it is
            task = {"kind": "exec", "argv": ["sh", "-c", "echo %d >> %s; echo %d" %
                                             (t, self.ran, t)]}
            kind = "exec"
        else:
            task = {"kind": "exec", "argv": ["sh", "-c", "echo %d >> %s; sleep 0.05; echo %d" %
                                             (t, self.ran, t)]}
            kind = "exec"
        with self.lock:
            self.spec[t] = (kind, rerun)
        req = {"op": "submit", "id": t, "task": task}
        if rerun:
            req["on_lost"] = "rerun"
        return req


def token_of(done):
    res = done.get("result") or {}
    if "value" in res:
        return res["value"]["t"]
    if res.get("stdout"):
        return int(res["stdout"].split()[-1])
    return None


def client_main(load, sock):
    try:
        c = Client(sock)
    except OSError:
        return
    inflight = 0
    try:
        while True:
            while inflight < IN_FLIGHT:
                req = load.new_task()
                if req is None:
                    break
                c.send(req)
                inflight += 1
            if inflight == 0:
                return
            ev = c.recv(timeout=TIMEOUT)
            kind = ev.get("event")
            with load.lock:
                if kind == "accepted":
                    check(ev["task"] not in load.accepted, "task id %d given twice", ev["task"])
                    load.accepted[ev["task"]] = ev["id"]
                elif kind == "done":
                    inflight -= 1
                    if ev["task"] in load.dones:
                        load.extra_dones.append((ev["task"], ev))
                    else:
                        load.dones[ev["task"]] = ev
                elif kind in ("rejected", "error"):
                    inflight -= 1
                    load.rejected += 1
                    code = ev.get("error", {}).get("code")
                    load.reject_codes[code] = load.reject_codes.get(code, 0) + 1
    except (EOFError, OSError, ValueError):
        return  # the daemon was killed
    finally:
        c.close()


def test_kill9_under_load_accounts_for_every_id():
    crashes = int(os.environ.get("TPD_STRESS_CRASHES", "20" if SLOW == 1 else "6"))
    total = int(os.environ.get("TPD_STRESS_TASKS", "10000" if SLOW == 1 else "3000"))
    seed = int(os.environ.get("TPD_STRESS_SEED", str(int(time.time()))))
    print("# seed %d (TPD_STRESS_SEED), %d crashes, %d tasks" % (seed, crashes, total),
          flush=True)
    root = tempfile.mkdtemp(prefix="tpdcrash-")
    state = os.path.join(root, "state")
    ran = os.path.join(root, "ran")
    open(ran, "w").close()
    load = Load(total, seed, ran)
    rng = random.Random(seed + 1)
    args = ("--state-dir", state, "--result-retain", "1000000", "--result-ttl", "1d")
    try:
        for round in range(crashes + 1):
            mode = MODES[round % len(MODES)]
            with Daemon(*args, "--journal-sync", mode, workers=4, queue=20000) as d:
                threads = [threading.Thread(target=client_main, args=(load, d.sock))
                           for _ in range(CONNECTIONS)]
                for t in threads:
                    t.start()
                if round < crashes:
                    time.sleep(rng.uniform(0.05, 0.4) * SLOW)
                    d.proc.kill()
                    d.proc.wait()
                for t in threads:
                    t.join(TIMEOUT * 4)
                if round == crashes:
                    final_check(load, d)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def final_check(load, d):
    c = d.client()
    # ids the clients never heard accepted: the ones after each acknowledged run
    known = set(load.accepted)
    probe = c.request({"op": "submit", "task": {"kind": "echo", "value": {"t": -1}}},
                      "accepted")["task"]
    ids = set(known)
    for start in sorted(known):
        t = start + 1
        while t not in ids and t < probe:
            ev = c.request({"op": "status", "task": t})
            if ev["event"] != "status":
                break
            ids.add(t)
            t += 1
    ids.discard(probe)
    finals = {}
    rids = {}
    for t in sorted(ids):
        rids[c.send({"op": "wait", "task": t})] = t
    while rids:
        ev = c.recv(timeout=TIMEOUT * 4)
        if ev.get("id") in rids and ev.get("event") == "done":
            finals[rids.pop(ev["id"])] = ev
        elif ev.get("id") in rids:
            raise AssertionError("wait answered %r" % ev)
    check(not load.extra_dones, "a task had two dones live: %r", load.extra_dones[:3])
    # every done heard live is the one the journal kept
    for t, dn in load.dones.items():
        f = dict(finals[t])
        f["id"] = dn["id"]
        check(f == dn, "task %d: done %r live, %r after the restarts", t, dn, finals[t])
    ran = {}
    for line in open(load.ran):
        if line.strip():
            ran[int(line)] = ran.get(int(line), 0) + 1
    tokens = {}
    states = {}
    for t, dn in finals.items():
        states[dn["state"]] = states.get(dn["state"], 0) + 1
        check(dn.get("attempt") is not None, "task %d: a done without attempt: %r", t, dn)
        tok = token_of(dn)
        if dn["state"] == "succeeded":
            check(tok is not None, "task %d: no token in %r", t, dn)
            check(tok not in tokens, "token %d accepted twice: tasks %d and %d",
                  tok, tokens.get(tok, -1), t)
            tokens[tok] = t
            if t in load.accepted:
                check(load.accepted[t] == tok, "task %d is token %d, accepted as %d", t, tok,
                      load.accepted[t])
        elif dn["state"] == "lost":
            check(dn["attempt"] >= 1, "task %d lost without having started: %r", t, dn)
        else:
            raise AssertionError("task %d ended %s: %r" % (t, dn["state"], dn))
    for t, tok in load.accepted.items():
        check(t in finals, "task %d (token %d) was accepted and has no done", t, tok)
    for tok, n in ran.items():
        kind, rerun = load.spec[tok]
        t = tokens.get(tok)
        attempts = finals[t]["attempt"] if t is not None else None
        if rerun:
            check(attempts is None or n <= attempts, "token %d ran %d times in %s attempts",
                  tok, n, attempts)
        else:
            check(n == 1, "token %d ran %d times without rerun", tok, n)
    reruns = sum(1 for dn in finals.values() if dn["attempt"] > 1)
    print("# %d ids accepted, %d heard live, %d dones live; states %s; %d rerun; %d "
          "rejected %s" % (len(finals), len(load.accepted), len(load.dones), states, reruns,
                           load.rejected, load.reject_codes), flush=True)


if __name__ == "__main__":
    run_tests(globals())
