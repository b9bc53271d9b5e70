"""A throwaway PostgreSQL server for tests that restart or break one: `initdb` into a
temporary directory, `pg_ctl` on a free loopback port, trust authentication. The machine's
own PostgreSQL is never touched. PostgreSQL refuses to run as root: as root the server runs
as the `postgres` user, which owns its directory."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .netns import Link
from .waiting import free_port


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def unavailable_reason() -> str | None:
    if _bin("initdb") is None or _bin("pg_ctl") is None:
        return "PostgreSQL's initdb and pg_ctl (to run a throwaway server)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser (to run a throwaway PostgreSQL as the postgres user)"
    return None


class ThrowawayPostgres:
    def __init__(self, settings: str = "", *, link: Link | None = None) -> None:
        """`settings`: more of the server's options (`-c name=value ...`). `link`: run in
        that network namespace, listening on its address (`netns.cut_off_link`)."""
        self.settings = settings
        self.link = link
        self.host = link.there if link is not None else "127.0.0.1"
        self.dir = Path(tempfile.mkdtemp(prefix="conveyor-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self._as: list[str] = link.run_there() if link is not None else []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self._as += ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run([*self._as, *args], capture_output=True, timeout=timeout)
        if done.returncode != 0:
            said = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(
                f"{' '.join(args)} exited {done.returncode}:\n{said}\n--- server log:\n{self.log()}"
            )

    def log(self) -> str:
        """The end of the server's log."""
        log = self.dir / "log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"

    @classmethod
    def replica_of(cls, primary: ThrowawayPostgres) -> ThrowawayPostgres:
        """A streaming replica of `primary` (pg_basebackup -R), to start, and to promote
        (without the primary's settings: promoted, it waits for no standby of its own)."""
        replica = cls()
        basebackup = _bin("pg_basebackup")
        assert basebackup is not None
        replica._run(basebackup, "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                     "-D", str(replica.data), "-R", "-X", "stream",
                     "-d", "application_name=replica")  # fmt: skip
        return replica

    def promote(self) -> None:
        """This replica becomes a primary that takes writes."""
        self._pg_ctl("promote")

    def kill(self) -> None:
        """Stop at once, as a crash would (no checkpoint); the data stays until `stop`."""
        self._pg_ctl("stop", "-m", "immediate")

    def start(self) -> ThrowawayPostgres:
        """Start the server, made first if need be. Its port was chosen free before the
        server binds it: if another process took it meanwhile, a server that has never run
        is started once more on a fresh port."""
        if not self.data.exists():
            self._initdb()
        never_ran = not (self.dir / "log").exists()
        try:
            self._pg_ctl("start")
        except RuntimeError:
            if not (never_ran and "Address already in use" in self.log()):
                raise
            self.port = free_port()
            self._pg_ctl("start")
        return self

    def _initdb(self) -> None:
        """`initdb` into `data`, tried once more into an empty directory if it fails."""
        initdb = _bin("initdb")
        assert initdb is not None
        try:
            self._run(initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        except RuntimeError:
            shutil.rmtree(self.data, ignore_errors=True)
            self._run(initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        if self.link is not None:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {self.link.here}/32 trust\n")

    def _pg_ctl(self, action: str, *extra: str) -> None:
        pg_ctl = _bin("pg_ctl")
        assert pg_ctl is not None
        options = (
            f"-p {self.port} -c listen_addresses={self.host} -k {self.dir}"
            f" -c fsync=off -c max_connections=200 {self.settings}"
        )
        self._run(pg_ctl, "-D", str(self.data), "-l", str(self.dir / "log"), "-w",
                  "-o", options, action, *extra)  # fmt: skip
        if action != "stop":
            self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def restart(self) -> None:
        self._pg_ctl("restart", "-m", "fast")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
