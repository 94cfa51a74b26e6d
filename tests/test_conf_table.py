#!/usr/bin/env python3
"""conf/tpd.conf and tpd.conf(5) against the key table (conf.c), read from `tpd --help`:
every key of the table is in both; every line of conf/tpd.conf shows its key's built-in
default unless it (or its section) says "# example"; uncommenting every line that is not an
example gives a file `tpd -n` accepts; the man page gives each key's default where it has
one. Each check is also run on a broken copy, to show that it would fail."""
import os
import re
import subprocess
import tempfile

from tpdtest import TPD, TIMEOUT, check, run_tests

SRCDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF = os.path.join(SRCDIR, "conf", "tpd.conf")
MAN = os.path.join(SRCDIR, "conf", "tpd.conf.5")

HELP_KEY = re.compile(r"^  (?:-\w, )?\s*(?:--[a-z-]+|[a-z_]+) \S+\s+"
                      r"\[(daemon|exec|pool default|source NAME)\] (\w+)(.*)$")
SECTIONS = {"daemon": "daemon", "exec": "exec", "pool default": "pool", "source NAME": "source"}


def tpd(*args):
    r = subprocess.run([TPD, "-c", "none"] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=TIMEOUT)
    return r.returncode, r.stdout, r.stderr


def table():
    """{(section, key): {"default": text or None (a list's entries joined by " and "),
    "restart": bool}} as `tpd --help` prints the table."""
    rc, out, _ = tpd("--help")
    check(rc == 0, "tpd --help exits 0")
    keys = {}
    for line in out.split("\n"):
        m = HELP_KEY.match(line)
        if not m:
            continue
        sect, key, rest = SECTIONS[m.group(1)], m.group(2), m.group(3)
        restart = rest.endswith(", read at start")
        if restart:
            rest = rest[:-len(", read at start")]
        d = re.search(r", default (.*)$", rest)
        keys[(sect, key)] = {"default": d.group(1) if d else None, "restart": restart}
    check(len(keys) > 50 and ("source", "claim_idle") in keys, "help lists the table: %r", out)
    return keys


def conf_lines(text):
    """The key lines of a tpd.conf text: (line number, section, key, value, example)."""
    sect, sect_example, lines = None, False, []
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^#?\[(\w+)[^\]]*\](.*)$", line)
        if m:
            sect, sect_example = m.group(1), "example" in m.group(2)
            continue
        m = re.match(r"^#(\w+) = (.*)$", line)
        if not m:
            continue
        value, _, comment = (re.split(r"(\s[#;])", m.group(2), maxsplit=1) + ["", ""])[:3]
        lines.append((n, sect, m.group(1), value.strip(),
                      sect_example or "example" in comment))
    return lines


def conf_problems(text, keys):
    """What conf/tpd.conf (text) says that the table does not: one string each."""
    problems, shown = [], {}
    for n, sect, key, value, example in conf_lines(text):
        if (sect, key) not in keys:
            problems.append("line %d: %s is not a key of [%s]" % (n, key, sect))
            continue
        shown.setdefault((sect, key), []).append((n, value, example))
    for sk, k in sorted(keys.items()):
        if sk not in shown:
            problems.append("[%s] %s is missing" % sk)
            continue
        plain = [(n, v) for n, v, example in shown[sk] if not example]
        if not plain:
            continue
        if k["default"] is None:
            problems.append("line %d: [%s] %s = %s: the key has no default value, so the line "
                            "must say \"# example\"" % (plain[0][0], sk[0], sk[1], plain[0][1]))
        elif [v for _, v in plain] != k["default"].split(" and "):
            problems.append("line %d: [%s] %s = %s: the default is %s; a value that is not "
                            "the default must say \"# example\"" % (plain[0][0], sk[0], sk[1],
                                                                     " / ".join(v for _, v in plain),
                                                                     k["default"]))
    return problems


def uncommented(text):
    """text with every line and section that is not an example uncommented."""
    out, skip = [], False
    for line in text.split("\n"):
        m = re.match(r"^#?(\[\w+[^\]]*\])(.*)$", line)
        if m:
            skip = "example" in m.group(2)
            if not skip:
                out.append(m.group(1))
            continue
        m = re.match(r"^#(\w+ = .*)$", line)
        if m and not skip and "example" not in m.group(1):
            out.append(m.group(1))
    return "\n".join(out) + "\n"


def man_entries(text):
    """{(section, key): the text of its entry} for every key tpd.conf(5) documents; keys
    whose .BI lines follow each other (joined by .TQ) share one entry."""
    sect, entries, group, prev_key = None, {}, [], False
    for line in text.split("\n"):
        m = re.match(r'^\.SH "\[(\w+)', line)
        if m or line.startswith(".SH") or line.startswith(".SS"):
            sect, group, prev_key = m.group(1) if m else None, [], False
            continue
        m = re.match(r"^\.BI (\w+) ", line)
        if m and sect is not None:
            if not prev_key:
                group = []
            group.append((sect, m.group(1)))
            entries[(sect, m.group(1))] = []
            prev_key = True
            continue
        if line == ".TQ":
            continue
        prev_key = False
        for k in group:
            entries[k].append(line)
    return {k: "\n".join(v) for k, v in entries.items()}


def man_problems(text, keys):
    problems = []
    entries = man_entries(text)
    for sk, k in sorted(keys.items()):
        if sk not in entries:
            problems.append("tpd.conf(5) does not document [%s] %s" % sk)
            continue
        body = entries[sk].replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
        body = re.sub(r"^\.[A-Z]+ ?", "", body, flags=re.M).replace('"', "")
        for d in (k["default"] or "").split(" and "):
            if d and not re.search(r"(?<![\w.])%s(?![\w])" % re.escape(d), body):
                problems.append("tpd.conf(5): [%s] %s does not give its default %s"
                                % (sk[0], sk[1], d))
        if k["restart"] and not re.search(r"(?i)read at start|at the next start", body):
            problems.append("tpd.conf(5): [%s] %s does not say it is read at start" % sk)
    return problems


def test_every_key_of_the_table_is_in_tpd_conf_with_its_default_or_says_example():
    keys = table()
    with open(CONF) as f:
        text = f.read()
    problems = conf_problems(text, keys)
    check(problems == [], "conf/tpd.conf against the table:\n  %s", "\n  ".join(problems))
    # the check fails on a value that is not the default, unmarked, and on a key left out
    broken = text.replace("#max_connections = 1024\n", "#max_connections = 512\n")
    broken = broken.replace("#kill_grace = 5s\n", "")
    broken = broken.replace("#socket_group = tpd    # example", "#socket_group = tpd")
    problems = conf_problems(broken, keys)
    check(len(problems) == 3 and "max_connections = 512" in problems[1 if "kill" in problems[0]
                                                                        else 0],
          "the check would fail: %r", problems)


def test_uncommenting_every_line_that_is_no_example_gives_a_good_file():
    with open(CONF) as f:
        text = uncommented(f.read())
    check("\nmax_connections = 1024\n" in text and "[pool default]" in text, "%s", text)
    fd, path = tempfile.mkstemp(prefix="tpdconftable-", suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        rc, out, err = tpd("-n", "-c", path)
    finally:
        os.unlink(path)
    check((rc, out, err) == (0, "configuration OK: %s\n" % path, ""), "rc %d %r %r", rc, out, err)


def test_every_key_of_the_table_is_in_tpd_conf_5_with_its_default():
    keys = table()
    with open(MAN) as f:
        text = f.read()
    problems = man_problems(text, keys)
    check(problems == [], "tpd.conf(5) against the table:\n  %s", "\n  ".join(problems))
    broken = text.replace(".BI stream_budget ", ".BI stream_budgets ")
    check(any("stream_budget" in p for p in man_problems(broken, keys)), "the check would fail")


run_tests(globals())
