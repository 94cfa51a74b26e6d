#!/usr/bin/env python3
"""callgraph.py: the file-level call graph of tpd and its cycles.

    python3 tests/callgraph.py BUILDDIR [--edges]

Reads the objects tpd is linked from in a built tree (BUILDDIR/daemon/**/tpd-*.o,
and the members of libpool.a and libwire.a) with nm: a file calls another
when it uses a function the other defines. Prints every cycle of files
(each strongly connected component of more than one file), largest first,
and with --edges the calls that make each. Calls through a pointer (a
callback set by the top) are not edges: that is how a lower layer calls
back up without depending on what is above it.
"""
import glob
import os
import subprocess
import sys


def source_of(obj, member=None):
    """The source file an object was built from, relative to the top."""
    if member is not None:
        name = member[:-2] + ".c"
        top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for sub in ("daemon", "common"):
            hits = glob.glob(os.path.join(top, sub, "**", name), recursive=True)
            if hits:
                return os.path.relpath(hits[0], top)
        return name
    d, base = os.path.split(obj)
    return os.path.join(d, base[len("tpd-"):-2] + ".c")


def symbols(path):
    """[(source, kind, name)] for an object or an archive's members."""
    out = subprocess.run(["nm", "-A", path], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        where, _, rest = line.rpartition(": ")
        if not where:
            where, rest = line.split(":", 1)[0], line.split(":", 1)[1]
        parts = rest.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        if path.endswith(".a"):
            member = where.split(":")[-1]
            rows.append((source_of(path, member), kind, name))
        else:
            rows.append((where, kind, name))
    return rows


def graph(build):
    defined, used = {}, []
    objs = glob.glob(os.path.join(build, "daemon", "**", "tpd-*.o"), recursive=True)
    if not objs:
        sys.exit("callgraph: no tpd objects under %s/daemon: build tpd first" % build)
    files = []
    for o in sorted(objs):
        src = source_of(os.path.relpath(o, build))
        files.append((src, symbols(o)))
    for lib in ("libpool.a", "libwire.a"):
        p = os.path.join(build, lib)
        if os.path.exists(p):
            by = {}
            for src, kind, name in symbols(p):
                by.setdefault(src, []).append((src, kind, name))
            files.extend(by.items())
    for src, rows in files:
        for _, kind, name in rows:
            if kind in ("T", "W"):
                defined[name] = src
            elif kind == "U":
                used.append((src, name))
    edges = {}
    for src, name in used:
        dst = defined.get(name)
        if dst is not None and dst != src:
            edges.setdefault(src, {}).setdefault(dst, set()).add(name)
    return sorted({src for src, _ in files}), edges


def cycles(nodes, edges):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    nodes, edges = graph(args[0])
    found = cycles(nodes, edges)
    print("%d files, %d calling edges, %d cycle%s" % (len(nodes),
          sum(len(d) for d in edges.values()), len(found), "" if len(found) == 1 else "s"))
    for comp in found:
        print("cycle of %d: %s" % (len(comp), " ".join(os.path.basename(f) for f in comp)))
        if "--edges" in sys.argv:
            members = set(comp)
            for a in comp:
                for b, names in sorted(edges.get(a, {}).items()):
                    if b in members:
                        print("    %s -> %s: %s" % (a, b, " ".join(sorted(names))))


if __name__ == "__main__":
    main()
