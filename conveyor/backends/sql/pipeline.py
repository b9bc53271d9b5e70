"""The SQL store's bulk access for parallel jobs (the `Pipeline` contract): a part the store
holds.

- snapshots read a queue's rows (or its archive's) by row-key range;
- leases are rows of ``leases`` (queue, stream, lease number, row key, message id, claim
  token), written as messages are claimed; acknowledging deletes the rows that still carry
  their lease's token, then the lease rows, and records the stream's position;
- staged writes: one ``stages`` row per task attempt records its tag and how many rows it
  staged. PostgreSQL and MySQL write the rows to the ``staging`` table (unlogged on
  PostgreSQL) and publish a batch with one INSERT ... SELECT into the queue, so every row is
  written to the queue once; SQLite inserts them into the queue's own table with
  `visible_at` at HIDDEN + the tag, the stage recording the row-key range, and publishes
  with one range UPDATE (no row versions there: an update costs what an insert does, and
  the ids it makes carry their row). Publishing checks that every stage is there with all
  its rows, else publishes nothing. ``sinks`` records each sink's last published batch.

The running totals a lease, an acknowledgement or a publication counts (received, deleted,
sent) are written before it returns, not a second later with the store's others
(totals.py): its process is a Spark worker, which Spark ends with a kill or a bare
`os._exit`, past the exit hooks that would write them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...exceptions import InvalidInput, StagedWritesLost
from ...models import ArchivedMessage, Delivery, Message, NewMessage
from ...receipts import claim_token
from ..base import Bounds, Pipeline
from ..rules import claim_terms, walks_head
from .connections import Exec
from .pipeline_statements import (
    ABANDONED_STAGES,
    ADD_STAGED,
    ARCHIVE_BOUNDS,
    ARCHIVE_LEASED,
    CREATE_STAGE,
    DELETE_LEASED,
    DELETE_LEASES,
    DROP_STAGED,
    DROP_STAGES,
    FORGET_JOB_SINKS,
    LEASE_BOUNDS,
    LEASE_PAGE,
    LEASE_ROWS,
    LEASED_ROWS,
    MESSAGE_BOUNDS,
    PUBLISH_STAGED,
    RESTAGE,
    SCAN_ARCHIVE,
    SCAN_MESSAGES,
    SET_SINK_BATCH,
    SET_STAGE_RANGE,
    SET_STREAM_POSITION,
    SINK_BATCH,
    STAGES_OF_BATCH,
    STREAM_POSITION,
)
from .rows import Row, new_fields, row_archived, row_message
from .server_statements import SERVER_DROP_STAGING
from .statement import Statement, spread
from .statements import DELETE_KEYS

if TYPE_CHECKING:
    from .store import SQLStore

HIDDEN = 1e15  # staged messages have visible_at HIDDEN + their stage's tag: after any real time
PAGE = 2000  # rows per statement when scanning or reading a lease
LEASE_CHUNK = 5000  # messages claimed per receive when leasing, deleted per acknowledgement
JOB_SINK_DAYS = 7  # how long a one-off job's commit record is kept
STAGE_HOURS = 24  # a one-off job's staged rows older than this are its own dead job's
REMOVE_CHUNK = 1000  # ids looked up and removed per statement

Page = tuple[list[Row], "int | None"]  # rows, and the key to go on after (None: done)


@dataclass(frozen=True)
class Stage:
    """One task attempt's staged messages: `staged` of them, tagged `tag` (in the queue's
    own table: visible_at HIDDEN + tag, row keys low..high)."""

    tag: int
    part: int
    attempt: int
    low: int | None
    high: int | None
    staged: int


class SQLPipeline(Pipeline):
    def __init__(self, store: SQLStore[Any]) -> None:
        self.store = store
        self.d = store.dialect

    def _qid(self, ex: Exec, queue: str) -> int:
        qid, _ = self.store.queue_row(ex, queue)
        return qid

    # -- snapshots ------------------------------------------------------------------------

    def row_bounds(self, queue: str, *, archive: bool = False) -> Bounds:
        d = self.d

        def run(ex: Exec) -> Row | None:
            if archive:
                return ex.one(d.sql(ARCHIVE_BOUNDS), {"queue": queue})
            qid = self._qid(ex, queue)
            return ex.one(d.sql(MESSAGE_BOUNDS, qid), {"hidden": HIDDEN})

        return _bounds(self.store.read(run))

    def _pages(self, fetch: Callable[[Exec, int], Page], low: int) -> Iterator[Row]:
        """The rows `fetch` returns page by page, from `low` until it says there is no more."""
        after: int | None = low
        while after is not None:

            def page(ex: Exec, start: int = after) -> Page:
                return fetch(ex, start)

            rows, after = self.store.read(page)
            yield from rows

    def scan_messages(self, queue: str, low: int, high: int) -> Iterator[Message]:
        d = self.d

        def fetch(ex: Exec, after: int) -> Page:
            qid = self._qid(ex, queue)
            rows = ex.rows(
                d.sql(SCAN_MESSAGES, qid),
                {"after": after, "high": high, "hidden": HIDDEN, "page": PAGE},
            )
            return rows, _last_key(rows)

        for row in self._pages(fetch, low):
            yield row_message(queue, row, d.sequence)

    def scan_archive(self, queue: str, low: int, high: int) -> Iterator[ArchivedMessage]:
        def fetch(ex: Exec, after: int) -> Page:
            rows = ex.rows(
                self.d.sql(SCAN_ARCHIVE),
                {"queue": queue, "after": after, "high": high, "page": PAGE},
            )
            return rows, _last_key(rows)

        for _, *archived in self._pages(fetch, low):
            yield row_archived(tuple(archived))

    # -- leases ---------------------------------------------------------------------------

    def stream_position(self, queue: str, stream: str) -> int:
        def run(ex: Exec) -> int:
            row = ex.one(
                self.d.sql(STREAM_POSITION), {"qid": self._qid(ex, queue), "stream": stream}
            )
            return _first(row, 0)

        return self.store.read(run)

    def lease_messages(
        self, queue: str, stream: str, lease: int, max_messages: int, visibility_timeout: float
    ) -> int:
        count = self.lease_bounds(queue, stream, lease, lease).count
        while count < max_messages:
            got = self._lease_chunk(
                queue, stream, lease, min(LEASE_CHUNK, max_messages - count), visibility_timeout
            )
            if not got:
                break
            count += got
        self.store.accounts.write_now()
        return count

    def _lease_chunk(
        self, queue: str, stream: str, lease: int, max_messages: int, visibility_timeout: float
    ) -> int:
        """Claim up to `max_messages` and record each claim under `lease`; how many."""
        store, d = self.store, self.d
        qid, attrs = store.lookup(queue)
        if not walks_head(attrs):
            # a plain queue: where the dialect can, one statement claims and records
            now = store.clock.now()
            store.accounts.sweep(qid, queue, attrs, now, force=False)
            terms = claim_terms(attrs, now, visibility_timeout)
            token = claim_token(now)
            got = store.counted_write(
                lambda ex: d.lease_claim(ex, qid, stream, lease, max_messages, terms, token),
                "received",
                lambda n: [(qid, n or 0)],
                single=d.single_claim,
                durable=attrs.delivery is Delivery.AT_MOST_ONCE,
            )
            if got is not None:
                return got
        rows, token = store.fresh_on_drop(
            queue, lambda: store.claim(queue, max_messages, visibility_timeout)
        )
        if not rows:
            return 0
        leased = [(int(key), str(message_id)) for key, message_id, *_ in rows]
        store.write(lambda ex: d.record_leases(ex, qid, stream, lease, token, leased))
        return len(rows)

    def _lease_rows(self, queue: str, stream: str, upto: int) -> list[tuple[int, str]]:
        """(row key, claim token) of what leases <= `upto` hold."""

        def run(ex: Exec) -> list[Row]:
            values = {"qid": self._qid(ex, queue), "stream": stream, "upto": upto}
            return ex.rows(self.d.sql(LEASE_ROWS), values)

        return [(int(key), str(token).strip()) for key, token in self.store.read(run)]

    def lease_bounds(self, queue: str, stream: str, first: int, last: int) -> Bounds:
        def run(ex: Exec) -> Row | None:
            values = {"qid": self._qid(ex, queue), "stream": stream, "first": first, "last": last}
            return ex.one(self.d.sql(LEASE_BOUNDS), values)

        return _bounds(self.store.read(run))

    def read_leased(
        self, queue: str, stream: str, first: int, last: int, low: int, high: int
    ) -> Iterator[Message]:
        d = self.d
        for lease in range(first, last + 1):

            def fetch(ex: Exec, after: int, lease: int = lease) -> Page:
                # the lease rows first (one lease number: the key's order is the index's),
                # then their messages by key: a join would leave the plan to a planner that
                # may walk the whole queue
                qid = self._qid(ex, queue)
                held = ex.rows(
                    d.sql(LEASE_PAGE),
                    {
                        "qid": qid,
                        "stream": stream,
                        "lease": lease,
                        "after": after,
                        "high": high,
                        "page": PAGE,
                    },
                )
                if not held:
                    return [], None
                tokens = {int(key): str(token).strip() for key, token in held}
                # by key alone (keys are unique in the table, and the token must match): a
                # prepared statement's generic plan could otherwise walk the whole queue
                rows = ex.rows(d.sql(LEASED_ROWS, qid, len(tokens)), spread("keys", list(tokens)))
                mine = []
                for *row, token in rows:
                    key, *_ = row
                    if str(token or "").strip() == tokens[int(key)]:
                        mine.append(tuple(row))
                return mine, _last_key(held)

            for row in self._pages(fetch, low):
                yield row_message(queue, row, d.sequence)

    def acknowledge_leases(self, queue: str, stream: str, upto: int) -> int:
        d, store = self.d, self.store
        deleted = self._delete_leased(queue, stream, upto)

        def run(ex: Exec) -> None:
            qid = self._qid(ex, queue)
            ex.run(d.sql(DELETE_LEASES), {"qid": qid, "stream": stream, "upto": upto})
            row = ex.one(d.sql(STREAM_POSITION), {"qid": qid, "stream": stream})
            acked = max(upto, _first(row, 0))
            ex.run(
                d.sql(SET_STREAM_POSITION),
                {"qid": qid, "stream": stream, "acked": acked, "now": store.clock.now()},
            )

        store.write(run)
        store.accounts.write_now()
        return deleted

    def _delete_leased(self, queue: str, stream: str, upto: int) -> int:
        """Delete what leases <= `upto` still hold, as deletes by receipt would; how many."""
        store, d = self.store, self.d
        qid, attrs = store.lookup(queue)
        if d.deletes_leased:
            # one statement: the rows the leases hold, where they still hold the claim
            now = store.clock.now()
            values = {"qid": qid, "stream": stream, "upto": upto}

            def run(ex: Exec) -> int:
                if attrs.archive:
                    archived = {**values, "queue": queue, "now": now, "outcome": "deleted"}
                    ex.run(d.sql(ARCHIVE_LEASED, qid), archived)
                return ex.run(d.sql(DELETE_LEASED, qid), values)

            return store.counted_write(
                run, "deleted", lambda n: [(qid, n)], single=not attrs.archive
            )
        held = self._lease_rows(queue, stream, upto)
        deleted = 0
        for i in range(0, len(held), LEASE_CHUNK):
            by_token: dict[str, list[int]] = {}
            for key, token in held[i : i + LEASE_CHUNK]:
                by_token.setdefault(token, []).append(key)
            deleted += len(store.delete_claims(queue, by_token))
        return deleted

    # -- staged writes --------------------------------------------------------------------

    def stage_messages(
        self, queue: str, sink: str, batch: int, part: int, attempt: int,
        messages: Sequence[NewMessage],
    ) -> int:  # fmt: skip
        d = self.d
        now = self.store.clock.now()
        mine_ids = [m.generated_id or not m.id for m in messages]
        fresh = iter(d.new_ids(sum(mine_ids)) or ())
        ids = [next(fresh, "") if own else m.id for m, own in zip(messages, mine_ids, strict=True)]

        def run(ex: Exec) -> int:
            qid, attrs = self.store.queue_row(ex, queue)
            if attrs.fifo:
                raise InvalidInput(
                    f"queue {queue!r} is FIFO: parallel writers cannot keep group order;"
                    " write to a standard queue"
                )
            stages = self._stages(ex, qid, sink, batch)
            mine = next((s for s in stages if (s.part, s.attempt) == (part, attempt)), None)
            if mine is None:
                if not stages:  # a new batch: reclaim what one-off jobs that died left
                    self._drop_staged(ex, qid, self._abandoned(ex, qid, now - STAGE_HOURS * 3600))
                ex.run(
                    d.sql(CREATE_STAGE),
                    {
                        "qid": qid,
                        "sink": sink,
                        "batch": batch,
                        "part": part,
                        "attempt": attempt,
                        "now": now,
                    },
                )
                stages = self._stages(ex, qid, sink, batch)
                mine = next(s for s in stages if (s.part, s.attempt) == (part, attempt))
            hidden = HIDDEN + mine.tag
            rows = [
                new_fields(m, i, None, now, False, hidden)
                for m, i in zip(messages, ids, strict=True)
            ]
            if d.stages_aside:
                held = d.held_at_home(ex, qid, [row.id for row in rows])
                if held:  # skipped now: publishing skips the ids the index holds
                    rows = [row for row in rows if row.id not in held]
                if rows:
                    d.stage_aside(ex, mine.tag, mine.staged, rows)
                    ex.run(d.sql(ADD_STAGED), {"n": len(rows), "tag": mine.tag})
                return len(rows)
            if not rows:
                return 0
            stored = d.insert_keyed(ex, qid, rows, all(mine_ids))
            keys = [k for k in stored if k is not None]
            present = [row.id for row, k in zip(rows, stored, strict=True) if k is None]
            if present:
                # what an earlier attempt of this batch staged, this attempt takes over
                others = {HIDDEN + s.tag for s in stages if s.tag != mine.tag}
                taken = [k for k, v in d.find_many(ex, qid, present) if v in others]
                if taken:
                    ex.run(
                        d.sql(RESTAGE, qid, len(taken)), {"hidden": hidden, **spread("keys", taken)}
                    )
                keys += taken
            if keys:
                low = min(keys) if mine.low is None else min(mine.low, *keys)
                high = max(keys) if mine.high is None else max(mine.high, *keys)
                ex.run(d.sql(SET_STAGE_RANGE), {"low": low, "high": high, "tag": mine.tag})
            return len(keys)

        return self.store.write(run)

    def _stages(self, ex: Exec, qid: int, sink: str, batch: int) -> list[Stage]:
        """The stages of (sink, batch)."""
        return self._stage_rows(ex, STAGES_OF_BATCH, {"qid": qid, "sink": sink, "batch": batch})

    def _abandoned(self, ex: Exec, qid: int, before: float) -> list[Stage]:
        """The stages of one-off jobs created before `before` (their jobs died unfinished)."""
        values = {"qid": qid, "pattern": "job:%", "before": before}
        return self._stage_rows(ex, ABANDONED_STAGES, values)

    def _stage_rows(self, ex: Exec, statement: Statement, values: dict[str, Any]) -> list[Stage]:
        rows = ex.rows(self.d.sql(statement), values)
        return [
            Stage(int(tag), int(part), int(attempt), _int(low), _int(high), int(staged))
            for tag, part, attempt, low, high, staged in rows
        ]

    def _staged(
        self, ex: Exec, statement: Statement, qid: int, stages: Sequence[Stage], **more: Any
    ) -> int:
        """Run `statement` on the stages' staged messages (pipeline_statements._STAGED); how many
        rows it changed."""
        held = [(s.tag, s.low, s.high) for s in stages if s.low is not None and s.high is not None]
        if not held:
            return 0
        values = {
            "low": min(lo for _, lo, _ in held if lo is not None),
            "high": max(hi for _, _, hi in held if hi is not None),
            **spread("tags", [HIDDEN + tag for tag, _, _ in held]),
            **more,
        }
        return ex.run(self.d.sql(statement, qid, len(held)), values)

    def publish_staged(
        self, queue: str, sink: str, batch: int, tags: Sequence[tuple[int, int]]
    ) -> int | None:
        d = self.d
        store = self.store
        now = store.clock.now()

        def run(ex: Exec) -> tuple[int, int | None]:
            qid = self._qid(ex, queue)
            done = ex.one(d.sql(SINK_BATCH), {"qid": qid, "sink": sink})
            stages = self._stages(ex, qid, sink, batch)
            published: int | None = None
            if _first(done, -1) < batch:
                asked = set(tags)
                wanted = [s for s in stages if (s.part, s.attempt) in asked]
                if asked - {(s.part, s.attempt) for s in wanted}:
                    raise _lost(queue, sink, batch)  # a stage is missing
                if d.stages_aside:
                    staged = sum(s.staged for s in wanted)
                    published = d.publish_aside(ex, qid, [s.tag for s in wanted], now, staged)
                    if published is None:
                        raise _lost(queue, sink, batch)  # a stage's rows fall short
                else:
                    published = self._staged(ex, PUBLISH_STAGED, qid, wanted, now=now)
                ex.run(
                    d.sql(SET_SINK_BATCH), {"qid": qid, "sink": sink, "batch": batch, "now": now}
                )
                ex.run(
                    d.sql(FORGET_JOB_SINKS),
                    {"pattern": "job:%", "before": now - JOB_SINK_DAYS * 86400},
                )
            # what other attempts staged goes, and so do one-off jobs that died a day ago
            stale = self._abandoned(ex, qid, now - STAGE_HOURS * 3600)
            self._drop_staged(ex, qid, stages + stale)
            return qid, published

        _, published = store.counted_write(run, "sent", lambda done: [(done[0], done[1] or 0)])
        store.accounts.write_now()
        if published:
            store.notify(queue)
        return published

    def _drop_aside(self, ex: Exec, stages: Sequence[Stage]) -> int:
        """Delete the stages' rows in the staging table (where the dialect stages aside);
        how many went."""
        if not stages or not self.d.stages_aside:
            return 0
        sql = self.d.sql(SERVER_DROP_STAGING, 0, len(stages))
        return ex.run(sql, spread("tags", [s.tag for s in stages]))

    def discard_staged(self, queue: str, sink: str, batch: int) -> int:
        def run(ex: Exec) -> int:
            qid = self._qid(ex, queue)
            return self._drop_staged(ex, qid, self._stages(ex, qid, sink, batch))

        return self.store.write(run)

    def remove_messages(self, queue: str, ids: Sequence[str]) -> int:
        d = self.d

        def run(ex: Exec) -> int:
            qid = self._qid(ex, queue)
            gone = 0
            for i in range(0, len(ids), REMOVE_CHUNK):
                keys = [key for key, _ in d.find_many(ex, qid, ids[i : i + REMOVE_CHUNK])]
                if keys:
                    gone += ex.run(d.sql(DELETE_KEYS, qid, len(keys)), spread("keys", keys))
            return gone

        return self.store.write(run) if ids else 0

    def _drop_staged(self, ex: Exec, qid: int, stages: Sequence[Stage]) -> int:
        """Delete the stages' messages still hidden, and the stages; how many messages went."""
        if not stages:
            return 0
        gone = self._staged(ex, DROP_STAGED, qid, stages) + self._drop_aside(ex, stages)
        tags = [s.tag for s in stages]
        ex.run(self.d.sql(DROP_STAGES, 0, len(tags)), spread("tags", tags))
        return gone


def _lost(queue: str, sink: str, batch: int) -> StagedWritesLost:
    return StagedWritesLost(
        f"what the tasks of {sink!r} (batch {batch}) staged for queue {queue!r} is not all in"
        " the store (the database restarted, emptying its staging table, or the job ran"
        f" longer than {STAGE_HOURS} hours and its stages were taken for a dead job's):"
        " nothing was published; run the job again"
    )


def _bounds(row: Row | None) -> Bounds:
    count, low, high = row if row is not None else (0, None, None)
    return Bounds(int(count), int(low or 0), int(high or 0))


def _last_key(rows: Sequence[Row]) -> int | None:
    """The key to read on from: the last row's first column, when a page came back full."""
    if len(rows) < PAGE:
        return None
    key, *_ = rows[-1]
    return int(key)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _first(row: Row | None, default: int) -> int:
    """The one column of a row read as an integer, or `default` where there was no row."""
    if row is None:
        return default
    (value,) = row
    return int(value)
