"""Embedded SQLite store: the default.

URL: ``sqlite:///relative/or/absolute/path.db`` (``sqlite:////abs/path.db`` for an absolute
path). Options: ``durability=full`` (default: an acknowledged send survives a power cut:
its commit is answered once the write-ahead log has been fsynced after it, which is what
``synchronous=FULL`` does) or ``durability=normal`` (survives a process crash; no fsync
but the checkpoints'), ``busy_timeout`` in seconds (default 60), ``keep_heap=true`` (see
`conveyor.tuning`).

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
from .dialect import Bare, Dialect, NotAllHeld
from .inflight import claim_values
from .rows import Fields, Row
from .schema import SQLITE_MIGRATIONS, Step
from .sqlite_connections import SQLiteConnections, SQLiteExec
from .statement import Statement, by_rows, execute, spread
from .statements import (
    ANY_READY,
    SQLITE_ALL_COLUMNS,
    SQLITE_ANY_FRESH,
    SQLITE_ANY_HELD,
    SQLITE_AT_HOME,
    SQLITE_AT_ROWIDS,
    SQLITE_BARE_ROWS,
    SQLITE_CLAIM_KEYS,
    SQLITE_COLUMNS,
    SQLITE_CREATE_QUEUE,
    SQLITE_DELETE_HELD,
    SQLITE_DELETE_HELD_RETURNING,
    SQLITE_DROP_QUEUE,
    SQLITE_INDEX_HELD,
    SQLITE_INDEXED_ID,
    SQLITE_LAST_ROWID,
    SQLITE_LEASE_CLAIM,
    SQLITE_MOVED_ROW,
    SQLITE_OF_IDS,
    SQLITE_READY_INDEXED,
    SQLITE_READY_ROWS,
    SQLITE_RECORD_LEASE,
    SQLITE_SEND_COLUMNS,
    SQLITE_SENT_ROWS,
    SQLITE_WALK_INDEXED,
)
from .store import SQLStore

# rows per statement of `_bare_insert` and of rows written as sent
BARE_ROWS = 50
LOOKUP_ROWS = 500  # ids per statement when looking many up
HELD_INDEX_AFTER = 20_000  # see SQLiteDialect.held_index_after


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


class SQLiteDialect(Dialect[SQLiteExec]):
    """SQLite: a table per queue, the rowid its delivery order."""

    name = "sqlite"
    key = "rowid"
    order = "rowid"
    columns = SQLITE_COLUMNS
    priority = "priority"
    polls_idle = True
    deletes_leased = True

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

    def slot_names(self, qid: int) -> dict[str, str]:
        names = super().slot_names(qid)
        if qid:
            t = self.messages(qid)
            for index in ("fresh", "held", "by_id", "by_deadline"):
                names[f"{index}_index"] = f"{t}_{index}"
        return names

    def scope(self, qid: int) -> str:
        return "1 = 1"

    def sequence(self, key: int, priority: int) -> int:
        return key

    after_words = "rowid > :after"

    def after_values(self, after: int) -> dict[str, Any]:
        return {"after": after}

    # -- schema ---------------------------------------------------------------------------

    def migrations(self) -> list[Step]:
        return list(SQLITE_MIGRATIONS)

    def schema_version(self, ex: SQLiteExec) -> int:
        (version,) = ex.conn.execute("PRAGMA user_version").fetchone()
        return int(version)

    def set_schema_version(self, ex: SQLiteExec, version: int) -> None:
        # a pragma takes no parameters: the version is an integer
        ex.conn.execute(f"PRAGMA user_version = {int(version)}")

    def create_queue(self, ex: SQLiteExec, qid: int) -> None:
        for statement in SQLITE_CREATE_QUEUE:
            execute(ex.conn, self.sql(statement, qid))

    def drop_queue(self, ex: SQLiteExec, qid: int) -> None:
        execute(ex.conn, self.sql(SQLITE_DROP_QUEUE, qid))

    def dropped(self, exc: BaseException) -> bool:
        cause = exc.__cause__
        return isinstance(cause, sqlite3.OperationalError) and "no such table" in str(cause)

    # -- writes ---------------------------------------------------------------------------

    def new_ids(self, n: int) -> list[str] | None:
        return None  # ids are made as rows are written, and carry their rowid

    def _last_rowid(self, conn: sqlite3.Connection, qid: int, priority: int) -> int:
        """The highest rowid in a priority's band (or the band's base when it is empty)."""
        base = band(priority)
        (last,) = execute(
            conn, self.sql(SQLITE_LAST_ROWID, qid), {"low": base, "high": base + BAND - 1}
        ).fetchone()
        return base if last is None else int(last)

    def insert_bare(
        self, ex: SQLiteExec, qid: int, queue: str, bare: Bare, retry: bool
    ) -> list[str]:
        """Consecutive rowids, one multi-row statement per BARE_ROWS bodies, the values the
        rows share bound once: most of what an insert costs from Python is binding."""
        conn = ex.conn
        start = self._last_rowid(conn, qid, bare.priority) + 1
        n = len(bare.bodies)
        ids = row_ids(start, n)
        for i in range(0, n, BARE_ROWS):
            chunk = bare.bodies[i : i + BARE_ROWS]
            rows = list(zip(ids[i : i + BARE_ROWS], chunk, strict=True))
            shared = {
                "priority": bare.priority,
                "now": bare.now,
                "visible_at": bare.visible_at,
                "start": start + i,
            }
            sql = self.sql(SQLITE_BARE_ROWS, qid, len(chunk))
            conn.execute(sql, by_rows(sql, shared, _ID_BODY, rows))
        return ids

    def _write_rows(
        self, ex: SQLiteExec, qid: int, rows: Sequence[Fields], check: bool
    ) -> list[tuple[int, str] | None]:
        """Insert rows at the back of their priority bands; per row (rowid, id), or None
        where `check` found the id present (rows before it in `rows` included). Ids are
        looked up, and rows as sent inserted, many to a statement."""
        conn = ex.conn
        present = self._present(ex, qid, [r.id for r in rows if r.id]) if check else set()
        last: dict[int, int] = {}
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
                self._last_rowid(conn, qid, row.priority) if n is None else n
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
                moved = dict(zip(SQLITE_ALL_COLUMNS, (*values, *received), strict=True))
                execute(conn, self.sql(SQLITE_MOVED_ROW, qid), moved)
            out.append((rowid, message_id))
        for i in range(0, len(pending), BARE_ROWS):
            part = pending[i : i + BARE_ROWS]
            sql = self.sql(SQLITE_SENT_ROWS, qid, len(part))
            conn.execute(sql, by_rows(sql, {}, _SENT, part))
        return out

    def _present(self, ex: SQLiteExec, qid: int, ids: Sequence[str]) -> set[str]:
        """The ids of `ids` the queue holds."""
        return {message_id for _, message_id, _ in self._lookup(ex, qid, ids)}

    def _lookup(self, ex: SQLiteExec, qid: int, ids: Sequence[str]) -> list[tuple[int, str, float]]:
        """(rowid, id, visible_at) of the queue's messages with these ids, a few hundred to
        a statement: by rowid for ids this store made up, by the partial index for others."""
        conn = ex.conn
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
            for rowid, message_id, visible_at in execute(
                conn, self.sql(SQLITE_AT_ROWIDS, qid, len(rowids)), spread("rowids", rowids)
            ):
                if made.get(rowid) == message_id:
                    found.append((int(rowid), message_id, float(visible_at)))
        # not at their row number: moved (and so in the index), or gone
        at_home = {message_id for _, message_id, _ in found}
        others += [m for m in made.values() if m not in at_home]
        for i in range(0, len(others), LOOKUP_ROWS):
            part = others[i : i + LOOKUP_ROWS]
            for rowid, message_id, visible_at in execute(
                conn, self.sql(SQLITE_OF_IDS, qid, len(part)), spread("ids", part)
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
        conn = ex.conn
        rowid = rowid_of(message_id)
        if (
            rowid is not None
            and execute(
                conn, self.sql(SQLITE_AT_HOME, qid), {"rowid": rowid, "id": message_id}
            ).fetchone()
        ):
            return rowid
        for (key,) in execute(conn, self.sql(SQLITE_INDEXED_ID, qid), {"id": message_id}):
            return int(key)
        return None

    def find_many(self, ex: SQLiteExec, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        return [(key, visible_at) for key, _, visible_at in self._lookup(ex, qid, ids)]

    # -- claims and deletes ---------------------------------------------------------------

    def any_ready(self, ex: SQLiteExec, qid: int, now: float) -> bool:
        values = {"now": now}
        if qid in self.held_indexed:
            try:
                return any(
                    execute(ex.conn, self.sql(statement, qid), values).fetchone() is not None
                    for statement in (SQLITE_ANY_FRESH, SQLITE_ANY_HELD)
                )
            except sqlite3.OperationalError as exc:
                self._lost_held_index(qid, exc)
        with _Steps(ex.conn, self.held_index_after) as steps:
            found = execute(ex.conn, self.sql(ANY_READY, qid), values).fetchone()
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
        values = claim_values(terms, token)
        values["limit"] = limit
        return self._held_or_plain(
            ex,
            qid,
            lambda: self._claim_read(ex, qid, SQLITE_READY_INDEXED, values, terms),
            lambda: self._claim_read(ex, qid, SQLITE_READY_ROWS, values, terms),
        )

    def _claim_read(
        self,
        ex: SQLiteExec,
        qid: int,
        ready: Statement,
        values: dict[str, Any],
        terms: ClaimTerms,
    ) -> list[Row]:
        """The rows `ready` reads, then claimed by rowid (`claim_rows`): cheaper in SQLite
        than one `UPDATE ... RETURNING` of them, which gathers the rowids its subquery
        chose, and the rows it returns, in temporary tables first (docs/benchmarks.md,
        "Receives that read, then claim")."""
        return self.claim_rows(ex, qid, ex.rows(self.sql(ready, qid), values), values, terms)

    def walk_visible(
        self, ex: SQLiteExec, qid: int, after: int, now: float, page: int, lock: bool
    ) -> list[Row]:
        plain = super().walk_visible
        return self._held_or_plain(
            ex,
            qid,
            lambda: execute(
                ex.conn,
                self.sql(SQLITE_WALK_INDEXED, qid),
                {"now": now, "after": after, "page": page},
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
        if qid in self.held_indexed:
            try:
                return held()
            except sqlite3.OperationalError as exc:
                self._lost_held_index(qid, exc)
        if qid in self.held_wanted or not self.held_index_after:
            if self.on_loop():
                self.held_wanted.add(qid)
                raise WouldBlock
            self._index_held(ex, qid)
            return held()
        with _Steps(ex.conn, self.held_index_after) as steps:
            rows = plain()
        if steps.many:
            if self.on_loop():
                self.held_wanted.add(qid)  # indexed by the next claim, in a thread
            else:
                self._index_held(ex, qid)
        return rows

    def _index_held(self, ex: SQLiteExec, qid: int) -> None:
        """Index a queue's rows by whether they were ever received or delayed (in this
        transaction; kept until the queue is deleted)."""
        for statement in SQLITE_INDEX_HELD:
            execute(ex.conn, self.sql(statement, qid))
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
        values = claim_values(terms, token)
        values.update(spread("keys", keys))
        return execute(ex.conn, self.sql(SQLITE_CLAIM_KEYS, qid, len(keys)), values).fetchall()

    def delete_held(
        self, ex: SQLiteExec, qid: int, token: str, keys: Sequence[int], exact: bool
    ) -> Collection[int]:
        values = spread("keys", keys)
        values["token"] = token
        if not exact:
            # counting is cheaper than returning each row; anything short of every row
            # rolls the call back, to be run again exactly
            deleted = execute(ex.conn, self.sql(SQLITE_DELETE_HELD, qid, len(keys)), values)
            if deleted.rowcount != len(keys):
                raise NotAllHeld(self.messages(qid))
            return keys
        rows = execute(ex.conn, self.sql(SQLITE_DELETE_HELD_RETURNING, qid, len(keys)), values)
        return [rowid for (rowid,) in rows.fetchall()]

    # -- bulk -----------------------------------------------------------------------------

    def lease_claim(
        self, ex: SQLiteExec, qid: int, stream: str, lease: int, limit: int,
        terms: ClaimTerms, token: str,
    ) -> int | None:  # fmt: skip
        # a claim that returns row keys alone (no bodies copied); the claims are recorded
        # straight from the table: the claimed rows are the ones in their key range that
        # hold the claim's token
        values = claim_values(terms, token)
        values["limit"] = limit
        keys = [
            rowid
            for (rowid,) in execute(ex.conn, self.sql(SQLITE_LEASE_CLAIM, qid), values).fetchall()
        ]
        if keys:
            execute(
                ex.conn,
                self.sql(SQLITE_RECORD_LEASE, qid),
                {
                    "qid": qid,
                    "stream": stream,
                    "lease": lease,
                    "low": min(keys),
                    "high": max(keys),
                    "token": token,
                },
            )
        return len(keys)


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


_ID_BODY = ("id", "body")
_SENT = SQLITE_SEND_COLUMNS
