"""PostgreSQL store: ``postgresql://user[:password]@host[:port]/database``.

Options (URL query): ``prefix`` (table name prefix, default ``conveyor_``), ``pool_size``
(connections per process, default 10), ``reconnect_timeout`` (seconds an operation waits out
a lost database before it fails, default 60), ``poll_interval`` (how often a long poll looks
for messages that became ready without a send: delays and visibility timeouts ending; default
0.5 s); anything else goes to libpq (``sslmode``, ``application_name``, ...).

psycopg 3 with a connection pool, opened on first use. A send, a receive and a delete are
one statement each, in autocommit: the receive is ``UPDATE ... FROM (SELECT ... FOR UPDATE
SKIP LOCKED) RETURNING``. Every process with long polls LISTENs on one connection, registers
in the listeners table and wakes its waiters; while any listener is registered, a send
notifies the queue's channel in the same statement, so a send through one server wakes a
long poll held by another at once. Implements every contract.
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
from collections.abc import Collection, Sequence
from contextlib import suppress
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ...clock import Clock
from ...exceptions import InvalidInput
from ...notify import HUB
from ...urls import redact
from ..rules import ClaimTerms, order_after
from .connections import CursorExec, ServerConnections, first_line, marks
from .dialect import Bare, ServerDialect
from .inflight import CLAIMED_UNTIL, claim_params
from .pg_held import Borrowed, ConnectionsBusy, HeldConnections
from .pg_inflight import HeldIndexes
from .rows import Fields, Row
from .schema import ServerTypes, Step, server_migrations
from .statement import Style, postgres_style
from .statements import RECORD_LEASES
from .store import SQLStore

log = logging.getLogger("conveyor.store")

TYPES = ServerTypes(
    "BIGSERIAL PRIMARY KEY",
    "BYTEA",
    "DOUBLE PRECISION",
    # byte-wise comparison: exact, as on every store, and cheaper than the locale's
    text_key='VARCHAR(255) COLLATE "C"',
    message_id='VARCHAR(128) COLLATE "C"',
    # room in each page, so a claim's UPDATE stays on its page and touches no index (HOT)
    message_options=" WITH (fillfactor = 70)",
    partial_where=" WHERE deadline IS NOT NULL",
    long_key='VARCHAR(512) COLLATE "C"',
)

# A queue's statistics are always stale (it empties and fills faster than ANALYZE runs),
# and on a fresh table the planner guesses a handful of rows: it would then claim by a
# bitmap scan of the whole queue and a sort, whose cost grows with depth. Without bitmap
# scans and sorts, the only plan left walks the order index from the queue's head. No JIT:
# the store's statements are short, and estimates inflated by stale statistics made
# PostgreSQL compile a lookup of 1,000 ids that runs in 5 ms for 55 ms first.
PLANNER_OPTIONS = "-c enable_bitmapscan=off -c enable_sort=off -c jit=off"

# a listening process refreshes its row this often; a row older than the TTL is ignored
LISTENER_BEAT = 5.0
LISTENER_TTL = 15.0

# how long a connection stays with the store between operations before it goes back to
# the pool, which renews connections past their lifetime
KEEP_SECONDS = 60.0
POOL_TIMEOUT = 5.0  # how long an operation waits for a connection when all are busy

# binary parameters (%b): arrays cross without text quoting and escaping
# rows with ids chosen by senders from which an insert tries COPY first (a savepoint and a
# reservation of seqs cost two more round trips: worth it for bulk moves, not for a send)
COPY_IDS_AT = 100
_ARRAYS = (
    "%b::bigint[], %b::int[], %b::text[], %b::bytea[], %b::text[], %b::text[], %b::text[],"
    " %b::float8[], %b::float8[], %b::float8[], %b::smallint[]"
)
_VALUES_ROWS = 10  # plain batches up to this size insert with a VALUES list
# a plain row: queue_id, id, body, sent_at and visible_at; every other column its default
_PLAIN_VALUES = "(%s, 0, %s, %s, NULL, NULL, NULL, NULL, %s, %s, 0)"
_COPY_TYPES = [
    "int8", "int8", "int4", "text", "bytea", "text", "text", "text", "float8", "float8", "float8",
    "int2",
]  # fmt: skip


def from_url(rest: str, params: dict[str, str], *, clock: Clock) -> SQLStore[CursorExec]:
    params = dict(params)
    try:
        prefix = params.pop("prefix", "conveyor_")
        pool_size = int(params.pop("pool_size", 10))
        reconnect_timeout = float(params.pop("reconnect_timeout", 60))
        poll_interval = float(params.pop("poll_interval", 0.5))
    except ValueError as exc:
        raise InvalidInput(f"bad postgresql store option: {exc}") from None
    if not 0 < poll_interval <= 600:
        raise InvalidInput(f"poll_interval must be from 0 to 600 seconds, got {poll_interval}")
    query = f"?{urlencode(params)}" if params else ""
    db = PostgresConnections(
        f"postgresql://{rest}{query}",
        prefix=prefix,
        pool_size=pool_size,
        reconnect_timeout=reconnect_timeout,
    )
    return SQLStore(
        scheme="postgresql",
        key=f"{db.display}#{db.prefix}",
        dialect=PostgresDialect(db),
        db=db,
        clock=clock,
        poll_interval=poll_interval,
    )


def int_array(values: Sequence[int]) -> str:
    """A bigint[] parameter as its text form: a tenth of the driver's cost of dumping a list."""
    return "{%s}" % ",".join(map(str, values))  # noqa: UP031 - the braces would need doubling


class PostgresConnections(ServerConnections):
    """Held connections on a psycopg pool; LISTEN for wake-ups across processes."""

    scheme = "postgresql"
    driver_errors = (psycopg.Error, PoolTimeout)

    def __init__(
        self, conninfo: str, *, prefix: str, pool_size: int, reconnect_timeout: float
    ) -> None:
        if pool_size < 1:
            raise InvalidInput(f"pool_size must be at least 1, got {pool_size}")
        self.conninfo = conninfo
        self.display = redact(conninfo)
        self.prefix = prefix
        self.channel = f"{prefix}messages"
        self.reconnect_timeout = reconnect_timeout
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "options": PLANNER_OPTIONS},
            timeout=POOL_TIMEOUT,
            open=False,
            name=f"conveyor-{prefix}",
        )
        self._opened = False
        self._lock = threading.Lock()
        self._held = HeldConnections(self._pool, pool_size, POOL_TIMEOUT, KEEP_SECONDS)
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        self._closed = threading.Event()
        self._listener_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._listened_at = -1e18  # when the listeners table was last read
        self._anyone_listens = True

    def _transaction(self, tx: bool) -> Borrowed:
        if not self._opened:
            with self._lock:
                if not self._opened:
                    self._pool.open(wait=False)
                    self._opened = True
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

    def close(self) -> None:
        self._closed.set()
        self._held.release(closing=True)
        if self._opened:
            self._pool.close()

    def listened(self, ex: CursorExec) -> bool:
        """Whether any process holds long polls on this store (read at most once a second).

        NOTIFY serialises committing transactions on a lock, so sends skip it while nobody
        listens; a process that starts listening is heard within a second, and its first
        long polls poll meanwhile.
        """
        now = time.monotonic()
        if now - self._listened_at >= 1.0:
            self._listened_at = now
            found = ex.one(
                f"SELECT 1 FROM {self.prefix}listeners WHERE seen_at > %s LIMIT 1",
                (time.time() - LISTENER_TTL,),
            )
            self._anyone_listens = found is not None
        return self._anyone_listens

    # -- long polls -----------------------------------------------------------------------

    def wait(self, key: str, queue: str, since: int, timeout: float) -> None:
        self._listen_once(key)
        super().wait(key, queue, since, timeout)

    async def wait_async(
        self, key: str, queue: str, since: int, timeout: float, interval: float
    ) -> None:
        self._listen_once(key)
        await super().wait_async(key, queue, since, timeout, interval)

    def _listen_once(self, key: str) -> None:
        if self._listener is None:
            with self._lock:
                if self._listener is None:
                    self._listener = threading.Thread(
                        target=self._listen, args=(key,), name="conveyor-pg-listen", daemon=True
                    )
                    self._listener.start()
            self._listening.wait(1.0)

    def _listen(self, key: str) -> None:
        """LISTEN on the store's channel and wake this process's waiters; reconnects."""
        delay = 0.1
        lost = False
        beat_sql = (
            f"INSERT INTO {self.prefix}listeners (id, seen_at) VALUES (%s, %s)"
            " ON CONFLICT (id) DO UPDATE SET seen_at = EXCLUDED.seen_at"
        )
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
                            conn.execute(beat_sql, (self._listener_id, time.time()))
                        for note in conn.notifies(timeout=1.0):
                            HUB.notify(key, note.payload)
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


@functools.lru_cache(maxsize=64)
def _plain_insert(prefix: str, n: int) -> str:
    return (
        f"INSERT INTO {prefix}messages ({ServerDialect.send_columns})"
        f" VALUES {', '.join([_PLAIN_VALUES] * n)}"
    )


def _plain(row: Fields) -> bool:
    return (
        row.priority == 0
        and row.attributes is None
        and row.group_id is None
        and row.dedup_id is None
        and row.deadline is None
        and not row.compressed
    )


class PostgresDialect(ServerDialect):
    name = "postgresql"
    single_insert = True
    single_claim = True
    deletes_leased = True

    def __init__(self, db: PostgresConnections) -> None:
        super().__init__(db.prefix)
        self.db = db
        p = self.prefix
        self._claim_columns = self.columns.replace("-nprio", "-m.nprio").replace(
            "seq, ", "m.seq, ", 1
        )
        self._set_claimed = (
            f"visible_at = {CLAIMED_UNTIL.replace('deadline', 'm.deadline')},"
            " receive_count = m.receive_count + 1,"
            " first_received_at = coalesce(m.first_received_at, %s), version = m.version + 1,"
            " token = %s"
        )
        # the claim of a queue's first ready messages, one statement; parameters:
        # claim_params, queue id, now, retention horizon, expires, limit
        self._ready_claim = (
            f"UPDATE {p}messages m SET {self._set_claimed} FROM (SELECT seq FROM {p}messages"
            " WHERE queue_id = %s AND visible_at <= %s AND sent_at >= %s"
            " AND (deadline IS NULL OR deadline > %s) ORDER BY nprio, seq LIMIT %s"
            " FOR UPDATE SKIP LOCKED) c WHERE m.seq = c.seq"
        )
        self.held = HeldIndexes(db.conninfo, p, PLANNER_OPTIONS)

    @property
    def single_delete(self) -> bool:
        return True

    def after(self, after: int) -> tuple[str, tuple[Any, ...]]:
        # a row comparison is one range of the order index; the OR form the other stores
        # use made PostgreSQL walk the index from the queue's head and filter, so paging
        # through a deep queue cost the square of its depth
        priority, seq = order_after(after)
        return "(nprio, seq) > (%s, %s)", (-priority, seq)

    after_words = "(nprio, seq) > (:after_nprio, :after_seq)"

    def style(self) -> Style:
        return postgres_style()

    def key_scope(self, qid: int) -> str:
        # `+ 0`: the driver prepares statements, and a generic plan would find rows through
        # the order index (walking the whole queue) instead of by seq
        return f"queue_id + 0 = {int(qid)}"

    def find_many(self, ex: CursorExec, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        # a probe of the (id, queue_id) index per id, whatever the statistics say (LATERAL
        # with LIMIT: a nested loop, the subquery is not flattened; `+ 0`: the order index
        # cannot serve the queue). With `id IN (...)` on a table never analyzed PostgreSQL
        # took a queue of 1,000,000 rows for 4,000 and filtered all of it through the order
        # index for every thousand ids (0.37 s a lookup instead of 6 ms); with statistics
        # from before a queue grew, it took the queue for empty and did the same
        found: list[tuple[int, float]] = []
        for i in range(0, len(ids), 1000):
            for key, visible_at in ex.rows(
                "SELECT m.seq, m.visible_at FROM unnest(%s::text[]) AS x(id) CROSS JOIN"
                f" LATERAL (SELECT seq, visible_at FROM {self.prefix}messages WHERE id = x.id"
                f" AND {self.key_scope(qid)} LIMIT 1) m",
                (list(ids[i : i + 1000]),),
            ):
                found.append((int(key), float(visible_at)))
        return found

    def migrations(self) -> list[Step]:
        return server_migrations(TYPES, self.prefix)

    def advice(self, ex: CursorExec) -> list[str]:
        found = ex.one("SELECT current_setting('autovacuum')")
        if found is None or found[0] == "on":
            return []
        return [
            "autovacuum is off on this PostgreSQL server: the rows of deleted messages stay"
            " behind as dead tuples, receives slow down as they pile up at a queue's head, and"
            f" statistics are never gathered; turn autovacuum on, or run VACUUM ANALYZE"
            f" {self.prefix}messages regularly"
        ]

    def lock_schema(self, ex: CursorExec) -> None:
        ex.rows("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(self.prefix.encode()),))

    # -- writes ---------------------------------------------------------------------------

    def _insert(
        self, ex: CursorExec, queue: str, insert: str, params: list[Any], fresh: bool
    ) -> set[str] | None:
        """Run an insert of message rows, with the notification of listening processes;
        the ids inserted, or None when `fresh` (all of them: ids made for this attempt)."""
        if not fresh:
            # a speculative insert costs more: only where a sender chose the ids, or on retry
            insert += " ON CONFLICT (queue_id, id) DO NOTHING RETURNING id"
        if self.db.listened(ex):
            if fresh:
                insert += " RETURNING id"
            insert = f"WITH ins AS ({insert}) SELECT ins.id FROM ins, (SELECT pg_notify(%s, %s)) n"
            params += [self.db.channel, queue]
        cur = ex.cur
        cur.execute(insert, params)
        if fresh:
            return None
        return {message_id for (message_id,) in cur.fetchall()}

    def _rows_insert(
        self, ex: CursorExec, qid: int, queue: str, rows: Sequence[Fields], fresh: bool
    ) -> set[str] | None:
        params: list[Any]
        if len(rows) <= _VALUES_ROWS and all(_plain(row) for row in rows):
            # the common batch (no priority, attributes, group, deadline or compression):
            # five scalar parameters a row, which the driver dumps in C and, under its limit
            # of 50, converts once per batch size (arrays cost it ~0.5 ms more a statement)
            params = []
            for row in rows:
                params += (qid, row.id, row.body, row.sent_at, row.visible_at)
            return self._insert(ex, queue, _plain_insert(self.prefix, len(rows)), params, fresh)
        # one array per column: the same statement (prepared once) for any batch size
        insert = (
            f"INSERT INTO {self.prefix}messages ({self.send_columns})"
            f" SELECT * FROM unnest({_ARRAYS})"
        )
        values = [self.send_values(qid, row) for row in rows]
        params = [list(column) for column in zip(*values, strict=True)]
        return self._insert(ex, queue, insert, params, fresh)

    def insert_bare(
        self, ex: CursorExec, qid: int, queue: str, bare: Bare, retry: bool
    ) -> list[str]:
        ids = bare.ids or []
        if bare.priority or len(ids) > _VALUES_ROWS:
            rows = [
                Fields(i, body, None, None, None, bare.priority, None, bare.now, bare.visible_at, 0)
                for i, body in zip(ids, bare.bodies, strict=True)
            ]
            self._rows_insert(ex, qid, queue, rows, not retry)
            return ids
        params: list[Any] = []
        for i, body in zip(ids, bare.bodies, strict=True):
            params += (qid, i, body, bare.now, bare.visible_at)
        self._insert(ex, queue, _plain_insert(self.prefix, len(ids)), params, not retry)
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
        inserted = self._rows_insert(ex, qid, queue, rows, made and not retry)
        if made or inserted is None:
            return [row.id for row in rows]
        out: list[str | None] = []
        for row in rows:
            if row.id in inserted:
                inserted.discard(row.id)  # a second entry with the same id is its duplicate
                out.append(row.id)
            else:
                out.append(None)
        return out

    def insert_one(self, ex: CursorExec, qid: int, row: Fields) -> tuple[int, str] | None:
        if row.as_sent:
            columns, values = self.send_columns, self.send_values(qid, row)
        else:
            columns, values = self.insert_columns, self.all_values(qid, row)
        found = ex.one(
            f"INSERT INTO {self.prefix}messages ({columns}) VALUES ({marks(values)})"
            " ON CONFLICT (queue_id, id) DO NOTHING"
            " RETURNING seq",
            values,
        )
        if found is None:
            return None
        (seq,) = found
        return int(seq), row.id

    def insert_keyed(
        self, ex: CursorExec, qid: int, rows: Sequence[Fields], made: bool
    ) -> list[int | None]:
        if not made:
            if not all(row.as_sent and row.id for row in rows):
                return super().insert_keyed(ex, qid, rows, made)
            if len(rows) >= COPY_IDS_AT:
                # ids chosen by senders (an import), seldom held already: a binary COPY in a
                # savepoint, which a unique violation undoes for the statement below
                with suppress(psycopg.errors.UniqueViolation), ex.cur.connection.transaction():
                    return list(self._copy_rows(ex, qid, rows))
            # one statement of one array per column; the rows whose id the queue holds are
            # skipped, and so is a second row of one id
            values = [self.send_values(qid, row) for row in rows]
            stored = {
                str(message_id): int(seq)
                for seq, message_id in ex.rows(
                    f"INSERT INTO {self.prefix}messages ({self.send_columns})"
                    f" SELECT * FROM unnest({_ARRAYS})"
                    " ON CONFLICT (queue_id, id) DO NOTHING RETURNING seq, id",
                    [list(column) for column in zip(*values, strict=True)],
                )
            }
            return [stored.pop(row.id, None) for row in rows]
        return list(self._copy_rows(ex, qid, rows))

    def _copy_rows(self, ex: CursorExec, qid: int, rows: Sequence[Fields]) -> list[int]:
        """Insert rows with seqs reserved up front by one binary COPY (several times an
        INSERT's speed); their seqs."""
        p = self.prefix
        seqs = [
            int(seq)
            for (seq,) in ex.rows(
                f"SELECT nextval(pg_get_serial_sequence('{p}messages', 'seq'))"
                " FROM generate_series(1, %s)",
                (len(rows),),
            )
        ]
        copy = f"COPY {p}messages (seq, {self.send_columns}) FROM STDIN (FORMAT BINARY)"
        with ex.cur.copy(copy) as cp:
            cp.set_types(_COPY_TYPES)
            for seq, row in zip(seqs, rows, strict=True):
                cp.write_row((seq, *self.send_values(qid, row)))
        return seqs

    # -- claims and deletes ---------------------------------------------------------------

    def claim_ready(
        self, ex: CursorExec, qid: int, limit: int, terms: ClaimTerms, token: str
    ) -> list[Row]:
        now, horizon = terms.now, terms.horizon
        if qid in self.held.deep:  # its head is deep in messages in flight
            return ex.rows(
                self.held.claim_sql(qid, self._set_claimed, self._claim_columns),
                (now, horizon, terms.expires, limit) * 2 + (limit, *claim_params(terms, token)),
            )
        return self.held.watched(
            ex,
            qid,
            lambda: ex.rows(
                f"{self._ready_claim} RETURNING {self._claim_columns}",
                (*claim_params(terms, token), qid, now, horizon, terms.expires, limit),
            ),
            priority_at=6,
        )

    def walk_visible(
        self, ex: CursorExec, qid: int, after: int, now: float, page: int, lock: bool
    ) -> list[Row]:
        if qid in self.held.deep:
            cond, params = self.after(after)
            return ex.rows(self.held.walk_sql(qid, cond, lock), (now, *params, page) * 2 + (page,))
        return self.held.watched(
            ex,
            qid,
            lambda: super(PostgresDialect, self).walk_visible(ex, qid, after, now, page, lock),
            priority_at=1,
        )

    def create_queue(self, ex: CursorExec, qid: int) -> None:
        super().create_queue(ex, qid)
        if not self.held.rows:
            for statement in self.held.statements(qid, concurrently=False):
                ex.run(statement)
            self.held.deep.add(qid)

    def drop_queue(self, ex: CursorExec, qid: int) -> None:
        super().drop_queue(ex, qid)
        self.held.drop(ex, qid)

    def claim_keys(
        self, ex: CursorExec, qid: int, keys: Sequence[int], terms: ClaimTerms, token: str
    ) -> list[Row]:
        return ex.rows(
            f"UPDATE {self.prefix}messages m SET {self._set_claimed} WHERE m.queue_id + 0 = %s"
            f" AND m.seq = ANY(%s::bigint[]) RETURNING {self._claim_columns}",
            (*claim_params(terms, token), qid, int_array(keys)),
        )

    def delete_held(
        self, ex: CursorExec, qid: int, token: str, keys: Sequence[int], exact: bool
    ) -> Collection[int]:
        rows = ex.rows(
            f"DELETE FROM {self.prefix}messages WHERE queue_id + 0 = %s AND token = %s"
            " AND seq = ANY(%s::bigint[]) RETURNING seq",
            (qid, token, int_array(keys)),
        )
        return [int(seq) for (seq,) in rows]

    def notify_waiters(self, ex: CursorExec, queue: str) -> None:
        if self.db.listened(ex):
            ex.rows("SELECT pg_notify(%s, %s)", (self.db.channel, queue))

    # -- bulk -----------------------------------------------------------------------------

    def record_leases(
        self,
        ex: CursorExec,
        qid: int,
        stream: str,
        lease: int,
        token: str,
        rows: Sequence[tuple[int, str]],
    ) -> None:
        # one array per column (unnest): several times faster than VALUES lists
        for i in range(0, len(rows), 1000):
            chunk = rows[i : i + 1000]
            ex.run(
                self.sql(RECORD_LEASES),
                {
                    "qid": qid,
                    "stream": stream,
                    "lease": lease,
                    "token": token,
                    "row_keys": [key for key, _ in chunk],
                    "message_ids": [message_id for _, message_id in chunk],
                },
            )

    def lease_claim(
        self, ex: CursorExec, qid: int, stream: str, lease: int, limit: int,
        terms: ClaimTerms, token: str,
    ) -> int | None:  # fmt: skip
        # one statement claims the head of a plain queue and records the claims in the
        # lease (no bodies sent back, no messages built)
        now = terms.now
        claim = (*claim_params(terms, token), qid, now, terms.horizon, terms.expires, limit)
        return ex.run(
            f"WITH claimed AS ({self._ready_claim} RETURNING m.seq, m.id)"
            f" INSERT INTO {self.prefix}leases (queue_id, stream, lease, row_key, message_id,"
            " token) SELECT %s, %s, %s, seq, id, %s FROM claimed ON CONFLICT"
            " (queue_id, stream, lease, row_key) DO UPDATE SET"
            " message_id = excluded.message_id, token = excluded.token",
            (*claim, qid, stream, lease, token),
        )
