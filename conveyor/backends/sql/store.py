"""The SQL store: every rule of the queue contract, once, for SQLite, PostgreSQL and MySQL.

A `SQLStore` holds a `Dialect` (where messages live, how each database words a statement,
its hot path) and a `Connections` object (how operations reach the database). This module
holds the core; editing is in `editing.py`, the queues' running totals, stats and sweeps in
`accounts.py`, topics and consumers in `registry.py`, bulk access for Spark in
`pipeline.py`, each a part the store holds.

Receives of plain queues claim in one step (the dialect's `claim_ready`: ``SKIP LOCKED``
on the servers, the write lock in SQLite); FIFO queues, queues with a dead-letter policy and
rate-limited queues walk the queue's head, expiring and dead-lettering on the way (FIFO and
rate limits hold the queue's row lock, which orders their receivers). Times are the clients'
clocks (keep hosts in NTP sync).
"""

from __future__ import annotations

import contextlib
import logging
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Generic, TypeVar

from ...clock import Clock
from ...exceptions import (
    ConveyorError,
    OutcomeUnknown,
    StoreUnavailable,
)
from ...models import (
    Capability,
    Delivery,
    Message,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
    sent_result,
)
from ...notify import HUB
from ...receipts import (
    claim_token,
    group_receipts,
    parse_receipt,
    receipt_prefix,
    receipt_results,
    stale_receipt,
)
from ...validation import DEDUP_WINDOW
from ..base import QUEUE_FEATURES, Backend, Inline, LoopCommits
from ..errors import no_queue, queue_exists
from ..exits import at_end
from ..rules import (
    ClaimTerms,
    GroupFill,
    bare_bodies,
    claim_terms,
    dedup,
    expired,
    refill_tokens,
    walks_head,
)
from .accounts import SQLAccounts
from .connections import Connections, E, Exec
from .dialect import Bare, Dialect, NotAllHeld
from .editing import SQLEditor
from .pipeline import SQLPipeline
from .registry import SQLRegistry
from .rows import (
    Row,
    new_fields,
    row_message,
)
from .statement import Statement
from .statements import (
    CHANGE_VISIBILITY,
    CREATE_QUEUE,
    DEDUP_SEEN,
    DELETE_QUEUE,
    FORGET_DEDUP,
    GIVE_BACK,
    PURGE,
    QUEUE_ID,
    QUEUE_INFO,
    QUEUE_LEFTOVERS,
    QUEUE_NAMES,
    QUEUE_ROW,
    QUEUE_ROW_LOCKED,
    RATE_BUCKET,
    REMEMBER_DEDUP,
    SET_QUEUE_ATTRIBUTES,
    SPEND_TOKENS,
)
from .totals import Total, last_counts

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")

_in_order = operator.attrgetter("sequence")  # a message's place in delivery order

# how long a queue's id and attributes are trusted before they are read again (by the
# store's clock); changes made through this store apply at once, changes made elsewhere
# within this time (as on SQS, where attribute changes take up to a minute to propagate)
QUEUE_CACHE_SECONDS = 1.0
# rows of one page of a walk (`_claim_walking`) at most: the pages of a walk that does not
# lock what it reads double in size from the first, so that a walk past thousands of rows
# (FIFO groups held back) takes a few round trips rather than one every 64 rows
MAX_WALK_PAGE = 4_096

log = logging.getLogger(__name__)


class SQLStore(Backend, LoopCommits, Generic[E]):
    """A queue store on a SQL database. Build one with its database's `from_url`."""

    features = QUEUE_FEATURES | {Capability.CROSS_PROCESS}
    joined_send_receive = True

    def __init__(
        self,
        *,
        scheme: str,
        key: str,
        dialect: Dialect[E],
        db: Connections[E],
        clock: Clock,
        poll_interval: float = 0.2,
    ) -> None:
        super().__init__(clock=clock)
        self.scheme = scheme
        self.dialect = dialect
        self.db = db
        self.one_writer = db.one_writer
        self._key = key
        self._poll_interval = poll_interval
        self._queues: dict[str, tuple[float, int, QueueAttributes]] = {}
        self._parsed: dict[str, QueueAttributes] = {}
        self._idle: set[str] = set()  # queues whose last receive here found nothing
        self._migrated = False
        self._schema_lock = threading.RLock()
        self.accounts = SQLAccounts(self)
        self.editor = SQLEditor(self)
        self.registry = SQLRegistry(self)
        self.bulk = SQLPipeline(self)
        totals = self.accounts.totals  # counted in memory: written however the process ends
        at_end(self, last_counts, db, totals, dialect, forget=totals.take)

    @property
    def key(self) -> str:
        return self._key

    @property
    def poll_interval(self) -> float:
        return self._poll_interval

    def loop_commits(self) -> LoopCommits | None:
        return self if self.db.commits_on_loop else None

    def inline(self) -> AbstractContextManager[Inline]:
        return self.db.inline()

    def gather(self, call: Callable[[], T]) -> asyncio.Future[T] | None:
        return self.db.gather(call)

    def gathering(self) -> bool:
        return self.db.gathering()

    def __repr__(self) -> str:
        return f"SQLStore({self.db.display!r})"

    # -- running operations ---------------------------------------------------------------

    def counted_write(
        self,
        fn: Callable[[E], T],
        total: Total,
        counts: Callable[[T], Sequence[tuple[int, int]]],
        *,
        single: bool = False,
        durable: bool = True,
    ) -> T:
        """`db.write(fn)`, and the running total `total` (sent, received or deleted) of each
        queue raised by what `fn` did (`counts(result)`: (queue id, how many) pairs) once it
        has committed: counted in memory and written by the accounts (totals.py)."""
        result = self.db.write(fn, single=single, durable=durable)
        self.accounts.count(counts(result), total)
        return result

    def write(self, fn: Callable[[E], T], *, single: bool = False, durable: bool = True) -> T:
        """Run `fn` in a transaction (see `Connections.write`), the schema made first."""
        if not self._migrated:
            self._first_use()
        return self.db.write(fn, single=single, durable=durable)

    def read(self, fn: Callable[[E], T]) -> T:
        """Run `fn` outside a transaction, the schema made first."""
        if not self._migrated:
            self._first_use()
        return self.db.read(fn)

    def _first_use(self) -> None:
        with self._schema_lock:
            if not self._migrated:
                self.migrate()

    def migrate(self) -> tuple[int, int]:
        """Bring the database's tables to this version's schema; (old, new) version."""
        d = self.dialect
        steps = d.migrations()

        def run(ex: E) -> int:
            d.lock_schema(ex)
            try:
                current = d.schema_version(ex)
                if current > len(steps):
                    raise StoreUnavailable(
                        f"the tables of {self.db.display} have schema version {current}, newer"
                        f" than this Conveyor ({len(steps)}): upgrade Conveyor"
                    )
                for version in range(current, len(steps)):
                    step = steps[version]
                    if callable(step):
                        step(ex, d.sql)
                    else:
                        for statement in step:
                            ex.run(d.sql(statement))
                    d.set_schema_version(ex, version + 1)
                return current
            finally:
                d.unlock_schema(ex)

        with self._schema_lock:
            self.db.check()
            old = self.db.write(run)
            self._migrated = True
        for line in self.read(d.advice):
            log.warning("%s: %s", self.db.display, line)
        return old, len(steps)

    def fresh_on_drop(self, queue: str, operation: Callable[[], T]) -> T:
        """Run an operation that used a remembered queue row; if the queue's table was
        dropped meanwhile (the queue deleted, perhaps made again), forget it and run once
        more."""
        try:
            return operation()
        except StoreUnavailable as exc:
            if not self.forgot_dropped(queue, exc):
                raise
            return operation()

    def forgot_dropped(self, queue: str, exc: StoreUnavailable) -> bool:
        """Whether `exc` says the queue's table was dropped (then its row is forgotten, and
        the operation may run once more). The hot paths call this inline rather than
        through `fresh_on_drop`'s closure."""
        if not self.dialect.dropped(exc):
            return False
        self._queues.pop(queue, None)
        return True

    # -- queue rows -----------------------------------------------------------------------

    def lookup(self, name: str, now: float | None = None) -> tuple[int, QueueAttributes]:
        """The queue's id and attributes, as read at most QUEUE_CACHE_SECONDS before `now`.

        A row in the cache was read after the schema was made, so the hot paths that start
        here run their statements on `db` directly."""
        hit = self._queues.get(name)
        if hit is not None:
            read_at, qid, attrs = hit
            if 0.0 <= (self.clock.now() if now is None else now) - read_at < QUEUE_CACHE_SECONDS:
                return qid, attrs
        return self.read(lambda ex: self.queue_row(ex, name))

    def queue_row(self, ex: Exec, name: str, *, lock: bool = False) -> tuple[int, QueueAttributes]:
        """Read the queue's id and attributes (locking its row with `lock`)."""
        d = self.dialect
        row = ex.one(d.sql(QUEUE_ROW_LOCKED if lock else QUEUE_ROW), {"name": name})
        if row is None:
            self._queues.pop(name, None)
            raise no_queue(name)
        qid, text = row
        attrs = self._parsed.get(text)
        if attrs is None:
            attrs = self._parsed[text] = QueueAttributes.from_json(text)
        self._queues[name] = (self.clock.now(), int(qid), attrs)
        return int(qid), attrs

    def _info(self, ex: Exec, name: str) -> tuple[int, QueueInfo]:
        row = ex.one(self.dialect.sql(QUEUE_INFO), {"name": name})
        if row is None:
            raise no_queue(name)
        qid, text, created_at, updated_at = row
        attrs = QueueAttributes.from_json(text)
        return int(qid), QueueInfo(
            name=name, attributes=attrs, created_at=created_at, updated_at=updated_at
        )

    def names(self, statement: Statement, prefix: str) -> list[str]:
        """The names of queues or topics (`statement` reads them all) that start with
        `prefix`, sorted."""
        rows = self.read(lambda ex: ex.rows(self.dialect.sql(statement)))
        return sorted(name for (name,) in rows if name.startswith(prefix))

    def close(self) -> None:
        with contextlib.suppress(ConveyorError):  # counts are best effort without a database
            self.accounts.close()
        self.db.close()

    # -- waiting --------------------------------------------------------------------------

    def notify(self, queue: str) -> None:
        if self.db.after_commit(lambda: self.notify(queue)):
            return  # a waiter woken now would not see the uncommitted write
        HUB.notify(self._key, queue)  # `Backend.notify`, then the other processes'
        self.db.announce(self._key, queue)

    def wait_for_messages(self, queue: str, since: int, timeout: float) -> None:
        if self.clock.manual:
            self.clock.sleep(timeout)
            return
        self.db.wait(self.key, queue, since, timeout)

    async def wait_for_messages_async(self, queue: str, since: int, timeout: float) -> None:
        if self.clock.manual:
            self.clock.sleep(min(timeout, self.poll_interval))
            return
        await self.db.wait_async(self.key, queue, since, timeout, self.poll_interval)

    # -- queues ---------------------------------------------------------------------------

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        now = self.clock.now()
        d = self.dialect

        def run(ex: E) -> tuple[QueueInfo, bool]:
            row = {
                "name": name,
                "attrs": attributes.to_json(),
                "now": now,
                "tokens": attributes.rate_limit or 0,
            }
            created = ex.run(d.sql(CREATE_QUEUE), row) > 0
            qid, info = self._info(ex, name)
            if not created:
                if info.attributes != attributes:
                    raise queue_exists(name)
                return info, False
            d.create_queue(ex, qid)
            return info, True

        self._queues.pop(name, None)
        return self.write(run)

    def delete_queue(self, name: str) -> None:
        d = self.dialect

        def run(ex: E) -> int:
            qid, _ = self.queue_row(ex, name, lock=True)
            ex.run(d.sql(DELETE_QUEUE), {"qid": qid})
            d.drop_queue(ex, qid)
            for statement in QUEUE_LEFTOVERS:
                ex.run(d.sql(statement), {"qid": qid})
            return qid

        try:
            qid = self.write(run)
        finally:
            self._queues.pop(name, None)
        self.accounts.forget(qid)

    def list_queues(self, prefix: str = "") -> list[str]:
        return self.names(QUEUE_NAMES, prefix)

    def get_queue(self, name: str) -> QueueInfo:
        return self.read(lambda ex: self._info(ex, name)[1])

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        now = self.clock.now()

        def run(ex: E) -> QueueInfo:
            self.queue_row(ex, name, lock=True)
            ex.run(
                self.dialect.sql(SET_QUEUE_ATTRIBUTES),
                {"attrs": attributes.to_json(), "now": now, "name": name},
            )
            return self._info(ex, name)[1]

        try:
            return self.write(run)
        finally:
            self._queues.pop(name, None)

    def purge_queue(self, name: str) -> int:
        d = self.dialect

        def run(ex: E) -> int:
            qid, _ = self.queue_row(ex, name)
            ex.run(d.sql(FORGET_DEDUP), {"qid": qid})
            self.accounts.recount(ex, qid)
            return ex.run(d.sql(PURGE, qid))

        return self.write(run)

    def queue_stats(self, name: str) -> QueueStats:
        return self.accounts.stats(name)

    # -- messages -------------------------------------------------------------------------

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        try:
            results = self._send(queue, messages)
        except StoreUnavailable as exc:
            if not self.forgot_dropped(queue, exc):
                raise
            results = self._send(queue, messages)
        self.notify(queue)
        return results

    def _send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        now = self.clock.now()
        qid, attrs = self.lookup(queue, now)
        if attrs.fifo:
            return self.counted_write(
                lambda ex: self.send_each(ex, queue, qid, attrs, messages, now, None),
                "sent",
                lambda done: [(qid, sum(1 for r in done if not r.duplicate))],
            )
        insert, single = self._inserting(queue, qid, messages, now)
        stored = self.counted_write(
            insert, "sent", lambda done: [(qid, _stored(done))], single=single
        )
        return _send_results(stored, messages)

    def send_receive(
        self,
        queue: str,
        messages: Sequence[NewMessage],
        max_messages: int,
        visibility_timeout: float,
    ) -> tuple[list[SendResult], list[Message]]:
        return self.fresh_on_drop(
            queue, lambda: self._send_receive(queue, messages, max_messages, visibility_timeout)
        )

    def _send_receive(
        self,
        queue: str,
        messages: Sequence[NewMessage],
        max_messages: int,
        visibility_timeout: float,
    ) -> tuple[list[SendResult], list[Message]]:
        """The send's insert and the receive's claim in one transaction (one commit, one
        wait for the disk). Waiters are woken only where the claim left a message this send
        stored ready (it took older ones first, or fewer): what was ready before woke them
        when it was sent."""
        d = self.dialect
        now = self.clock.now()
        qid, attrs = self.lookup(queue, now)
        if attrs.fifo or not messages:  # FIFO sends hold the queue's row: two calls
            return super().send_receive(queue, messages, max_messages, visibility_timeout)
        insert, _ = self._inserting(queue, qid, messages, now)
        token = claim_token(now)
        self.accounts.sweep(qid, queue, attrs, now, force=False)
        terms = claim_terms(attrs, now, visibility_timeout)
        walking = walks_head(attrs)

        def run(ex: E) -> tuple[Sequence[str | None], list[Row]]:
            stored = insert(ex)
            if ex.in_doubt:  # an attempt lost its connection: its claim, if it committed,
                return stored, []  # ends with its visibility timeout, as a dead receiver's
            if walking:
                return stored, self._claim_walking(
                    ex, qid, queue, attrs, max_messages, terms, token
                )
            return stored, d.claim_ready(ex, qid, max_messages, terms, token)

        stored, rows = self.db.write(run)
        self.accounts.count([(qid, _stored(stored))], "sent")
        self.accounts.count([(qid, len(rows))], "received")
        if rows:
            self._idle.discard(queue)
        prefix = receipt_prefix(queue, token)
        received = [row_message(queue, row, d.sequence, prefix) for row in rows]
        if not {i for i in stored if i is not None} <= {m.id for m in received}:
            self.notify(queue)
        if len(received) > 1:
            received.sort(key=_in_order)  # a claim returns its rows in any order
        return _send_results(stored, messages), received

    def _inserting(
        self, queue: str, qid: int, messages: Sequence[NewMessage], now: float
    ) -> tuple[Callable[[E], Sequence[str | None]], bool]:
        """The write of a send to a standard queue (per message the id stored, or None where
        the queue holds that id already), and whether it is one statement. Ids are fixed
        before its first attempt, so a retry after an attempt that lost its connection
        stores nothing twice (`settle`)."""
        d = self.dialect
        tries = [0]
        mark = d.made_floor
        if bare_bodies(messages):
            # one priority and delay, no options: rows built straight from the bodies
            first = messages[0]
            bodies = [m.body for m in messages]
            return self._bare_write(queue, qid, bodies, first.priority, now, first.delay), True
        mine = [m.generated_id or not m.id for m in messages]
        made = all(mine)
        fresh = iter(d.new_ids(sum(mine)) or ())
        rows = [
            new_fields(m, next(fresh, "") if own else m.id, None, now, False, None)
            for m, own in zip(messages, mine, strict=True)
        ]

        def insert(ex: E) -> list[str | None]:
            tries[0] += 1
            if ex.in_doubt and all(row.id for row in rows):
                ids = [row.id for row in rows]
                return list(self.settle(ex, qid, queue, ids, made, mark))
            return d.insert(ex, qid, queue, rows, made=made, retry=tries[0] > 1)

        return insert, d.single_insert or made

    def settle(
        self, ex: E, qid: int, queue: str, ids: Sequence[str], made: bool, mark: int
    ) -> list[str]:
        """Before an insert of `ids` (made by this store beforehand: `made`; `mark`, the
        dialect's `made_floor` before its first attempt) runs again after an attempt that
        lost its connection (and so may have committed): return the ids as stored if that
        attempt stored every one of them, and raise OutcomeUnknown otherwise. What it
        stored may have been received and deleted since: inserting it again would deliver
        it a second time, after its delete."""
        stored = self.dialect.stored_before(ex, qid, ids, made, mark)
        if stored is None:
            raise OutcomeUnknown.of_send(queue, len(ids))
        return stored

    def send_bodies(self, queue: str, bodies: Sequence[bytes], delay: float) -> list[str]:
        try:
            ids = self._send_bodies(queue, bodies, delay)
        except StoreUnavailable as exc:
            if not self.forgot_dropped(queue, exc):
                raise
            ids = self._send_bodies(queue, bodies, delay)
        self.notify(queue)
        return ids

    def _send_bodies(self, queue: str, bodies: Sequence[bytes], delay: float) -> list[str]:
        now = self.clock.now()
        qid, attrs = self.lookup(queue, now)
        if attrs.fifo:  # FIFO rules: the contract's default, `send`
            return super().send_bodies(queue, bodies, delay)
        insert = self._bare_write(queue, qid, bodies, 0, now, delay)
        return self.counted_write(insert, "sent", lambda ids: [(qid, len(ids))], single=True)

    def _bare_write(
        self,
        queue: str,
        qid: int,
        bodies: Sequence[bytes],
        priority: int,
        now: float,
        delay: float,
    ) -> Callable[[E], list[str]]:
        """The write of bare bodies as rows: their ids (a retry inserts row by row, each
        skipping an id stored before: ids are fixed before the first attempt)."""
        d = self.dialect
        bare = Bare(d.new_ids(len(bodies)), list(bodies), priority, now, now + delay)
        tries = [0]
        mark = d.made_floor

        def insert_bare(ex: E) -> list[str]:
            tries[0] += 1
            if ex.in_doubt and bare.ids is not None:
                return self.settle(ex, qid, queue, bare.ids, True, mark)
            return d.insert_bare(ex, qid, queue, bare, tries[0] > 1)

        return insert_bare

    def send_each(
        self,
        ex: E,
        queue: str,
        qid: int,
        attrs: QueueAttributes,
        messages: Sequence[NewMessage],
        now: float,
        hidden: float | None,
    ) -> list[SendResult]:
        """Send one by one inside the caller's transaction (FIFO queues, topic fan-out,
        staged writes: those hidden until `hidden`), with FIFO de-duplication.

        FIFO sends hold the queue's row lock, so send order is commit order and a group is
        never seen out of order.
        """
        d = self.dialect
        fifo = attrs.fifo
        if fifo:
            self.queue_row(ex, queue, lock=True)
        results: list[SendResult] = []
        for m in messages:
            shown, key = dedup(m, attrs)
            if key is not None:
                seen = ex.one(d.sql(DEDUP_SEEN), {"qid": qid, "dkey": key, "now": now})
                if seen is not None:
                    (original,) = seen
                    results.append(SendResult(id=original, duplicate=True))
                    continue
            given = m.id if m.id and not m.generated_id else None
            made = None if given is not None else d.new_ids(1)
            message_id = given or (made[0] if made else "")
            stored = d.insert_one(ex, qid, new_fields(m, message_id, shown, now, fifo, hidden))
            if stored is None:
                results.append(SendResult(id=message_id, duplicate=True))
                continue
            row_key, message_id = stored
            if key is not None:
                ex.run(
                    d.sql(REMEMBER_DEDUP),
                    {
                        "qid": qid,
                        "dkey": key,
                        "message_id": message_id,
                        "expires_at": now + DEDUP_WINDOW,
                    },
                )
            results.append(
                SendResult(id=message_id, sequence=d.sequence(row_key, 0) if fifo else None)
            )
        if any(not r.duplicate for r in results):
            d.notify_waiters(ex, queue)
        return results

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        try:
            rows, token = self.claim(queue, max_messages, visibility_timeout)
        except StoreUnavailable as exc:
            if not self.forgot_dropped(queue, exc):
                raise
            rows, token = self.claim(queue, max_messages, visibility_timeout)
        if not rows:
            return []
        prefix = receipt_prefix(queue, token)
        sequence = self.dialect.sequence
        messages = [row_message(queue, row, sequence, prefix) for row in rows]
        if len(messages) > 1 and not self.lookup(queue, self.clock.now())[1].fifo:
            messages.sort(key=_in_order)  # a claim returns its rows in any order
        return messages

    def claim(
        self, queue: str, max_messages: int, visibility_timeout: float
    ) -> tuple[list[Row], str]:
        """Receive: claim up to `max_messages` under a new token; the claimed rows and the
        token.

        A claim of an at-least-once queue need not wait for the disk: a power cut that undid
        it would make its messages visible again as they were, as if their receiver had died.
        At-most-once claims are durable (their messages must never come back).
        """
        d = self.dialect
        now = self.clock.now()
        qid, attrs = self.lookup(queue, now)
        if d.polls_idle and queue in self._idle and not self._maybe_ready(queue, qid, now):
            return [], ""
        token = claim_token(now)
        self.accounts.sweep(qid, queue, attrs, now, force=False)
        terms = claim_terms(attrs, now, visibility_timeout)
        durable = attrs.delivery is Delivery.AT_MOST_ONCE

        def received(claimed: list[Row]) -> list[tuple[int, int]]:
            return [(qid, len(claimed))]

        if walks_head(attrs):
            rows = self.counted_write(
                lambda ex: self._claim_walking(ex, qid, queue, attrs, max_messages, terms, token),
                "received",
                received,
                durable=durable,
            )
        else:
            rows = self.counted_write(
                lambda ex: d.claim_ready(ex, qid, max_messages, terms, token),
                "received",
                received,
                single=d.single_claim,
                durable=durable,
            )
        if rows:
            self._idle.discard(queue)
        else:
            self._idle.add(queue)
        return rows, token

    def _maybe_ready(self, queue: str, qid: int, now: float) -> bool:
        """Whether a receive could find anything, read without taking the write lock.

        Receivers polling an idle queue (its last receive here found nothing) would
        otherwise hold the lock that senders need. Only a definite "nothing is visible"
        answers False; any doubt (a dropped table, a failed read) goes on to the claim.
        """
        d = self.dialect
        try:
            return self.db.read(lambda ex: d.any_ready(ex, qid, now))
        except ConveyorError:
            self._queues.pop(queue, None)
            return True

    def _claim_walking(
        self,
        ex: E,
        qid: int,
        queue: str,
        attrs: QueueAttributes,
        max_messages: int,
        terms: ClaimTerms,
        token: str,
    ) -> list[Row]:
        """Receive from FIFO queues, rate-limited queues and queues with a dead-letter policy.

        Walks the queue from its head: expires messages past their retention or (at most
        once) deadline and
        moves those at the max receive count to the dead-letter queue on the way. FIFO queues
        skip every group whose earliest message is not visible; they and rate-limited queues
        hold the queue's row lock, other queues skip rows other receivers hold.
        """
        d = self.dialect
        now = terms.now
        limit = max_messages
        tokens = 0.0
        if attrs.fifo or attrs.rate_limit:
            bucket = ex.one(d.sql(RATE_BUCKET), {"qid": qid})
            if bucket is None:
                return []
            if attrs.rate_limit:
                left, left_at = bucket
                tokens = refill_tokens(left, left_at, attrs.rate_limit, now)
                limit = min(limit, int(tokens))
        policy = attrs.dead_letter
        dlq: list[int | None] = []  # its dead-letter queue's id, looked up at a first dead one
        lock = not (attrs.fifo or attrs.rate_limit)
        chosen: list[int] = []
        fill: GroupFill[int] | None = GroupFill(limit) if attrs.fifo else None
        blocked: set[str | None] = set()
        dead = False
        after = 0
        # FIFO: every row of the head, groups held back included; else the visible rows
        # alone, of which `limit` are claimed unless some are expired or dead
        page = max(limit * 4, 64) if attrs.fifo else limit + 8
        while len(chosen) < limit and not (fill is not None and fill.done):
            rows = d.walk_page(ex, qid, after, now, page, fifo=attrs.fifo, lock=lock)
            for key, priority, group, visible_at, count, deadline, sent_at in rows:
                after = d.sequence(key, priority)
                if fill is not None:
                    fill.step(visible_at, count)
                if group in blocked:
                    continue
                if visible_at > now:
                    blocked.add(group)
                    continue
                if expired(sent_at, deadline, terms.horizon, terms.expires):
                    self.editor.expire(ex, qid, queue, attrs, key, now)
                    continue
                if policy is not None and count >= policy.max_receive_count:
                    if not dlq:
                        found = ex.one(d.sql(QUEUE_ID), {"name": policy.queue})
                        dlq.append(None if found is None else int(found[0]))
                    if dlq[0] is not None:  # (none: the message stays, as SQS leaves it)
                        self.editor.to_dlq(ex, qid, queue, dlq[0], key, None)
                        dead = True
                        continue
                if fill is not None:
                    fill.add(group, key, visible_at)
                    if fill.done:
                        break
                    continue
                chosen.append(key)
                if len(chosen) >= limit:
                    break
            if len(rows) < page:
                break
            if not lock:  # a walk deep in held groups or messages: fewer, longer pages
                page = min(page * 2, MAX_WALK_PAGE)
        if fill is not None:
            chosen = fill.chosen()
        claimed = d.claim_keys(ex, qid, chosen, terms, token) if chosen else []
        if fill is not None:  # in the order chosen: group after group
            place = {key: i for i, key in enumerate(chosen)}
            claimed.sort(key=lambda row: place[row[0]])
        if attrs.rate_limit:
            ex.run(d.sql(SPEND_TOKENS), {"tokens": tokens - len(claimed), "now": now, "qid": qid})
        if dead and policy is not None:
            d.notify_waiters(ex, policy.queue)
        return claimed

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        parsed, by_token = group_receipts(queue, receipts)
        if not by_token:
            return receipt_results(parsed, set())
        try:
            try:
                gone = self.delete_claims(queue, by_token, False)
            except StoreUnavailable as exc:
                if not self.forgot_dropped(queue, exc):
                    raise
                gone = self.delete_claims(queue, by_token, False)
        except NotAllHeld:  # some receipts are stale: find out which
            gone = self.fresh_on_drop(queue, lambda: self.delete_claims(queue, by_token, True))
        return receipt_results(parsed, gone)

    def delete_claims(
        self, queue: str, by_token: Mapping[str, Sequence[int]], exact: bool = True
    ) -> set[tuple[str, int]]:
        """Delete rows still held by their claim's token (archiving where the queue
        archives); the (token, row) pairs deleted. One statement per token: the receipts of
        one receive share it. Without `exact`, a dialect may count alone (NotAllHeld when
        short)."""
        d = self.dialect
        now = self.clock.now()
        qid, attrs = self.lookup(queue, now)

        def run(ex: E) -> set[tuple[str, int]]:
            gone: set[tuple[str, int]] = set()
            for token, keys in by_token.items():
                if attrs.archive:
                    self.editor.archive(ex, qid, queue, now, "deleted", keys, token)
                gone.update([(token, row) for row in d.delete_held(ex, qid, token, keys, exact)])
            return gone

        single = d.single_delete and not attrs.archive and len(by_token) == 1
        return self.counted_write(run, "deleted", lambda done: [(qid, len(done))], single=single)

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        return self.fresh_on_drop(
            queue, lambda: self._by_receipt(queue, CHANGE_VISIBILITY, entries)
        )

    def give_back(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        entries = [(receipt, 0.0) for receipt in receipts]
        return self.fresh_on_drop(queue, lambda: self._by_receipt(queue, GIVE_BACK, entries))

    def _by_receipt(
        self, queue: str, statement: Statement, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        """`statement` (CHANGE_VISIBILITY or GIVE_BACK) for each (receipt, timeout), in one
        transaction; per entry, None or why its receipt holds nothing."""
        d = self.dialect
        now = self.clock.now()
        qid, _ = self.lookup(queue, now)
        update = d.sql(statement, qid)

        def run(ex: E) -> tuple[list[Exception | None], bool]:
            results: list[Exception | None] = []
            released = False
            for receipt, timeout in entries:
                try:
                    key, mid, token = parse_receipt(queue, receipt)
                except ConveyorError as exc:
                    results.append(exc)
                    continue
                changed = ex.run(update, {"visible_at": now + timeout, "key": key, "token": token})
                results.append(None if changed else stale_receipt(mid))
                released = released or (changed > 0 and timeout == 0)
            if released:
                d.notify_waiters(ex, queue)
            return results, released

        results, released = self.db.write(run)
        if released:
            self.notify(queue)
        return results

    # -- the optional contracts: parts the store holds -----------------------------------

    def editing(self) -> SQLEditor:
        return self.editor

    def topics(self) -> SQLRegistry:
        return self.registry

    def consumers(self) -> SQLRegistry:
        return self.registry

    def pipeline(self) -> SQLPipeline:
        return self.bulk


def _stored(ids: Sequence[str | None]) -> int:
    """How many messages an insert stored (None: the queue held that id already)."""
    return sum(1 for i in ids if i is not None)


def _send_results(ids: Sequence[str | None], messages: Sequence[NewMessage]) -> list[SendResult]:
    """A send's results from what its insert stored: a message whose id the queue held
    already (None) is a duplicate."""
    return [
        sent_result(i) if i is not None else SendResult(id=m.id, duplicate=True)
        for i, m in zip(ids, messages, strict=True)
    ]
