"""Embedded SQLite store: the default.

URL: ``sqlite:///relative/or/absolute/path.db`` (``sqlite:////abs/path.db`` for an absolute
path). Options: ``durability=full`` (default: an acknowledged send survives a power cut;
``synchronous=FULL``) or ``durability=normal`` (survives a process crash; ``synchronous=NORMAL``),
``busy_timeout`` in seconds (default 60), ``keep_heap=true`` (see `conveyor.tuning`).

One file holds every queue, in WAL mode. Any number of threads and processes on one host may
share it: every change runs inside ``BEGIN IMMEDIATE``, so claims are atomic. Each queue has
a table of its own whose rowid is the delivery order (priority band, then sequence), so a
receive walks the table from its head and its cost does not grow with queue depth; a queue
whose head fills with messages in flight gets two partial indexes the first time a receive
steps over thousands of them (`SQLiteDialect.claim_ready`). Ids the store makes up carry
their rowid (`conveyor.ids.row_id`), so finding one is a primary-key lookup; only ids chosen
by senders, and messages that changed rows (moved, re-prioritised), are in the partial
unique index ``by_id`` (``indexed`` = 1). The schema is versioned (``PRAGMA user_version``)
and migrated on first use. Implements every contract.

Connections, transactions and the order of writes: `conveyor.backends.sql.sqlite_connections`.
"""

from __future__ import annotations

import functools
import random
import sqlite3
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ...clock import Clock
from ...exceptions import InvalidInput
from ...ids import row_id, row_ids, rowid_of
from ...urls import check_options
from ..base import WouldBlock
from ..rules import BAND, ClaimTerms, band
from .connections import marks
from .dialect import Bare, Dialect, NotAllHeld
from .inflight import CLAIMED_UNTIL, FRESH, HELD, READY, claim_params
from .rows import Fields, Row
from .schema import SQLITE_MIGRATIONS, Step
from .sqlite_connections import SQLiteConnections, SQLiteExec, qmarks
from .store import SQLStore

# rows per statement of `_bare_insert` and of rows written as sent
BARE_ROWS = 50
LOOKUP_ROWS = 500  # ids per statement when looking many up
HELD_INDEX_AFTER = 20_000  # see SQLiteDialect.held_index_after

COLUMNS = (
    "rowid, id, body, attributes, group_id, dedup_id, priority, deadline, sent_at, visible_at,"
    " receive_count, first_received_at, version, source_queue, error, compressed"
)
# what a send writes (the receive state keeps its defaults)
SEND_COLUMNS = (
    "rowid, id, body, attributes, group_id, dedup_id, priority, deadline, sent_at, visible_at,"
    " compressed, indexed"
)
ALL_COLUMNS = f"{SEND_COLUMNS}, receive_count, first_received_at, version, source_queue, error"


def file_of(rest: str) -> str:
    path = rest[1:] if rest.startswith("/") else rest
    if not path:
        raise InvalidInput("sqlite URL needs a file: sqlite:///path/to/conveyor.db")
    return path


def backup(rest: str, params: dict[str, str], dest: str) -> int:
    """An online backup of the store's file to `dest` (sqlite_backup.py); bytes written."""
    from . import sqlite_backup

    return sqlite_backup.backup(file_of(rest), dest)


def restore(rest: str, params: dict[str, str], source: str, *, replace: bool) -> int:
    """The backup at `source` copied into the store's file (sqlite_backup.py)."""
    from . import sqlite_backup

    return sqlite_backup.restore(source, file_of(rest), replace=replace)


def from_url(rest: str, params: dict[str, str], *, clock: Clock) -> SQLStore[SQLiteExec]:
    path = file_of(rest)
    check_options("sqlite", params, ("durability", "busy_timeout", "keep_heap"))
    try:
        busy_timeout = float(params.get("busy_timeout", 60))
    except ValueError:
        raise InvalidInput(
            f"busy_timeout must be a number of seconds, got {params['busy_timeout']!r}"
        ) from None
    return open_sqlite(
        path,
        durability=params.get("durability", "full"),
        busy_timeout=busy_timeout,
        heap=params.get("keep_heap", "false").lower() in ("1", "true", "yes"),
        clock=clock,
    )


def open_sqlite(
    path: str,
    *,
    durability: str = "full",
    busy_timeout: float = 60.0,
    heap: bool = False,
    clock: Clock,
) -> SQLStore[SQLiteExec]:
    db = SQLiteConnections(path, durability=durability, busy_timeout=busy_timeout, heap=heap)
    return SQLStore(
        scheme="sqlite",
        key=f"sqlite:{db.path}",
        dialect=SQLiteDialect(db.on_loop),
        db=db,
        clock=clock,
    )


def _places(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


class SQLiteDialect(Dialect[SQLiteExec]):
    """SQLite: a table per queue, the rowid its delivery order."""

    name = "sqlite"
    totals_with_writes = True
    key = "rowid"
    order = "rowid"
    columns = COLUMNS
    priority = "priority"
    polls_idle = True

    def __init__(self, on_loop: Callable[[], bool] = lambda: False) -> None:
        # VM steps of one claim (or look for a ready row) past which a queue's head is
        # indexed (claim_ready): some 5,000 rows stepped over; 0: every queue, at its
        # first claim
        self.held_index_after = HELD_INDEX_AFTER
        self.on_loop = on_loop  # whether a call runs on an event loop's thread (inline)
        self.held_indexed: set[int] = set()  # queues known to have the indexes
        self.held_wanted: set[int] = set()  # queues to index at their next claim

    def messages(self, qid: int) -> str:
        return f"q{int(qid)}"

    def scope(self, qid: int) -> str:
        return "1 = 1"

    def sequence(self, key: int, priority: int) -> int:
        return key

    def after(self, after: int) -> tuple[str, tuple[Any, ...]]:
        return "rowid > %s", (after,)

    # -- schema ---------------------------------------------------------------------------

    def migrations(self) -> list[Step]:
        return list(SQLITE_MIGRATIONS)

    def schema_version(self, ex: SQLiteExec) -> int:
        (version,) = ex.conn.execute("PRAGMA user_version").fetchone()
        return int(version)

    def set_schema_version(self, ex: SQLiteExec, version: int) -> None:
        ex.conn.execute(f"PRAGMA user_version = {int(version)}")

    def create_queue(self, ex: SQLiteExec, qid: int) -> None:
        t = self.messages(qid)
        for statement in (
            f"""CREATE TABLE {t} (
                id TEXT NOT NULL,
                body BLOB NOT NULL,
                attributes TEXT,
                group_id TEXT,
                dedup_id TEXT,
                priority INTEGER NOT NULL DEFAULT 0,
                deadline REAL,
                sent_at REAL NOT NULL,
                visible_at REAL NOT NULL,
                receive_count INTEGER NOT NULL DEFAULT 0,
                first_received_at REAL,
                version INTEGER NOT NULL DEFAULT 1,
                token TEXT,
                source_queue TEXT,
                error TEXT,
                compressed INTEGER NOT NULL DEFAULT 0,
                indexed INTEGER NOT NULL DEFAULT 0
            )""",
            f"CREATE UNIQUE INDEX {t}_by_id ON {t} (id) WHERE indexed",
            f"CREATE INDEX {t}_by_deadline ON {t} (deadline) WHERE deadline IS NOT NULL",
        ):
            ex.conn.execute(statement)

    def drop_queue(self, ex: SQLiteExec, qid: int) -> None:
        ex.conn.execute(f"DROP TABLE {self.messages(qid)}")

    def dropped(self, exc: BaseException) -> bool:
        cause = exc.__cause__
        return isinstance(cause, sqlite3.OperationalError) and "no such table" in str(cause)

    # -- writes ---------------------------------------------------------------------------

    def new_ids(self, n: int) -> list[str] | None:
        return None  # ids are made as rows are written, and carry their rowid

    @staticmethod
    def _last_rowid(conn: sqlite3.Connection, t: str, priority: int) -> int:
        """The highest rowid in a priority's band (or the band's base when it is empty)."""
        base = band(priority)
        (last,) = conn.execute(
            f"SELECT max(rowid) FROM {t} WHERE rowid BETWEEN ? AND ?", (base, base + BAND - 1)
        ).fetchone()
        return base if last is None else int(last)

    def insert_bare(
        self, ex: SQLiteExec, qid: int, queue: str, bare: Bare, retry: bool
    ) -> list[str]:
        """Consecutive rowids, one multi-row statement per BARE_ROWS bodies, the values the
        rows share bound once: most of what an insert costs from Python is binding."""
        conn, t = ex.conn, self.messages(qid)
        start = self._last_rowid(conn, t, bare.priority) + 1
        n = len(bare.bodies)
        ids = row_ids(start, n)
        for i in range(0, n, BARE_ROWS):
            chunk = bare.bodies[i : i + BARE_ROWS]
            params: list[Any] = [bare.priority, bare.now, bare.visible_at, start + i]
            for message_id, body in zip(ids[i : i + BARE_ROWS], chunk, strict=True):
                params += (message_id, body)
            conn.execute(_bare_insert(t, len(chunk)), params)
        return ids

    def _write_rows(
        self, ex: SQLiteExec, qid: int, rows: Sequence[Fields], check: bool
    ) -> list[tuple[int, str] | None]:
        """Insert rows at the back of their priority bands; per row (rowid, id), or None
        where `check` found the id present (rows before it in `rows` included). Ids are
        looked up, and rows as sent inserted, many to a statement."""
        conn, t = ex.conn, self.messages(qid)
        present = self._present(ex, qid, [r.id for r in rows if r.id]) if check else set()
        last: dict[int, int] = {}
        full = f"INSERT INTO {t} ({ALL_COLUMNS}) VALUES ({marks(ALL_COLUMNS.split(','))})"
        out: list[tuple[int, str] | None] = []
        pending: list[tuple[Any, ...]] = []  # rows as sent, inserted BARE_ROWS a statement
        for row in rows:
            if row.id and check:
                if row.id in present:
                    out.append(None)
                    continue
                present.add(row.id)
            n = last.get(row.priority)
            rowid = last[row.priority] = (
                self._last_rowid(conn, t, row.priority) if n is None else n
            ) + 1
            message_id = row.id or row_id(rowid, random.getrandbits(59))
            values = (
                rowid,
                message_id,
                row.body,
                row.attributes,
                row.group_id,
                row.dedup_id,
                row.priority,
                row.deadline,
                row.sent_at,
                row.visible_at,
                row.compressed,
                1 if row.id else 0,  # ids made here carry their rowid: no index entry
            )
            if row.as_sent:
                pending.append(values)
            else:
                received = (
                    row.receive_count,
                    row.first_received_at,
                    row.version,
                    row.source_queue,
                    row.error,
                )
                conn.execute(qmarks(full), (*values, *received))
            out.append((rowid, message_id))
        for i in range(0, len(pending), BARE_ROWS):
            part = pending[i : i + BARE_ROWS]
            conn.execute(_sent_rows(t, len(part)), [v for values in part for v in values])
        return out

    def _present(self, ex: SQLiteExec, qid: int, ids: Sequence[str]) -> set[str]:
        """The ids of `ids` the queue holds."""
        return {message_id for _, message_id, _ in self._lookup(ex, qid, ids)}

    def _lookup(self, ex: SQLiteExec, qid: int, ids: Sequence[str]) -> list[tuple[int, str, float]]:
        """(rowid, id, visible_at) of the queue's messages with these ids, a few hundred to
        a statement: by rowid for ids this store made up, by the partial index for others."""
        conn, t = ex.conn, self.messages(qid)
        made: dict[int, str] = {}
        others: list[str] = []
        for message_id in ids:
            rowid = rowid_of(message_id)
            if rowid is None:
                others.append(message_id)
            else:
                made[rowid] = message_id
        found: list[tuple[int, str, float]] = []
        keys = list(made)
        for i in range(0, len(keys), LOOKUP_ROWS):
            rowids = keys[i : i + LOOKUP_ROWS]
            for rowid, message_id, visible_at in conn.execute(
                f"SELECT rowid, id, visible_at FROM {t} WHERE rowid IN ({_places(rowids)})",
                rowids,
            ):
                if made.get(rowid) == message_id:
                    found.append((int(rowid), message_id, float(visible_at)))
        # not at their row number: moved (and so in the index), or gone
        at_home = {message_id for _, message_id, _ in found}
        others += [m for m in made.values() if m not in at_home]
        for i in range(0, len(others), LOOKUP_ROWS):
            part = others[i : i + LOOKUP_ROWS]
            for rowid, message_id, visible_at in conn.execute(
                f"SELECT rowid, id, visible_at FROM {t} WHERE indexed AND id IN ({_places(part)})",
                part,
            ):
                found.append((int(rowid), message_id, float(visible_at)))
        return found

    def insert(
        self,
        ex: SQLiteExec,
        qid: int,
        queue: str,
        rows: Sequence[Fields],
        *,
        made: bool,
        retry: bool,
    ) -> list[str | None]:
        # a transaction here commits or fails whole: a retry never follows a commit
        return [_id(stored) for stored in self._write_rows(ex, qid, rows, not made)]

    def insert_one(self, ex: SQLiteExec, qid: int, row: Fields) -> tuple[int, str] | None:
        [stored] = self._write_rows(ex, qid, [row], True)
        return stored

    def insert_keyed(
        self, ex: SQLiteExec, qid: int, rows: Sequence[Fields], made: bool
    ) -> list[int | None]:
        return [_key(stored) for stored in self._write_rows(ex, qid, rows, True)]

    def find(self, ex: SQLiteExec, qid: int, message_id: str) -> int | None:
        """A primary-key lookup for ids this store made up, the partial index for others."""
        conn, t = ex.conn, self.messages(qid)
        rowid = rowid_of(message_id)
        if (
            rowid is not None
            and conn.execute(
                f"SELECT 1 FROM {t} WHERE rowid = ? AND id = ?", (rowid, message_id)
            ).fetchone()
        ):
            return rowid
        for (key,) in conn.execute(
            f"SELECT rowid FROM {t} WHERE indexed AND id = ?", (message_id,)
        ):
            return int(key)
        return None

    def find_many(self, ex: SQLiteExec, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        return [(key, visible_at) for key, _, visible_at in self._lookup(ex, qid, ids)]

    # -- claims and deletes ---------------------------------------------------------------

    def any_ready(self, ex: SQLiteExec, qid: int, now: float) -> bool:
        t = self.messages(qid)
        if qid in self.held_indexed:
            try:
                return any(
                    ex.conn.execute(f"{sql.format(t=t)} LIMIT 1", (now,)).fetchone() is not None
                    for sql in (_ANY_FRESH, _ANY_HELD)
                )
            except sqlite3.OperationalError as exc:
                self._lost_held_index(qid, exc)
        with _Steps(ex.conn, self.held_index_after) as steps:
            found = ex.conn.execute(
                f"SELECT 1 FROM {t} WHERE visible_at <= ? LIMIT 1", (now,)
            ).fetchone()
        if steps.many and found is None:
            # the head is deep in messages in flight: say "maybe", so that a claim comes
            # and indexes them (claim_ready)
            self.held_wanted.add(qid)
            return True
        return found is not None

    def claim_ready(
        self, ex: SQLiteExec, qid: int, limit: int, terms: ClaimTerms, token: str
    ) -> list[Row]:
        """The first `limit` ready rows in rowid order. A queue whose head holds many
        messages in flight (or delayed) gets two partial indexes the first time a claim
        walks past a great many of them: ready rows are then found without stepping over
        the others (the rows never received, in rowid order; the rest by visible_at)."""
        t, now = self.messages(qid), terms.now
        return self._held_or_plain(
            ex,
            qid,
            lambda: ex.conn.execute(
                f"{_claim(t)} ({_held_claim(t)}) RETURNING {COLUMNS}",
                (
                    *claim_params(terms, token),
                    *(now, terms.horizon, terms.expires, limit),
                    *(now, terms.horizon, terms.expires, limit),
                    limit,
                ),
            ).fetchall(),
            lambda: ex.conn.execute(
                f"{_claim(t)} (SELECT rowid FROM {t} WHERE {_READY} ORDER BY rowid LIMIT ?)"
                f" RETURNING {COLUMNS}",
                (*claim_params(terms, token), now, terms.horizon, terms.expires, limit),
            ).fetchall(),
        )

    def walk_visible(
        self, ex: SQLiteExec, qid: int, after: int, now: float, page: int, lock: bool
    ) -> list[Row]:
        plain = super().walk_visible
        return self._held_or_plain(
            ex,
            qid,
            lambda: ex.conn.execute(
                _held_walk(self.messages(qid)), (now, after, page, now, after, page, page)
            ).fetchall(),
            lambda: plain(ex, qid, after, now, page, lock),
        )

    def _held_or_plain(
        self,
        ex: SQLiteExec,
        qid: int,
        held: Callable[[], list[Row]],
        plain: Callable[[], list[Row]],
    ) -> list[Row]:
        """A claim or walk page: `held` on an indexed queue; else `plain`, counting its
        steps, and the queue indexed if it stepped over many rows.

        Indexing reads the whole queue (a second or so at a million rows), so it is never
        done on an event loop's thread: there the queue is marked, and the call that would
        index it raises WouldBlock, to be run again in a thread (its transaction rolled
        back, nothing changed)."""
        t = self.messages(qid)
        if qid in self.held_indexed:
            try:
                return held()
            except sqlite3.OperationalError as exc:
                self._lost_held_index(qid, exc)
        if qid in self.held_wanted or not self.held_index_after:
            if self.on_loop():
                self.held_wanted.add(qid)
                raise WouldBlock
            self._index_held(ex, t, qid)
            return held()
        with _Steps(ex.conn, self.held_index_after) as steps:
            rows = plain()
        if steps.many:
            if self.on_loop():
                self.held_wanted.add(qid)  # indexed by the next claim, in a thread
            else:
                self._index_held(ex, t, qid)
        return rows

    def _index_held(self, ex: SQLiteExec, t: str, qid: int) -> None:
        """Index a queue's rows by whether they were ever received or delayed (in this
        transaction; kept until the queue is deleted)."""
        for statement in _HELD_INDEXES:
            ex.conn.execute(statement.format(t=t))
        self.held_indexed.add(qid)
        self.held_wanted.discard(qid)

    def _lost_held_index(self, qid: int, exc: sqlite3.OperationalError) -> None:
        """The indexes are gone (their creation rolled back): claim the plain way."""
        if "no such index" not in str(exc):
            raise exc
        self.held_indexed.discard(qid)

    def claim_keys(
        self, ex: SQLiteExec, qid: int, keys: Sequence[int], terms: ClaimTerms, token: str
    ) -> list[Row]:
        return ex.conn.execute(
            f"{_claim(self.messages(qid))} ({','.join('?' * len(keys))}) RETURNING {COLUMNS}",
            (*claim_params(terms, token), *keys),
        ).fetchall()

    def delete_held(
        self, ex: SQLiteExec, qid: int, token: str, keys: Sequence[int], exact: bool
    ) -> Collection[int]:
        t = self.messages(qid)
        where = f"token = ? AND rowid IN ({','.join('?' * len(keys))})"
        if not exact:
            # counting is cheaper than returning each row; anything short of every row
            # rolls the call back, to be run again exactly
            if ex.conn.execute(f"DELETE FROM {t} WHERE {where}", (token, *keys)).rowcount != len(
                keys
            ):
                raise NotAllHeld(t)
            return keys
        rows = ex.conn.execute(f"DELETE FROM {t} WHERE {where} RETURNING rowid", (token, *keys))
        return [rowid for (rowid,) in rows.fetchall()]

    # -- bulk -----------------------------------------------------------------------------

    def insert_many(
        self, ex: SQLiteExec, sql: str, rows: Sequence[Sequence[Any]], types: str
    ) -> None:
        ex.run_many(sql, rows)

    def lease_claim(
        self, ex: SQLiteExec, qid: int, stream: str, lease: int, limit: int,
        terms: ClaimTerms, token: str,
    ) -> int | None:  # fmt: skip
        # a claim that returns row keys alone (no bodies copied); the claims are recorded
        # straight from the table: the claimed rows are the ones in their key range that
        # hold the claim's token
        t = self.messages(qid)
        keys = [
            rowid
            for (rowid,) in ex.conn.execute(
                f"{_claim(t)} (SELECT rowid FROM {t} WHERE {_READY} ORDER BY rowid LIMIT ?)"
                " RETURNING rowid",
                (*claim_params(terms, token), terms.now, terms.horizon, terms.expires, limit),
            ).fetchall()
        ]
        if keys:
            ex.conn.execute(
                "INSERT INTO leases (queue_id, stream, lease, row_key, message_id, token)"
                f" SELECT ?, ?, ?, rowid, id, token FROM {t}"
                " WHERE rowid BETWEEN ? AND ? AND token = ? ON CONFLICT"
                " (queue_id, stream, lease, row_key) DO UPDATE SET"
                " message_id = excluded.message_id, token = excluded.token",
                (qid, stream, lease, min(keys), max(keys), token),
            )
        return len(keys)

    def leased(self, qid: int, stream: str, upto: int) -> tuple[str, tuple[Any, ...]] | None:
        return (
            "(rowid, token) IN (SELECT row_key, token FROM leases"
            " WHERE queue_id = %s AND stream = %s AND lease <= %s)",
            (qid, stream, upto),
        )


def _id(stored: tuple[int, str] | None) -> str | None:
    if stored is None:
        return None
    _, message_id = stored
    return message_id


def _key(stored: tuple[int, str] | None) -> int | None:
    if stored is None:
        return None
    key, _ = stored
    return key


class _Steps:
    """Whether a statement took more than about `limit` steps of SQLite's virtual machine:
    a progress handler on the connection while the block runs counts every `EVERY` steps
    (SQLite counts a cached statement's steps over all its runs, so one call on a first
    multiple of `limit` would say nothing of this run); the statement goes on."""

    __slots__ = ("calls", "conn", "enough")

    EVERY = 1_000

    def __init__(self, conn: sqlite3.Connection, limit: int) -> None:
        self.conn = conn
        self.enough = max(1, limit // self.EVERY) + 1  # the first call may come at once
        self.calls = 0

    @property
    def many(self) -> bool:
        return self.calls >= self.enough

    def _step(self) -> int:
        self.calls += 1
        return 0  # go on

    def __enter__(self) -> _Steps:
        self.conn.set_progress_handler(self._step, self.EVERY)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.set_progress_handler(None, 0)


_READY = qmarks(READY)
_UNTIL = qmarks(CLAIMED_UNTIL)
_HELD_INDEXES = (
    f"CREATE INDEX IF NOT EXISTS {{t}}_fresh ON {{t}} (receive_count) WHERE {FRESH}",
    f"CREATE INDEX IF NOT EXISTS {{t}}_held ON {{t}} (visible_at) WHERE {HELD}",
)
_ANY_FRESH = f"SELECT 1 FROM {{t}} INDEXED BY {{t}}_fresh WHERE {FRESH} AND visible_at <= ?"
_ANY_HELD = f"SELECT 1 FROM {{t}} INDEXED BY {{t}}_held WHERE {HELD} AND visible_at <= ?"


@functools.lru_cache(maxsize=1024)
def _held_claim(t: str) -> str:
    """The rowids of the first ready rows of an indexed queue: the first fresh ones in
    rowid order and the held ones that became visible first, merged in rowid order;
    parameters: (now, horizon, expires, limit) twice, then limit."""
    return (
        f"SELECT rowid FROM (SELECT rowid FROM {t} INDEXED BY {t}_fresh WHERE {FRESH}"
        f" AND {_READY} ORDER BY rowid LIMIT ?) UNION ALL SELECT rowid FROM (SELECT rowid"
        f" FROM {t} INDEXED BY {t}_held WHERE {HELD} AND {_READY} ORDER BY visible_at, rowid"
        " LIMIT ?) ORDER BY rowid LIMIT ?"
    )


@functools.lru_cache(maxsize=1024)
def _held_walk(t: str) -> str:
    """A page of the visible rows of an indexed queue after a rowid, as `_held_claim`
    chooses them; parameters: (now, after, page) twice, then page."""
    return (
        f"SELECT rowid, priority, group_id, visible_at, receive_count, deadline, sent_at"
        f" FROM {t} WHERE rowid IN (SELECT rowid FROM (SELECT rowid FROM {t} INDEXED BY"
        f" {t}_fresh WHERE {FRESH} AND visible_at <= ? AND rowid > ? ORDER BY rowid LIMIT ?)"
        f" UNION ALL SELECT rowid FROM (SELECT rowid FROM {t} INDEXED BY {t}_held WHERE"
        f" {HELD} AND visible_at <= ? AND rowid > ? ORDER BY visible_at, rowid LIMIT ?)"
        " ORDER BY rowid LIMIT ?) ORDER BY rowid"
    )


def _claim(t: str) -> str:
    """The claim of a row set given after it (``... WHERE rowid IN``); parameters:
    `claim_params`."""
    return (
        f"UPDATE {t} SET visible_at = {_UNTIL}, receive_count = receive_count + 1,"
        " first_received_at = coalesce(first_received_at, ?), version = version + 1,"
        " token = ? WHERE rowid IN"
    )


@functools.lru_cache(maxsize=1024)
def _sent_rows(t: str, n: int) -> str:
    """Insert n rows as sent (SEND_COLUMNS), in one statement."""
    row = f"({marks(SEND_COLUMNS.split(','))})"
    return f"INSERT INTO {t} ({SEND_COLUMNS}) VALUES {','.join([row] * n)}".replace("%s", "?")


@functools.lru_cache(maxsize=1024)
def _bare_insert(t: str, n: int) -> str:
    """Insert n bodies that share priority, sent_at and visible_at (?1-?3), at consecutive
    rowids from ?4, each with its id and body (?5 and ?6 for the first, and so on)."""
    rows = ",".join(f"(?1, ?2, ?3, ?4 + {k}, ?{5 + 2 * k}, ?{6 + 2 * k})" for k in range(n))
    return f"INSERT INTO {t} (priority, sent_at, visible_at, rowid, id, body) VALUES {rows}"
