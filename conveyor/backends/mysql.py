"""MySQL 8 and MariaDB 10.6+ store: ``mysql://user[:password]@host[:port]/database``.

Options (URL query): ``prefix`` (table name prefix, default ``conveyor_``), ``pool_size``
(connections kept per process, default 10), ``reconnect_timeout`` (seconds an operation
waits out a lost database before it fails, default 60), ``connect_timeout`` (default 5).

PyMySQL (pure Python: nothing to compile) with a small pool of its own. Sessions run at READ
COMMITTED, so a claim (``SELECT ... FOR UPDATE SKIP LOCKED``, then ``UPDATE``) locks only the
rows it takes. MySQL has no LISTEN: long polls poll with a bounded back-off (10 ms doubling
to 0.2 s), besides the in-process wake-up on a send.
"""

from __future__ import annotations

import functools
import queue as queue_mod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql

from ..clock import SYSTEM_CLOCK, Clock
from ..exceptions import InvalidInput
from ..urls import redact
from .sql import INSERT_VALUES, Bare, Row, SQLBackend
from .sql_conn import Cursor, in_list
from .sql_schema import INSERT_COLUMNS, MYSQL, check_prefix

# lost or refused connections, server shutting down, connection killed
_DISCONNECTS = {0, 1053, 1927, 2003, 2006, 2013, 2055}
# deadlock, lock wait timeout
_CONFLICTS = {1205, 1213}


class MySQLBackend(SQLBackend):
    scheme = "mysql"
    dialect = MYSQL
    driver_errors = (pymysql.Error,)

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 3306,
        user: str = "root",
        password: str = "",
        database: str = "conveyor",
        prefix: str = "conveyor_",
        pool_size: int = 10,
        reconnect_timeout: float = 60.0,
        connect_timeout: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        self.prefix = check_prefix(prefix)
        if pool_size < 1:
            raise InvalidInput(f"pool_size must be at least 1, got {pool_size}")
        self._connect_args: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": user,
            "password": password,
            "database": database,
            "autocommit": True,
            "charset": "utf8mb4",
            "binary_prefix": True,
            "connect_timeout": connect_timeout,
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        }
        self.display = redact(
            f"mysql://{user}{':' + password if password else ''}@{host}:{port}/{database}"
        )
        self.reconnect_timeout = reconnect_timeout
        self._idle: queue_mod.LifoQueue[pymysql.connections.Connection[Any]] = queue_mod.LifoQueue(
            maxsize=pool_size
        )
        self._init_connections()

    @classmethod
    def from_url(cls, rest: str, params: dict[str, str], *, clock: Clock) -> MySQLBackend:
        parts = urlsplit(f"mysql://{rest}")
        database = parts.path.lstrip("/")
        if not database or not parts.hostname:
            raise InvalidInput(
                "mysql URL needs a host and a database: mysql://user:password@host:3306/database"
            )
        unknown = set(params) - {"prefix", "pool_size", "reconnect_timeout", "connect_timeout"}
        if unknown:
            raise InvalidInput(
                f"unknown mysql store option(s) {', '.join(sorted(unknown))}: use prefix,"
                " pool_size, reconnect_timeout or connect_timeout"
            )
        try:
            return cls(
                host=parts.hostname,
                port=parts.port or 3306,
                user=unquote(parts.username or "root"),
                password=unquote(parts.password or ""),
                database=database,
                prefix=params.get("prefix", "conveyor_"),
                pool_size=int(params.get("pool_size", 10)),
                reconnect_timeout=float(params.get("reconnect_timeout", 60)),
                connect_timeout=float(params.get("connect_timeout", 5)),
                clock=clock,
            )
        except ValueError as exc:
            raise InvalidInput(f"bad mysql store option: {exc}") from None

    @property
    def key(self) -> str:
        return f"{self.display}#{self.prefix}"

    # -- connections ----------------------------------------------------------------------

    def _get(self) -> pymysql.connections.Connection[Any]:
        try:
            return self._idle.get_nowait()
        except queue_mod.Empty:
            return pymysql.connect(**self._connect_args)

    def _put(self, conn: pymysql.connections.Connection[Any]) -> None:
        try:
            self._idle.put_nowait(conn)
        except queue_mod.Full:
            conn.close()

    @contextmanager
    def _transaction(self, tx: bool) -> Iterator[Cursor]:
        conn = self._get()
        healthy = False
        try:
            with conn.cursor() as cur:
                if tx:
                    conn.begin()
                try:
                    yield cur
                    if tx:
                        conn.commit()
                except BaseException:
                    if tx:
                        conn.rollback()
                    raise
            healthy = True
        except pymysql.err.OperationalError as exc:
            healthy = exc.args[0] in _CONFLICTS
            raise
        except pymysql.Error:
            healthy = False
            raise
        except BaseException:
            healthy = True  # the transaction was rolled back; the connection is fine
            raise
        finally:
            if healthy:
                self._put(conn)
            else:
                _discard(conn)

    def _retryable(self, exc: BaseException) -> str | None:
        if isinstance(exc, pymysql.err.InterfaceError):
            return "disconnect"
        if isinstance(exc, pymysql.err.OperationalError):
            code = exc.args[0] if exc.args else 0
            if code in _CONFLICTS:
                return "conflict"
            if code in _DISCONNECTS or code >= 2000:
                return "disconnect"
        return None

    def _on_disconnect(self) -> None:
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue_mod.Empty:
                return
            _discard(conn)

    def _connect_once(self) -> None:
        conn = self._get()
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            # MariaDB deletes and says what it deleted in one statement; MySQL 8 cannot
            self.single_statement_delete = "mariadb" in str(cur.fetchone()[0]).lower()
        self._put(conn)

    def _delete_by_token(self, cur: Cursor, qid: int, token: str, seqs: Sequence[int]) -> list[int]:
        if not self.single_statement_delete:
            return super()._delete_by_token(cur, qid, token, seqs)
        cur.execute(
            f"DELETE FROM {self.prefix}messages WHERE queue_id = %s AND token = %s"
            f" AND seq IN ({in_list(seqs)}) RETURNING seq",
            (qid, token, *seqs),
        )
        return [int(r[0]) for r in cur.fetchall()]

    def _lock_schema(self, cur: Cursor) -> None:
        cur.execute("SELECT GET_LOCK(%s, 60)", (f"conveyor-schema-{self.prefix}",))

    def _unlock_schema(self, cur: Cursor) -> None:
        cur.execute("SELECT RELEASE_LOCK(%s)", (f"conveyor-schema-{self.prefix}",))

    def _close_pool(self) -> None:
        self._on_disconnect()

    # -- statements -----------------------------------------------------------------------

    def _insert_many(
        self, cur: Cursor, queue: str, rows: Sequence[Row], generated: bool
    ) -> set[str]:
        if generated:
            cur.execute(
                f"INSERT INTO {self.prefix}messages ({INSERT_COLUMNS}) VALUES"
                f" {', '.join([INSERT_VALUES] * len(rows))}",
                [v for r in rows for v in r],
            )
            return {r[2] for r in rows}
        return {r[2] for r in rows if self._insert_one(cur, r) is not None}

    def _insert_bare(self, cur: Cursor, queue: str, bare: Bare, again: bool) -> None:
        if again:  # one by one, skipping ids a first attempt stored
            super()._insert_bare(cur, queue, bare, again)
            return
        # named parameters: the driver escapes each value once (it quotes parameters into
        # the statement in Python), so what the rows share is escaped once, not per row
        params: dict[str, Any] = {
            "q": bare.qid, "p": bare.nprio, "t": bare.now, "v": bare.visible_at,
        }  # fmt: skip
        for k, (message_id, body) in enumerate(zip(bare.ids, bare.bodies, strict=True)):
            params[f"i{k}"] = message_id
            params[f"b{k}"] = body
        cur.execute(_bare_insert(self.prefix, len(bare.ids)), params)

    def _insert_one(self, cur: Cursor, row: Row) -> int | None:
        cur.execute(
            f"INSERT IGNORE INTO {self.prefix}messages ({INSERT_COLUMNS}) VALUES {INSERT_VALUES}",
            row,
        )
        return int(cur.lastrowid) if cur.rowcount > 0 else None

    def _insert_select(self, cur: Cursor, sql: str, params: Sequence[Any]) -> int:
        cur.execute(sql, params)
        return int(cur.lastrowid)


@functools.lru_cache(maxsize=64)
def _bare_insert(prefix: str, n: int) -> str:
    rows = ", ".join(f"(%(q)s, %(p)s, %(i{k})s, %(b{k})s, %(t)s, %(v)s)" for k in range(n))
    return (
        f"INSERT INTO {prefix}messages (queue_id, nprio, id, body, sent_at, visible_at)"
        f" VALUES {rows}"
    )


def _discard(conn: pymysql.connections.Connection[Any]) -> None:
    with suppress(pymysql.Error):
        conn.close()
