#!/usr/bin/env python3
"""tpctl-read: how fast tpctl reads one large result.

Starts the built tpd, runs one exec task whose stdout is SIZE bytes (text:
64-byte lines, sent as a JSON string; binary: random bytes, sent as
stdout_base64) with output_limit raised to fit, and lets it finish. Then
times `tpctl wait --output ID > /dev/null` ROUNDS times: the daemon still
holds the finished task, so each wait gets the whole done at once. Next to
it, a floor: a raw socket client that sends the same wait and reads the
done line to its newline without parsing it (the daemon's encoding and the
socket's copy, which no client can avoid). Prints MB/s of task output
(1 MB = 10^6 bytes), the median of the rounds. With TPCTL_BASELINE naming
another tpctl (an older build), it is timed too, round by round with the
first, so that both see the same load.

  TPD=_build/dev/tpd TPCTL=_build/dev/tpctl [TPCTL_BASELINE=old/tpctl] \
      python3 bench/tpctl-read.py [SIZE] [ROUNDS]
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from tpdtest import TPCTL, Daemon  # noqa: E402

LINE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+"   # 63 + \n


def make_task(d, kind, size):
    if kind == "text":
        script = "yes %s | head -c %d" % (LINE, size)
    else:
        script = "head -c %d /dev/urandom" % size
    task = {"kind": "exec", "argv": ["sh", "-c", script], "output_limit": size}
    c = d.client()
    rid = c.send({"op": "submit", "task": task})
    ev = c.recv_id(rid)
    if ev["event"] != "accepted":
        raise SystemExit("submit: %r" % ev)
    done = c.done(rid, timeout=120)
    res = done.get("result", {})
    got = len(res.get("stdout", "")) if "stdout" in res else len(res.get("stdout_base64", "")) * 3 // 4
    if done["state"] != "succeeded" or res.get("truncated") or abs(got - size) > 2:
        raise SystemExit("the task did not produce %d bytes: %r" % (size, {
            k: v for k, v in done.items() if k != "result"}))
    return ev["task"]


def time_tpctl(d, task, tpctl=TPCTL):
    start = time.monotonic()
    with open(os.devnull, "wb") as null:
        p = subprocess.run([tpctl, "-s", d.sock, "wait", "--output", str(task)],
                           stdout=null, stderr=subprocess.PIPE, timeout=120)
    took = time.monotonic() - start
    if p.returncode != 0:
        raise SystemExit("tpctl wait: exit %d: %r" % (p.returncode, p.stderr))
    return took


def time_floor(d, task):
    start = time.monotonic()
    s = socket.socket(socket.AF_UNIX)
    s.connect(d.sock)
    s.sendall((json.dumps({"op": "wait", "id": 1, "task": task}) + "\n").encode())
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while True:
        n = s.recv_into(view)
        if n == 0:
            raise SystemExit("the daemon closed the connection")
        if buf.find(b"\n", 0, n) != -1:
            break
    s.close()
    return time.monotonic() - start


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 16000000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    baseline = os.environ.get("TPCTL_BASELINE")
    print("one %d-byte result, median of %d rounds, %d CPUs" % (size, rounds, os.cpu_count()))
    if baseline:
        print("| output | tpctl MB/s | baseline MB/s | speed-up | raw read (floor) MB/s |")
    else:
        print("| output | tpctl wait --output MB/s | raw read (floor) MB/s | tpctl / floor |")
    print("| --- | --- | --- | --- |" + (" --- |" if baseline else ""))
    with Daemon("--log-level", "warning") as d:
        for kind in ("text", "binary"):
            task = make_task(d, kind, size)
            time_tpctl(d, task)     # warm up the page cache and the daemon
            tp, base, fl = [], [], []
            for _ in range(rounds):
                tp.append(time_tpctl(d, task))
                if baseline:
                    base.append(time_tpctl(d, task, baseline))
                fl.append(time_floor(d, task))
            rate = {k: size / statistics.median(v) / 1e6 for k, v in
                    (("tp", tp), ("base", base), ("fl", fl)) if v}
            if baseline:
                print("| %s | %.0f | %.0f | %.1fx | %.0f |" % (
                    kind, rate["tp"], rate["base"], rate["tp"] / rate["base"], rate["fl"]),
                    flush=True)
            else:
                print("| %s | %.0f | %.0f | %.2f |" % (kind, rate["tp"], rate["fl"],
                                                      rate["tp"] / rate["fl"]), flush=True)


if __name__ == "__main__":
    main()
