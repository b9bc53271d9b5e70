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
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from ...clock import Clock
from ...exceptions import InvalidInput
from ...forks import renew_after_fork, renewed
from ...ids import rowid_of
from ...notify import HUB
from ...urls import redact
from ..rules import ClaimTerms
from .connections import (
    LOCK_TIMEOUT,
    CursorExec,
    ServerConnections,
    Stopped,
    first_line,
    lock_timeout,
)
from .dialect import Bare, ServerDialect, table_names
from .inflight import claim_values
from .pg_held import Borrowed, ConnectionsBusy, HeldConnections
from .pg_inflight import HeldIndexes
from .pipeline_statements import RECORD_LEASES
from .rows import Fields, Row
from .schema import MESSAGES_FILLFACTOR, ServerTypes
from .server_statements import (
    POSTGRES_ANY_LISTENER,
    POSTGRES_ARRAY_ROWS,
    POSTGRES_AT_HOMES,
    POSTGRES_AUTOVACUUM,
    POSTGRES_CLAIM_KEYS,
    POSTGRES_CLAIM_READY,
    POSTGRES_COPY_ROWS,
    POSTGRES_COPY_STAGING,
    POSTGRES_DEEP_CLAIM,
    POSTGRES_DEEP_WALK,
    POSTGRES_DEEP_WALK_LOCKING,
    POSTGRES_DELETE_HELD,
    POSTGRES_FIND_MADE,
    POSTGRES_FIND_MANY,
    POSTGRES_HELD_INDEXES_NOW,
    POSTGRES_KEYED_ROWS,
    POSTGRES_LEASE_CLAIM,
    POSTGRES_LISTEN,
    POSTGRES_LISTENER_BEAT,
    POSTGRES_LISTENER_GONE,
    POSTGRES_LOCK_SCHEMA,
    POSTGRES_MADE_ARRAY_ROWS,
    POSTGRES_MADE_PLAIN_ROWS,
    POSTGRES_MADE_SINCE,
    POSTGRES_NEW_MOVED_ROW,
    POSTGRES_NEW_SENT_ROW,
    POSTGRES_NOTIFY,
    POSTGRES_PLAIN_ROWS,
    POSTGRES_PUBLISH_PLAIN,
    POSTGRES_RESERVE_SEQS,
    POSTGRES_SESSION_SETTINGS,
)
from .statement import Compiler, Statement, Style, each, execute, postgres_style, spread
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
    message_options=f" WITH (fillfactor = {MESSAGES_FILLFACTOR})",
    partial_where=" WHERE deadline IS NOT NULL",
    long_key='VARCHAR(512) COLLATE "C"',
    # the staging table: no WAL for what a job stages (a crash empties it, and publishing
    # then refuses: pipeline.py)
    unlogged="UNLOGGED ",
    staging_key="",
)

# A queue's statistics are always stale (it empties and fills faster than ANALYZE runs),
# and on a fresh table the planner guesses a handful of rows: it would then claim by a
# bitmap scan of the whole queue and a sort, whose cost grows with depth. Without bitmap
# scans and sorts, the only plan left walks the order index from the queue's head. No JIT:
# the store's statements are short, and estimates inflated by stale statistics made
# PostgreSQL compile a lookup of 1,000 ids that runs in 5 ms for 55 ms first. Generic plans
# for the statements the driver prepares: the statements are written so that their plan
# cannot depend on the values or the statistics (`key_scope`, row comparisons, LATERAL
# probes), and PostgreSQL's own choice between a generic and a custom plan, made on a
# table's stale size, made a receive from a queue of 1,000,000 messages a quarter slower
# than from 10,000 (with either kind forced, the same at both). Each connection sets them
# (POSTGRES_SESSION_SETTINGS, with lock_timeout) once it is made: as startup options
# (`-c name=value`) they would be refused by connection poolers such as PgBouncer.

# a listening process refreshes its row this often; a row older than the TTL is ignored
LISTENER_BEAT = 5.0
LISTENER_TTL = 15.0

# how long a connection stays with the store between operations before it goes back to
# the pool, which renews connections past their lifetime
KEEP_SECONDS = 60.0
POOL_TIMEOUT = 5.0  # how long an operation waits for a connection when all are busy
# libpq's settings for a database that stops answering without closing the connection (a
# host gone, a network partition): a statement sent and never acknowledged fails after 20 s,
# an idle or waiting connection after 25 s without a sign of life from the server's host, a
# connection attempt after 10 s; else each waits out TCP's own timers, a quarter of an hour
# and more. Only where the store URL does not set them.
NETWORK_DEFAULTS = {
    "connect_timeout": "10",
    "tcp_user_timeout": "20000",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}

# binary parameters (%b): arrays cross without text quoting and escaping
# rows with ids chosen by senders from which an insert tries COPY first (a savepoint and a
# reservation of seqs cost two more round trips: worth it for bulk moves, not for a send)
COPY_IDS_AT = 100
_VALUES_ROWS = 10  # plain batches up to this size insert with a VALUES list
_COPY_TYPES = [
    "int8", "int8", "int4", "text", "bytea", "text", "text", "text", "float8", "float8", "float8",
    "int2",
]  # fmt: skip


class _Short(Exception):
    """The stages held fewer rows than they counted."""


def from_url(rest: str, params: dict[str, str], *, clock: Clock) -> SQLStore[CursorExec]:
    params = dict(params)
    try:
        prefix = params.pop("prefix", "conveyor_")
        pool_size = int(params.pop("pool_size", 10))
        reconnect_timeout = float(params.pop("reconnect_timeout", 60))
        poll_interval = float(params.pop("poll_interval", 0.5))
        waits = lock_timeout("postgresql", params)
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
        lock_timeout=waits,
    )
    return SQLStore(
        scheme="postgresql",
        key=f"{db.display}#{db.prefix}",
        dialect=PostgresDialect(db),
        db=db,
        clock=clock,
        poll_interval=poll_interval,
    )


# what PostgreSQL answers a connection at its limits (max_connections; the reserved slots;
# a role's or a database's CONNECTION LIMIT): libpq reports it without its SQLSTATE
CROWDED_WORDS = (
    "too many clients",
    "remaining connection slots are reserved",
    "too many connections for",
)


def _crowded(text: str) -> bool:
    return any(words in text for words in CROWDED_WORDS)


def int_array(values: Sequence[int]) -> str:
    """A bigint[] parameter as its text form: a tenth of the driver's cost of dumping a list."""
    return "{%s}" % ",".join(map(str, values))  # noqa: UP031 - the braces would need doubling


class PostgresConnections(ServerConnections):
    """Held connections on a psycopg pool; LISTEN for wake-ups across processes."""

    scheme = "postgresql"
    driver_errors = (psycopg.Error, PoolTimeout)
    lock_hint = "pg_stat_activity, pg_locks"
    timeout_setting = "statement_timeout"

    def __init__(
        self,
        conninfo: str,
        *,
        prefix: str,
        pool_size: int,
        reconnect_timeout: float,
        lock_timeout: float = LOCK_TIMEOUT,
    ) -> None:
        if pool_size < 1:
            raise InvalidInput(f"pool_size must be at least 1, got {pool_size}")
        given = conninfo_to_dict(conninfo)
        network = {k: v for k, v in NETWORK_DEFAULTS.items() if k not in given}
        self.conninfo = make_conninfo(conninfo, **network)
        self.display = redact(conninfo)
        self.prefix = prefix
        self.channel = f"{prefix}messages"
        names = {**table_names(prefix), "channel": self.channel}
        self.sql = Compiler("postgresql", postgres_style(), lambda qid: names, lambda qid: {})
        self.reconnect_timeout = reconnect_timeout
        self.lock_timeout = lock_timeout
        self.pool_size = pool_size
        self._closed = threading.Event()
        self._connections()
        renew_after_fork(self)

    def _connections(self) -> None:
        """A pool and a listener of this process's own, made on first use."""
        self._pool = ConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=self.pool_size,
            kwargs={"autocommit": True},
            configure=self.configure,
            timeout=POOL_TIMEOUT,
            open=False,
            name=f"conveyor-{self.prefix}",
        )
        self._opened = False
        self._lock = threading.Lock()
        self._held = HeldConnections(self._pool, self.pool_size, POOL_TIMEOUT, KEEP_SECONDS)
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        self._listener_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._listened_at = -1e18  # when the listeners table was last read
        self._anyone_listens = True

    def forked(self) -> None:
        """A forked child: the parent's connections and listener forgotten (forks.py)."""
        self._closed = renewed(self._closed)
        self._connections()

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        """Give a new connection (autocommit) the store's session settings."""
        settings = {"lock_timeout": str(round(self.lock_timeout * 1000))}
        execute(conn, self.sql(POSTGRES_SESSION_SETTINGS), settings)

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
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
            return "read-only"
        if isinstance(exc, ConnectionsBusy):
            return "busy"
        if isinstance(exc, psycopg.errors.TooManyConnections) or (
            isinstance(exc, psycopg.OperationalError) and _crowded(str(exc))
        ):  # no connection was made
            return "crowded"
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | PoolTimeout):
            return "disconnect"
        return None

    def _stopped(self, exc: BaseException) -> Stopped | None:
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return "lock"
        if isinstance(exc, psycopg.errors.QueryCanceled):  # statement_timeout, a cancel
            return "cancelled"
        if isinstance(exc, psycopg.errors.DiskFull):
            return "full"
        # a statement the driver prepared on this session, gone or there twice: the
        # session is a pooler's, shared transaction by transaction
        if isinstance(
            exc, psycopg.errors.InvalidSqlStatementName | psycopg.errors.DuplicatePreparedStatement
        ):
            return "shared"
        return None

    def _on_disconnect(self) -> None:
        # drop every idle connection that died with the server, not one per retry
        self._held.release()
        with suppress(psycopg.Error):
            self._pool.check()

    def _why_unreachable(self, exc: BaseException) -> BaseException:
        # the pool connects in the background and says only that it had no connection
        # to give: a connection of this call's own hears the server's reason
        if not isinstance(exc, PoolTimeout) or isinstance(exc, ConnectionsBusy):
            return exc
        try:
            self._connect_once()
        except psycopg.Error as refused:
            return refused
        return exc

    def _on_read_only(self) -> None:
        self._held.renew()  # they are alive, only led to the wrong host

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
            found = ex.one(self.sql(POSTGRES_ANY_LISTENER), {"since": time.time() - LISTENER_TTL})
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
        beat_sql = self.sql(POSTGRES_LISTENER_BEAT)
        while not self._closed.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(self.sql(POSTGRES_LISTEN))
                    self._listening.set()
                    if lost:
                        log.warning("listening for sends on %s again", self.display)
                        HUB.wake_all()  # sends may have gone unheard while the link was down
                    lost, delay = False, 0.1
                    beat = 0.0
                    while not self._closed.is_set():
                        if time.monotonic() - beat >= LISTENER_BEAT:
                            beat = time.monotonic()
                            beat_params = {"id": self._listener_id, "now": time.time()}
                            execute(conn, beat_sql, beat_params)
                        for note in conn.notifies(timeout=1.0):
                            HUB.notify(key, note.payload)
                    execute(conn, self.sql(POSTGRES_LISTENER_GONE), {"id": self._listener_id})
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
    types = TYPES
    single_insert = True
    single_claim = True
    deletes_leased = True

    def __init__(self, db: PostgresConnections) -> None:
        super().__init__(db.prefix)
        self.db = db
        self.held = HeldIndexes(db.conninfo, self.prefix, db.configure, self.sql)
        # this instance's own `made_floor`, raised by `_made`: a floor, since the sequence
        # that gives the keys only grows
        self.made_floor = 0

    @property
    def single_delete(self) -> bool:
        return True

    # a row comparison is one range of the order index; the OR form the other stores use
    # made PostgreSQL walk the index from the queue's head and filter, so paging through a
    # deep queue cost the square of its depth
    after_words = "(nprio, seq) > (:after_nprio, :after_seq)"

    def style(self) -> Style:
        return postgres_style()

    def slot_names(self, qid: int) -> dict[str, str]:
        names = super().slot_names(qid)
        if qid:
            names["fresh_index"], names["held_index"] = self.held.names(qid)
        return names

    def key_scope(self, qid: int) -> str:
        # `+ 0`: the driver prepares statements, and a generic plan would find rows through
        # the order index (walking the whole queue) instead of by seq
        return f"queue_id + 0 = {int(qid)}"

    def find(self, ex: CursorExec, qid: int, message_id: str) -> int | None:
        seq = rowid_of(message_id)
        if seq is not None:
            found = ex.one(self.sql(POSTGRES_FIND_MADE, qid), {"seq": seq, "id": message_id})
            if found is not None:
                return int(found[0])
        return super().find(ex, qid, message_id)

    def find_many(self, ex: CursorExec, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        # per id, a probe of the key its id carries (where the store made it) and of the
        # (id, queue_id) index of ids chosen by senders, whatever the statistics say (LATERAL
        # with LIMIT: a nested loop, the subquery is not flattened; `+ 0`: the order index
        # cannot serve the queue). With `id IN (...)` on a table never analyzed PostgreSQL
        # took a queue of 1,000,000 rows for 4,000 and filtered all of it through the order
        # index for every thousand ids (0.37 s a lookup instead of 6 ms); with statistics
        # from before a queue grew, it took the queue for empty and did the same
        found: list[tuple[int, float]] = []
        for i in range(0, len(ids), 1000):
            part = list(ids[i : i + 1000])
            values = {"ids": part, "seqs": [rowid_of(message_id) for message_id in part]}
            for key, visible_at in ex.rows(self.sql(POSTGRES_FIND_MANY, qid), values):
                found.append((int(key), float(visible_at)))
        return found

    def stored_before(
        self, ex: CursorExec, qid: int, ids: Sequence[str], made: bool, mark: int
    ) -> list[str] | None:
        if not made:
            return super().stored_before(ex, qid, ids, made, mark)
        # the ids an insert made carry the random digits of the ids made for it beforehand,
        # and keys above any this process was given before its first attempt
        tails = [i[-12:] for i in ids]
        values = {"qid": qid, "floor": mark, "tails": tails}
        stored = {
            str(i)[-12:]: str(i) for (i,) in ex.rows(self.sql(POSTGRES_MADE_SINCE, qid), values)
        }
        return [stored[t] for t in tails] if all(t in stored for t in tails) else None

    def held_at_home(self, ex: CursorExec, qid: int, ids: Sequence[str]) -> set[str]:
        # ids this store made carry the key of their row, which no index of ids holds
        homes = [(seq, i) for i in ids if (seq := rowid_of(i)) is not None]
        if not homes:
            return set()
        values = {"seqs": [seq for seq, _ in homes], "ids": [i for _, i in homes]}
        return {str(i) for (i,) in ex.rows(self.sql(POSTGRES_AT_HOMES, qid), values)}

    def advice(self, ex: CursorExec) -> list[str]:
        found = ex.one(self.sql(POSTGRES_AUTOVACUUM))
        if found is None or found[0] == "on":
            return []
        return [
            "autovacuum is off on this PostgreSQL server: the rows of deleted messages stay"
            " behind as dead tuples, receives slow down as they pile up at a queue's head, and"
            f" statistics are never gathered; turn autovacuum on, or run VACUUM ANALYZE"
            f" {self.prefix}messages regularly"
        ]

    def lock_schema(self, ex: CursorExec) -> None:
        ex.rows(self.sql(POSTGRES_LOCK_SCHEMA), {"key": zlib.crc32(self.prefix.encode())})

    # -- writes ---------------------------------------------------------------------------

    def _insert(
        self,
        ex: CursorExec,
        qid: int,
        queue: str,
        inserts: dict[str, Statement],
        n: int,
        values: dict[str, Any],
    ) -> list[Any]:
        """Run an insert of message rows (`inserts`: server_statements.py's `_pg_chosen` or
        `_pg_made`), with the notification of listening processes; the rows it returns."""
        kind = "plain"
        if self.db.listened(ex):
            kind = "notify"
            values["channel"], values["queue"] = self.db.channel, queue
        return ex.rows(self.sql(inserts[kind], qid, n), values)

    def _rows_insert(
        self, ex: CursorExec, qid: int, queue: str, rows: Sequence[Fields], made: bool
    ) -> list[Any]:
        """Rows as sent, in one statement: `made`, their ids made by the insert from their
        keys (the ids made for them beforehand give the random digits); else ids chosen by
        senders, skipping those the queue holds. The rows the statement returns."""
        if len(rows) <= _VALUES_ROWS and all(_plain(row) for row in rows):
            # the common batch (no priority, attributes, group, deadline or compression):
            # four scalar parameters a row, which the driver dumps in C and, under its limit
            # of 50, converts once per batch size (arrays cost it ~0.5 ms more a statement)
            own: list[tuple[Any, ...]]
            if made:
                names, plain = _MADE, POSTGRES_MADE_PLAIN_ROWS
                own = [(_rand(r.id), r.body, r.sent_at, r.visible_at) for r in rows]
            else:
                names, plain = _PLAIN, POSTGRES_PLAIN_ROWS
                own = [(r.id, r.body, r.sent_at, r.visible_at) for r in rows]
            values = each(names, own)
            values["qid"] = qid
            return self._insert(ex, qid, queue, plain, len(rows), values)
        # one array per column: the same statement (prepared once) for any batch size
        arrays = _arrays(qid, rows)
        if made:
            arrays["rands"] = [_rand(i) for i in arrays.pop("ids")]
            return self._insert(ex, qid, queue, POSTGRES_MADE_ARRAY_ROWS, 0, arrays)
        return self._insert(ex, qid, queue, POSTGRES_ARRAY_ROWS, 0, arrays)

    def _made(self, returned: list[Any]) -> list[str]:
        """The ids an insert that made them returned with their keys, in the rows' order
        (the keys'); the highest key raises `made_floor`."""
        made = sorted(returned)
        if made:
            self.made_floor = max(self.made_floor, int(made[-1][0]))
        return [str(message_id) for _, message_id in made]

    def insert_bare(
        self, ex: CursorExec, qid: int, queue: str, bare: Bare, retry: bool
    ) -> list[str]:
        ids = bare.ids or []
        if bare.priority or len(ids) > _VALUES_ROWS:
            rows = [
                Fields(i, body, None, None, None, bare.priority, None, bare.now, bare.visible_at, 0)
                for i, body in zip(ids, bare.bodies, strict=True)
            ]
            return self._made_rows(ex, qid, queue, rows)
        pairs = zip(ids, bare.bodies, strict=True)
        values = each(_MADE, [(_rand(i), body, bare.now, bare.visible_at) for i, body in pairs])
        values["qid"] = qid
        return self._made(self._insert(ex, qid, queue, POSTGRES_MADE_PLAIN_ROWS, len(ids), values))

    def _made_rows(self, ex: CursorExec, qid: int, queue: str, rows: Sequence[Fields]) -> list[str]:
        """Rows whose ids the insert makes; the ids made, in the rows' order."""
        return self._made(self._rows_insert(ex, qid, queue, rows, True))

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
        if made:  # (a retry comes here only after an attempt that surely stored nothing)
            return list(self._made_rows(ex, qid, queue, rows))
        held = self.held_at_home(ex, qid, [row.id for row in rows])
        kept = [row for row in rows if row.id not in held] if held else rows
        found = self._rows_insert(ex, qid, queue, kept, False) if kept else []
        inserted = {str(message_id) for (message_id,) in found}
        out: list[str | None] = []
        for row in rows:
            if row.id in inserted:
                inserted.discard(row.id)  # a second entry with the same id is its duplicate
                out.append(row.id)
            else:
                out.append(None)
        return out

    def insert_one(self, ex: CursorExec, qid: int, row: Fields) -> tuple[int, str] | None:
        if self.held_at_home(ex, qid, [row.id]):
            return None
        if row.as_sent:
            statement, values = POSTGRES_NEW_SENT_ROW, self.sent_named(qid, row)
        else:
            statement, values = POSTGRES_NEW_MOVED_ROW, self.moved_named(qid, row)
        found = ex.one(self.sql(statement, qid), values)
        if found is None:
            return None
        (seq,) = found
        return int(seq), row.id

    def insert_keyed(
        self, ex: CursorExec, qid: int, rows: Sequence[Fields], made: bool
    ) -> list[int | None]:
        if made:
            return list(self._copy_rows(ex, qid, rows))
        if not all(row.as_sent and row.id for row in rows):
            return super().insert_keyed(ex, qid, rows, made)  # insert_one's, row by row
        held = self.held_at_home(ex, qid, [row.id for row in rows])
        kept = [row for row in rows if row.id not in held] if held else rows
        keys = iter(self._chosen_keyed(ex, qid, kept) if kept else [])
        return [None if row.id in held else next(keys) for row in rows]

    def _chosen_keyed(self, ex: CursorExec, qid: int, rows: Sequence[Fields]) -> list[int | None]:
        """Rows as sent with ids chosen by senders, none held at home; per row its key, or
        None where the queue holds its id."""
        if len(rows) >= COPY_IDS_AT:
            # ids chosen by senders (an import), seldom held already: a binary COPY in a
            # savepoint, which a unique violation undoes for the statement below
            with suppress(psycopg.errors.UniqueViolation), ex.cur.connection.transaction():
                return list(self._copy_rows(ex, qid, rows))
        # one statement of one array per column; the rows whose id the queue holds are
        # skipped, and so is a second row of one id
        stored = {
            str(message_id): int(seq)
            for seq, message_id in ex.rows(self.sql(POSTGRES_KEYED_ROWS, qid), _arrays(qid, rows))
        }
        return [stored.pop(row.id, None) for row in rows]

    def stage_aside(self, ex: CursorExec, tag: int, start: int, rows: Sequence[Fields]) -> None:
        """One binary COPY into the (unlogged) staging table."""
        with ex.cur.copy(self.sql(POSTGRES_COPY_STAGING)) as cp:
            cp.set_types(_COPY_TYPES)  # (tag, number) as (seq, queue id): two int8s
            for i, row in enumerate(rows, start):
                cp.write_row((tag, i, *self.send_row(row)))

    def publish_aside(
        self, ex: CursorExec, qid: int, tags: Sequence[int], now: float, staged: int
    ) -> int | None:
        """A plain INSERT in a savepoint first (an import seldom meets an id the queue
        holds), whose count of rows is also the stages' count; where it meets one, the
        statement that skips them."""
        if not tags:
            return 0
        values = {"qid": qid, "now": now, **spread("tags", tags)}
        try:
            with ex.cur.connection.transaction():
                copied = ex.run(self.sql(POSTGRES_PUBLISH_PLAIN, qid, len(tags)), values)
                if copied != staged:
                    raise _Short  # (undone with the savepoint)
                return copied
        except psycopg.errors.UniqueViolation:
            return super().publish_aside(ex, qid, tags, now, staged)
        except _Short:
            return None

    def _copy_rows(self, ex: CursorExec, qid: int, rows: Sequence[Fields]) -> list[int]:
        """Insert rows with seqs reserved up front by one binary COPY (several times an
        INSERT's speed); their seqs."""
        seqs = [
            int(seq)
            for (seq,) in ex.rows(
                self.sql(POSTGRES_RESERVE_SEQS),
                {"table": f"{self.prefix}messages", "n": len(rows)},
            )
        ]
        with ex.cur.copy(self.sql(POSTGRES_COPY_ROWS, qid)) as cp:
            cp.set_types(_COPY_TYPES)
            for seq, row in zip(seqs, rows, strict=True):
                cp.write_row((seq, *self.send_values(qid, row)))
        return seqs

    # -- claims and deletes ---------------------------------------------------------------

    def claim_ready(
        self, ex: CursorExec, qid: int, limit: int, terms: ClaimTerms, token: str
    ) -> list[Row]:
        values = claim_values(terms, token)
        values.update(qid=qid, limit=limit)
        if qid in self.held.deep:  # its head is deep in messages in flight
            return self.held.deep_rows(
                ex, qid, terms.now, lambda: ex.rows(self.sql(POSTGRES_DEEP_CLAIM, qid), values)
            )
        return self.held.watched(
            ex, qid, lambda: ex.rows(self.sql(POSTGRES_CLAIM_READY, qid), values), priority_at=6
        )

    def walk_visible(
        self, ex: CursorExec, qid: int, after: int, now: float, page: int, lock: bool
    ) -> list[Row]:
        if qid in self.held.deep:
            statement = POSTGRES_DEEP_WALK_LOCKING if lock else POSTGRES_DEEP_WALK
            values = {"now": now, "limit": page, **self.after_values(after)}
            return self.held.deep_rows(
                ex, qid, now, lambda: ex.rows(self.sql(statement, qid), values)
            )
        return self.held.watched(
            ex,
            qid,
            lambda: super(PostgresDialect, self).walk_visible(ex, qid, after, now, page, lock),
            priority_at=1,
        )

    def create_queue(self, ex: CursorExec, qid: int) -> None:
        super().create_queue(ex, qid)
        if not self.held.rows:
            for statement in POSTGRES_HELD_INDEXES_NOW:
                ex.run(self.sql(statement, qid))
            self.held.deep.add(qid)

    def drop_queue(self, ex: CursorExec, qid: int) -> None:
        super().drop_queue(ex, qid)
        self.held.drop(ex, qid)

    def claim_keys(
        self, ex: CursorExec, qid: int, keys: Sequence[int], terms: ClaimTerms, token: str
    ) -> list[Row]:
        values = claim_values(terms, token)
        values.update(qid=qid, keys=int_array(keys))
        return ex.rows(self.sql(POSTGRES_CLAIM_KEYS, qid), values)

    def delete_held(
        self, ex: CursorExec, qid: int, token: str, keys: Sequence[int], exact: bool
    ) -> Collection[int]:
        rows = ex.rows(
            self.sql(POSTGRES_DELETE_HELD, qid),
            {"qid": qid, "token": token, "keys": int_array(keys)},
        )
        return [int(seq) for (seq,) in rows]

    def notify_waiters(self, ex: CursorExec, queue: str) -> None:
        if self.db.listened(ex):
            ex.rows(self.sql(POSTGRES_NOTIFY), {"channel": self.db.channel, "queue": queue})

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
        values = claim_values(terms, token)
        values.update(qid=qid, limit=limit, stream=stream, lease=lease)
        return ex.run(self.sql(POSTGRES_LEASE_CLAIM, qid), values)


_PLAIN = ("id", "body", "sent_at", "visible_at")  # a plain row's own values
_MADE = ("r", "body", "sent_at", "visible_at")  # ... where the insert makes its id


def _rand(made_before: str) -> int:
    """The random bits of an id the insert makes from those of the id made for its row
    beforehand (`conveyor.ids.new_ids`): its last 12 digits the same, which is how a retry
    finds the row an attempt whose answer was lost stored."""
    return int(made_before[-12:], 16) | (int(made_before[20:23], 16) & 0x7FF) << 48


def _arrays(qid: int, rows: Sequence[Fields]) -> dict[str, Any]:
    """Rows as sent, one array a column (server_statements.py's `_ARRAYS`)."""
    return {
        "qids": [qid] * len(rows),
        "nprios": [-row.priority for row in rows],
        "ids": [row.id for row in rows],
        "bodies": [row.body for row in rows],
        "attributes": [row.attributes for row in rows],
        "group_ids": [row.group_id for row in rows],
        "dedup_ids": [row.dedup_id for row in rows],
        "deadlines": [row.deadline for row in rows],
        "sent_ats": [row.sent_at for row in rows],
        "visible_ats": [row.visible_at for row in rows],
        "compressed": [row.compressed for row in rows],
    }
