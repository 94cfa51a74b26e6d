#!/usr/bin/env python3
"""Hostile request lines on the wire: over 20,000 generated lines, sent
pipelined over 8 connections to the real daemon, from a fixed seed (printed;
TPD_FUZZ_SEED=N replays another), and every one accounted for.

The lines are mutations of valid requests of every op: wrong types, unknown
fields, ops, kinds and pools, UTF-8 strings of many lengths (é, 𝄞, CJK,
mixed) in every string position including keys and ids, very long strings,
nesting just below and above 64 levels with the id before or after the deep
part, numbers at the edges, duplicate keys, bad JSON, invalid UTF-8 bytes,
CRLF, empty lines, NUL escapes, huge ids, and submits of cheap tasks (echo,
fail, sleep 0, exec true) with odd fields. Two more connections send lines
longer than max_request_bytes (tpd runs with a small one), between pings.

What must hold:
  - every request line gets exactly one answer: matched by its unique id
    where it carries a usable one (a string or an integer), else by its
    place among the connection's answers with "id" null or absent (a
    marker ping follows each such line, so its answer is the one between
    two pongs), with the error code the line calls for (request_too_large
    past the limit);
  - a line the generator knows to be wrong gets an error (or, for an
    unknown pool, rejected), never an accepted submit;
  - an accepted submit gets exactly one done later (none when detached);
    an echo's done carries its value unchanged, a fail's its message;
  - empty lines get nothing; every answer is one JSON object on one line;
  - a connection closes only after an error that explains it (and only
    the oversize connections may close at all);
  - at the end tpd answers ping and stats, and its log has no sanitizer
    report.
Synchronisation is by answers: a ping closes each connection's lines; once
stats says no task is outstanding, a second ping on each connection comes
after every done tpd sent it.
"""
import json
import os
import random
import selectors
import socket
import time

from tpdtest import SLOW, Daemon, check, eventually, run_tests

SEED = int(os.environ.get("TPD_FUZZ_SEED", "7420"))
CONNS = 8
LINES_PER_CONN = 2600
OVERSIZE_CONNS = 2
OVERSIZE_PER_CONN = 24
MAX_REQUEST = 16384          # tpd --max-request-bytes: long lines stay cheap
LONG = 12000                 # "very long" strings stay below the limit
DEPTH = 64                   # WIRE_MAX_DEPTH
EXEC_PER_CONN = 30           # exec tasks spawn processes: keep them few
MAX_TIMEOUT_MS = 30 * 24 * 3600 * 1000
MAX_TASK_MS = 7 * 24 * 3600 * 1000
DEADLINE = 120 * SLOW        # only for a hung daemon; a run takes seconds

CHARS = ["é", "𝄞", "中", "日本語", "ß", "€", "😀", "\u0301", "\u200b", "ﬀ", "Ω", "ж", "ا"]
OPS = ["hello", "ping", "submit", "wait", "status", "cancel", "stats", "resize", "shutdown"]
NOID = object()              # a line whose answer has no usable id
MARKER = "marker"            # the ping after each line without a usable id

# The fields of each op and task kind, and the type of value each takes.
TOP_FIELDS = {
    "hello": {"token": "str", "client": "str"},
    "ping": {},
    "stats": {},
    "submit": {"task": "obj", "pool": "str", "detach": "bool", "stream": "bool",
               "queue_timeout_ms": "int1"},
    "wait": {"task": "taskid"},
    "status": {"task": "taskid"},
    "cancel": {"task": "taskid"},
    "resize": {"size": "int1", "pool": "str"},
    "shutdown": {"mode": "str"},
}
KIND_FIELDS = {
    "echo": {"timeout_ms": "int1"},
    "fail": {"message": "str", "timeout_ms": "int1"},
    "sleep": {"ms": "int0", "timeout_ms": "int1"},
    "spin": {"ms": "int0", "timeout_ms": "int1"},
    "exec": {"argv": "argv", "env": "env", "cwd": "str", "stdin": "str", "stdin_base64": "str",
             "output_limit": "int1", "timeout_ms": "int1"},
}
# A value of the wrong type for each type (null included: no field takes null).
WRONG = {
    "str": [5, -1, 1.5, True, False, None, [], ["x"], {}, {"a": "b"}],
    "bool": [1, 0, "true", "false", None, [], {}, 1.0],
    "int0": ["5", 1.5, -1, True, None, [], {}, "0", 1e3],
    "int1": ["5", 1.5, 0, -1, True, None, [], {}, 1e3],
    "obj": ["echo", 1, True, None, [], [{"kind": "echo"}]],
    "taskid": [0, -1, 1.5, True, None, [], {}, "", "0", "-1", "1x", " 1", "abc"],
    "argv": [[], "true", [1], [None], ["true", 5], [["true"]], [""], {}, None, 7],
    "env": ["A=1", ["A=1"], 1, True, {"A": 1}, {"A": True}, {"A": []}, {"A=B": "x"},
            {"": "x"}, None],
}


def dumps(obj, rng):
    """Compact JSON, with the non-ASCII characters raw or as \\u escapes."""
    return json.dumps(obj, ensure_ascii=rng.random() < 0.25, separators=(",", ":"))


def key_of(v):
    return (type(v).__name__, v)


class Line:
    """One generated line and what its answer must be."""
    __slots__ = ("data", "id", "what", "first", "codes", "msg", "submit", "detach", "done_check")

    def __init__(self, data, rid, what, first=None, codes=None, msg=None, submit=False,
                 detach=False, done_check=None):
        self.data = data            # bytes, with the newline
        self.id = rid               # the usable id; NOID; or None for no answer at all
        self.what = what            # the kind of mutation, for the report
        self.first = first          # events the answer may be (None: any)
        self.codes = codes          # error codes it may carry (None: any)
        self.msg = msg              # what its error message says (None: anything)
        self.submit = submit
        self.detach = detach
        self.done_check = done_check  # done event -> None or what is wrong


class Gen:
    """The deterministic generator: one per connection, seeded from SEED."""

    def __init__(self, seed, serial, ids):
        self.rng = random.Random(seed)
        self.serial = serial        # connection number
        self.ids = ids              # shared counter (a one-element list)
        self.execs = 0

    # ---- building blocks

    def new_id(self, big=True):
        """A unique id: an integer, or a string with UTF-8 (long ones with big)."""
        n = self._bump()
        r = self.rng.random()
        if r < 0.4:
            return 10_000_000 + n
        if r < 0.5:
            return -(10_000_000 + n)
        if r < 0.85 or not big:
            return "i%d:%s" % (n, self.text(self.rng.choice([0, 1, 8, 40, 70])))
        return "i%d:%s" % (n, self.text(self.rng.choice([200, 600, 3000])))

    def _bump(self):
        self.ids[0] += 1
        return self.ids[0]

    def text(self, nbytes, raw=False):
        """A string of about nbytes UTF-8 bytes: one character repeated after a
        few ASCII bytes (so a cut at any byte count lands inside a character
        for some lengths), or a mix. raw: fit to paste between quotes as it
        is (no quote, backslash, slash, control character or space)."""
        rng = self.rng
        if nbytes == 0:
            return ""
        if rng.random() < 0.6:
            ch = rng.choice(CHARS)
            pre = "x" * rng.randrange(4)
            n = max(1, (nbytes - len(pre)) // len(ch.encode()))
            return pre + ch * n
        extra = ["a", "Z", "-"] if raw else ["a", "Z", "-", " ", "\"", "\\", "/", "\t", "\n"]
        out, size = [], 0
        while size < nbytes:
            ch = rng.choice(CHARS + extra)
            out.append(ch)
            size += len(ch.encode())
        return "".join(out)

    def length(self):
        return self.rng.choice([1, 2, 3, 4, 5, 16, 31, 32, 33, 34, 63, 64, 65, 66, 67, 100, 127,
                                128, 129, 255, 256, 257, 500, 509, 510, 511, 512, 513, 514,
                                1000, 4000])

    def foreign(self, avoid=()):
        """A name that is none of avoid: UTF-8 of many lengths, long, odd."""
        while True:
            r = self.rng.random()
            if r < 0.7:
                s = self.text(self.length())
            elif r < 0.8:
                s = self.text(self.rng.choice([2000, 6000, LONG]))
            else:
                s = self.rng.choice(["", " ", "x", "ping ", "PING", "submit\n", "é", "exe",
                                     "défault", "a\tb", "\\", "\"", "1"])
            if s not in avoid:
                return s

    def task_ref(self):
        """A task id for wait/status/cancel: tasks of this run or none."""
        n = self.rng.randrange(1, 9000)
        return str(n) if self.rng.random() < 0.2 else n

    def cheap_task(self, odd=False):
        """A task that costs next to nothing; with odd, odd but valid fields."""
        rng = self.rng
        kind = rng.choice(["echo", "echo", "fail", "sleep", "spin", "exec"])
        if kind == "exec" and self.execs >= EXEC_PER_CONN:
            kind = "echo"
        if kind == "echo":
            t = {"kind": "echo", "value": self.value(3)}
        elif kind == "fail":
            t = {"kind": "fail"}
            if rng.random() < 0.8:
                t["message"] = self.text(self.length())
        elif kind in ("sleep", "spin"):
            t = {"kind": kind, "ms": 0}
        else:
            self.execs += 1
            t = {"kind": "exec", "argv": ["true"]}
            if odd:
                if rng.random() < 0.4:
                    t["argv"] = ["true", self.text(self.length()), ""]
                if rng.random() < 0.3:
                    t["env"] = {"A": self.text(self.length()), "ÉTÉ_" + self.text(3): "",
                                "LANG": None}
                if rng.random() < 0.2:
                    t["cwd"] = rng.choice(["/", "/tmp", "/nonexistent/é"])
                if rng.random() < 0.3:
                    t["stdin"] = self.text(self.length())
                elif rng.random() < 0.1:
                    t["stdin_base64"] = "aGVsbG8="
                if rng.random() < 0.2:
                    t["output_limit"] = rng.choice([1, 2, 3, 4096])
                if rng.random() < 0.1:
                    t["argv"] = [self.text(self.length())]     # no such program
        if odd and rng.random() < 0.2:
            t["timeout_ms"] = rng.choice([1, 2, MAX_TIMEOUT_MS])
        return t

    def value(self, depth):
        """An echo value: every JSON type, numbers at their edges, UTF-8."""
        rng = self.rng
        r = rng.random()
        if depth == 0 or r < 0.35:
            return rng.choice([None, True, False, 0, -1, 2**63 - 1, -2**63, 1.5, -0.0, 1e308,
                               -2.2250738585072014e-308, 5e-324, 1.7976931348623157e308,
                               "", self.text(self.length()), "[[[[", "\\\"}}}", "\u0001"])
        if r < 0.7:
            return [self.value(depth - 1) for _ in range(rng.randrange(4))]
        return {self.text(rng.choice([1, 3, 40])) + str(i): self.value(depth - 1)
                for i in range(rng.randrange(4))}

    def request(self, op, rid):
        """A valid request of op (never shutdown: that one would stop tpd)."""
        rng = self.rng
        req = {"op": op, "id": rid}
        if op == "hello":
            if rng.random() < 0.5:
                req["client"] = self.text(self.length())
            if rng.random() < 0.3:
                req["token"] = self.text(self.length())
        elif op in ("wait", "status", "cancel"):
            req["task"] = self.task_ref()
        elif op == "resize":
            req["size"] = rng.randrange(1, 4)
            if rng.random() < 0.5:
                req["pool"] = "default"
        elif op == "submit":
            req["task"] = self.cheap_task(odd=rng.random() < 0.5)
        if rng.random() < 0.5:      # the id anywhere among the fields
            req = dict(sorted(req.items(), key=lambda kv: rng.random()))
        return req

    # ---- lines

    def line(self, text, rid, what, **kw):
        rng = self.rng
        end = "\n"
        r = rng.random()
        if r < 0.1:
            end = "\r\n"
        elif r < 0.13:
            end = rng.choice([" \n", "\t\n", " \t\r\n"])
        data = text.encode() if isinstance(text, str) else text
        assert b"\n" not in data, "a generated line holds a newline: %r" % data[:80]
        return Line(data + end.encode(), rid, what, **kw)

    def answer_for(self, req, what, odd=False):
        """The Line of a valid request."""
        op, rid = req["op"], req["id"]
        if op == "submit":
            task = req["task"]
            return self.line(dumps(req, self.rng), rid, what, first={"accepted", "rejected"},
                             codes={"queue_full"}, submit=True, detach=req.get("detach", False),
                             done_check=done_check_for(task))
        first = {"hello": {"hello"}, "ping": {"pong"}, "stats": {"stats"},
                 "wait": {"done", "error"}, "status": {"status", "error"},
                 "cancel": {"ok", "error"}, "resize": {"ok"}}[op]
        return self.line(dumps(req, self.rng), rid, what, first=first,
                         codes={"no_such_task"})

    def bad(self, req, what, codes=("bad_request",), first=("error",)):
        return self.line(dumps(req, self.rng), req["id"], what, first=set(first),
                         codes=set(codes))

    def gen_valid(self):
        op = self.rng.choice([o for o in OPS if o != "shutdown"] + ["submit"] * 3)
        return self.answer_for(self.request(op, self.new_id()), "valid " + op)

    def gen_odd_submit(self):
        rng = self.rng
        req = {"op": "submit", "id": self.new_id(), "task": self.cheap_task(odd=True)}
        if rng.random() < 0.3:
            req["detach"] = True
        elif rng.random() < 0.3:
            req["detach"] = False
        if rng.random() < 0.3:
            req["stream"] = rng.random() < 0.7
        if rng.random() < 0.2:
            req["queue_timeout_ms"] = rng.choice([1, 2, MAX_TIMEOUT_MS])
        if rng.random() < 0.3:
            req["pool"] = "default"
        return self.answer_for(req, "submit with odd fields (%s)" % req["task"]["kind"])

    def gen_wrong_type(self):
        rng = self.rng
        op = rng.choice(OPS)
        req = self.request(op, self.new_id()) if op != "shutdown" else \
            {"op": "shutdown", "id": self.new_id()}
        r = rng.random()
        if r < 0.08:
            req["op"] = rng.choice(WRONG["str"])
            return self.bad(req, "op of the wrong type")
        if op == "submit" and r < 0.6:
            task = req["task"]
            kind = task["kind"]
            if rng.random() < 0.15:
                task["kind"] = rng.choice(WRONG["str"])
                return self.bad(req, "task kind of the wrong type")
            field, typ = rng.choice(sorted(KIND_FIELDS[kind].items()))
            task[field] = rng.choice(WRONG[typ])
            if field == "env" and rng.random() < 0.5:   # a name the message quotes
                task[field] = {"=" + self.text(self.length()): "x"}
            if field == "stdin_base64":
                task.pop("stdin", None)
            return self.bad(req, "%s.%s of the wrong type" % (kind, field))
        fields = TOP_FIELDS[op]
        if not fields:
            req[rng.choice(["task", "size", "mode", "pool"])] = 1
            return self.bad(req, "%s with a field it does not take" % op)
        field, typ = rng.choice(sorted(fields.items()))
        req[field] = rng.choice(WRONG[typ])
        return self.bad(req, "%s.%s of the wrong type" % (op, field))

    def gen_unknown_field(self):
        rng = self.rng
        op = rng.choice(OPS)
        req = self.request(op, self.new_id()) if op != "shutdown" else \
            {"op": "shutdown", "id": self.new_id(), "mode": "drain"}
        if op == "submit" and rng.random() < 0.5:
            task = req["task"]
            key = self.foreign(avoid=set(KIND_FIELDS[task["kind"]]) | {"kind", "value"})
            task[key] = self.value(1)
            return self.bad(req, "unknown field in a %s task" % task["kind"])
        key = self.foreign(avoid=set(TOP_FIELDS[op]) | {"op", "id"})
        req[key] = self.value(1)
        return self.bad(req, "unknown field in %s" % op)

    def gen_unknown_name(self):
        rng = self.rng
        r = rng.random()
        rid = self.new_id()
        if r < 0.3:
            req = {"op": self.foreign(avoid=OPS), "id": rid}
            return self.bad(req, "unknown op", codes=("unknown_op",))
        if r < 0.55:
            req = {"op": "submit", "id": rid,
                   "task": {"kind": self.foreign(avoid=KIND_FIELDS)}}
            return self.bad(req, "unknown task kind")
        if r < 0.75:
            req = {"op": "submit", "id": rid, "task": {"kind": "echo", "value": 1},
                   "pool": self.foreign(avoid=("default",))}
            return self.bad(req, "submit to an unknown pool", codes=("no_such_pool",),
                            first=("rejected",))
        if r < 0.85:
            req = {"op": "resize", "id": rid, "size": 2, "pool": self.foreign(avoid=("default",))}
            return self.bad(req, "resize of an unknown pool", codes=("no_such_pool",))
        if r < 0.93:
            req = {"op": rng.choice(["wait", "status", "cancel"]), "id": rid,
                   "task": self.foreign(avoid=("1",))}
            return self.bad(req, "%s of a task id that is no number" % req["op"])
        req = {"op": "shutdown", "id": rid, "mode": self.foreign(avoid=("drain", "now"))}
        return self.bad(req, "shutdown with an unknown mode")

    def gen_utf8(self):
        """UTF-8 in the string positions that are valid: ids, client, echo, fail, argv."""
        rng = self.rng
        rid = "i%d:%s" % (self._bump(), self.text(self.length()))
        r = rng.random()
        if r < 0.3:
            req = {"op": "ping", "id": rid}
        elif r < 0.5:
            req = {"op": "hello", "id": rid, "client": self.text(self.length())}
        elif r < 0.75:
            req = {"op": "submit", "id": rid, "task": {"kind": "echo",
                                                      "value": self.text(self.length())}}
        else:
            req = {"op": "submit", "id": rid, "task": {"kind": "fail",
                                                      "message": self.text(self.length())}}
        return self.answer_for(req, "UTF-8 strings in %s" % req["op"])

    def gen_long(self):
        rng = self.rng
        n = rng.choice([2000, 6000, LONG])
        r = rng.random()
        rid = "i%d:%s" % (self._bump(), self.text(n)) if r < 0.4 else self.new_id(big=False)
        if r < 0.4:
            return self.answer_for({"op": "ping", "id": rid}, "a very long string id")
        if r < 0.7:
            return self.answer_for({"op": "submit", "id": rid,
                                    "task": {"kind": "echo", "value": self.text(n)}},
                                   "a very long echo value")
        if r < 0.85:
            return self.bad({"op": "ping", "id": rid, self.text(n): 1}, "a very long unknown key")
        return self.bad({"op": self.text(n), "id": rid}, "a very long unknown op",
                        codes=("unknown_op",))

    def gen_deep(self):
        """Nesting just below and above 64 levels, the id before or after."""
        rng = self.rng
        depth = rng.choice([DEPTH - 2, DEPTH - 1, DEPTH, DEPTH + 1, DEPTH + 2, DEPTH + 10, 200])
        rid = self.new_id()
        # the request object is level 1 and "task" level 2: the value holds the rest
        inner = depth - 2
        if rng.random() < 0.5:
            value_text = "[" * inner + "1" + "]" * inner
        else:
            value_text = '{"a":' * inner + "1" + "}" * inner
        ids = dumps(rid, rng)
        task = '{"kind":"echo","value":%s}' % value_text
        if rng.random() < 0.5:
            text = '{"id":%s,"op":"submit","task":%s}' % (ids, task)
            where = "before"
        else:
            text = '{"op":"submit","task":%s,"id":%s}' % (task, ids)
            where = "after"
        what = "nesting of %d levels, the id %s it" % (depth, where)
        if depth <= DEPTH:
            value = json.loads(value_text)
            return self.line(text, rid, what, first={"accepted", "rejected"},
                             codes={"queue_full"}, submit=True,
                             done_check=done_check_for({"kind": "echo", "value": value}))
        return self.line(text, rid, what, first={"error"}, codes={"bad_request"})

    def gen_deep_other(self):
        rng = self.rng
        r = rng.random()
        if r < 0.4:     # brackets inside strings are no nesting
            rid = self.new_id()
            s = rng.choice(["[" * 200, "{" * 100 + "\\\"" + "[" * 100, "\\\\\\\"[" * 3])
            text = '{"op":"submit","id":%s,"task":{"kind":"echo","value":"%s"}}' % (
                dumps(rid, rng), s)
            return self.line(text, rid, "brackets inside a string", first={"accepted", "rejected"},
                             codes={"queue_full"}, submit=True,
                             done_check=done_check_for({"kind": "echo", "value": json.loads(
                                 '"%s"' % s)}))
        if r < 0.7:     # deep in an unknown field
            rid = self.new_id()
            depth = rng.choice([DEPTH - 1, DEPTH + 1, 300])
            text = '{"op":"ping","id":%s,"x":%s}' % (dumps(rid, rng),
                                                       "[" * (depth - 1) + "]" * (depth - 1))
            return self.line(text, rid, "nesting of %d levels in an unknown field" % depth,
                             first={"error"}, codes={"bad_request"})
        depth = rng.choice([3, DEPTH + 1])  # the id itself nested: no usable id
        text = '{"op":"ping","id":%s}' % ("[" * (depth - 1) + "1" + "]" * (depth - 1))
        return self.line(text, NOID, "an id that is an array", first={"error"},
                         codes={"bad_request"}, msg='field "id"' if depth <= DEPTH else "deeper")

    def gen_numbers(self):
        rng = self.rng
        r = rng.random()
        if r < 0.15:    # ids past what an integer can be: no usable id
            text = '{"op":"ping","id":%s}' % rng.choice(
                ["9223372036854775808", "18446744073709551616", "-9223372036854775809",
                 "1" * 40, "1E400"])
            return self.line(text, NOID, "an id too big for an integer", first={"error"},
                             codes={"bad_json"}, msg="invalid JSON")
        if r < 0.3:     # numbers that are no integer: no usable id
            text = '{"op":"ping","id":%s}' % rng.choice(["1.0", "1e3", "-0.0", "0.5", "-1e-400"])
            return self.line(text, NOID, "an id that is no integer", first={"error"},
                             codes={"bad_request"}, msg='field "id"')
        rid = self.new_id()
        if r < 0.45:
            task = {"kind": "sleep", "ms": rng.choice([-1, MAX_TASK_MS + 1, 2**63 - 1, -2**63])}
            return self.bad({"op": "submit", "id": rid, "task": task}, "sleep ms out of range")
        if r < 0.6:
            field = rng.choice(["queue_timeout_ms", "timeout_ms"])
            v = rng.choice([0, -1, MAX_TIMEOUT_MS + 1, 2**63 - 1, -2**63])
            req = {"op": "submit", "id": rid, "task": {"kind": "echo", "value": 1}}
            if field == "timeout_ms":
                req["task"]["timeout_ms"] = v
            else:
                req[field] = v
            return self.bad(req, "%s out of range" % field)
        if r < 0.7:
            req = {"op": "resize", "id": rid, "size": rng.choice([0, -1, 65, 2**20 + 1, 2**63 - 1])}
            codes = ("bad_request",)
            return self.bad(req, "resize size out of range", codes=codes)
        if r < 0.8:
            req = {"op": "submit", "id": rid, "task": {"kind": "exec", "argv": ["true"],
                   "output_limit": rng.choice([0, -1, 16 * 1024 * 1024 + 1, 2**63 - 1])}}
            return self.bad(req, "exec output_limit out of range")
        req = {"op": "submit", "id": rid, "task": {"kind": "echo", "value": rng.choice(
            [2**63 - 1, -2**63, 1e308, 5e-324, -0.0, 123456789.123456789])}}
        return self.answer_for(req, "echo of a number at an edge")

    def gen_duplicate(self):
        rng = self.rng
        rid = dumps(self.new_id(), rng)
        key = rng.choice(["op", "id", "x", self.text(self.length())])
        k = json.dumps(key, ensure_ascii=False)
        texts = [
            '{"op":"ping","id":%s,%s:1,%s:2}' % (rid, k, k),
            '{"op":"ping","op":"ping","id":%s}' % rid,
            '{"id":%s,"op":"ping","id":%s}' % (rid, rid),
            '{"op":"submit","id":%s,"task":{"kind":"echo","value":{%s:1,%s:1}}}' % (rid, k, k),
            '{"op":"submit","id":%s,"task":{"kind":"echo","kind":"echo"}}' % rid,
        ]
        return self.line(rng.choice(texts), NOID, "a duplicate key", first={"error"},
                         codes={"bad_json"}, msg="invalid JSON")

    def gen_bad_json(self):
        rng = self.rng
        rid = dumps(self.new_id(), rng)
        u = self.text(self.length(), raw=True)
        texts = [
            '{"op":"ping","id":%s' % rid,
            '{"op":"ping","id":%s}}' % rid,
            '{"op":"ping","id":%s} x' % rid,
            '{"op":"ping","id":%s}{"op":"ping"}' % rid,
            "{'op':'ping','id':%s}" % rid,
            '{"op":ping,"id":%s}' % rid,
            '{"op":"ping","id":%s,}' % rid,
            '{"op":"ping",,"id":%s}' % rid,
            '{"op":"ping" "id":%s}' % rid,
            '{"op":"ping","id":%s /* c */}' % rid,
            '{"op":"pi\tng","id":%s}' % rid,
            '{"op":"ping","id":%s,"x":"%s' % (rid, u),
            '{"op":"ping","id":%s,"x":%s}' % (rid, u),
            '{"op":"ping","id":%s,"x":"\\%s%s"}' % (rid, rng.choice(CHARS), u),  # escaping a character
            '{"op":"ping","id":%s,"x":"%s\\q"}' % (rid, u),
            '{"op":"ping","id":%s,"x":"\\u12"}' % rid,
            '{"op":"ping","id":%s,"x":"\\ud800"}' % rid,
            '{"op":"ping","id":%s,"x":"\\udc00\\ud800"}' % rid,
            '{"op":"ping","id":%s,%s:1}' % (rid, u),
            '{"op":"ping","id":%s,"x":tru}' % rid,
            '{"op":"ping","id":%s,"x":01}' % rid,
            '{"op":"ping","id":%s,"x":-}' % rid,
            '{"op":"ping","id":%s,"x":NaN}' % rid,
            '{"op":"ping","id":%s,"x":Infinity}' % rid,
            "{", "}", "[", "]", ":", ",", '"', "null{}", "{}}", "x", "ping", "x" + u,
        ]
        return self.line(rng.choice(texts), NOID, "bad JSON", first={"error"},
                         codes={"bad_json"}, msg="invalid JSON")

    def gen_not_object(self):
        text = self.rng.choice(['[{"op":"ping","id":1}]', '"ping"', "42", "-1.5", "true",
                                "null", "[]", '["op","ping"]',
                                '"%s"' % self.text(self.length(), raw=True)])
        return self.line(text, NOID, "a JSON value that is no object", first={"error"},
                         codes={"bad_request"}, msg="must be a JSON object")

    def gen_bad_id(self):
        rng = self.rng
        v = rng.choice(["null", "true", "1.5", "[]", "{}", '{"id":1}', "[1]", "-0.5"])
        text = rng.choice(['{"op":"ping","id":%s}', '{"id":%s,"op":"submit","task":{}}',
                           '{"id":%s}']) % v
        return self.line(text, NOID, "an id of the wrong type", first={"error"},
                         codes={"bad_request"}, msg='field "id"')

    def gen_no_op(self):
        rid = self.new_id()
        text = self.rng.choice(['{"id":%s}', '{"id":%s,"task":1}', '{"id":%s,"Op":"ping"}'])
        return self.line(text % dumps(rid, self.rng), rid, "no op", first={"error"},
                         codes={"bad_request"})

    def gen_invalid_utf8(self):
        rng = self.rng
        rid = dumps(self.new_id(), rng)
        bad = rng.choice([b"\xff", b"\xfe", b"\x80", b"\xbf\xbf", b"\xc0\xaf", b"\xc1\xbf",
                          b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
                          b"\xf8\x88\x80\x80\x80", b"\xe4\xb8", b"\xf0\x9d\x84", b"\xc3",
                          b"\xc3\x28", "é".encode("latin-1")])
        s = self.text(rng.choice([0, 5, 63, 500]), raw=True).encode()
        pos = rng.choice(["value", "key", "id", "op", "outside"])
        rb = rid.encode()
        if pos == "value":
            data = b'{"op":"ping","id":' + rb + b',"x":"' + s + bad + s + b'"}'
        elif pos == "key":
            data = b'{"op":"ping","id":' + rb + b',"' + s + bad + b'":1}'
        elif pos == "id":
            data = b'{"op":"ping","id":"' + s + bad + b'"}'
        elif pos == "op":
            data = b'{"op":"pi' + bad + b'ng","id":' + rb + b'}'
        else:
            data = b'{"op":"ping","id":' + rb + b'}' + bad
        return self.line(data, NOID, "invalid UTF-8 in the %s" % pos, first={"error"},
                         codes={"bad_json"}, msg="invalid JSON")

    def gen_nul(self):
        rng = self.rng
        rid = dumps(self.new_id(), rng)
        texts = [
            '{"op":"ping","id":%s,"x":"a\\u0000b"}' % rid,
            '{"op":"ping","id":"a\\u0000b"}',
            '{"op":"pi\\u0000ng","id":%s}' % rid,
            '{"op":"ping","id":%s,"\\u0000":1}' % rid,
            '{"op":"submit","id":%s,"task":{"kind":"exec","argv":["true\\u0000x"]}}' % rid,
            '{"op":"submit","id":%s,"task":{"kind":"echo","value":"\\u0000"}}' % rid,
        ]
        if rng.random() < 0.3:
            data = rng.choice([b'{"op":"ping","id":' + rid.encode() + b'}\x00',
                               b'\x00{"op":"ping"}',
                               b'{"op":"ping","id":' + rid.encode() + b',"x":"a\x00b"}'])
            return self.line(data, NOID, "a NUL byte", first={"error"},
                             codes={"bad_json"}, msg="invalid JSON")
        return self.line(rng.choice(texts), NOID, "a NUL escape", first={"error"},
                         codes={"bad_json"}, msg="invalid JSON")

    def gen_empty(self):
        data = self.rng.choice([b"", b" ", b"\t", b"\r", b"  \t \r"])
        return Line(data + b"\n", None, "an empty line")

    def gen_no_id(self):
        op = self.rng.choice(["ping", "stats"])
        return self.line('{"op":"%s"}' % op, NOID, "%s without an id" % op,
                         first={"pong" if op == "ping" else "stats"})

    def generate(self, n):
        table = [
            (15, self.gen_valid), (10, self.gen_odd_submit), (12, self.gen_wrong_type),
            (10, self.gen_unknown_field), (10, self.gen_unknown_name), (8, self.gen_utf8),
            (3, self.gen_long), (4, self.gen_deep), (2, self.gen_deep_other),
            (5, self.gen_numbers), (3, self.gen_duplicate), (6, self.gen_bad_json),
            (2, self.gen_not_object), (2, self.gen_bad_id), (1, self.gen_no_op),
            (5, self.gen_invalid_utf8), (3, self.gen_nul), (3, self.gen_empty),
            (1, self.gen_no_id),
        ]
        weights = [w for w, _ in table]
        makers = [m for _, m in table]
        lines = []
        if self.serial == 0:    # the ids at an integer's edges, once
            for rid in (0, -1, 2**63 - 1, -2**63):
                lines.append(self.answer_for({"op": "ping", "id": rid}, "an id at an edge"))
        while len(lines) < n:
            line = self.rng.choices(makers, weights)[0]()
            if len(line.data) < MAX_REQUEST - 8:    # past it is the oversize lines' part
                lines.append(line)
        return self.with_markers(lines)

    def with_markers(self, lines):
        """lines, with a marker ping after each that has no usable id."""
        out = []
        for line in lines:
            out.append(line)
            if line.id is NOID:
                rid = "m%d" % self._bump()
                out.append(Line(b'{"op":"ping","id":"%s"}\n' % rid.encode(), rid, MARKER,
                                first={"pong"}))
        return out

    def generate_oversize(self, n):
        """Pings between lines longer than max_request_bytes."""
        rng = self.rng
        lines = []
        for i in range(n):
            lines.append(self.answer_for({"op": "ping", "id": self.new_id()}, "a ping between"))
            size = rng.choice([MAX_REQUEST + 1, MAX_REQUEST + 2, MAX_REQUEST + 3,
                               MAX_REQUEST * 2, MAX_REQUEST * 4 + 7])
            r = rng.random()
            if r < 0.4:     # valid JSON, only too long
                body = '{"op":"submit","id":%d,"task":{"kind":"echo","value":"%s"}}' % (
                    self._bump(), "é" * (size // 2))
            elif r < 0.7:
                body = self.text(size, raw=True)
            else:
                body = "[" * size
            data = body.encode()
            if len(data) <= MAX_REQUEST:
                data += b"x" * (MAX_REQUEST + 1 - len(data))
            lines.append(Line(data + b"\n", NOID, "a line over max_request_bytes",
                              first={"error"}, codes={"request_too_large"},
                              msg="max_request_bytes"))
        return self.with_markers(lines)


# Ends any task may come to here: a timeout_ms or queue_timeout_ms of 1, or a
# cancel of a random task id from another connection.
ENDS_OF_ANY = ("timed_out", "expired", "cancelled")


def done_check_for(task):
    """What an accepted task's done must say, for the kinds whose result is known."""
    kind = task.get("kind")
    if kind == "echo":
        want = task.get("value")

        def check_echo(ev):
            if ev.get("state") in ENDS_OF_ANY:
                return None
            if ev.get("state") != "succeeded":
                return "state %r" % ev.get("state")
            got = (ev.get("result") or {}).get("value", "<no value>")
            return None if same(got, want) else "value changed: %s" % ascii(got)[:200]
        return check_echo
    if kind == "fail":
        want = task.get("message", "task failed as asked")

        def check_fail(ev):
            err = ev.get("error") or {}
            if ev.get("state") in ENDS_OF_ANY:
                return None
            if ev.get("state") != "failed":
                return "state %r" % ev.get("state")
            if err.get("code") != "task_failed" or err.get("message") != want:
                return "error %s" % ascii(err)[:300]
            return None
        return check_fail
    return None


def same(a, b):
    """Equal JSON values (a number keeps its type: 1 and 1.0 differ)."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and (a == b or a != a and b != b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class Conn:
    """One connection's lines, what came back, and what is still owed."""

    def __init__(self, path, name, lines, may_close):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.sock.setblocking(False)
        self.name = name
        self.lines = lines
        self.may_close = may_close      # only after an error that explains it
        self.out = b"".join(l.data for l in lines)
        self.sent = 0
        self.buf = b""
        self.by_id = {}                 # key_of(id) -> Line
        self.events = {}                # key_of(id) -> [events]
        self.noid = [l for l in lines if l.id is NOID]
        self.noid_got = []              # (segment, event) of the events without an id
        self.seg = 0                    # the markers answered so far
        self.markers = {key_of(l.id) for l in lines if l.what == MARKER}
        self.unknown = []               # events with an id no line had
        self.garbage = []               # answer lines that are no JSON object
        self.closed = None              # None, or why it closed
        self.last = None                # the last event
        for l in lines:
            if l.id is not None and l.id is not NOID:
                k = key_of(l.id)
                assert k not in self.by_id, "generator gave an id twice"
                self.by_id[k] = l
                self.events[k] = []

    def send_more(self):
        try:
            n = self.sock.send(self.out[self.sent:self.sent + 262144])
        except BlockingIOError:
            return
        except OSError as e:
            self.closed = self.closed or "send failed: %s" % e
            return
        self.sent += n

    def receive(self):
        try:
            chunk = self.sock.recv(262144)
        except BlockingIOError:
            return
        except OSError as e:
            chunk = b""
            self.closed = self.closed or "recv failed: %s" % e
        if not chunk:
            self.closed = self.closed or "closed by tpd"
            return
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        for raw in lines:
            try:
                ev = json.loads(raw.decode("utf-8"))
            except ValueError:
                self.garbage.append(raw[:300])
                continue
            if not isinstance(ev, dict) or not isinstance(ev.get("event"), str):
                self.garbage.append(raw[:300])
                continue
            self.take(ev)

    def take(self, ev):
        self.last = ev
        rid = ev.get("id")
        if rid is None:
            self.noid_got.append((self.seg, ev))
            return
        k = key_of(rid)
        if k in self.markers and not self.events[k]:
            self.seg += 1
        if k in self.events:
            self.events[k].append(ev)
        else:
            self.unknown.append(ev)

    def segment_lines(self, seg):
        """The lines between markers seg - 1 and seg."""
        n, start, end = 0, 0, len(self.lines)
        for i, l in enumerate(self.lines):
            if l.what == MARKER:
                n += 1
                if n == seg:
                    start = i + 1
                elif n == seg + 1:
                    end = i
                    break
        return self.lines[start:end]

    def unanswered_in(self, seg):
        """True when a line of the segment with an id got no answer."""
        return any(l.id is not NOID and l.id is not None and not self.events[key_of(l.id)]
                   for l in self.segment_lines(seg))

    def segment(self, seg):
        """What the lines of a segment were, for a report."""
        return "; ".join("%s (id %s%s)" % (l.what, ascii(l.id)[:40] if l.id is not NOID else
                                             "none", ", unanswered" if l.id is not NOID and
                                             l.id is not None and
                                             not self.events[key_of(l.id)] else "")
                         for l in self.segment_lines(seg))[:600]

    def send_line(self, obj):
        """Queues one more request (a sync ping) and returns its id key."""
        self.out += (json.dumps(obj) + "\n").encode()
        k = key_of(obj["id"])
        self.by_id[k] = Line(b"", obj["id"], "sync ping", first={"pong"})
        self.events[k] = []
        return k


def pump(conns, done, deadline):
    """Sends and receives on every connection until done() or the deadline."""
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
    try:
        while not done():
            if time.monotonic() > deadline:
                return False
            for c in conns:
                if c.closed:
                    try:
                        sel.unregister(c.sock)
                    except (KeyError, ValueError):
                        pass
                    continue
                mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.sent < len(c.out) else 0)
                sel.modify(c.sock, mask, c)
            if all(c.closed for c in conns):
                return done()
            for key, mask in sel.select(timeout=0.5):
                c = key.data
                if mask & selectors.EVENT_WRITE:
                    c.send_more()
                if mask & selectors.EVENT_READ:
                    c.receive()
        return True
    finally:
        sel.close()


# What an answer without an id says, in short: its event, code and the gist of its message.
GISTS = ("invalid JSON", "deeper", "JSON object", 'field "id"', "max_request_bytes")


def gist(message):
    for g in GISTS:
        if g in message:
            return g
    return message[:40]


def event_sig(ev):
    if ev["event"] != "error":
        return ev["event"]
    err = ev.get("error") or {}
    return "error %s: %s" % (err.get("code"), gist(str(err.get("message"))))


def line_sig(line):
    """The event_sig of the answer line must get (a line without an id)."""
    if line.first != {"error"}:
        (name,) = line.first
        return name
    (code,) = line.codes
    return "error %s: %s" % (code, gist(line.msg))


def answered(c, k):
    return c.closed or len(c.events[k]) > 0


def audit(c, failures):
    """Every line of c against what came back; adds (what, detail) to failures."""
    def fail(what, detail, line=None):
        shown = ascii(line.data[:160]) + ("... (%d bytes)" % len(line.data)
                                          if len(line.data) > 160 else "") if line else ""
        failures.append((what, "%s: %s%s" % (c.name, detail, (" | line " + shown) if shown else "")))

    if c.closed and not c.may_close:
        fail("connection closed", "%s; last event %s" % (c.closed, ascii(c.last)[:300]))
    if c.closed and c.may_close:
        last = c.last or {}
        if last.get("event") != "error" or not (last.get("error") or {}).get("message"):
            fail("connection closed without an explaining error",
                 "%s; last event %s" % (c.closed, ascii(last)[:300]))
    for raw in c.garbage:
        fail("answer that is no JSON object", ascii(raw))
    for ev in c.unknown:
        fail("event for an id no line had", ascii(ev)[:300])
    cut = c.closed is not None      # past a close, what is missing is not owed
    for k, line in c.by_id.items():
        evs = c.events[k]
        if not evs:
            if not cut:
                fail("no answer: " + line.what, "id %s" % ascii(line.id)[:80], line)
            continue
        first = evs[0]
        name = first["event"]
        if line.first is not None and name not in line.first:
            fail("wrong answer: " + line.what, "%s, expected %s" % (ascii(first)[:300],
                                                                   sorted(line.first)), line)
            continue
        if name in ("error", "rejected"):
            err = first.get("error") or {}
            if not isinstance(err.get("code"), str) or not isinstance(err.get("message"), str) \
                    or not err.get("message"):
                fail("%s without an error code and message: %s" % (name, line.what),
                     ascii(first)[:300], line)
            elif line.codes is not None and err["code"] not in line.codes and \
                    not (line.submit and name == "rejected"):
                fail("wrong error code: " + line.what, "%s, expected %s" % (
                    ascii(first)[:300], sorted(line.codes)), line)
        rest = evs[1:]
        if line.submit and name == "accepted":
            dones = [e for e in rest if e["event"] == "done"]
            others = [e for e in rest if e["event"] not in ("done", "started", "output")]
            if line.detach:
                if rest:
                    fail("events for a detached task", ascii(rest[:2])[:300], line)
                continue
            if len(dones) != 1 and not cut:
                fail("%d dones: %s" % (len(dones), line.what), ascii(dones[:2])[:300], line)
            if others:
                fail("more answers than one: " + line.what, ascii(others[:2])[:300], line)
            if len(dones) == 1 and line.done_check is not None:
                wrong = line.done_check(dones[0])
                if wrong:
                    fail("done that is wrong: " + line.what, wrong, line)
        elif rest:
            fail("more answers than one: " + line.what, "%s then %s" % (
                ascii(first)[:200], ascii(rest[:2])[:300]), line)
    # Answers without an id: the k-th line without one is followed by the
    # k-th marker ping, so its answer is the one that came between the pongs
    # of markers k-1 and k (answers to a connection's lines keep their order).
    by_seg = {}
    for seg, ev in c.noid_got:
        by_seg.setdefault(seg, []).append(ev)
    for k, line in enumerate(c.noid):
        evs = by_seg.pop(k, [])
        mine = [ev for ev in evs if event_sig(ev) == line_sig(line)]
        if mine:
            evs.remove(mine[0])
        elif evs and not c.unanswered_in(k):
            fail("wrong answer (no id): " + line.what, "%s, expected %s" % (
                ascii(evs[0])[:300], line_sig(line)), line)
            evs.pop(0)
        elif not cut:
            # (an answer of another line of the segment, which lost its id, stays extra)
            fail("no answer (no id): " + line.what, "", line)
        if evs:
            by_seg[k] = evs
    for seg, evs in sorted(by_seg.items()):
        for ev in evs:
            fail("an answer without an id where none was due",
                 "%s, among the answers to %s" % (ascii(ev)[:200], c.segment(seg)))


def test_hostile_lines_each_get_one_answer():
    print("seed %d (TPD_FUZZ_SEED=%d replays it)" % (SEED, SEED), flush=True)
    ids = [0]
    gens = [Gen(SEED * 1000 + i, i, ids) for i in range(CONNS + OVERSIZE_CONNS)]
    main = [g.generate(LINES_PER_CONN) for g in gens[:CONNS]]
    over = [g.generate_oversize(OVERSIZE_PER_CONN) for g in gens[CONNS:]]
    nlines = sum(1 for l in main + over for x in l if x.what != MARKER)
    nmarkers = sum(1 for l in main + over for x in l if x.what == MARKER)
    nbytes = sum(len(x.data) for l in main + over for x in l)
    with Daemon("--max-request-bytes", str(MAX_REQUEST), workers=2, queue=100000) as d:
        conns = [Conn(d.sock, "connection %d" % i, l, False) for i, l in enumerate(main)]
        conns += [Conn(d.sock, "oversize connection %d" % i, l, True)
                  for i, l in enumerate(over)]
        start = time.monotonic()
        deadline = start + DEADLINE
        # 1. every line, then a ping: once it is answered, so is every line before it
        sync1 = [c.send_line({"op": "ping", "id": "sync-1:%d" % i}) for i, c in enumerate(conns)]
        ok = pump(conns, lambda: all(answered(c, k) for c, k in zip(conns, sync1)), deadline)
        check(ok, "no answer to the closing pings within %ss" % DEADLINE)
        # 2. every accepted task ends; its done was sent before it stopped counting
        admin = d.client()
        eventually(lambda: admin.request({"op": "stats"}, "stats")["tasks_outstanding"] == 0,
                   "every accepted task has ended", timeout=DEADLINE)
        # 3. a second ping: every done owed to a connection came before its pong
        sync2 = [c.send_line({"op": "ping", "id": "sync-2:%d" % i}) if not c.closed else None
                 for i, c in enumerate(conns)]
        ok = pump(conns, lambda: all(k is None or answered(c, k)
                                     for c, k in zip(conns, sync2)), deadline)
        check(ok, "no answer to the second pings within %ss" % DEADLINE)
        took = time.monotonic() - start
        failures = []
        for c in conns:
            audit(c, failures)
        ntasks = sum(1 for c in conns for k, l in c.by_id.items()
                     if l.submit and c.events[k] and c.events[k][0]["event"] == "accepted")
        nevents = sum(len(e) for c in conns for e in c.events.values()) + \
            sum(len(c.noid_got) for c in conns)
        print("%d lines and %d marker pings (%d bytes) over %d connections: %d answers and "
              "dones, %d tasks accepted, in %.1f s" % (nlines, nmarkers, nbytes, len(conns),
                                                      nevents, ntasks, took))
        # tpd still serves
        check(admin.request({"op": "ping"}, "pong") is not None, "no pong at the end")
        stats = admin.request({"op": "stats"}, "stats")
        check(isinstance(stats.get("pools"), list), "stats without pools: %r", stats)
        for c in conns:
            c.sock.close()
        if failures:
            dropped = d.read_log().count("could not be encoded")
            kinds = {}
            for what, detail in failures:
                kinds.setdefault(what, []).append(detail)
            report = ["%d failures of %d kinds (seed %d); tpd logged %d events it could not "
                      "encode:" % (len(failures), len(kinds), SEED, dropped)]
            for what, details in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
                report.append("  %d x %s" % (len(details), what))
                for detail in details[:3]:
                    report.append("      " + detail[:600])
            raise AssertionError("\n".join(report))


if __name__ == "__main__":
    run_tests(globals())
