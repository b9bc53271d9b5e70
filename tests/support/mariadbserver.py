"""A throwaway MariaDB server for tests that break one, or replicate one: `mariadb-install-db`
into a temporary directory, `mariadbd` on a free loopback port with its binary log on (so a
replica can follow it), root without a password over TCP. The machine's own MariaDB is never
touched."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql

from .netns import Link
from .waiting import free_port, unix_socket_accepts

SERVER_IDS = iter(range(100, 10_000))


def unavailable_reason() -> str | None:
    missing = [t for t in ("mariadb-install-db", "mariadbd") if _bin(t) is None]
    return f"{' and '.join(missing)} (to run a throwaway MariaDB)" if missing else None


def _bin(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


class ThrowawayMariaDB:
    def __init__(
        self, under: Path | None = None, *, binlog: bool = True, link: Link | None = None
    ) -> None:
        """`under`: the directory to make its own in (a `disks.small_disk`, say). `binlog`:
        keep a binary log (replication needs one). `link`: run in that network namespace,
        listening on its address (`netns.cut_off_link`)."""
        self.binlog = binlog
        self.link = link
        self.host = link.there if link is not None else "127.0.0.1"
        self.dir = Path(tempfile.mkdtemp(prefix="conveyor-mariadb-", dir=under))
        self.data = self.dir / "data"
        self.port = free_port()
        self.server_id = next(SERVER_IDS)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mysql://root@{self.host}:{self.port}/test"

    def start(self) -> ThrowawayMariaDB:
        """Start the server, made first if need be. Its port was chosen free before the
        server binds it: if another process took it meanwhile, a server that has never run
        is started once more on a fresh port."""
        if not self.data.exists():
            self._install()
        never_ran = not (self.dir / "error.log").exists()
        try:
            return self._start()
        except RuntimeError as e:
            if not (never_ran and "Address already in use" in str(e)):
                raise
            self.port = free_port()
            return self._start()

    def _start(self) -> ThrowawayMariaDB:
        mariadbd = _bin("mariadbd")
        assert mariadbd is not None
        there = self.link.run_there() if self.link is not None else []
        self.proc = subprocess.Popen(
            [*there, mariadbd, "--no-defaults", f"--datadir={self.data}", "--user=root",
             f"--port={self.port}", f"--bind-address={self.host}",
             f"--socket={self.dir / 'sock'}", f"--pid-file={self.dir / 'pid'}",
             f"--server-id={self.server_id}",
             *(["--log-bin=binlog", "--binlog-format=ROW"] if self.binlog else []),
             "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=2",
             "--max-connections=300", "--log-error=" + str(self.dir / "error.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                if unix_socket_accepts(self.dir / "sock"):  # before PyMySQL connects
                    self.sql("SELECT 1", db=None)
                    break
            except pymysql.err.OperationalError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.dir / "error.log"
                raise RuntimeError(
                    f"mariadbd did not start:\n{log.read_text() if log.exists() else ''}"
                )
            time.sleep(0.1)
        self.sql("CREATE DATABASE IF NOT EXISTS test", db=None)
        return self

    def _install(self) -> None:
        """`mariadb-install-db` into `data`; a failed install is tried once more into an
        empty directory, and a second failure raised with what the tool printed."""
        install = _bin("mariadb-install-db")
        assert install is not None
        said = ""
        for _ in range(2):
            done = subprocess.run(
                [install, "--no-defaults", f"--datadir={self.data}", "--user=root",
                 "--auth-root-authentication-method=normal", "--skip-test-db"],
                capture_output=True, timeout=120,
            )  # fmt: skip
            if done.returncode == 0:
                return
            said = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
            shutil.rmtree(self.data, ignore_errors=True)
        raise RuntimeError(f"mariadb-install-db failed twice ({done.returncode}):\n{said}")

    def connect(self, db: str | None = "test") -> Any:
        # root over TCP: --skip-name-resolve leaves root@localhost to the socket, so the
        # socket it is (what a TCP client sees is the same server)
        return pymysql.connect(
            unix_socket=str(self.dir / "sock"), user="root", database=db, autocommit=True,
            connect_timeout=2,
        )  # fmt: skip

    def sql(self, statement: str, db: str | None = "test") -> Any:
        with self.connect(db) as conn, conn.cursor() as cur:
            cur.execute(statement)
            return cur.fetchall()

    def allow_tcp_root(self) -> None:
        peer = self.link.here if self.link is not None else "127.0.0.1"
        self.sql(f"CREATE USER IF NOT EXISTS 'root'@'{peer}'", db=None)
        self.sql(f"GRANT ALL ON *.* TO 'root'@'{peer}' WITH GRANT OPTION", db=None)

    def follow(self, primary: ThrowawayMariaDB) -> None:
        """Replicate `primary` from its first transaction on (GTID), read-only meanwhile."""
        self.sql("SET GLOBAL read_only = 1", db=None)
        self.sql(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port},"
            " MASTER_USER='root', MASTER_USE_GTID=slave_pos",
            db=None,
        )
        self.sql("START SLAVE", db=None)

    def caught_up(self, primary: ThrowawayMariaDB) -> bool:
        [(want,)] = primary.sql("SELECT @@gtid_binlog_pos", db=None)
        [(have,)] = self.sql("SELECT @@gtid_slave_pos", db=None)
        return bool(want == have)

    def promote(self) -> None:
        """Stop following and take writes."""
        self.sql("STOP SLAVE", db=None)
        self.sql("RESET SLAVE ALL", db=None)
        self.sql("SET GLOBAL read_only = 0", db=None)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
