"""Bulk access for data pipelines, shared by the SQLite and the SQL stores.

Three things a parallel job needs and single-message operations cannot give it:

- snapshots: a queue's rows (or its archive's) read by row-key range without receiving them,
  so any number of tasks can each read a disjoint slice;
- leases: messages claimed in bulk under (stream, lease number) with a long visibility
  timeout, readable again by lease and row range (a replayed batch sees the same messages)
  and acknowledged by lease number. A lease row keeps the claim's token, so a message whose
  lease ran out and which someone else received since is neither read nor deleted;
- staged writes: messages inserted hidden, their `visible_at` a tag far in the future that
  stands for (sink, batch, partition, attempt) (one `stages` row per task attempt records
  it and the row-key range the attempt wrote), published in one transaction that also
  records (sink, batch), so a retried task or a replayed batch never duplicates, and
  discarded when a job aborts. Publishing is one range UPDATE per batch, not one per row.

A store provides a handful of hooks (below); statements here are written with ``%s``
parameters and the store's runner adapts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..exceptions import InvalidInput
from ..models import ArchivedMessage, Message, NewMessage, QueueAttributes
from .base import receipt_claim

T = TypeVar("T")

HIDDEN = 1e15  # staged messages have visible_at HIDDEN + their stage's tag: after any real time
PAGE = 2000  # rows per statement when scanning or reading a lease
LEASE_COLUMNS = "queue_id, stream, lease, row_key, message_id, token"
LEASE_KEY = "queue_id, stream, lease, row_key"


def lease_insert(prefix: str, select: str) -> str:
    """Record the claims `select` yields (rows of LEASE_COLUMNS) in the leases table; a claim
    recorded before under the same lease and row key is replaced (SQLite and PostgreSQL)."""
    return (
        f"INSERT INTO {prefix}leases ({LEASE_COLUMNS}) {select} ON CONFLICT ({LEASE_KEY})"
        " DO UPDATE SET message_id = excluded.message_id, token = excluded.token"
    )


LEASE_CHUNK = 5000  # messages claimed per receive when leasing, deleted per acknowledgement
JOB_SINK_DAYS = 7  # how long a one-off job's commit record is kept


Page = tuple[list[tuple[Any, ...]], "int | None"]  # rows, and the key to go on after (None: done)


class Exec(Protocol):
    def __call__(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def many(self, sql: str, rows: Sequence[Sequence[Any]], types: Sequence[str]) -> None:
        """Run a one-row INSERT for many rows (`types`: the columns' SQL types)."""
        ...

    def count(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; how many rows it changed."""
        ...


@dataclass(frozen=True)
class Stage:
    """One task attempt's staged messages: visible_at HIDDEN + tag, row keys low..high."""

    tag: int
    part: int
    attempt: int
    low: int | None
    high: int | None


@dataclass(frozen=True)
class Bounds:
    """How many rows a source holds and its lowest and highest row keys."""

    count: int
    low: int
    high: int

    def split(self, parts: int) -> list[tuple[int, int]]:
        """Up to `parts` contiguous (low, high] key ranges covering every row."""
        if self.count == 0:
            return []
        parts = max(1, min(parts, self.count))
        span = self.high - self.low + 1
        edges = [self.low - 1 + span * i // parts for i in range(parts + 1)]
        return [(edges[i], edges[i + 1]) for i in range(parts) if edges[i + 1] > edges[i]]


def pipeline_ddl(p: str, key: str, text: str, double: str, options: str = "") -> list[str]:
    """Tables of the pipeline features; `key` is the type of a message's row key."""
    return [
        f"""CREATE TABLE {p}leases (
            queue_id BIGINT NOT NULL,
            stream {text} NOT NULL,
            lease BIGINT NOT NULL,
            row_key BIGINT NOT NULL,
            message_id {text} NOT NULL,
            token CHAR(16) NOT NULL,
            PRIMARY KEY (queue_id, stream, lease, row_key)
        ){options}""",
        f"""CREATE TABLE {p}streams (
            queue_id BIGINT NOT NULL,
            stream {text} NOT NULL,
            acked BIGINT NOT NULL,
            updated_at {double} NOT NULL,
            PRIMARY KEY (queue_id, stream)
        ){options}""",
        f"""CREATE TABLE {p}staged (
            queue_id BIGINT NOT NULL,
            sink {text} NOT NULL,
            batch BIGINT NOT NULL,
            part INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            mkey {key} NOT NULL,
            PRIMARY KEY (queue_id, sink, batch, mkey)
        ){options}""",
        f"""CREATE TABLE {p}sinks (
            queue_id BIGINT NOT NULL,
            sink {text} NOT NULL,
            batch BIGINT NOT NULL,
            committed_at {double} NOT NULL,
            PRIMARY KEY (queue_id, sink)
        ){options}""",
    ]


def stages_ddl(p: str, serial: str, text: str, double: str, options: str = "") -> list[str]:
    """The table of staging task attempts (replaces the per-message `staged` table)."""
    return [
        f"""CREATE TABLE {p}stages (
            tag {serial},
            queue_id BIGINT NOT NULL,
            sink {text} NOT NULL,
            batch BIGINT NOT NULL,
            part INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            low BIGINT,
            high BIGINT,
            created_at {double} NOT NULL,
            UNIQUE (queue_id, sink, batch, part, attempt)
        ){options}""",
    ]


class PipelineStore:
    """The pipeline operations over a store's tables; see the module doc."""

    clock: Any
    _pl_prefix: str = ""

    # -- what a store provides ------------------------------------------------------------

    def _pl_run(self, fn: Callable[[Exec], T], *, tx: bool = True) -> T:
        raise NotImplementedError

    def _pl_queue(self, ex: Exec, queue: str) -> tuple[int, QueueAttributes]:
        raise NotImplementedError

    def _pl_messages(self, qid: int) -> tuple[str, str, str]:
        """(messages table, row-key column, condition selecting the queue's rows)."""
        raise NotImplementedError

    _pl_columns: str  # message columns, row key first, as `_pl_message` reads them

    def _pl_message(self, queue: str, row: tuple[Any, ...]) -> Message:
        raise NotImplementedError

    def _pl_archive(self) -> tuple[str, str, str]:
        """(archive table, its queue-name column, its columns as `row_to_archived` reads)."""
        raise NotImplementedError

    def _pl_archived(self, row: tuple[Any, ...]) -> ArchivedMessage:
        raise NotImplementedError

    def _pl_insert_hidden(
        self, ex: Exec, queue: str, qid: int, attrs: QueueAttributes,
        messages: Sequence[NewMessage], now: float, visible_at: float,
    ) -> tuple[list[int], list[str]]:  # fmt: skip
        """Insert messages with `visible_at`, skipping ids the queue holds; (row keys of the
        new rows, ids already present)."""
        raise NotImplementedError

    def _pl_find(self, ex: Exec, qid: int, ids: Sequence[str]) -> list[tuple[int, float]]:
        """(row key, visible_at) of the queue's messages with these ids."""
        raise NotImplementedError

    def _pl_upsert(self, table: str, columns: str, key: str) -> str:
        raise NotImplementedError

    def _delete_claims(self, queue: str, by_token: Mapping[str, Sequence[int]]) -> set[int]:
        """Delete rows still held by their claim's token, as a delete by receipts would
        (archiving where the queue archives); the rows deleted."""
        raise NotImplementedError

    def _pl_forget(self, ex: Exec, qid: int) -> None:
        """Drop a deleted queue's pipeline rows."""
        p = self._pl_prefix
        for table in ("leases", "streams", "stages", "sinks"):
            ex(f"DELETE FROM {p}{table} WHERE queue_id = %s", (qid,))

    # -- snapshots ------------------------------------------------------------------------

    def row_bounds(self, queue: str, *, archive: bool = False) -> Bounds:
        def run(ex: Exec) -> Bounds:
            if archive:
                table, name_col, _ = self._pl_archive()
                row = ex(
                    f"SELECT count(*), min(seq), max(seq) FROM {table} WHERE {name_col} = %s",
                    (queue,),
                )[0]
            else:
                qid, _ = self._pl_queue(ex, queue)
                table, key, where = self._pl_messages(qid)
                row = ex(
                    f"SELECT count(*), min({key}), max({key}) FROM {table} WHERE {where}"
                    f" AND visible_at < %s",
                    (HIDDEN,),
                )[0]
            return Bounds(int(row[0]), int(row[1] or 0), int(row[2] or 0))

        return self._pl_run(run, tx=False)

    def _pages(self, fetch: Callable[[Exec, int], Page], low: int) -> Iterator[tuple[Any, ...]]:
        """The rows `fetch` returns page by page, from `low` until it says there is no more."""
        after: int | None = low
        while after is not None:

            def page(ex: Exec, start: int = after) -> Page:
                return fetch(ex, start)

            rows, after = self._pl_run(page, tx=False)
            yield from rows

    def scan_messages(self, queue: str, low: int, high: int) -> Iterator[Message]:
        """Every message with low < row key <= high, in row-key order, none received."""

        def fetch(ex: Exec, after: int) -> Page:
            qid, _ = self._pl_queue(ex, queue)
            table, key, where = self._pl_messages(qid)
            rows = ex(
                f"SELECT {self._pl_columns} FROM {table} WHERE {where} AND {key} > %s"
                f" AND {key} <= %s AND visible_at < %s ORDER BY {key} LIMIT %s",
                (after, high, HIDDEN, PAGE),
            )
            return rows, (int(rows[-1][0]) if len(rows) == PAGE else None)

        for r in self._pages(fetch, low):
            yield self._pl_message(queue, r)

    def scan_archive(self, queue: str, low: int, high: int) -> Iterator[ArchivedMessage]:
        table, name_col, columns = self._pl_archive()

        def fetch(ex: Exec, after: int) -> Page:
            rows = ex(
                f"SELECT seq, {columns} FROM {table} WHERE {name_col} = %s AND seq > %s"
                " AND seq <= %s ORDER BY seq LIMIT %s",
                (queue, after, high, PAGE),
            )
            return rows, (int(rows[-1][0]) if len(rows) == PAGE else None)

        for r in self._pages(fetch, low):
            yield self._pl_archived(r[1:])

    # -- leases ---------------------------------------------------------------------------

    def stream_position(self, queue: str, stream: str) -> int:
        """The highest lease number acknowledged for `stream` on `queue` (0 at first)."""

        def run(ex: Exec) -> int:
            qid, _ = self._pl_queue(ex, queue)
            rows = ex(
                f"SELECT acked FROM {self._pl_prefix}streams WHERE queue_id = %s AND stream = %s",
                (qid, stream),
            )
            return int(rows[0][0]) if rows else 0

        return self._pl_run(run, tx=False)

    def lease_messages(
        self, queue: str, stream: str, lease: int, max_messages: int, visibility_timeout: float
    ) -> int:
        """Top lease `lease` up to `max_messages` held messages; how many it holds.

        Messages are received (every rule of a receive applies: dead-lettering, deadlines,
        FIFO groups) with `visibility_timeout`, and each claim is recorded with its token.
        Leasing a number again adds to it, so a planner that died after leasing re-plans the
        same batch.
        """
        count = self.lease_bounds(queue, stream, lease, lease).count
        while count < max_messages:
            got = self._lease_chunk(
                queue, stream, lease, min(LEASE_CHUNK, max_messages - count), visibility_timeout
            )
            if not got:
                break
            count += got
        return count

    def _lease_chunk(
        self, queue: str, stream: str, lease: int, max_messages: int, visibility_timeout: float
    ) -> int:
        """Receive up to `max_messages` and record each claim under `lease`; how many."""
        got = self.receive(queue, max_messages, visibility_timeout)  # type: ignore[attr-defined]
        rows = [receipt_claim(m.receipt) for m in got]
        if not rows:
            return 0
        p = self._pl_prefix

        def record(ex: Exec) -> None:
            qid, _ = self._pl_queue(ex, queue)
            ex.many(
                self._pl_upsert(f"{p}leases", LEASE_COLUMNS, LEASE_KEY),
                [(qid, stream, lease, row, mid, token) for row, mid, token in rows],
                ("bigint", "text", "bigint", "bigint", "text", "text"),
            )

        self._pl_run(record)
        return len(rows)

    def _lease_rows(self, queue: str, stream: str, upto: int) -> list[tuple[int, str]]:
        """(row key, claim token) of what leases <= `upto` hold."""

        def run(ex: Exec) -> list[tuple[int, str]]:
            qid, _ = self._pl_queue(ex, queue)
            rows = ex(
                f"SELECT row_key, token FROM {self._pl_prefix}leases"
                " WHERE queue_id = %s AND stream = %s AND lease <= %s",
                (qid, stream, upto),
            )
            return [(int(r[0]), str(r[1]).strip()) for r in rows]

        return self._pl_run(run, tx=False)

    def lease_bounds(self, queue: str, stream: str, first: int, last: int) -> Bounds:
        def run(ex: Exec) -> Bounds:
            qid, _ = self._pl_queue(ex, queue)
            row = ex(
                f"SELECT count(*), min(row_key), max(row_key) FROM {self._pl_prefix}leases"
                " WHERE queue_id = %s AND stream = %s AND lease >= %s AND lease <= %s",
                (qid, stream, first, last),
            )[0]
            return Bounds(int(row[0]), int(row[1] or 0), int(row[2] or 0))

        return self._pl_run(run, tx=False)

    def read_leased(
        self, queue: str, stream: str, first: int, last: int, low: int, high: int
    ) -> Iterator[Message]:
        """Messages still held under leases first..last with low < row key <= high."""
        p = self._pl_prefix
        for lease in range(first, last + 1):

            def fetch(ex: Exec, after: int, lease: int = lease) -> Page:
                # the lease rows first (one lease number: the key's order is the index's),
                # then their messages by key: a join would leave the plan to a planner that
                # may walk the whole queue
                qid, _ = self._pl_queue(ex, queue)
                table, key, _ = self._pl_messages(qid)
                held = ex(
                    f"SELECT row_key, token FROM {p}leases WHERE queue_id = %s AND stream = %s"
                    " AND lease = %s AND row_key > %s AND row_key <= %s ORDER BY row_key"
                    " LIMIT %s",
                    (qid, stream, lease, after, high, PAGE),
                )
                if not held:
                    return [], None
                tokens = {int(r[0]): str(r[1]).strip() for r in held}
                # by key alone (keys are unique in the table, and the token must match): a
                # prepared statement's generic plan could otherwise walk the whole queue
                rows = ex(
                    f"SELECT {self._pl_columns}, token FROM {table}"
                    f" WHERE {key} IN ({_marks(held)}) ORDER BY {key}",
                    list(tokens),
                )
                mine = [r[:-1] for r in rows if str(r[-1] or "").strip() == tokens[int(r[0])]]
                return mine, (int(held[-1][0]) if len(held) == PAGE else None)

            for r in self._pages(fetch, low):
                yield self._pl_message(queue, r)

    def acknowledge_leases(self, queue: str, stream: str, upto: int) -> int:
        """Delete (archive, where the queue archives) what leases <= `upto` still hold, and
        record `upto` as the stream's position. Idempotent; returns how many were deleted."""
        p = self._pl_prefix
        deleted = self._delete_leased(queue, stream, upto)

        def run(ex: Exec) -> None:
            qid, _ = self._pl_queue(ex, queue)
            ex(
                f"DELETE FROM {p}leases WHERE queue_id = %s AND stream = %s AND lease <= %s",
                (qid, stream, upto),
            )
            rows = ex(
                f"SELECT acked FROM {p}streams WHERE queue_id = %s AND stream = %s",
                (qid, stream),
            )
            ex(
                self._pl_upsert(
                    f"{p}streams", "queue_id, stream, acked, updated_at", "queue_id, stream"
                ),
                (qid, stream, max(upto, int(rows[0][0]) if rows else 0), self.clock.now()),
            )

        self._pl_run(run)
        return deleted

    def _delete_leased(self, queue: str, stream: str, upto: int) -> int:
        """Delete what leases <= `upto` still hold, as deletes by receipt would; how many."""
        held = self._lease_rows(queue, stream, upto)
        deleted = 0
        for i in range(0, len(held), LEASE_CHUNK):
            by_token: dict[str, list[int]] = {}
            for row, token in held[i : i + LEASE_CHUNK]:
                by_token.setdefault(token, []).append(row)
            deleted += len(self._delete_claims(queue, by_token))
        return deleted

    # -- staged writes --------------------------------------------------------------------

    def stage_messages(
        self, queue: str, sink: str, batch: int, part: int, attempt: int,
        messages: Sequence[NewMessage],
    ) -> int:  # fmt: skip
        """Insert messages hidden under (sink, batch, part, attempt); how many were staged.

        A message whose id the queue holds already is skipped, unless an earlier attempt of
        this sink's batch staged it: then this attempt takes it over.
        """
        p = self._pl_prefix
        now = self.clock.now()

        def run(ex: Exec) -> int:
            qid, attrs = self._pl_queue(ex, queue)
            if attrs.fifo:
                raise InvalidInput(
                    f"queue {queue!r} is FIFO: parallel writers cannot keep group order;"
                    " write to a standard queue"
                )
            stages = self._pl_stages(ex, qid, sink, batch)
            mine = next((s for s in stages if (s.part, s.attempt) == (part, attempt)), None)
            if mine is None:
                ex(
                    f"INSERT INTO {p}stages (queue_id, sink, batch, part, attempt, created_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    (qid, sink, batch, part, attempt, now),
                )
                stages = self._pl_stages(ex, qid, sink, batch)
                mine = next(s for s in stages if (s.part, s.attempt) == (part, attempt))
            hidden = HIDDEN + mine.tag
            keys, present = self._pl_insert_hidden(ex, queue, qid, attrs, messages, now, hidden)
            if present:
                others = {HIDDEN + s.tag for s in stages if s.tag != mine.tag}
                taken = [k for k, v in self._pl_find(ex, qid, present) if v in others]
                if taken:
                    table, key, _ = self._pl_messages(qid)
                    ex(
                        f"UPDATE {table} SET visible_at = %s WHERE {key} IN ({_marks(taken)})",
                        (hidden, *taken),
                    )
                keys += taken
            if keys:
                low = min(keys) if mine.low is None else min(mine.low, *keys)
                high = max(keys) if mine.high is None else max(mine.high, *keys)
                ex(
                    f"UPDATE {p}stages SET low = %s, high = %s WHERE tag = %s",
                    (low, high, mine.tag),
                )
            return len(keys)

        return self._pl_run(run)

    def _pl_stages(self, ex: Exec, qid: int, sink: str, batch: int) -> list[Stage]:
        """The stages of (sink, batch)."""
        return self._pl_stage_rows(ex, "sink = %s AND batch = %s", (qid, sink, batch))

    def _pl_abandoned(self, ex: Exec, qid: int, before: float) -> list[Stage]:
        """The stages of one-off jobs created before `before` (their jobs died unfinished)."""
        return self._pl_stage_rows(ex, "sink LIKE %s AND created_at < %s", (qid, "job:%", before))

    def _pl_stage_rows(self, ex: Exec, cond: str, params: Sequence[Any]) -> list[Stage]:
        rows = ex(
            f"SELECT tag, part, attempt, low, high FROM {self._pl_prefix}stages"
            f" WHERE queue_id = %s AND {cond}",
            params,
        )
        return [Stage(int(r[0]), int(r[1]), int(r[2]), _int(r[3]), _int(r[4])) for r in rows]

    def _pl_tagged(self, qid: int, stages: Sequence[Stage]) -> tuple[str, list[Any]]:
        """A condition on row key and visible_at selecting the stages' staged messages."""
        held = [s for s in stages if s.low is not None and s.high is not None]
        if not held:
            return "1 = 0", []
        _, key, _ = self._pl_messages(qid)
        low = min(s.low for s in held if s.low is not None)
        high = max(s.high for s in held if s.high is not None)
        # tags are unique across queues, so the key range and the tags select the rows alone
        return (
            f"{key} >= %s AND {key} <= %s AND visible_at IN ({_marks(held)})",
            [low, high, *(HIDDEN + s.tag for s in held)],
        )

    def publish_staged(
        self, queue: str, sink: str, batch: int, tags: Sequence[tuple[int, int]]
    ) -> int | None:
        """Make visible what (part, attempt) in `tags` staged for (sink, batch), drop what
        other attempts staged, and record the batch, in one transaction. None if the batch
        was published before (nothing changes but the other attempts' rows going)."""
        p = self._pl_prefix
        now = self.clock.now()

        def run(ex: Exec) -> tuple[int, int | None]:
            qid, _ = self._pl_queue(ex, queue)
            table, _, _ = self._pl_messages(qid)
            done = ex(f"SELECT batch FROM {p}sinks WHERE queue_id = %s AND sink = %s", (qid, sink))
            stages = self._pl_stages(ex, qid, sink, batch)
            published: int | None = None
            if not done or int(done[0][0]) < batch:
                wanted = set(tags)
                cond, params = self._pl_tagged(
                    qid, [s for s in stages if (s.part, s.attempt) in wanted]
                )
                published = ex.count(
                    f"UPDATE {table} SET visible_at = %s, sent_at = %s WHERE {cond}",
                    (now, now, *params),
                )
                ex(
                    self._pl_upsert(
                        f"{p}sinks", "queue_id, sink, batch, committed_at", "queue_id, sink"
                    ),
                    (qid, sink, batch, now),
                )
                ex(
                    f"DELETE FROM {p}sinks WHERE sink LIKE %s AND committed_at < %s",
                    ("job:%", now - JOB_SINK_DAYS * 86400),
                )
            # what other attempts staged goes, and so do one-off jobs abandoned long ago
            stale = self._pl_abandoned(ex, qid, now - JOB_SINK_DAYS * 86400)
            self._pl_drop_staged(ex, qid, stages + stale)
            return qid, published

        qid, published = self._pl_run(run)
        if published:
            self._count(qid, sent=published)  # type: ignore[attr-defined]
            self.notify(queue)  # type: ignore[attr-defined]
        return published

    def discard_staged(self, queue: str, sink: str, batch: int) -> int:
        """Remove everything staged for (sink, batch); how many messages went."""

        def run(ex: Exec) -> int:
            qid, _ = self._pl_queue(ex, queue)
            return self._pl_drop_staged(ex, qid, self._pl_stages(ex, qid, sink, batch))

        return self._pl_run(run)

    def _pl_drop_staged(self, ex: Exec, qid: int, stages: Sequence[Stage]) -> int:
        """Delete the stages' messages still hidden, and the stages; how many messages went."""
        if not stages:
            return 0
        table, _, _ = self._pl_messages(qid)
        cond, params = self._pl_tagged(qid, stages)
        gone = ex.count(f"DELETE FROM {table} WHERE {cond}", params)
        ex(
            f"DELETE FROM {self._pl_prefix}stages WHERE tag IN ({_marks(stages)})",
            [s.tag for s in stages],
        )
        return gone


def _marks(values: Sized) -> str:
    # sql_conn.in_list's twin: importing it here would be circular (sql_conn imports the SQL
    # schema, which imports this module's DDL)
    return ", ".join(["%s"] * len(values))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
