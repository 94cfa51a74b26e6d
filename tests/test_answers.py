#!/usr/bin/env python3
"""Every request is answered: messages that quote a client's strings, deep nesting's id."""
import json

from tpdtest import Daemon, check, run_tests

# Characters of 2, 3 and 4 bytes, and a mix. With 0 to 3 ASCII bytes in
# front, a cut at any fixed byte count lands inside a character for some of them.
CHARS = ("\u00e9", "\u20ac", "\U0001d11e", "a\u00e9\u20ac\U0001d11e")


def client_strings(counts=(20, 40, 300)):
    for ch in CHARS:
        for n in counts:
            for shift in range(4):
                yield "x" * shift + ch * n


def answers_to(c, request):
    """Sends request, then a ping; returns every event for request that came before the pong."""
    rid = c.send(request)
    sync = c.send({"op": "ping"})
    got = []
    while True:
        ev = c.recv()
        if ev.get("id") == sync:
            check(ev["event"] == "pong", "%r", ev)
            return rid, got
        check(ev.get("id") == rid, "an event for no request of ours: %r", ev)
        got.append(ev)


def check_one_error(c, request, event, code):
    rid, got = answers_to(c, request)
    check(len(got) == 1, "%d answers to %.200r: %.300r", len(got), request, got)
    ev = got[0]
    check(ev["event"] == event and ev["id"] == rid, "%.300r", ev)
    err = ev.get("error")
    check(isinstance(err, dict) and err.get("code") == code, "%.300r", ev)
    check(isinstance(err.get("message"), str) and err["message"], "no message: %.300r", ev)
    # the message is text: it encodes back to UTF-8
    err["message"].encode("utf-8")
    check(len(err["message"].encode()) <= 512, "message of %d bytes", len(err["message"]))
    return err["message"]


def test_messages_quoting_client_strings_are_always_sent():
    paths = [
        ("unknown op", lambda s: {"op": s}, "error", "unknown_op"),
        ("unknown kind", lambda s: {"op": "submit", "task": {"kind": s}}, "error", "bad_request"),
        ("unknown pool", lambda s: {"op": "submit", "task": {"kind": "echo"}, "pool": s},
         "rejected", "no_such_pool"),
        ("task id", lambda s: {"op": "wait", "task": s}, "error", "bad_request"),
        ("status id", lambda s: {"op": "status", "task": s}, "error", "bad_request"),
        ("cancel id", lambda s: {"op": "cancel", "task": s}, "error", "bad_request"),
        ("env name", lambda s: {"op": "submit", "task": {"kind": "exec", "argv": ["true"],
                                                         "env": {s + "=": "v"}}},
         "error", "bad_request"),
        ("env value", lambda s: {"op": "submit", "task": {"kind": "exec", "argv": ["true"],
                                                          "env": {s: 1}}},
         "error", "bad_request"),
        ("resize pool", lambda s: {"op": "resize", "size": 1, "pool": s}, "error", "no_such_pool"),
        ("shutdown mode", lambda s: {"op": "shutdown", "mode": s}, "error", "bad_request"),
        ("request field", lambda s: {"op": "ping", s: 1}, "error", "bad_request"),
        ("submit field", lambda s: {"op": "submit", "task": {"kind": "echo"}, s: 1},
         "error", "bad_request"),
        ("exec field", lambda s: {"op": "submit", "task": {"kind": "exec", "argv": ["true"], s: 1}},
         "error", "bad_request"),
        ("echo field", lambda s: {"op": "submit", "task": {"kind": "echo", s: 1}},
         "error", "bad_request"),
        ("sleep field", lambda s: {"op": "submit", "task": {"kind": "sleep", "ms": 1, s: 1}},
         "error", "bad_request"),
        ("fail field", lambda s: {"op": "submit", "task": {"kind": "fail", s: 1}},
         "error", "bad_request"),
        ("hello field", lambda s: {"op": "hello", s: 1}, "error", "bad_request"),
    ]
    n = 0
    with Daemon() as d:
        c = d.client()
        for what, make, event, code in paths:
            for s in client_strings():
                msg = check_one_error(c, make(s), event, code)
                n += 1
                if len(s.encode()) > 64:
                    # a long string is quoted in part, and says so
                    check("\u2026" in msg, "%s: no ellipsis in %r", what, msg)
        # the connection is still usable, and nothing was dropped
        check(c.request({"op": "ping"})["event"] == "pong", "ping")
        check("could not be encoded" not in d.read_log(), "the log says an event was dropped")
    print("checked: %d requests quoting multi-byte strings, one answer each" % n)


def test_short_client_strings_are_quoted_whole():
    with Daemon() as d:
        c = d.client()
        name = "p\u00e9\U0001d11e"
        msg = check_one_error(c, {"op": "submit", "task": {"kind": "echo"}, "pool": name},
                              "rejected", "no_such_pool")
        check('"%s"' % name in msg and "\u2026" not in msg, "%r", msg)
        msg = check_one_error(c, {"op": "wait", "task": "12a"}, "error", "bad_request")
        check('"12a"' in msg, "%r", msg)


def test_rejected_unknown_pool_carries_its_error():
    with Daemon() as d:
        c = d.client()
        for s in client_strings((40,)):
            _, ev = c.submit({"kind": "echo", "value": 1}, pool=s)
            check(ev["event"] == "rejected", "%r", ev)
            check(ev.get("error", {}).get("code") == "no_such_pool", "rejected without its error: %r", ev)
            check("no pool named" in ev["error"]["message"], "%r", ev)


def test_bad_json_quoting_the_line_is_sent():
    # jansson's error text quotes the bytes near the error: a cut escape
    # sequence must not make the bad_json event unencodable.
    lines = [b'{"a":"\\u' + "\u00e9".encode() + b'"}',
             b'{"a":"\\u12' + "\U0001d11e".encode() + b'"}']
    for s in client_strings((40,)):
        lines.append(b'{"op":' + s.encode())
        lines.append(b'{"a":tru' + s.encode())
    with Daemon() as d:
        c = d.client()
        for line in lines:
            c.send_raw(line + b"\n")
            sync = c.send({"op": "ping"})
            ev = c.recv()
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_json", "%r for %r",
                  ev, line)
            check(ev["error"]["message"], "no message: %r", ev)
            check(c.recv()["id"] == sync, "one answer for %r", line)


def deep(levels):
    return "[" * levels + "]" * levels


def test_deep_nesting_keeps_the_id():
    cases = [
        ('{"op":"ping","id":7,"x":%s}' % deep(70), 7),
        ('{"op":"ping","id":"deep-1","x":%s}' % deep(70), "deep-1"),
        ('{"op":"ping","x":%s,"id":8}' % deep(70), 8),
        ('{"x":%s,"op":"ping","id":"after"}' % deep(200), "after"),
        ('{"op":"ping","x":{"a":%s},"y":[1,"]",{"z":"["}],"id":9}' % deep(100), 9),
        ('{"op":"ping","x":"[[[[","id":"s\\"t]","y":%s}' % deep(65), 's"t]'),
        ('{"op":"ping","id":"\\u00e9","x":%s}' % deep(64 * 3), "\u00e9"),
        # no usable id: null, as before
        ('{"op":"ping","x":%s}' % deep(70), None),
        ('{"op":"ping","id":[1],"x":%s}' % deep(70), None),
        ('{"op":"ping","id":1.5,"x":%s}' % deep(70), None),
        ('[{"id":3},%s]' % deep(70), None),
        ('{"op":"ping","x":{"id":4,"y":%s}}' % deep(70), None),
        # not JSON apart from its depth: no id is trusted
        ('{"op":"ping","id":5,"x":%s' % deep(70), None),
        ('{"op":"ping","id":6,"x":%s]}' % deep(70), None),
        ('{"op":"ping","id":6,"id":7,"x":%s}' % deep(70), None),
    ]
    with Daemon() as d:
        c = d.client()
        for line, want in cases:
            c.send_raw(line.encode() + b"\n")
            sync = c.send({"op": "ping"})
            ev = c.recv()
            check(ev["event"] == "error" and ev["error"]["code"] == "bad_request", "%r for %s",
                  ev, line[:60])
            check("deeper than 64" in ev["error"]["message"], "%r", ev)
            check("id" in ev and ev["id"] == want, "id %r, expected %r, for %s", ev.get("id"),
                  want, line[:60])
            check(c.recv()["id"] == sync, "one answer for %s", line[:60])
        # 64 levels is still fine
        ev = c.request({"op": "submit", "task": {"kind": "echo", "value": json.loads(deep(62))}})
        check(ev["event"] == "accepted", "%r", ev)


run_tests(globals())
