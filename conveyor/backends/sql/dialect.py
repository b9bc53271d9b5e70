"""What differs between the SQL databases: where a queue's messages live, the statements
each database words its own way, and the hot path (insert, claim, delete).

The SQL store (`store.py`) holds every rule of the queue contract once and asks its
`Dialect` for these. Two layouts exist:

- SQLite keeps each queue in a table of its own, ``q<queue id>``, whose rowid is the
  delivery order (priority band, then sequence): the row key is the rowid.
- PostgreSQL and MySQL keep every queue in one ``messages`` table; the row key is ``seq``
  (a sequence) and delivery order is ``(queue_id, nprio, seq)`` with ``nprio`` minus the
  priority. `ServerDialect` holds what the two share.

Statements are named once in `statements.py`; each dialect compiles them for its driver
(`Dialect.sql`), filling their slots with its tables' names (the prefix checked against
``PREFIX_RE``, queue ids integers) and its own words. Names, ids and bodies are always
parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Any, Generic, NamedTuple

from ...exceptions import InvalidInput
from ...ids import new_ids
from ..rules import ClaimTerms, order_after, order_key
from .connections import CursorExec, E
from .inflight import claim_values
from .pipeline_statements import RECORD_LEASES
from .rows import Fields, Row, claimed
from .schema import SERVER_MIGRATIONS, ServerTypes, Step
from .server_statements import (
    SERVER_COLUMNS,
    SERVER_COUNT_STAGING,
    SERVER_CREATE_SCHEMA,
    SERVER_DROP_QUEUE,
    SERVER_FIND,
    SERVER_FIRST_VERSION,
    SERVER_PUBLISH_STAGING,
    SERVER_SCHEMA_VERSION,
    SERVER_SEND_COLUMNS,
    SERVER_SET_VERSION,
    SERVER_STAGING_ROWS,
    STAGING_COLUMNS,
)
from .statement import SQLITE, Compiler, Statement, Style, by_rows, spread
from .statements import (
    ANY_READY,
    CLAIM_KEYS,
    FIND_MANY,
    ROWS_OF_KEYS,
    WALK,
    WALK_LOCKING,
    WALK_VISIBLE,
    WALK_VISIBLE_LOCKING,
)

# the tables every store keeps besides its messages (their names take the prefix)
TABLES = (
    "queues", "dedup", "archive", "topics", "subscriptions", "consumers", "leases", "streams",
    "stages", "sinks", "listeners", "schema", "staged", "queues_v5", "staging", "counts",
)  # fmt: skip
# the servers' shared messages table and the indexes the schema names, by what slots call
# them (their names take the prefix)
INDEXES = {
    "messages_table": "messages",
    "messages_order": "messages_order",
    "messages_by_id": "messages_by_id",
    "messages_by_deadline": "messages_by_deadline",
    "messages_seq": "messages_seq",
    "messages_serial": "messages_seq_seq",  # PostgreSQL's sequence of the key (BIGSERIAL's)
    "messages_by_chosen_id": "messages_by_chosen_id",
    "messages_held_index": "messages_held",
    "archive_by_queue": "archive_by_queue",
}

PREFIX_RE = re.compile(r"[a-z][a-z0-9_]{0,29}")


def check_prefix(prefix: str) -> str:
    if not PREFIX_RE.fullmatch(prefix):
        raise InvalidInput(
            f"table prefix {prefix!r} is not valid: use 1-30 lower-case letters, digits or"
            " underscores, starting with a letter (for example prefix=conveyor_)"
        )
    return prefix


def table_names(prefix: str) -> dict[str, str]:
    """The names of a store's tables besides its messages, by what slots call them."""
    names = {table: f"{prefix}{table}" for table in TABLES}
    names.update((slot, f"{prefix}{name}") for slot, name in INDEXES.items())
    return names


class Bare(NamedTuple):
    """Bare bodies to insert together (see `rules.bare_bodies`) and what their rows share.
    `ids` are made before the first attempt where a dialect needs them fixed (a retry after
    an unconfirmed commit must not store a message twice), or None where it makes them."""

    ids: list[str] | None
    bodies: list[bytes]
    priority: int
    now: float
    visible_at: float


class NotAllHeld(Exception):
    """A delete that counted its rows found fewer than it was given: run it again, exactly."""


class Dialect(ABC, Generic[E]):
    """One database's words for the SQL store. Thread-safe; holds no connections."""

    name: str
    prefix: str = ""
    key: str  # the row key column of a queue's messages
    order: str  # ORDER BY of delivery order
    columns: str  # a message row's columns, in the order of rows.MessageRow
    priority: str  # a row's priority as an expression
    for_update: str = ""  # locks rows a SELECT reads, where the database has row locks
    skip_locked: str = ""  # ... and skips rows others hold
    single_insert = False  # an insert of rows is one statement (no explicit transaction)
    single_claim = False  # claim_ready is one statement
    polls_idle = False  # receives of an idle queue look before they take the write lock
    # the highest key an insert of ids made in the statement was given (PostgreSQL): the
    # keys of any insert begun since lie above it; `stored_before` is given it as `mark`
    made_floor = 0
    # the messages a stream's leases hold are deleted by one statement (DELETE_LEASED); else
    # by their claims' tokens, as deletes by receipt
    deletes_leased = False
    # a job's staged messages wait in a staging table of their own (`stage_aside`) and are
    # copied into the queue when it publishes; else they wait in the queue's own table,
    # hidden, and publishing makes them visible (pipeline.py)
    stages_aside = False

    @property
    def single_delete(self) -> bool:
        """Whether delete_held is one statement."""
        return False

    # -- statements -----------------------------------------------------------------------

    def style(self) -> Style:
        """How the driver takes parameters and quotes names."""
        return SQLITE

    @functools.cached_property
    def sql(self) -> Compiler:
        """The driver's text of a statement (`statements.py`): ``d.sql(STATEMENT, qid)``."""
        return Compiler(self.name, self.style(), self.slot_names, self.slot_words)

    def slot_names(self, qid: int) -> dict[str, str]:
        """The tables (and indexes) a statement's slots name, for queue `qid` (0: none)."""
        names = table_names(self.prefix)
        if qid:
            names["messages"] = self.messages(qid)
        return names

    def slot_words(self, qid: int) -> dict[str, str]:
        """The dialect's own words a statement's slots hold, for queue `qid` (0: none)."""
        words = {
            "key": self.key,
            "order": self.order,
            "columns": self.columns,
            "priority": self.priority,
            "for_update": self.for_update,
            "skip_locked": self.skip_locked,
            "after": self.after_words,
        }
        if qid:
            words.update(
                scope=self.scope(qid), key_scope=self.key_scope(qid), id_scope=self.id_scope(qid)
            )
        return words

    after_words: str  # the condition selecting rows after a place (`after_values`)

    @abstractmethod
    def after_values(self, after: int) -> dict[str, Any]:
        """The parameters of ``{after}`` for rows after place `after` in delivery order."""

    # -- layout ---------------------------------------------------------------------------

    @abstractmethod
    def messages(self, qid: int) -> str:
        """The table holding queue `qid`'s messages."""

    @abstractmethod
    def scope(self, qid: int) -> str:
        """A condition selecting queue `qid`'s rows in its table, for statements that walk
        the queue."""

    def key_scope(self, qid: int) -> str:
        """`scope` for statements that find rows by key (their plan must use the key)."""
        return self.scope(qid)

    def id_scope(self, qid: int) -> str:
        """`scope` for statements that find rows by message id (their plan must use the id
        index, not walk the queue through its order index)."""
        return self.scope(qid)

    @abstractmethod
    def sequence(self, key: int, priority: int) -> int:
        """A row's place in delivery order (Message.sequence)."""

    # -- schema ---------------------------------------------------------------------------

    @abstractmethod
    def migrations(self) -> list[Step]:
        """The schema's versions: the change from version n to n + 1 at index n."""

    @abstractmethod
    def schema_version(self, ex: E) -> int:
        """The version the database is at (creating what records it, if needed)."""

    @abstractmethod
    def set_schema_version(self, ex: E, version: int) -> None: ...

    def lock_schema(self, ex: E) -> None:
        """Take the lock that serialises migrations (held until `unlock_schema` or commit)."""

    def unlock_schema(self, ex: E) -> None:
        pass

    def advice(self, ex: E) -> list[str]:
        """What the database server's settings should change for this store (said once, as
        the store migrates)."""
        return []

    def create_queue(self, ex: E, qid: int) -> None:
        """Make room for a new queue's messages."""

    @abstractmethod
    def drop_queue(self, ex: E, qid: int) -> None:
        """Remove a deleted queue's messages."""

    def dropped(self, exc: BaseException) -> bool:
        """Whether `exc` says a queue's table is gone (read its queue row again)."""
        return False

    # -- the hot path ---------------------------------------------------------------------

    def new_ids(self, n: int) -> list[str] | None:
        """Ids for n messages, made before the first attempt of their insert (None where
        the dialect makes them as it inserts)."""
        return new_ids(n)

    @abstractmethod
    def insert_bare(self, ex: E, qid: int, queue: str, bare: Bare, retry: bool) -> list[str]:
        """Insert bare bodies into queue `qid` (named `queue`, for wake-ups); their ids. A
        `retry` skips ids an earlier attempt stored."""

    @abstractmethod
    def insert(
        self, ex: E, qid: int, queue: str, rows: Sequence[Fields], *, made: bool, retry: bool
    ) -> list[str | None]:
        """Insert rows; per row the id stored, or None where the queue held that id already.
        `made`: every id was made by this store (an empty id: make one here), so none can be
        present (a `retry` after an unconfirmed commit skips what it stored, and reports
        every row stored)."""

    @abstractmethod
    def insert_one(self, ex: E, qid: int, row: Fields) -> tuple[int, str] | None:
        """Insert one row; its key and id (an empty id: one made here), or None where the
        queue holds its id already."""

    def insert_keyed(self, ex: E, qid: int, rows: Sequence[Fields], made: bool) -> list[int | None]:
        """Insert rows; per row its key, or None where the queue holds its id already
        (`made`: none can be, every id made by this store)."""
        keys: list[int | None] = []
        for row in rows:
            stored = self.insert_one(ex, qid, row)
            keys.append(None if stored is None else stored[0])
        return keys

    @abstractmethod
    def find(self, ex: E, qid: int, message_id: str) -> int | None:
        """The key of a message by id, or None."""

    def held_at_home(self, ex: E, qid: int, ids: Sequence[str]) -> set[str]:
        """Of ids chosen by senders, those the queue holds outside the index that finds the
        others (ids the store made there, sent again): the dialect's inserts skip them as
        they skip the rest it holds. None where every id is in the index."""
        return set()

    def stored_before(
        self, ex: E, qid: int, ids: Sequence[str], made: bool, mark: int
    ) -> list[str] | None:
        """The ids, as stored, of the messages an earlier attempt of an insert of `ids`
        (made by this store beforehand: `made`; `mark`, its `made_floor` before the first
        attempt) stored, or None unless it stored them all."""
        return list(ids) if len(self.find_many(ex, qid, ids)) >= len(set(ids)) else None

    def find_many(self, ex: E, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        """(key, visible_at) of the queue's messages with these ids."""
        found: list[tuple[int, float]] = []
        for i in range(0, len(ids), 1000):
            chunk = ids[i : i + 1000]
            for key, _, visible_at in ex.rows(
                self.sql(FIND_MANY, qid, len(chunk)), spread("ids", chunk)
            ):
                found.append((int(key), float(visible_at)))
        return found

    def any_ready(self, ex: E, qid: int, now: float) -> bool:
        """Whether queue `qid` has a message visible at `now` (a read, no lock taken)."""
        return ex.one(self.sql(ANY_READY, qid), {"now": now}) is not None

    def walk_page(
        self, ex: E, qid: int, after: int, now: float, page: int, *, fifo: bool, lock: bool
    ) -> list[Row]:
        """One page of a walk of the queue's head (`SQLStore._claim_walking`), after the
        position `after`, in delivery order: (key, priority, group_id, visible_at,
        receive_count, deadline, sent_at) of every row (FIFO queues: a group's first message
        decides, in flight or not) or of the rows visible at `now` (`walk_visible`); `lock`
        skips and locks rows as a claim does where the database can."""
        if fifo:
            return self._walk(ex, qid, after, None, page, lock)
        return self.walk_visible(ex, qid, after, now, page, lock)

    def walk_visible(
        self, ex: E, qid: int, after: int, now: float, page: int, lock: bool
    ) -> list[Row]:
        """`walk_page` of the rows visible at `now`."""
        return self._walk(ex, qid, after, now, page, lock)

    def _walk(
        self, ex: E, qid: int, after: int, now: float | None, page: int, lock: bool
    ) -> list[Row]:
        if now is None:
            statement = WALK_LOCKING if lock else WALK
        else:
            statement = WALK_VISIBLE_LOCKING if lock else WALK_VISIBLE
        return ex.rows(
            self.sql(statement, qid), {"now": now, "page": page, **self.after_values(after)}
        )

    @abstractmethod
    def claim_ready(self, ex: E, qid: int, limit: int, terms: ClaimTerms, token: str) -> list[Row]:
        """Claim up to `limit` ready messages of a queue (none expired), as a receive of a
        plain queue does; the claimed rows, as the claim left them, in any order."""

    def claim_keys(
        self, ex: E, qid: int, keys: Sequence[int], terms: ClaimTerms, token: str
    ) -> list[Row]:
        """Claim the rows of `keys` (chosen by a walk of the queue's head); the rows as the
        claim left them, in any order."""
        found = ex.rows(self.sql(ROWS_OF_KEYS, qid, len(keys)), spread("keys", keys))
        return self.claim_rows(ex, qid, found, claim_values(terms, token), terms)

    def claim_rows(
        self,
        ex: E,
        qid: int,
        rows: list[Row],
        values: dict[str, Any],
        terms: ClaimTerms,
        claim: Statement = CLAIM_KEYS,
    ) -> list[Row]:
        """Claim rows this transaction read (each its key first) by key: `claim`, a claim
        by ``:keys*`` given `values` (`claim_values`, to which the keys are added); the rows
        as the claim left them."""
        if not rows:
            return rows
        keys = [row[0] for row in rows]
        values.update(spread("keys", keys))
        ex.run(self.sql(claim, qid, len(keys)), values)
        return [claimed(row, terms) for row in rows]

    @abstractmethod
    def delete_held(
        self, ex: E, qid: int, token: str, keys: Sequence[int], exact: bool
    ) -> Collection[int]:
        """Delete the rows of `keys` that still carry `token`; the keys deleted. Without
        `exact` a dialect may only count, and raise NotAllHeld when it deleted fewer."""

    def notify_waiters(self, ex: E, queue: str) -> None:
        """Wake other processes' long polls on `queue` when this transaction commits."""

    # -- bulk (the pipeline) --------------------------------------------------------------

    def record_leases(
        self, ex: E, qid: int, stream: str, lease: int, token: str, rows: Sequence[tuple[int, str]]
    ) -> None:
        """Record claims (row key, message id) under a lease, all under one token, in few
        statements."""
        shared = {"qid": qid, "stream": stream, "lease": lease, "token": token}
        for i in range(0, len(rows), 1000):
            chunk = rows[i : i + 1000]
            sql = self.sql(RECORD_LEASES, 0, len(chunk))
            ex.run(sql, by_rows(sql, shared, ("row_key", "message_id"), chunk))

    def stage_aside(self, ex: E, tag: int, start: int, rows: Sequence[Fields]) -> None:
        """Write stage `tag`'s rows to the staging table, numbered from `start` (the
        dialects that stage aside)."""
        raise NotImplementedError(f"{self.name} stages in the queue's own table")

    def publish_aside(
        self, ex: E, qid: int, tags: Sequence[int], now: float, staged: int
    ) -> int | None:
        """Copy the rows of stages `tags` from the staging table into queue `qid` as sent at
        `now`, skipping ids the queue holds; how many it gained. None, copying nothing, where
        the stages hold fewer rows than the `staged` they counted (the dialects that stage
        aside)."""
        raise NotImplementedError(f"{self.name} stages in the queue's own table")

    def lease_claim(
        self, ex: E, qid: int, stream: str, lease: int, limit: int, terms: ClaimTerms,
        token: str,
    ) -> int | None:  # fmt: skip
        """Claim up to `limit` ready messages of a plain queue and record each claim under
        (stream, lease) without reading the messages; how many. None where the dialect has
        no such statement (the pipeline then receives and records)."""
        return None


class ServerDialect(Dialect[CursorExec]):
    """PostgreSQL and MySQL: every queue in one messages table, ``seq`` the row key."""

    key = "seq"
    order = "nprio, seq"
    columns = SERVER_COLUMNS
    priority = "-nprio"
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # the columns a send writes, as `send_values` orders them
    send_columns = ", ".join(SERVER_SEND_COLUMNS)
    # an UPDATE of every staged row would leave a dead version of each (PostgreSQL) or undo
    # for each (InnoDB) in the one transaction that publishes, while the job's tasks idle
    stages_aside = True

    def __init__(self, prefix: str) -> None:
        self.prefix = check_prefix(prefix)

    def messages(self, qid: int) -> str:
        return f"{self.prefix}messages"

    def scope(self, qid: int) -> str:
        return f"queue_id = {int(qid)}"

    def sequence(self, key: int, priority: int) -> int:
        return order_key(priority, key)

    after_words = "(nprio > :after_nprio OR (nprio = :after_nprio AND seq > :after_seq))"

    def after_values(self, after: int) -> dict[str, Any]:
        priority, seq = order_after(after)
        return {"after_nprio": -priority, "after_seq": seq}

    types: ServerTypes  # how the database spells the schema's types (schema.py)

    def slot_words(self, qid: int) -> dict[str, str]:
        words = super().slot_words(qid)
        words.update(dataclasses.asdict(self.types))
        return words

    def migrations(self) -> list[Step]:
        return list(SERVER_MIGRATIONS)

    def schema_version(self, ex: CursorExec) -> int:
        ex.run(self.sql(SERVER_CREATE_SCHEMA))
        row = ex.one(self.sql(SERVER_SCHEMA_VERSION))
        if row is None:
            ex.run(self.sql(SERVER_FIRST_VERSION))
            return 0
        (version,) = row
        return int(version)

    def set_schema_version(self, ex: CursorExec, version: int) -> None:
        ex.run(self.sql(SERVER_SET_VERSION), {"version": version})

    def drop_queue(self, ex: CursorExec, qid: int) -> None:
        ex.run(self.sql(SERVER_DROP_QUEUE, qid), {"qid": qid})

    def find(self, ex: CursorExec, qid: int, message_id: str) -> int | None:
        found = ex.one(self.sql(SERVER_FIND, qid), {"id": message_id, "qid": qid})
        if found is None:
            return None
        (seq,) = found
        return int(seq)

    def stage_aside(self, ex: CursorExec, tag: int, start: int, rows: Sequence[Fields]) -> None:
        sql = self.sql(SERVER_STAGING_ROWS, 0, len(rows))
        shared = {"tag": tag, "start": start}
        ex.run(sql, by_rows(sql, shared, STAGING_COLUMNS[2:], [self.send_row(r) for r in rows]))

    def publish_aside(
        self, ex: CursorExec, qid: int, tags: Sequence[int], now: float, staged: int
    ) -> int | None:
        if not tags:
            return 0
        found = ex.one(self.sql(SERVER_COUNT_STAGING, 0, len(tags)), spread("tags", tags))
        if (int(found[0]) if found else 0) != staged:
            return None
        values = {"qid": qid, "now": now, **spread("tags", tags)}
        return ex.run(self.sql(SERVER_PUBLISH_STAGING, qid, len(tags)), values)

    @staticmethod
    def send_values(qid: int, row: Fields) -> tuple[Any, ...]:
        """A sent row's values, in the order of `send_columns`."""
        return (qid, *ServerDialect.send_row(row))

    @staticmethod
    def send_row(row: Fields) -> tuple[Any, ...]:
        """A sent row's values but its queue id, in the order of SERVER_SEND_COLUMNS."""
        return (
            -row.priority,
            row.id,
            row.body,
            row.attributes,
            row.group_id,
            row.dedup_id,
            row.deadline,
            row.sent_at,
            row.visible_at,
            row.compressed,
        )

    @staticmethod
    def sent_named(qid: int, row: Fields) -> dict[str, Any]:
        """A sent row's values by column (SERVER_SEND_COLUMNS, the queue id as qid)."""
        values = dict(zip(SERVER_SEND_COLUMNS[1:], ServerDialect.send_row(row), strict=True))
        values["qid"] = qid
        return values

    @staticmethod
    def moved_named(qid: int, row: Fields) -> dict[str, Any]:
        """A moved row's values by column (SERVER_ALL_COLUMNS, the queue id as qid)."""
        return {
            **ServerDialect.sent_named(qid, row),
            "receive_count": row.receive_count,
            "first_received_at": row.first_received_at,
            "version": row.version,
            "source_queue": row.source_queue,
            "error": row.error,
        }
