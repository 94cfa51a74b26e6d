#!/usr/bin/env python3
"""The state_dir against a hostile local user and against damage (tpd(8),
"SECURITY" and "DURABILITY"): a directory tpd does not own, or that others may
write, is refused; files planted in it (symlinks, a FIFO) are never followed
or waited on; a journal that held records and lost them is damage, never an
empty journal; what the records give back is checked like a client's input."""
import glob
import os
import pwd
import shutil
import struct
import subprocess
import tempfile
import time

from tpdtest import TIMEOUT, TPD, Daemon, Skip, check, run_tests


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), as the journal's records carry it."""
    table = crc32c.table
    if table is None:
        table = crc32c.table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = None


class State:
    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="tpdfiles-")
        self.dir = os.path.join(self.root, "state")

    def daemon(self, *args, **kw):
        return Daemon("--state-dir", self.dir, *args, **kw)

    def start_fails(self):
        """Runs tpd on the state_dir; returns (exit status, stderr) of a start that must fail."""
        p = subprocess.run([TPD, "-c", "none", "-f", "-s", os.path.join(self.root, "s.sock"),
                            "--state-dir", self.dir], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TIMEOUT)
        return p.returncode, p.stderr.decode(errors="replace")

    def segments(self):
        return sorted(glob.glob(os.path.join(self.dir, "journal.*[0-9]")))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)


def run_one(c, task):
    """Submits task and waits for its done; returns the request id.

    A small journal_max_bytes can refuse a submit (storage) for the moment its compaction
    lags behind the tasks' results (slow builds: TSan); such a submit is tried again, as a
    client told "storage" would, once the compaction has made room."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        rid, ev = c.submit(task)
        if ev["event"] == "accepted":
            c.done(rid)
            return rid
        check(ev["event"] == "rejected" and ev["error"]["code"] == "storage" and
              time.monotonic() < deadline, "submit answered %r", ev)
        time.sleep(0.05)


def with_tasks(st, n=5, value="AAAA"):
    """A journal holding n finished echo tasks, left by a kill -9."""
    with st.daemon() as d:
        c = d.client()
        for i in range(n):
            rid, _ = c.submit({"kind": "echo", "value": value})
            c.done(rid)
        d.proc.kill()
        d.proc.wait()


def records(data):
    """(offset, type, id, payload length) of each record of a segment."""
    off, out = 40, []
    while off + 20 <= len(data) and data[off:off + 20] != bytes(20):
        length = struct.unpack_from("<I", data, off + 4)[0]
        out.append((off, data[off + 8], struct.unpack_from("<Q", data, off + 12)[0], length))
        off += 20 + length
    return out


def reseal(data, off):
    """The record at off gets its CRC-32C again."""
    length = struct.unpack_from("<I", data, off + 4)[0]
    struct.pack_into("<I", data, off, crc32c(bytes(data[off + 4:off + 20 + length])))


# ---------------------------------------------------------------- the directory


def nobody():
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        raise Skip("no user nobody")


def test_state_dir_owned_by_another_user_is_refused():
    if os.geteuid() != 0:
        raise Skip("making a directory of another user needs root")
    with State() as st:
        os.mkdir(st.dir, 0o700)
        os.chown(st.dir, nobody().pw_uid, nobody().pw_gid)
        rc, err = st.start_fails()
        check(rc != 0 and st.dir in err and "owned by uid %d" % nobody().pw_uid in err,
              "exit %d: %s", rc, err)


def test_state_dir_writable_by_others_is_refused():
    with State() as st:
        os.mkdir(st.dir)
        os.chmod(st.dir, 0o777)
        rc, err = st.start_fails()
        check(rc != 0 and st.dir in err and "writable by others" in err, "exit %d: %s", rc, err)
        os.chmod(st.dir, 0o770)
        rc, err = st.start_fails()
        check(rc != 0 and "writable by its group" in err, "exit %d: %s", rc, err)


def test_planted_lock_symlink_is_not_followed():
    with State() as st:
        victim = os.path.join(st.root, "victim")
        with open(victim, "w") as f:
            f.write("the victim's own file\n")
        os.chmod(victim, 0o600)
        os.mkdir(st.dir, 0o700)
        os.symlink(victim, os.path.join(st.dir, "lock"))
        rc, err = st.start_fails()
        check(rc != 0 and "lock" in err and "symbolic link" in err, "exit %d: %s", rc, err)
        check(open(victim).read() == "the victim's own file\n", "the victim's file changed")


def test_planted_tmp_symlinks_are_not_followed():
    with State() as st:
        os.mkdir(st.dir, 0o700)
        victim = os.path.join(st.root, "victim")
        with open(victim, "w") as f:
            f.write("keep\n")
        # 64 KiB segments: new ones (and compactions) while it runs, under names planted
        # once it started (the leftovers of a crash are removed at the start)
        with st.daemon("--journal-max-bytes", "256k", "--result-retain", "10") as d:
            for seq in range(2, 40):
                os.symlink(victim, os.path.join(st.dir, "journal.%012d.tmp" % seq))
            c = d.client()
            for i in range(200):
                run_one(c, {"kind": "echo", "value": "s3cret-%d " % i + "x" * 2000})
            check(len(st.segments()) >= 1 and
                  c.request({"op": "stats"}, "stats")["journal"]["state"] == "ok",
                  "the journal failed: %s", d.read_log()[-2000:])
        check(open(victim).read() == "keep\n", "tpd wrote the victim's file: %r",
              open(victim).read()[:200])


def test_fifo_in_place_of_a_segment_is_refused():
    with State() as st:
        with_tasks(st, 1)
        seg = st.segments()[-1]
        os.unlink(seg)
        os.mkfifo(seg, 0o600)
        rc, err = st.start_fails()       # never hangs: subprocess.run has a timeout
        check(rc != 0 and seg in err and "not a regular file" in err, "exit %d: %s", rc, err)


# ---------------------------------------------------------------- damage


def test_segment_cut_to_its_header_is_damage():
    with State() as st:
        with_tasks(st)
        seg = st.segments()[-1]
        with open(seg, "r+b") as f:
            f.truncate(40)
        rc, err = st.start_fails()
        check(rc != 0 and seg in err and "damaged" in err, "exit %d: %s", rc, err)


def test_segment_garbage_after_its_header_is_damage():
    with State() as st:
        with_tasks(st)
        seg = st.segments()[-1]
        size = os.path.getsize(seg)
        with open(seg, "r+b") as f:
            f.seek(40)
            f.write(os.urandom(size - 40))
        rc, err = st.start_fails()
        check(rc != 0 and seg in err and "damaged" in err, "exit %d: %s", rc, err)


def test_segment_shorter_than_made_is_damage():
    with State() as st:
        with_tasks(st)
        seg = st.segments()[-1]
        data = open(seg, "rb").read()
        end = records(data)[-1][0]      # cut before the last record: a clean end, records gone
        with open(seg, "r+b") as f:
            f.truncate(end)
        rc, err = st.start_fails()
        check(rc != 0 and seg in err and "shorter than" in err, "exit %d: %s", rc, err)


def tear_last_record(seg):
    """Zeroes the last record of seg from inside its header on: a write the crash cut."""
    data = open(seg, "rb").read()
    off, _, _, length = records(data)[-1]
    with open(seg, "r+b") as f:
        f.seek(off + 10)
        f.write(bytes(20 + length - 10))


def test_torn_segment_before_one_with_records_is_damage():
    # a torn tail is only the crash's last write: a later segment with records, whether
    # it ends clean or torn itself, makes the earlier tear damage
    for tear_last_too in (False, True):
        with State() as st:
            with st.daemon("--journal-max-bytes", "256k") as d:
                c = d.client()
                for i in range(40):
                    run_one(c, {"kind": "echo", "value": "x" * 2000})
                d.proc.kill()
                d.proc.wait()
            segs = st.segments()
            check(len(segs) >= 2, "one segment: %r", segs)
            tear_last_record(segs[-2])
            if tear_last_too:
                tear_last_record(segs[-1])
            rc, err = st.start_fails()
            check(rc != 0 and segs[-2] in err and "a later segment holds records" in err,
                  "last torn too: %s: exit %d: %s", tear_last_too, rc, err)


# ---------------------------------------------------------------- what records give back


def crafted(st, change):
    """A journal whose last finished record change(data, off, length) rewrote, resealed."""
    with_tasks(st, 2)
    seg = st.segments()[-1]
    data = bytearray(open(seg, "rb").read())
    fin = [r for r in records(data) if r[1] == 4]
    check(fin, "no finished record in %s: %r", seg, records(data))
    off, _, _, length = fin[-1]
    change(data, off, length)
    reseal(data, off)
    open(seg, "wb").write(data)
    return seg


def test_task_id_2_64_minus_1_is_refused():
    with State() as st:
        seg = crafted(st, lambda d, off, n: struct.pack_into("<Q", d, off + 12, 2 ** 64 - 1))
        rc, err = st.start_fails()
        check(rc != 0 and seg in err and "task id" in err, "exit %d: %s", rc, err)


def test_done_text_with_a_newline_is_refused():
    def newline(d, off, n):
        at = bytes(d[off + 20:off + 20 + n]).find(b"AAAA")
        check(at >= 0, "no AAAA in the finished record")
        d[off + 20 + at + 1] = 0x0A
    with State() as st:
        crafted(st, newline)
        rc, err = st.start_fails()
        check(rc != 0 and "control character" in err and "done" in err, "exit %d: %s", rc, err)


if __name__ == "__main__":
    run_tests(globals())
