#!/usr/bin/env python3
"""check-deps.py: the allowed directions of #include between daemon/'s parts.

    python3 tests/check-deps.py [TOP]

Resolves every `#include "..."` of TOP/daemon (TOP: this checkout) as the
compiler does (the including file's folder, then daemon/, then common/) and
fails, naming FILE:LINE and the rule, when a part includes one it may not.
Run by `make check`. The rules, written once (README.md, "Layout", says the
same in words):

The parts, lowest first. A part may include its own files, common/, and the
parts listed before it, never one after it:

    base      log, utf8, blob, idmap: needs nothing of the daemon
    conf      the settings (conf.c's key table)
    state     daemon.h: the running daemon's state (its settings, its loop)
    sd        sd.c: systemd's notify protocol and socket activation
    pool      pool.c (the pool, built alone) and pools.c (the named pools)
    proto     requests and events as text <-> structs
    task      the registry (tasks.c), the worker side (task.c), the kinds, the mailbox
    exec      the exec kind: spawn, cgroup, process groups, capture
    journal   the journal (journal-*) and durable.c, the daemon's use of it
    source    tasks from Redis streams
    net       listeners, connections, framing, auth, tokens
    life      shutdown.c: the daemon's phase and its way out
    ops       the op table and its handlers, a connection as a task's sink
    obs       /metrics and health (STATUS=, the watchdog): read what is below
    top       tpd.c (start and stop), reload.c: may include everything

Doors: from outside its folder, the journal is reached only through
journal/durable.h, and a source only through source/sources.h or
source/source.h. A lower part that must call back up (a connection waiting
for the journal, a line to dispatch) is given a callback by the top.

Spelling: an include of another folder names the folder ("pool/pool.h"),
one of the same folder does not ("pool.h").

It also checks that README.md's "Layout" section names files, folders and
functions that exist.
"""
import os
import re
import sys

# (part, files): a folder of daemon/, or files at daemon/'s top. Lowest first.
PARTS = [
    ("base", ["base/"]),
    ("conf", ["conf/"]),
    ("state", ["daemon.h"]),
    ("sd", ["sd.c", "sd.h"]),
    ("pool", ["pool/"]),
    ("proto", ["proto/"]),
    ("task", ["task/"]),
    ("exec", ["exec/"]),
    ("journal", ["journal/"]),
    ("source", ["source/"]),
    ("net", ["net/"]),
    ("life", ["shutdown.c", "shutdown.h"]),
    ("ops", ["ops/"]),
    ("obs", ["obs/"]),
    ("top", ["tpd.c", "reload.c", "reload.h"]),
]

# part: the only files of it that other parts may include.
DOORS = {
    "journal": {"journal/durable.h"},
    "source": {"source/sources.h", "source/source.h"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def part_of(rel):
    """The part a path under daemon/ belongs to, or None."""
    for name, files in PARTS:
        for f in files:
            if (f.endswith("/") and rel.startswith(f)) or rel == f:
                return name
    return None


def resolve(top, src_rel, inc):
    """The file an include names: ("daemon", rel), ("common", rel), or None."""
    daemon = os.path.join(top, "daemon")
    here = os.path.dirname(os.path.join(daemon, src_rel))
    for root, kind in ((here, "daemon"), (daemon, "daemon"), (os.path.join(top, "common"), "common")):
        p = os.path.normpath(os.path.join(root, inc))
        if os.path.isfile(p):
            base = daemon if kind == "daemon" else os.path.join(top, "common")
            return kind, os.path.relpath(p, base)
    return None


def check(top):
    """[message] for every include that breaks a rule, and the count of includes read."""
    rank = {name: i for i, (name, _) in enumerate(PARTS)}
    daemon = os.path.join(top, "daemon")
    errors, seen = [], 0
    for dirpath, _, names in sorted(os.walk(daemon)):
        for name in sorted(names):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, daemon)
            src = part_of(rel)
            where = os.path.join("daemon", rel)
            if src is None:
                errors.append("%s: belongs to no part: add it to PARTS in "
                              "tests/check-deps.py (and to README.md's layout)" % where)
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
            for lineno, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if m is None:
                    continue
                inc = m.group(1)
                seen += 1
                at = "%s:%d: #include \"%s\"" % (where, lineno, inc)
                if inc == "config.h":
                    continue
                hit = resolve(top, rel, inc)
                if hit is None:
                    errors.append("%s: names no file of daemon/ or common/" % at)
                    continue
                kind, target = hit
                if kind == "common":
                    continue
                dst = part_of(target)
                same_folder = os.path.dirname(target) == os.path.dirname(rel)
                if same_folder and "/" in inc:
                    errors.append("%s: a file of the same folder is included by its "
                                  "name alone (\"%s\")" % (at, os.path.basename(inc)))
                elif not same_folder and os.path.dirname(target) and \
                        inc != target:
                    errors.append("%s: another folder's file is included by its path "
                                  "under daemon/ (\"%s\")" % (at, target))
                if dst is None or dst == src:
                    continue
                if rank[dst] > rank[src]:
                    errors.append("%s: %s may not include %s, which is above it (the "
                                  "order of the parts is in tests/check-deps.py; to call "
                                  "up, take a callback set by the top)" % (at, src, dst))
                elif dst in DOORS and target not in DOORS[dst]:
                    errors.append("%s: outside %s/, %s is reached only through %s"
                                  % (at, dst, dst, " or ".join(sorted(DOORS[dst]))))
    return errors, seen


def check_readme(top):
    """[message] for each file, folder or name of daemon/ that README.md's "Layout"
    section (its tables and the path of one request) names and that does not exist."""
    path = os.path.join(top, "README.md")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = text.find("\n## Layout\n"), text.find("\n## Building by hand\n")
    if start == -1 or end == -1:
        return ["README.md: no \"## Layout\" section before \"## Building by hand\""]
    section = text[start:end]
    files, words = set(), set()
    for sub in sorted(os.listdir(top)):
        if sub.startswith((".", "_")) or not os.path.isdir(os.path.join(top, sub)):
            continue
        for dirpath, _, names in os.walk(os.path.join(top, sub)):
            rel = os.path.relpath(dirpath, top)
            files.add(rel + "/")
            files.update(os.path.join(rel, n) for n in names)
            for n in names:
                if n.endswith((".c", ".h")):
                    with open(os.path.join(dirpath, n), encoding="utf-8",
                              errors="replace") as f:
                        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.read()))
    errors = []
    for token in re.findall(r"`([^`\s]+)`", section):
        if token.endswith((".c", ".h", "/")):
            name = token.rstrip("/")
            hits = [f for f in files if f.rstrip("/") == name or
                    f.rstrip("/").endswith("/" + name)]
            if not hits:
                errors.append("README.md, Layout: `%s` names no file or folder" % token)
        elif re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", token) and token not in words:
            errors.append("README.md, Layout: `%s` names nothing in the sources" % token)
    return errors


def self_test():
    """The check must fail on a tree that breaks each rule."""
    import tempfile
    cases = {
        "base/log.c": ('#include "pool/pool.h"\n', "base may not include pool"),
        "net/conn.c": ('#include "journal/journal.h"\n', "reached only through"),
        "pool/pool.c": ('#include "pool/pools.h"\n', "by its name alone"),
        "task/task.c": ('#include "nosuch.h"\n', "names no file"),
        "net/listen.c": ('#include "ops/ops.h"\n', "net may not include ops"),
    }
    layout = ["base/log.c", "pool/pool.c", "pool/pool.h", "pool/pools.h", "journal/journal.h",
              "journal/durable.h", "net/conn.c", "net/listen.c", "task/task.c", "ops/ops.h"]
    for bad, (text, words) in cases.items():
        with tempfile.TemporaryDirectory() as top:
            os.makedirs(os.path.join(top, "common"))
            for rel in layout:
                os.makedirs(os.path.join(top, "daemon", os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(top, "daemon", rel), "w") as f:
                    f.write(text if rel == bad else "")
            errors, _ = check(top)
            if not any(words in e and ("daemon/" + bad + ":1:") in e for e in errors):
                print("check-deps: the check missed %r in %s: %s" % (words, bad, errors))
                return False
    return True


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not self_test():
        return 1
    errors, seen = check(top)
    errors += check_readme(top)
    for e in errors:
        print(e)
    if errors:
        print("check-deps: %d problem%s (the rules are in tests/check-deps.py)"
              % (len(errors), "" if len(errors) == 1 else "s"))
        return 1
    print("check-deps: %d includes of daemon/ follow the rules; README.md's layout names "
          "what exists" % seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
