"""PostgreSQL store: ``postgresql://user[:password]@host[:port]/database``.

Options (URL query): ``prefix`` (table name prefix, default ``conveyor_``), ``pool_size``
(connections per process, default 10), ``reconnect_timeout`` (seconds an operation waits out
a lost database before it fails, default 60), ``poll_interval`` (how often a long poll looks
for messages that became ready without a send: delays and visibility timeouts ending; default
0.5 s); anything else goes to libpq (``sslmode``,
``application_name``, ...).

psycopg 3 with a connection pool. A send, a receive and a delete are one statement each, in
autocommit: the receive is ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``.
Every process with long polls LISTENs on one connection, registers in the listeners table
and wakes its waiters; while any listener is registered, a send notifies the queue's channel
in the same statement, so a send through one server wakes a long poll held by another at once.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
import time
import zlib
from collections.abc import Sequence
from contextlib import suppress
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ..clock import SYSTEM_CLOCK, Clock
from ..exceptions import InvalidInput
from ..notify import HUB
from ..urls import redact
from .pg_held import Borrowed, ConnectionsBusy, HeldConnections
from .pipeline import lease_insert
from .sql import INSERT_VALUES, Bare, Row, SQLBackend
from .sql_conn import Cursor, first_line
from .sql_schema import INSERT_COLUMNS, MESSAGE_COLUMNS, POSTGRES, check_prefix

log = logging.getLogger("conveyor.store")
# the pool logs every failed reconnection attempt; the store logs the outage once, and its end
if logging.getLogger("psycopg.pool").level == logging.NOTSET:
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)

# A queue's statistics are always stale (it empties and fills faster than ANALYZE runs),
# and on a fresh table the planner guesses a handful of rows: it would then claim by a
# bitmap scan of the whole queue and a sort, whose cost grows with depth. Without bitmap
# scans and sorts, the only plan left walks the order index from the queue's head.
PLANNER_OPTIONS = "-c enable_bitmapscan=off -c enable_sort=off"

# a listening process refreshes its row this often; a row older than the TTL is ignored
LISTENER_BEAT = 5.0
LISTENER_TTL = 15.0

# how long a connection stays with the store between operations before it goes back to
# the pool, which renews connections past their lifetime
KEEP_SECONDS = 60.0
POOL_TIMEOUT = 5.0  # how long an operation waits for a connection when all are busy

# binary parameters (%b): arrays cross without text quoting and escaping
_ARRAYS = (
    "%b::bigint[], %b::int[], %b::text[], %b::bytea[], %b::text[], %b::text[], %b::text[],"
    " %b::float8[], %b::float8[], %b::float8[], %b::smallint[]"
)
_VALUES_ROWS = 10  # plain batches up to this size insert with a VALUES list
# a plain row: queue_id, id, body, sent_at and visible_at; every other column its default
_PLAIN_VALUES = "(%s, 0, %s, %s, NULL, NULL, NULL, NULL, %s, %s, 0)"


def int_array(values: Sequence[int]) -> str:
    """A bigint[] parameter as its text form: a tenth of the driver's cost of dumping a list."""
    return "{%s}" % ",".join(map(str, values))  # noqa: UP031 - the braces would need doubling


@functools.lru_cache(maxsize=64)
def _plain_insert(prefix: str, n: int) -> str:
    return (
        f"INSERT INTO {prefix}messages ({INSERT_COLUMNS}) VALUES {', '.join([_PLAIN_VALUES] * n)}"
    )


def _plain(row: Row) -> bool:
    return (
        row[1] == 0
        and row[4] is None
        and row[5] is None
        and row[6] is None
        and row[7] is None
        and not row[10]
    )


_COPY_TYPES = [
    "int8", "int8", "int4", "text", "bytea", "text", "text", "text", "float8", "float8", "float8",
    "int2",
]  # fmt: skip
_CLAIM_COLUMNS = ", ".join(f"m.{c.strip()}" for c in MESSAGE_COLUMNS.split(","))


class PostgresBackend(SQLBackend):
    scheme = "postgresql"
    dialect = POSTGRES
    single_statement = True
    single_statement_delete = True
    driver_errors = (psycopg.Error, PoolTimeout)

    def __init__(
        self,
        conninfo: str,
        *,
        prefix: str = "conveyor_",
        pool_size: int = 10,
        reconnect_timeout: float = 60.0,
        poll_interval: float = 0.5,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        if not 0 < poll_interval <= 600:
            raise InvalidInput(f"poll_interval must be from 0 to 600 seconds, got {poll_interval}")
        self._poll_interval = poll_interval
        self.prefix = check_prefix(prefix)
        if pool_size < 1:
            raise InvalidInput(f"pool_size must be at least 1, got {pool_size}")
        self.conninfo = conninfo
        self.display = redact(conninfo)
        self.reconnect_timeout = reconnect_timeout
        self.channel = f"{self.prefix}messages"
        self._init_connections()
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "options": PLANNER_OPTIONS},
            timeout=POOL_TIMEOUT,
            open=False,
            name=f"conveyor-{self.prefix}",
        )
        self._pool.open(wait=False)
        self._held = HeldConnections(self._pool, pool_size, POOL_TIMEOUT, KEEP_SECONDS)
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        self._closed = threading.Event()
        self._listener_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._listened_at = -1e18  # when the listeners table was last read
        self._anyone_listens = True

    @classmethod
    def from_url(cls, rest: str, params: dict[str, str], *, clock: Clock) -> PostgresBackend:
        params = dict(params)
        try:
            prefix = params.pop("prefix", "conveyor_")
            pool_size = int(params.pop("pool_size", 10))
            reconnect_timeout = float(params.pop("reconnect_timeout", 60))
            poll_interval = float(params.pop("poll_interval", 0.5))
        except ValueError as exc:
            raise InvalidInput(f"bad postgresql store option: {exc}") from None
        query = f"?{urlencode(params)}" if params else ""
        return cls(
            f"postgresql://{rest}{query}",
            prefix=prefix,
            pool_size=pool_size,
            reconnect_timeout=reconnect_timeout,
            poll_interval=poll_interval,
            clock=clock,
        )

    @property
    def key(self) -> str:
        return f"{self.display}#{self.prefix}"

    @property
    def poll_interval(self) -> float:
        # sends arrive by NOTIFY; polling only finds delays and visibility timeouts ending
        return self._poll_interval

    # -- connections ----------------------------------------------------------------------

    def _transaction(self, tx: bool) -> Borrowed:
        return Borrowed(self._held, tx)

    def _retryable(self, exc: BaseException) -> str | None:
        if isinstance(exc, psycopg.errors.TransactionRollback):
            return "conflict"
        if isinstance(exc, ConnectionsBusy):
            return "busy"
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | PoolTimeout):
            return "disconnect"
        return None

    def _on_disconnect(self) -> None:
        # drop every idle connection that died with the server, not one per retry
        self._held.release()
        with suppress(psycopg.Error):
            self._pool.check()

    def _connect_once(self) -> None:
        psycopg.connect(self.conninfo, connect_timeout=5).close()

    def _lock_schema(self, cur: Cursor) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(self.prefix.encode()),))

    def _close_pool(self) -> None:
        self._closed.set()
        self._held.release(closing=True)
        self._pool.close()

    # -- statements -----------------------------------------------------------------------

    def _insert_many(
        self, cur: Cursor, queue: str, rows: Sequence[Row], generated: bool
    ) -> set[str]:
        params: list[Any]
        if len(rows) <= _VALUES_ROWS and all(_plain(row) for row in rows):
            # the common batch (no priority, attributes, group, deadline or compression):
            # five scalar parameters a row, which the driver dumps in C and, under its limit
            # of 50, converts once per batch size (arrays cost it ~0.5 ms more a statement)
            params = [v for row in rows for v in (row[0], row[2], row[3], row[8], row[9])]
            inserted = self._insert(
                cur, queue, _plain_insert(self.prefix, len(rows)), params, generated
            )
        else:
            # one array per column: the same statement (prepared once) for any batch size
            insert = (
                f"INSERT INTO {self.prefix}messages ({INSERT_COLUMNS})"
                f" SELECT * FROM unnest({_ARRAYS})"
            )
            params = [list(column) for column in zip(*rows, strict=True)]
            inserted = self._insert(cur, queue, insert, params, generated)
        return {r[2] for r in rows} if inserted is None else inserted

    def _insert_bare(self, cur: Cursor, queue: str, bare: Bare, again: bool) -> None:
        if bare.nprio or len(bare.ids) > _VALUES_ROWS:
            super()._insert_bare(cur, queue, bare, again)
            return
        qid, now, visible_at = bare.qid, bare.now, bare.visible_at
        params: list[Any] = []
        for i, body in zip(bare.ids, bare.bodies, strict=True):
            params += (qid, i, body, now, visible_at)
        self._insert(cur, queue, _plain_insert(self.prefix, len(bare.ids)), params, not again)

    def _insert(
        self, cur: Cursor, queue: str, insert: str, params: list[Any], generated: bool
    ) -> set[str] | None:
        """Run an insert of message rows, with the notification of listening processes;
        the ids inserted, or None with `generated` (all of them)."""
        if not generated:
            # a speculative insert costs more: only where a sender chose the ids
            insert += " ON CONFLICT (queue_id, id) DO NOTHING RETURNING id"
        if self._listened(cur):
            if generated:
                insert += " RETURNING id"
            insert = f"WITH ins AS ({insert}) SELECT ins.id FROM ins, (SELECT pg_notify(%s, %s)) n"
            params += [self.channel, queue]
        cur.execute(insert, params)
        if generated:
            return None
        return {r[0] for r in cur.fetchall()}

    def _insert_staged(self, cur: Cursor, queue: str, qid: int, rows: Sequence[Row]) -> list[int]:
        # seqs reserved up front, then one binary COPY: several times an INSERT's speed
        p = self.prefix
        cur.execute(
            f"SELECT nextval(pg_get_serial_sequence('{p}messages', 'seq'))"
            " FROM generate_series(1, %s)",
            (len(rows),),
        )
        seqs = [int(r[0]) for r in cur.fetchall()]
        with cur.copy(f"COPY {p}messages (seq, {INSERT_COLUMNS}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(_COPY_TYPES)
            for seq, row in zip(seqs, rows, strict=True):
                cp.write_row((seq, *row))
        return seqs

    def _insert_one(self, cur: Cursor, row: Row) -> int | None:
        cur.execute(
            f"INSERT INTO {self.prefix}messages ({INSERT_COLUMNS}) VALUES {INSERT_VALUES}"
            " ON CONFLICT (queue_id, id) DO NOTHING RETURNING seq",
            row,
        )
        found = cur.fetchone()
        return None if found is None else int(found[0])

    def _insert_select(self, cur: Cursor, sql: str, params: Sequence[Any]) -> int:
        cur.execute(f"{sql} RETURNING seq", params)
        return int(cur.fetchone()[0])

    def _notify_waiters(self, cur: Cursor, queue: str) -> None:
        if self._listened(cur):
            cur.execute("SELECT pg_notify(%s, %s)", (self.channel, queue))

    def _listened(self, cur: Cursor) -> bool:
        """Whether any process holds long polls on this store (read at most once a second).

        NOTIFY serialises committing transactions on a lock, so sends skip it while nobody
        listens; a process that starts listening is heard within a second, and its first
        long polls poll meanwhile.
        """
        now = time.monotonic()
        if now - self._listened_at >= 1.0:
            self._listened_at = now
            cur.execute(
                f"SELECT 1 FROM {self.prefix}listeners WHERE seen_at > %s LIMIT 1",
                (time.time() - LISTENER_TTL,),
            )
            self._anyone_listens = cur.fetchone() is not None
        return self._anyone_listens

    def _claim_ready(
        self, cur: Cursor, qid: int, limit: int, visible_at: float, now: float, horizon: float,
        token: str,
    ) -> list[Row]:  # fmt: skip
        cur.execute(
            f"{self._ready_claim()} RETURNING {_CLAIM_COLUMNS}",
            (visible_at, now, token, qid, now, horizon, now, limit),
        )
        return list(cur.fetchall())

    def _ready_claim(self) -> str:
        """The claim of a queue's first ready messages, one statement; parameters: visible_at,
        now, token, queue id, now, retention horizon, now, limit."""
        p = self.prefix
        return (
            f"UPDATE {p}messages m SET visible_at = %s, receive_count = m.receive_count + 1,"
            " first_received_at = coalesce(m.first_received_at, %s), version = m.version + 1,"
            f" token = %s FROM (SELECT seq FROM {p}messages WHERE queue_id = %s"
            " AND visible_at <= %s AND sent_at >= %s AND (deadline IS NULL OR deadline > %s)"
            " ORDER BY nprio, seq LIMIT %s FOR UPDATE SKIP LOCKED) c WHERE m.seq = c.seq"
        )

    def _lease_chunk(
        self, queue: str, stream: str, lease: int, max_messages: int, visibility_timeout: float
    ) -> int:
        # one statement claims the head of a plain queue and records the claims in the
        # lease (no bodies sent back, no messages built); queues whose receives walk their
        # head lease through a receive
        qid, attrs, now, visible_at, horizon = self._claim_terms(queue, visibility_timeout)
        if self._walks_head(attrs):
            return super()._lease_chunk(queue, stream, lease, max_messages, visibility_timeout)
        token = secrets.token_hex(8)
        p = self.prefix
        claim = (visible_at, now, token, qid, now, horizon, now, max_messages)

        def run(cur: Cursor) -> int:
            cur.execute(
                f"WITH claimed AS ({self._ready_claim()} RETURNING m.seq, m.id) "
                + lease_insert(p, "SELECT %s, %s, %s, seq, id, %s FROM claimed"),
                (*claim, qid, stream, lease, token),
            )
            return int(cur.rowcount)

        claimed = self._run(run, tx=False)
        if claimed:
            self._count(qid, received=claimed)
        return claimed

    def _delete_leased(self, queue: str, stream: str, upto: int) -> int:
        # one statement deletes what the leases hold: rows by seq (arrays, so the plan is
        # by seq however large the queue), where they still hold one of the leases' claim
        # tokens (a message claimed again since holds another). Queues that archive copy
        # their rows first: the generic way
        qid, attrs = self._lookup(queue)
        if attrs.archive:
            return super()._delete_leased(queue, stream, upto)
        p = self.prefix
        leased = f"FROM {p}leases WHERE queue_id = %s AND stream = %s AND lease <= %s"

        def run(cur: Cursor) -> int:
            cur.execute(
                f"DELETE FROM {p}messages WHERE queue_id + 0 = %s"
                f" AND seq = ANY(ARRAY(SELECT row_key {leased}))"
                f" AND token = ANY(ARRAY(SELECT DISTINCT token {leased}))",
                (qid, qid, stream, upto, qid, stream, upto),
            )
            return int(cur.rowcount)

        deleted = self._run(run, tx=False)
        if deleted:
            self._count(qid, deleted=deleted)
        return deleted

    def _delete_by_token(self, cur: Cursor, qid: int, token: str, seqs: Sequence[int]) -> list[int]:
        # `queue_id + 0`: the driver prepares this statement, and a generic plan would find
        # the rows through the order index (walking the whole queue) instead of by seq
        cur.execute(
            f"DELETE FROM {self.prefix}messages WHERE queue_id + 0 = %s AND token = %s"
            " AND seq = ANY(%s::bigint[]) RETURNING seq",
            (qid, token, int_array(seqs)),
        )
        return [int(r[0]) for r in cur.fetchall()]

    # -- long polls -----------------------------------------------------------------------

    def wait_for_messages(self, queue: str, since: int, timeout: float) -> None:
        if not self.clock.manual:
            self._listen_once()
        super().wait_for_messages(queue, since, timeout)

    async def wait_for_messages_async(self, queue: str, since: int, timeout: float) -> None:
        if not self.clock.manual:
            self._listen_once()
        await super().wait_for_messages_async(queue, since, timeout)

    def _listen_once(self) -> None:
        if self._listener is None:
            with self._lock:
                if self._listener is None:
                    self._listener = threading.Thread(
                        target=self._listen, name="conveyor-pg-listen", daemon=True
                    )
                    self._listener.start()
            self._listening.wait(1.0)

    def _listen(self) -> None:
        """LISTEN on the store's channel and wake this process's waiters; reconnects."""
        delay = 0.1
        lost = False
        while not self._closed.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self._listening.set()
                    if lost:
                        log.warning("listening for sends on %s again", self.display)
                        HUB.wake_all()  # sends may have gone unheard while the link was down
                    lost, delay = False, 0.1
                    beat = 0.0
                    while not self._closed.is_set():
                        if time.monotonic() - beat >= LISTENER_BEAT:
                            beat = time.monotonic()
                            conn.execute(
                                self.dialect.upsert_sql(
                                    f"{self.prefix}listeners", "id, seen_at", "id"
                                ),
                                (self._listener_id, time.time()),
                            )
                        for note in conn.notifies(timeout=1.0):
                            HUB.notify(self.key, note.payload)
                    conn.execute(
                        f"DELETE FROM {self.prefix}listeners WHERE id = %s", (self._listener_id,)
                    )
            except psycopg.errors.UndefinedTable:
                log.warning(
                    "the tables with prefix %r are gone from %s: no longer listening for sends",
                    self.prefix,
                    self.display,
                )
                return
            except psycopg.Error as exc:
                if self._closed.is_set():
                    return
                if not lost:
                    log.warning(
                        "lost the LISTEN connection to %s (%s); long polls fall back to polling"
                        " until it is back",
                        self.display,
                        first_line(exc),
                    )
                lost = True
                self._closed.wait(delay)
                delay = min(delay * 2, 2.0)
