#!/usr/bin/env python3
"""tpctl reading large events: every byte arrives, whatever the encoding.

tpctl decodes the long strings of a long event line itself (jsonline.c)
and leaves the rest to jansson. These tests hold it to the same answers as
a JSON decoder: results of 16 MB through the real daemon (text as a JSON
string with escapes, binary as base64), and crafted lines from a fake
daemon for what tpd does not send (\\u escapes with surrogate pairs, a long
key, duplicate keys, a string that looks like tpctl's placeholder) and for
what must still be refused as not JSON.
"""
import base64
import json
import os
import random
import subprocess

from tpdtest import TPCTL, TIMEOUT, Daemon, check, run_tests
from test_tpctl import FakeTpd

LINE = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+\n"
BIG = 16000000


def finished_task(d, argv, size):
    """Runs an exec task to its end; returns its id."""
    c = d.client()
    rid = c.send({"op": "submit", "task": {"kind": "exec", "argv": argv,
                                           "output_limit": max(size, 1)}})
    done = c.done(rid, timeout=4 * TIMEOUT)
    check(done["state"] == "succeeded" and not done["result"]["truncated"], "%r",
          {k: v for k, v in done.items() if k != "result"})
    return done["task"]


def tpctl_out(d, *args):
    p = subprocess.run([TPCTL, "-s", d.sock] + list(args), capture_output=True,
                       timeout=4 * TIMEOUT)
    check(p.returncode == 0, "%s: exit %d: %r", " ".join(args), p.returncode, p.stderr[-2000:])
    return p.stdout


def same(got, want, what):
    if got != want:
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                  min(len(got), len(want)))
        raise AssertionError("%s: %d bytes, expected %d; first difference at %d: %r vs %r"
                             % (what, len(got), len(want), at, got[at:at + 40],
                                want[at:at + 40]))


def test_16mb_text_result_byte_for_byte():
    want = (LINE * (BIG // len(LINE) + 1))[:BIG]
    with Daemon() as d:
        task = finished_task(d, ["sh", "-c", "yes %s | head -c %d" % (LINE[:-1].decode(), BIG)],
                             BIG)
        same(tpctl_out(d, "wait", "--output", str(task)), want, "wait --output")
        # --json prints the line as received: it must still be the daemon's
        evs = [json.loads(line) for line in tpctl_out(d, "--json", "wait",
                                                      str(task)).splitlines()]
        check([e["event"] for e in evs] == ["done"], "%r", [e["event"] for e in evs])
        same(evs[0]["result"]["stdout"].encode(), want, "--json wait")


def test_16mb_binary_result_byte_for_byte():
    rng = random.Random(7)
    want = bytes(rng.getrandbits(8) for _ in range(1 << 16)) * (BIG >> 16)
    with Daemon() as d:
        path = os.path.join(d.dir, "blob")
        with open(path, "wb") as f:
            f.write(want)
        task = finished_task(d, ["cat", path], len(want))
        same(tpctl_out(d, "wait", "--output", str(task)), want, "wait --output (base64)")


def test_escapes_and_utf8_byte_for_byte():
    """Everything the daemon escapes or passes through, in a long result."""
    pieces = ["plain ascii ", "tab\there ", "cr\rlf\n", 'quote " ', "back\\slash ",
              "ctl \x01\x02\x1f\x7f ", "é ñ ü ", "€ ✓ ", "\U0001F600 \U00010348 ",
              "\u2028\u2029 ", "/ slash "]
    rng = random.Random(11)
    text = "".join(rng.choice(pieces) for _ in range(60000))
    want = text.encode()
    with Daemon() as d:
        path = os.path.join(d.dir, "text")
        with open(path, "wb") as f:
            f.write(want)
        task = finished_task(d, ["cat", path], len(want))
        same(tpctl_out(d, "wait", "--output", str(task)), want, "wait --output")
        # and streamed by run, in output events
        same(tpctl_out(d, "run", "--output-limit", str(len(want)), "--", "cat", path), want,
             "run")


def fake_done(stdout_json, extra=b""):
    """A handler answering a submit with accepted and a done whose result.stdout
    is the given JSON text (bytes, a whole string token or more)."""
    def handler(req):
        if req.get("op") != "submit":
            return []
        head = json.dumps({"event": "accepted", "id": req["id"], "task": 5}) + "\n"
        done = (b'{"event":"done","id":' + str(req["id"]).encode() +
                b',"task":5,"state":"succeeded","queued_ms":1,"run_ms":1' + extra +
                b',"result":{"exit_code":0,"truncated":false,"stdout":' + stdout_json + b'}}\n')
        return [head.encode(), done]
    return handler


def run_fake(handler):
    with FakeTpd(handler) as f:
        return subprocess.run([TPCTL, "-s", f.sock, "run", "--", "x"], capture_output=True,
                              timeout=TIMEOUT)


def test_crafted_long_strings():
    rng = random.Random(3)
    chars = ["a", "Z", " ", "\n", '"', "\\", "\x00", "\x1f", "é", "€", "\U0001F600", "\ud7ff",
             "\ue000", "\uffff", "\U0010FFFF"]
    text = "".join(rng.choice(chars) for _ in range(200000))
    for ensure_ascii in (True, False):
        token = json.dumps(text, ensure_ascii=ensure_ascii).encode()
        p = run_fake(fake_done(token))
        check(p.returncode == 0, "ensure_ascii=%s: exit %d %r", ensure_ascii, p.returncode,
              p.stderr)
        same(p.stdout, text.encode(), "ensure_ascii=%s" % ensure_ascii)
    long_text = "x" * 100000
    # a long key stays a key; a long string in an array, and nested, is read too
    extra = (b',"' + b"k" * 70000 + b'":1,"more":["' + b"y" * 70000 + b'",{"z":"' +
             b"z" * 5000 + b'"}]')
    p = run_fake(fake_done(json.dumps(long_text).encode(), extra))
    check(p.returncode == 0, "long key: exit %d %r", p.returncode, p.stderr)
    same(p.stdout, long_text.encode(), "long key")
    # duplicate keys: the last one counts, as jansson has it
    p = run_fake(fake_done(json.dumps(long_text).encode() + b',"stdout":"short"'))
    check(p.returncode == 0, "duplicate: exit %d %r", p.returncode, p.stderr)
    same(p.stdout, b"short", "duplicate key")
    p = run_fake(fake_done(b'"short","stdout":' + json.dumps(long_text).encode()))
    same(p.stdout, long_text.encode(), "duplicate key, long last")
    # a daemon's string shaped like a placeholder is only a string
    fake = "\u0000tpctl-lift-0000000000000001-0"
    p = run_fake(fake_done(json.dumps(long_text).encode(),
                           b',"result2":' + json.dumps([fake]).encode()))
    same(p.stdout, long_text.encode(), "placeholder look-alike elsewhere")
    p = run_fake(fake_done(json.dumps(fake + long_text).encode()))
    same(p.stdout, (fake + long_text).encode(), "placeholder look-alike as the value")


def test_crafted_bad_long_strings_are_not_json():
    body = b"x" * 100000
    bad = {
        "lone high surrogate": b'"' + body + b'\\ud800"',
        "lone low surrogate": b'"' + body + b'\\udc00x"',
        "high then not low": b'"' + body + b'\\ud800\\u0041"',
        "bad escape": b'"' + body + b'\\x41"',
        "short \\u": b'"' + body + b'\\u12"',
        "raw control character": b'"' + body + b'\x01"',
        "raw newline": b'"' + body + b'\t\x0a"',
        "bad UTF-8": b'"' + body + b'\xff"',
        "overlong UTF-8": b'"' + body + b'\xc0\xaf"',
        "encoded surrogate": b'"' + body + b'\xed\xa0\x80"',
        "truncated UTF-8": b'"' + body + b'\xe2\x82"',
        "unterminated": b'"' + body,
    }
    for what, token in bad.items():
        p = run_fake(fake_done(token))
        check(p.returncode == 76, "%s: exit %d, expected 76: %r", what, p.returncode,
              p.stderr[-500:])
        check(b"not JSON" in p.stderr, "%s: %r", what, p.stderr[-500:])


if __name__ == "__main__":
    run_tests(globals())
