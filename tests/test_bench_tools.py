#!/usr/bin/env python3
"""The manual benchmark tools start tpd the way the tests do: no configuration file and a
state_dir in their own temp dir, never the machine's (/var/lib/tpd, /etc/tpd). Each tool
is run against a build directory whose tpd is a wrapper that records its arguments and
then runs the real one; instr-per-task.sh's valgrind is a stand-in that runs the program
natively (the instruction count is not what is checked)."""
import os
import stat
import subprocess
import tempfile

from tpdtest import TPD, TIMEOUT, check, run_tests

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.dirname(os.path.abspath(TPD))


def script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class FakeBuild:
    """A build directory: tpd records each argv (one line, NUL-separated words) in
    argv.log and runs the real tpd; bench/tpbench is the real one."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tpd-bench-tools-")
        self.log = os.path.join(self.dir, "argv.log")
        script(os.path.join(self.dir, "tpd"),
               '#!/bin/sh\nprintf "%%s\\0" "$@" >> "%s"\necho >> "%s"\nexec "%s" "$@"\n' %
               (self.log, self.log, TPD))
        os.mkdir(os.path.join(self.dir, "bench"))
        os.symlink(os.path.join(BUILD, "bench", "tpbench"),
                   os.path.join(self.dir, "bench", "tpbench"))

    def argvs(self):
        with open(self.log) as f:
            return [line.rstrip("\0").split("\0") for line in f.read().splitlines() if line]

    def close(self):
        subprocess.run(["rm", "-rf", self.dir])


def check_private(argv, tool):
    """argv runs tpd with no configuration file and a state_dir of its own."""
    check("-c" in argv and argv[argv.index("-c") + 1] == "none",
          "%s runs tpd without -c none (it would read the machine's tpd.conf): %r" %
          (tool, argv))
    check("--state-dir" in argv, "%s runs tpd on the default state_dir: %r" % (tool, argv))
    sd = argv[argv.index("--state-dir") + 1]
    check(sd.startswith(tempfile.gettempdir() + "/") and not sd.startswith("/var/lib"),
          "%s's state_dir %s is not a temp dir" % (tool, sd))


def test_thread_cpu_runs_tpd_on_a_private_state_dir():
    b = FakeBuild()
    try:
        r = subprocess.run(["bash", os.path.join(SRC, "bench", "thread-cpu.sh"), b.dir,
                            "-s", "1", "-t", "--journal-sync interval", "--",
                            "-c", "1", "-w", "4", "--echo", "8"],
                           capture_output=True, text=True, timeout=TIMEOUT * 4)
        check(r.returncode == 0, "thread-cpu.sh failed: %s %s" % (r.stdout, r.stderr))
        argvs = b.argvs()
        check(len(argvs) == 1, "one tpd expected, got %r" % argvs)
        check_private(argvs[0], "thread-cpu.sh")
        check(argvs[0][-2:] == ["--journal-sync", "interval"],
              "-t's options are not passed on: %r" % argvs[0])
        check("us/req" in r.stdout, "no per-thread figures: %s" % r.stdout)
    finally:
        b.close()


def test_instr_per_task_runs_tpd_on_a_private_state_dir():
    b = FakeBuild()
    try:
        fake = os.path.join(b.dir, "fakebin")
        os.mkdir(fake)
        # valgrind OPTIONS... PROGRAM ARGS...: drops the options, runs the program, and
        # writes the summary line the script reads
        script(os.path.join(fake, "valgrind"),
               '#!/bin/bash\nout=\nwhile [[ $1 == --* ]]; do\n'
               '  case $1 in --callgrind-out-file=*) out=${1#*=} ;; esac\n  shift\ndone\n'
               '"$@"\nrc=$?\necho "summary: 1000" > "$out"\nexit $rc\n')
        env = dict(os.environ, PATH=fake + ":" + os.environ["PATH"])
        r = subprocess.run(["bash", os.path.join(SRC, "bench", "instr-per-task.sh"), b.dir],
                           capture_output=True, text=True, timeout=TIMEOUT * 8, env=env)
        check(r.returncode == 0, "instr-per-task.sh failed: %s %s" % (r.stdout, r.stderr))
        argvs = b.argvs()
        check(len(argvs) == 2, "two tpds expected, got %r" % argvs)
        for argv in argvs:
            check_private(argv, "instr-per-task.sh")
            check(argv[-2:] == ["--journal", "off"], "not the default options: %r" % argv)
        # -t's options replace the default --journal off
        r = subprocess.run(["bash", os.path.join(SRC, "bench", "instr-per-task.sh"),
                            "-t", "--journal-sync interval", b.dir],
                           capture_output=True, text=True, timeout=TIMEOUT * 8, env=env)
        check(r.returncode == 0, "instr-per-task.sh -t failed: %s %s" % (r.stdout, r.stderr))
        check("(--journal-sync interval)" in r.stdout, "options not named: %s" % r.stdout)
        argvs = b.argvs()[2:]
        check(len(argvs) == 2, "two more tpds expected, got %r" % argvs)
        for argv in argvs:
            check_private(argv, "instr-per-task.sh -t")
            check(argv[-2:] == ["--journal-sync", "interval"] and "off" not in argv,
                  "-t's options are not what tpd got: %r" % argv)
    finally:
        b.close()


if __name__ == "__main__":
    run_tests(globals())
