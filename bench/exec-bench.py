#!/usr/bin/env python3
"""exec-bench: `true` tasks per second through tpd, next to xargs -P.

For each worker count, starts the built tpd (-w N, a queue that holds every
task), submits all the `true` tasks pipelined on one connection, and times
from the first submit to the last done. In the same run, times
`seq COUNT | xargs -P N -n 1 true`, which forks and execs the same number of
`true` processes with no daemon in between. Prints one table row per N.

  TPD=_build/tpd python3 bench/exec-bench.py [COUNT] [ROUNDS]
"""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from tpdtest import Daemon  # noqa: E402

WORKERS = (2, 8)


def tpd_rate(d, count):
    c = d.client()
    task = {"kind": "exec", "argv": ["true"]}
    lines = "".join(json.dumps({"op": "submit", "id": i, "task": task}) + "\n"
                    for i in range(count)).encode()
    start = time.monotonic()
    c.send_raw(lines)
    done = 0
    while done < count:
        ev = c.recv()
        if ev["event"] == "done":
            if ev["state"] != "succeeded":
                raise SystemExit("task failed: %r" % ev)
            done += 1
        elif ev["event"] != "accepted":
            raise SystemExit("unexpected event: %r" % ev)
    elapsed = time.monotonic() - start
    c.close()
    return count / elapsed


def xargs_rate(workers, count):
    start = time.monotonic()
    subprocess.run("seq %d | xargs -P %d -n 1 true" % (count, workers), shell=True, check=True)
    return count / (time.monotonic() - start)


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print("%d `true` commands, median of %d rounds, %d CPUs" % (count, rounds, os.cpu_count()))
    print("| workers | tpd exec tasks/s | xargs -P tasks/s | tpd / xargs |")
    print("| --- | --- | --- | --- |")
    for w in WORKERS:
        tpd, xargs = [], []
        with Daemon("--log-level", "warning", workers=w, queue=count) as d:
            tpd_rate(d, min(count, 200))        # warm up
            for _ in range(rounds):
                tpd.append(tpd_rate(d, count))
                xargs.append(xargs_rate(w, count))
        t, x = statistics.median(tpd), statistics.median(xargs)
        print("| %d | %.0f | %.0f | %.2f |" % (w, t, x, t / x), flush=True)


if __name__ == "__main__":
    main()
