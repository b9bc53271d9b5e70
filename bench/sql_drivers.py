"""Hand-written SKIP LOCKED queues on PostgreSQL (psycopg 3) and MySQL/MariaDB (PyMySQL):
the baselines the SQL stores are measured against. Each does what a careful team would write
by hand for the same work: a multi-row INSERT per send; a claim of ready rows in id order that
skips rows other consumers hold; a DELETE by id and receipt. One connection per process."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from .drivers import Driver

TABLE = "bench_baseline"


class PostgresBaseline(Driver):
    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self._conn: Any = None

    @property
    def conn(self) -> Any:
        if self._conn is None:
            import psycopg

            self._conn = psycopg.connect(self.url, autocommit=True)
        return self._conn

    def setup(self) -> None:
        c = self.conn
        c.execute(f"DROP TABLE IF EXISTS {TABLE}")
        c.execute(
            f"CREATE TABLE {TABLE} (id BIGSERIAL PRIMARY KEY, body BYTEA NOT NULL,"
            " visible_at DOUBLE PRECISION NOT NULL, receipt TEXT)"
        )
        self.close()

    def drop(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        self.close()

    def send(self, bodies: Sequence[bytes]) -> None:
        now = time.time()
        values = ", ".join(["(%s, %s)"] * len(bodies))
        self.conn.execute(
            f"INSERT INTO {TABLE} (body, visible_at) VALUES {values}",
            [v for b in bodies for v in (b, now)],
        )

    def receive(self, n: int) -> list[tuple[object, bytes]]:
        now = time.time()
        receipt = secrets.token_hex(8)
        rows = self.conn.execute(
            f"UPDATE {TABLE} t SET visible_at = %s, receipt = %s FROM (SELECT id FROM {TABLE}"
            " WHERE visible_at <= %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) c"
            " WHERE t.id = c.id RETURNING t.id, t.body",
            (now + 300, receipt, now, n),
        ).fetchall()
        return [((r[0], receipt), bytes(r[1])) for r in rows]

    def delete(self, handles: Sequence[object]) -> None:
        ids = [h[0] for h in handles]  # type: ignore[index]
        receipt = handles[0][1]  # type: ignore[index]
        self.conn.execute(
            f"DELETE FROM {TABLE} WHERE id = ANY(%s) AND receipt = %s", (ids, receipt)
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class MySQLBaseline(Driver):
    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self._conn: Any = None

    @property
    def conn(self) -> Any:
        if self._conn is None:
            from tests.support.sqlstores import mysql_connect

            self._conn = mysql_connect(
                self.url,
                binary_prefix=True,
                init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            )
        return self._conn

    def setup(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
            cur.execute(
                f"CREATE TABLE {TABLE} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,"
                " body LONGBLOB NOT NULL, visible_at DOUBLE NOT NULL, receipt CHAR(16))"
                " ENGINE=InnoDB"
            )
        self.close()

    def drop(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        self.close()

    def send(self, bodies: Sequence[bytes]) -> None:
        now = time.time()
        values = ", ".join(["(%s, %s)"] * len(bodies))
        with self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {TABLE} (body, visible_at) VALUES {values}",
                [v for b in bodies for v in (b, now)],
            )

    def receive(self, n: int) -> list[tuple[object, bytes]]:
        import pymysql

        while True:
            try:
                return self._receive(n)
            except pymysql.err.OperationalError as exc:  # deadlock: InnoDB says try again
                self.conn.rollback()
                if exc.args[0] != 1213:
                    raise

    def _receive(self, n: int) -> list[tuple[object, bytes]]:
        now = time.time()
        receipt = secrets.token_hex(8)
        c = self.conn
        c.begin()
        with c.cursor() as cur:
            cur.execute(
                f"SELECT id, body FROM {TABLE} WHERE visible_at <= %s ORDER BY id LIMIT %s"
                " FOR UPDATE SKIP LOCKED",
                (now, n),
            )
            rows = cur.fetchall()
            if rows:
                marks = ", ".join(["%s"] * len(rows))
                cur.execute(
                    f"UPDATE {TABLE} SET visible_at = %s, receipt = %s WHERE id IN ({marks})",
                    (now + 300, receipt, *[r[0] for r in rows]),
                )
        c.commit()
        return [((r[0], receipt), bytes(r[1])) for r in rows]

    def delete(self, handles: Sequence[object]) -> None:
        ids = [h[0] for h in handles]  # type: ignore[index]
        receipt = handles[0][1]  # type: ignore[index]
        marks = ", ".join(["%s"] * len(ids))
        with self.conn.cursor() as cur:
            cur.execute(
                f"DELETE FROM {TABLE} WHERE id IN ({marks}) AND receipt = %s", (*ids, receipt)
            )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
