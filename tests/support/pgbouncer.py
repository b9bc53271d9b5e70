"""A PgBouncer of the test's own in front of a PostgreSQL: its configuration in a temporary
directory, a free loopback port, trust authentication, the pool mode and pool size the test
asks for. PgBouncer refuses to run as root: as root it runs as the `postgres` user, which
owns its directory. Stopped by its PID."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from .waiting import free_port


def unavailable_reason() -> str | None:
    if shutil.which("pgbouncer") is None:
        return "pgbouncer (Debian's package, to put a connection pooler before PostgreSQL)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser (to run PgBouncer as the postgres user)"
    return None


class PgBouncer:
    def __init__(self, target: str, *, mode: str, pool_size: int = 20) -> None:
        """`target`: the PostgreSQL URL to pool (its host, port, user and database);
        `mode`: PgBouncer's pool_mode (session, transaction)."""
        parts = urlsplit(target)
        self.database = parts.path.lstrip("/")
        self.user = parts.username or "postgres"
        self.dir = Path(tempfile.mkdtemp(prefix="conveyor-pgbouncer-"))
        self.port = free_port()
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            f"[databases]\n{self.database} = host={parts.hostname} port={parts.port or 5432}"
            f" dbname={self.database}\n"
            "[pgbouncer]\nlisten_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\nunix_socket_dir =\nauth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\npool_mode = {mode}\n"
            f"default_pool_size = {pool_size}\nlogfile = {self.dir / 'pgbouncer.log'}\n"
        )
        self._as: list[str] = []
        if os.geteuid() == 0:
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PgBouncer:
        self.proc = subprocess.Popen(
            [*self._as, "pgbouncer", str(self.dir / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.dir / "pgbouncer.log"
                    raise RuntimeError(
                        "pgbouncer did not start:\n" + (log.read_text() if log.exists() else "")
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
