"""The failing disk of the journal's fault tests: a state_dir that outlives
its daemons, and the control file of tests/faultfs.so (an LD_PRELOAD shim
that fails or delays the Nth write, fdatasync, rename... of files under
FAULTFS_DIR, by the rules written to FAULTFS_CTL; see tests/faultfs.c)."""
import os
import shutil
import tempfile

from tpdtest import Daemon, Skip

SHIM = os.environ.get("FAULTFS", os.path.abspath("tests/faultfs.so"))
EIO, ENOSPC = 5, 28


class Faulty:
    """A state_dir outliving its daemons, the shim's control file and hits
    file for it, and a marker file a task may write to show that it ran."""

    def __init__(self, prefix="tpdfault-"):
        if not os.path.exists(SHIM):
            raise Skip("%s is not built" % SHIM)
        self.root = os.path.realpath(tempfile.mkdtemp(prefix=prefix))
        self.dir = os.path.join(self.root, "state")
        self.ctl = os.path.join(self.root, "ctl")
        self.hits_path = os.path.join(self.root, "hits")
        self.marker = os.path.join(self.root, "ran")
        self.gen = 0

    def env(self):
        env = dict(os.environ)
        env["LD_PRELOAD"] = SHIM
        env["FAULTFS_DIR"] = self.dir
        env["FAULTFS_CTL"] = self.ctl
        env["FAULTFS_HITS"] = self.hits_path
        # an ASan build's runtime would insist on being first
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
        return env

    def daemon(self, *args, shim=True, **kw):
        """A Daemon on this state_dir, under the shim unless shim is false."""
        return Daemon("--state-dir", self.dir, *args, env=self.env() if shim else None, **kw)

    def set(self, *rules):
        """Replaces the rules ("OP SKIP ERR COUNT"); counters start again."""
        self.gen += 1
        tmp = "%s.%d" % (self.ctl, self.gen)
        with open(tmp, "w") as f:
            f.write("".join(r + "\n" for r in rules))
        os.rename(tmp, self.ctl)

    def hits(self):
        """What the shim wrote of the faults it injected, or ""."""
        try:
            return open(self.hits_path).read()
        except OSError:
            return ""

    def ran(self):
        """Whether a task wrote the marker file."""
        return os.path.exists(self.marker)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)
