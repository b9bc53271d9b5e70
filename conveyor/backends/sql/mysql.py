"""MySQL and MariaDB store: ``mysql://user[:password]@host[:port]/database``
(``mariadb://`` too). Several hosts (``host1:3306,host2:3306``), a primary and its replicas:
new connections go to the first that takes writes (``@@read_only`` off), so the store
follows a promotion.

Options: ``prefix`` (table name prefix, default ``conveyor_``), ``pool_size`` (connections kept
per process, default 10), ``reconnect_timeout`` (default 60 s), ``connect_timeout`` (default
5 s). Needs MySQL 8.0.1+ or MariaDB 10.6+ (``SKIP LOCKED``).

PyMySQL (pure Python: nothing to compile) with a small pool of its own. Sessions run at READ
COMMITTED, so a claim (``SELECT ... FOR UPDATE SKIP LOCKED``, then ``UPDATE``) locks only the
rows it takes; a queue whose head is deep in messages in flight is claimed from the index of
its messages by `held_at` instead (`inflight.py`). MySQL has no LISTEN: a send wakes the long
polls of its own process and, through a wake directory (`wakes.py`), those of the other
processes of its host; long polls in processes on other hosts see it on the store's ticker.
Implements every contract.
"""

from __future__ import annotations

import functools
import queue as queue_mod
import socket
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import pymysql

from ...clock import Clock
from ...exceptions import InvalidInput
from ...forks import renew_after_fork
from ...notify import HUB
from ...urls import check_options, redact
from ..rules import ClaimTerms
from .connections import (
    LOCK_TIMEOUT,
    CursorExec,
    ServerConnections,
    Stopped,
    lock_timeout,
    sent_unasked,
)
from .dialect import Bare, ServerDialect
from .inflight import HeadWatch, claim_values
from .rows import Fields, Row
from .schema import ServerTypes
from .server_statements import (
    MARIADB_DELETE_HELD,
    MYSQL_BARE_ROWS,
    MYSQL_CLAIM_PICK,
    MYSQL_CLAIM_SEQS,
    MYSQL_DEEP_CLAIM_PICK,
    MYSQL_DEEP_WALK,
    MYSQL_DEEP_WALK_LOCKING,
    MYSQL_DELETE_SEQS,
    MYSQL_HELD,
    MYSQL_LOCK_SCHEMA,
    MYSQL_LOCK_WAITS,
    MYSQL_NEW_MOVED_ROW,
    MYSQL_NEW_SENT_ROW,
    MYSQL_NEW_SENT_ROWS,
    MYSQL_READ_ONLY,
    MYSQL_SENT_ROWS,
    MYSQL_UNLOCK_SCHEMA,
    MYSQL_VERSION,
    SERVER_SEND_COLUMNS,
)
from .statement import MYSQL, Compiler, Statement, Style, by_rows, spread
from .statements import FIND_MANY
from .store import SQLStore
from .wakes import Wakes

TYPES = ServerTypes(
    "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
    "LONGBLOB",
    "DOUBLE",
    # binary collation: queue names and ids compare exactly, as on every other store
    " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
)

# lost or refused connections, server shutting down, connection killed
_DISCONNECTS = {0, 1053, 1927, 2003, 2006, 2013, 2055}
# deadlock: the transaction was rolled back, run it again
_CONFLICTS = {1213}
# a lock waited for lock_timeout (innodb_lock_wait_timeout, lock_wait_timeout)
_LOCK_WAITED = 1205
# a statement stopped: KILL QUERY, MariaDB's max_statement_time, MySQL's max_execution_time
_CANCELLED = {1317, 1969, 3024}
# out of room: a table that cannot grow (InnoDB on a full disk), a full disk
_FULL = {1114, 1021}
_LOCK_WAITS = Compiler("mysql", MYSQL, lambda qid: {}, lambda qid: {})(MYSQL_LOCK_WAITS)
# for a server whose host stops answering without closing the connection (a host gone, a
# network partition): a statement sent and never acknowledged fails after 20 s, a connection
# waiting for an answer after 25 s without a sign of life from the host (TCP's own timers
# take a quarter of an hour and more); Linux's options, where the platform has them
TCP_SETTINGS = [
    (getattr(socket, name), value)
    for name, value in (
        ("TCP_USER_TIMEOUT", 20_000),
        ("TCP_KEEPIDLE", 10),
        ("TCP_KEEPINTVL", 5),
        ("TCP_KEEPCNT", 3),
    )
    if hasattr(socket, name)
]
# the server's connection limits: max_connections, the user's max_user_connections
_CROWDED = {1040, 1203}
# the server runs read-only (--read-only), or is in read-only mode
_READ_ONLY = {1290, 1836}

if TYPE_CHECKING:
    Conn = pymysql.connections.Connection[Any]


def from_url(rest: str, params: dict[str, str], *, clock: Clock) -> SQLStore[CursorExec]:
    netloc, slash, path = rest.partition("/")
    userinfo, at, hostlist = netloc.rpartition("@")
    # one host, or several (a primary and its replicas: the one that takes writes is used)
    hosts: list[tuple[str, int]] = []
    for spec in hostlist.split(","):
        where = urlsplit(f"mysql://{spec}")
        try:
            port = where.port or 3306
        except ValueError:
            raise InvalidInput(f"mysql URL: {spec!r} is not HOST or HOST:PORT") from None
        if where.hostname:
            hosts.append((where.hostname, port))
    parts = urlsplit(f"mysql://{userinfo}{at}x/{path}")
    database = parts.path.lstrip("/")
    if not database or not hosts or not slash:
        raise InvalidInput(
            "mysql URL needs a host and a database: mysql://user:password@host:3306/database"
            " (several hosts, a primary and its replicas: host1:3306,host2:3306)"
        )
    check_options(
        "mysql",
        params,
        ("prefix", "pool_size", "reconnect_timeout", "connect_timeout", "lock_timeout"),
    )
    try:
        pool_size = int(params.get("pool_size", 10))
        reconnect_timeout = float(params.get("reconnect_timeout", 60))
        connect_timeout = float(params.get("connect_timeout", 5))
    except ValueError as exc:
        raise InvalidInput(f"bad mysql store option: {exc}") from None
    waits = lock_timeout("mysql", dict(params))
    db = MySQLConnections(
        hosts=hosts,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=database,
        pool_size=pool_size,
        reconnect_timeout=reconnect_timeout,
        connect_timeout=connect_timeout,
        lock_timeout=waits,
    )
    dialect = MySQLDialect(params.get("prefix", "conveyor_"), db)
    return SQLStore(
        scheme="mysql", key=f"{db.display}#{dialect.prefix}", dialect=dialect, db=db, clock=clock
    )


class MySQLConnections(ServerConnections):
    scheme = "mysql"
    driver_errors = (pymysql.Error,)
    lock_hint = "SHOW PROCESSLIST, information_schema.innodb_trx"
    timeout_setting = "max_statement_time on MariaDB, max_execution_time on MySQL"

    def __init__(
        self,
        *,
        hosts: list[tuple[str, int]],
        user: str,
        password: str,
        database: str,
        pool_size: int,
        reconnect_timeout: float,
        connect_timeout: float,
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        if pool_size < 1:
            raise InvalidInput(f"pool_size must be at least 1, got {pool_size}")
        self._hosts = hosts
        self._writable = 0  # the host that last took writes
        self._connect_args: dict[str, Any] = {
            "user": user,
            "password": password,
            "database": database,
            "autocommit": True,
            "charset": "utf8mb4",
            "binary_prefix": True,
            "connect_timeout": connect_timeout,
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        }
        # row locks (InnoDB's wait) and table locks (LOCK TABLES, schema changes: a year
        # by default), each bounded
        seconds = max(1, round(lock_timeout))
        self._waits = {"seconds": seconds}
        self.lock_timeout = float(seconds)
        where = ",".join(f"{host}:{port}" for host, port in hosts)
        self.display = redact(
            f"mysql://{user}{':' + password if password else ''}@{where}/{database}"
        )
        self.reconnect_timeout = reconnect_timeout
        self.mariadb = False  # known once the server has answered (`check`)
        self._idle: queue_mod.LifoQueue[Conn] = queue_mod.LifoQueue(maxsize=pool_size)
        self._wakes: dict[str, Wakes] = {}
        renew_after_fork(self)

    def forked(self) -> None:
        """A forked child: the parent's connections and wake sockets forgotten (forks.py)."""
        self._idle = queue_mod.LifoQueue(maxsize=self._idle.maxsize)
        self._wakes = {}

    def _get(self) -> Conn:
        """An idle connection (`_idle_one`), or a new one."""
        conn = self._idle_one()
        return conn if conn is not None else self._open()

    def _idle_one(self) -> Conn | None:
        """An idle connection, if any. One the server closed while it was idle (its
        `wait_timeout`, a proxy's idle timeout, a restart: `sent_unasked`) is found so
        before anything is written to it, and raises 2006 ("gone away"): the operation is
        then retried as for a lost connection, but never in doubt (a send made on it would
        have been answered `OutcomeUnknown`)."""
        try:
            conn = self._idle.get_nowait()
        except queue_mod.Empty:
            return None
        sock = getattr(conn, "_sock", None)
        if sock is not None and not sent_unasked(sock.fileno()):
            return conn
        _discard(conn)
        self._on_disconnect()  # the other idle ones likely went the same way
        raise pymysql.err.OperationalError(
            2006, "the server closed the connection while it was idle"
        )

    def _connect(self, host: str, port: int) -> Conn:
        """A connection to one host, its lock waits bounded (`lock_timeout`), and its socket
        given up where the server's host stops answering (`TCP_SETTINGS`)."""
        conn = pymysql.connect(host=host, port=port, **self._connect_args)
        try:
            sock = getattr(conn, "_sock", None)  # PyMySQL's socket (it sets SO_KEEPALIVE)
            if sock is not None:
                for option, value in TCP_SETTINGS:
                    sock.setsockopt(socket.IPPROTO_TCP, option, value)
            with conn.cursor() as cur:
                cur.execute(_LOCK_WAITS, self._waits)
        except pymysql.Error:
            _discard(conn)
            raise
        return conn

    def _open(self) -> Conn:
        """A new connection: to the one host, or to the first of several that takes writes
        (`@@read_only` off), starting with the one that did last, so that a promoted
        replica is found once the old primary is gone or read-only."""
        if len(self._hosts) == 1:
            host, port = self._hosts[0]
            return self._connect(host, port)
        why: list[str] = []
        n = len(self._hosts)
        for step in range(n):
            i = (self._writable + step) % n
            host, port = self._hosts[i]
            try:
                conn = self._connect(host, port)
            except pymysql.err.OperationalError as exc:
                why.append(f"{host}:{port}: {exc.args[-1]}")
                continue
            try:
                with conn.cursor() as cur:
                    cur.execute(MYSQL_READ_ONLY.text)
                    (read_only,) = cur.fetchone()
            except pymysql.Error as exc:
                _discard(conn)
                why.append(f"{host}:{port}: {exc}")
                continue
            if read_only:
                conn.close()
                why.append(f"{host}:{port}: read-only")
                continue
            self._writable = i
            return conn
        raise pymysql.err.OperationalError(2003, "no host takes writes (" + "; ".join(why) + ")")

    def _put(self, conn: Conn) -> None:
        try:
            self._idle.put_nowait(conn)
        except queue_mod.Full:
            conn.close()

    @contextmanager
    def _transaction(self, tx: bool) -> Iterator[Any]:
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
            if code in _DISCONNECTS or 2000 <= code < 3000:  # the client's own errors
                return "disconnect"
        code = exc.args[0] if isinstance(exc, pymysql.Error) and exc.args else 0
        if code in _CROWDED:  # no connection made: waited out like a busy pool
            return "crowded"
        if code in _READ_ONLY:  # a demoted primary: find the new one (another host, or this
            return "read-only"  # address once it leads there)
        return None

    def _stopped(self, exc: BaseException) -> Stopped | None:
        code = exc.args[0] if isinstance(exc, pymysql.Error) and exc.args else 0
        if code == _LOCK_WAITED:
            return "lock"
        if code in _CANCELLED:
            return "cancelled"
        if code in _FULL:
            return "full"
        return None

    def _on_disconnect(self) -> None:
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue_mod.Empty:
                return
            _discard(conn)

    def _connect_once(self) -> None:
        try:
            conn = self._idle_one()
        except pymysql.err.OperationalError:  # the server closed it while it was idle
            conn = None
        if conn is None:
            conn = self._open()
        with conn.cursor() as cur:
            cur.execute(MYSQL_VERSION.text)
            (version,) = cur.fetchone()
            # MariaDB deletes and says what it deleted in one statement; MySQL 8 cannot
            self.mariadb = "mariadb" in str(version).lower()
        self._put(conn)

    # -- wake-ups across the processes of this host (others: the store's ticker) ----------

    def _wakes_of(self, key: str) -> Wakes:
        wakes = self._wakes.get(key)
        if wakes is None:
            wakes = self._wakes.setdefault(key, Wakes(f"mysql:{key}", time.monotonic))
        return wakes

    def announce(self, key: str, queue: str) -> None:
        self._wakes_of(key).announce(queue)

    def wait(self, key: str, queue: str, since: int, timeout: float) -> None:
        self._wakes_of(key).listen(functools.partial(HUB.notify, key))
        super().wait(key, queue, since, timeout)

    async def wait_async(
        self, key: str, queue: str, since: int, timeout: float, interval: float
    ) -> None:
        self._wakes_of(key).listen(functools.partial(HUB.notify, key))
        await super().wait_async(key, queue, since, timeout, interval)

    def close(self) -> None:
        for wakes in self._wakes.values():
            wakes.close()
        self._wakes.clear()
        self._on_disconnect()


class MySQLDialect(ServerDialect):
    name = "mysql"
    types = TYPES

    def id_scope(self, qid: int) -> str:
        # `+ 0`: no index serves the queue alone, so ids are found through the index of
        # (id, queue_id) however the optimizer's statistics estimate the queue's size
        return f"queue_id + 0 = {int(qid)}"

    def __init__(self, prefix: str, db: MySQLConnections) -> None:
        super().__init__(prefix)
        self.db = db
        # queues whose heads are deep in messages in flight
        self.heads = HeadWatch(prefix, self.sql)

    @property
    def single_delete(self) -> bool:
        return self.db.mariadb  # DELETE ... RETURNING

    def lock_schema(self, ex: CursorExec) -> None:
        ex.rows(self.sql(MYSQL_LOCK_SCHEMA), {"name": f"conveyor-schema-{self.prefix}"})

    def unlock_schema(self, ex: CursorExec) -> None:
        ex.rows(self.sql(MYSQL_UNLOCK_SCHEMA), {"name": f"conveyor-schema-{self.prefix}"})

    def style(self) -> Style:
        return MYSQL

    # -- writes ---------------------------------------------------------------------------

    def _sent_rows(
        self, ex: CursorExec, statement: Statement, qid: int, rows: Sequence[Fields]
    ) -> None:
        """One multi-row INSERT of rows as sent (`statement`: MYSQL_SENT_ROWS or
        MYSQL_NEW_SENT_ROWS)."""
        sql = self.sql(statement, qid, len(rows))
        ex.run(sql, by_rows(sql, {"qid": qid}, _SENT, [self.send_row(row) for row in rows]))

    def _insert_all(self, ex: CursorExec, qid: int, rows: Sequence[Fields]) -> None:
        """One multi-row INSERT of rows none of whose ids can be present."""
        self._sent_rows(ex, MYSQL_SENT_ROWS, qid, rows)

    def insert_bare(
        self, ex: CursorExec, qid: int, queue: str, bare: Bare, retry: bool
    ) -> list[str]:
        ids = bare.ids or []
        if retry:  # one by one, skipping ids a first attempt stored
            for i, body in zip(ids, bare.bodies, strict=True):
                row = Fields(
                    i, body, None, None, None, bare.priority, None, bare.now, bare.visible_at, 0
                )
                self.insert_one(ex, qid, row)
            return ids
        # the driver escapes each value once (it quotes parameters into the statement in
        # Python), so what the rows share is escaped once, not per row
        shared = {
            "qid": qid,
            "nprio": -bare.priority,
            "now": bare.now,
            "visible_at": bare.visible_at,
        }
        sql = self.sql(MYSQL_BARE_ROWS, qid, len(ids))
        ex.cur.execute(
            sql, by_rows(sql, shared, _ID_BODY, list(zip(ids, bare.bodies, strict=True)))
        )
        return ids

    def insert(
        self,
        ex: CursorExec,
        qid: int,
        queue: str,
        rows: Sequence[Fields],
        *,
        made: bool,
        retry: bool,
    ) -> list[str | None]:
        if made and not retry:
            self._insert_all(ex, qid, rows)
            return [row.id for row in rows]
        stored = [self.insert_one(ex, qid, row) for row in rows]
        if made:  # a retry: what the first attempt stored counts as stored
            return [row.id for row in rows]
        return [None if s is None else row.id for s, row in zip(stored, rows, strict=True)]

    def insert_one(self, ex: CursorExec, qid: int, row: Fields) -> tuple[int, str] | None:
        if row.as_sent:
            statement, values = MYSQL_NEW_SENT_ROW, self.sent_named(qid, row)
        else:
            statement, values = MYSQL_NEW_MOVED_ROW, self.moved_named(qid, row)
        cur = ex.cur
        cur.execute(self.sql(statement, qid), values)
        return (int(cur.lastrowid), row.id) if cur.rowcount > 0 else None

    def insert_keyed(
        self, ex: CursorExec, qid: int, rows: Sequence[Fields], made: bool
    ) -> list[int | None]:
        if not made:
            if not all(row.as_sent and row.id for row in rows):
                return super().insert_keyed(ex, qid, rows, made)
            return self._insert_chosen(ex, qid, rows)
        keys: dict[str, int] = {}
        for i in range(0, len(rows), 1000):
            chunk = rows[i : i + 1000]
            self._insert_all(ex, qid, chunk)
            ids = [row.id for row in chunk]
            for seq, message_id, _ in self._with_ids(ex, qid, ids):
                keys[message_id] = int(seq)
        return [keys.get(row.id) for row in rows]

    def _with_ids(self, ex: CursorExec, qid: int, ids: Sequence[str]) -> list[Row]:
        """(key, id, visible_at) of the queue's messages with these ids (the id index)."""
        return ex.rows(self.sql(FIND_MANY, qid, len(ids)), spread("ids", ids))

    def _insert_chosen(self, ex: CursorExec, qid: int, rows: Sequence[Fields]) -> list[int | None]:
        """Rows with ids chosen by senders (an import), a thousand to a statement: the ids the
        queue holds are skipped (and a second row of one id), the others inserted, and the
        keys read back by id and visible_at (what another writer inserted meanwhile under
        one of these ids does not carry this write's visible_at)."""
        keys: dict[str, int] = {}
        for i in range(0, len(rows), 1000):
            chunk = rows[i : i + 1000]
            ids = [row.id for row in chunk]
            held = {str(message_id) for _, message_id, _ in self._with_ids(ex, qid, ids)}
            fresh: dict[str, Fields] = {}
            for row in chunk:
                if row.id not in held:
                    fresh.setdefault(row.id, row)
            if not fresh:
                continue
            self._sent_rows(ex, MYSQL_NEW_SENT_ROWS, qid, list(fresh.values()))
            for seq, message_id, visible_at in self._with_ids(ex, qid, list(fresh)):
                if float(visible_at) == fresh[str(message_id)].visible_at:
                    keys[str(message_id)] = int(seq)
        return [keys.pop(row.id, None) for row in rows]

    # -- claims and deletes ---------------------------------------------------------------

    def claim_ready(
        self, ex: CursorExec, qid: int, limit: int, terms: ClaimTerms, token: str
    ) -> list[Row]:
        values = claim_values(terms, token)
        values.update(qid=qid, limit=limit)
        if self.heads.is_deep(qid):
            rows = self._deep(ex, MYSQL_DEEP_CLAIM_PICK, qid, values, limit)
        else:
            rows = self.heads.watched(
                ex, qid, lambda: ex.rows(self.sql(MYSQL_CLAIM_PICK, qid), values), priority_at=6
            )
        return self.claim_rows(ex, qid, rows, values, terms, MYSQL_CLAIM_SEQS)

    def walk_visible(
        self, ex: CursorExec, qid: int, after: int, now: float, page: int, lock: bool
    ) -> list[Row]:
        if self.heads.is_deep(qid):
            values = {"qid": qid, "now": now, "limit": page, **self.after_values(after)}
            statement = MYSQL_DEEP_WALK_LOCKING if lock else MYSQL_DEEP_WALK
            return self._deep(ex, statement, qid, values, page, priority_at=1)
        plain = super().walk_visible
        return self.heads.watched(
            ex, qid, lambda: plain(ex, qid, after, now, page, lock), priority_at=1
        )

    def _deep(
        self,
        ex: CursorExec,
        statement: Statement,
        qid: int,
        values: dict[str, Any],
        limit: int,
        *,
        priority_at: int = 6,
    ) -> list[Row]:
        """The first `limit` rows of a deep queue that `statement` reads (server_statements.py's
        `_mysql_deep`), in delivery order; `priority_at`: where -nprio is in its rows."""
        rows = ex.rows(self.sql(statement, qid), values)
        rows.sort(key=lambda r: (-int(r[priority_at]), int(r[0])))
        return rows[:limit]

    def delete_held(
        self, ex: CursorExec, qid: int, token: str, keys: Sequence[int], exact: bool
    ) -> Collection[int]:
        values = {"qid": qid, "token": token, **spread("keys", keys)}
        if self.db.mariadb:
            rows = ex.rows(self.sql(MARIADB_DELETE_HELD, qid, len(keys)), values)
            return [int(seq) for (seq,) in rows]
        found = [int(seq) for (seq,) in ex.rows(self.sql(MYSQL_HELD, qid, len(keys)), values)]
        if found:
            ex.run(self.sql(MYSQL_DELETE_SEQS, qid, len(found)), spread("keys", found))
        return found


_ID_BODY = ("id", "body")
_SENT = SERVER_SEND_COLUMNS[1:]


def _discard(conn: Conn) -> None:
    with suppress(pymysql.Error):
        conn.close()
