"""A SQL store's accounts of its queues: the running totals it counts and writes in bulk
(totals.py), stats counted or estimated between counts (estimates.py), and the sweeps that
remove what expired. A part the store holds, as it holds its editor and registry."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic, NamedTuple

from ...exceptions import StoreUnavailable
from ...models import QueueAttributes, QueueStats
from ..base import WouldBlock
from ..idle import WhenIdle
from ..rules import SWEEP_INTERVAL, SWEEP_ROWS, deadline_rules
from .connections import E
from .estimates import Count, LastCounts, Totals
from .pipeline import HIDDEN
from .statement import spread
from .statements import (
    ADD_EXPIRED,
    ANY_EXPIRED_DEDUP,
    COUNT_MESSAGES,
    DELETE_KEYS,
    FORGET_EXPIRED_DEDUP,
    QUEUE_TOTALS_AND_COUNT,
    RECOUNT,
    STORE_COUNT,
    STORED_COUNT,
    SWEEP_DEADLINES,
    SWEEP_RETAINED,
    UNCOUNT,
)
from .totals import Counted, RunningTotals, Total, write_counts

if TYPE_CHECKING:
    from .store import SQLStore

log = logging.getLogger(__name__)


class SQLAccounts(Generic[E]):
    """What a store's queues hold and have seen: counts and sweeps."""

    def __init__(self, store: SQLStore[E]) -> None:
        self.store = store
        self.totals = RunningTotals()  # counted here, not yet written (totals.py)
        self.counts = LastCounts()  # of deep queues, for stats (estimates.py)
        self._swept: dict[int, float] = {}
        self._idle = WhenIdle(self.flush_if_due, self.totals.wait)

    def count(self, done: Sequence[tuple[int, int]], total: Total) -> None:
        """Count what a write did (`done`: (queue id, how many) pairs of `total`) once it
        has committed, and write the totals when due: at once where the write has committed,
        else (it shares a transaction: `Connections.after_commit`) after that commits, the
        totals written in that transaction when due. Every send, receive and delete counts:
        one call here, no more."""
        for _, n in done:
            if n:
                break
        else:
            return  # nothing done (a receive that found nothing)
        store = self.store
        if store.db.after_commit(lambda: self.add(done, total)):
            self.flush_if_due()  # in the transaction this write shares
        elif self.totals.add(store.clock.now(), total, done):
            self.flush_if_due()
        else:
            self._idle.counted()

    def add(self, done: Sequence[tuple[int, int]], total: Total) -> None:
        """Count what an operation did, once it is done (committed)."""
        self.totals.add(self.store.clock.now(), total, done)
        self._idle.counted()

    def close(self) -> None:
        """The store closing: write what is held (once a write under way in a thread has
        ended), and no more later."""
        self._idle.cancel()
        self.totals.writing.settle()
        self.flush()

    def flush_if_due(self) -> None:
        """Write the totals when due. A failure to write them is the totals', not the
        operation's that counted last (a send said to have failed would be sent again),
        so it is logged and they wait for the next write; on an event loop's thread, where
        writing them now would wait for another writer, they wait likewise. Either way the
        idle timer is armed for them, in case no call comes to write them."""
        if self.totals.due():
            self.write_now()

    def write_now(self) -> None:
        """Write the totals now, failures handled as `flush_if_due` handles them: for a bulk
        operation whose process may end without the exit hooks (a Spark worker's)."""
        try:
            self.flush()
        except WouldBlock:
            self._idle.counted()
        except StoreUnavailable as exc:
            log.warning("could not write the running totals (%s); trying again later", exc)
            self._idle.counted()

    def flush(self) -> None:
        """Write the running totals counted here; where that fails, they are kept."""
        self.totals.writing.begin()
        try:
            rows = self.totals.take()
            if rows:
                try:
                    self.store.write(lambda ex: write_counts(ex, self.store.dialect, rows))
                except BaseException:
                    self.totals.restore(rows)
                    raise
                self._kept_if_undone(rows)
        finally:
            self.totals.writing.end()

    def forget(self, qid: int) -> None:
        """A queue deleted: what was counted of it here goes with it (its stored count is
        deleted with its row, `QUEUE_LEFTOVERS`)."""
        self.totals.forget(qid)
        self.counts.forget(qid)

    def sweep(self, qid: int, name: str, attrs: QueueAttributes, now: float, force: bool) -> None:
        """Remove messages past retention or (at most once) deadline (counted as expired);
        forget old
        de-duplication keys.

        Receives never deliver such messages, so this only reclaims space: once a minute per
        queue and process, its cost bounded by what it removes: messages past their deadline
        come from the deadline index, and those past retention from the queue's head in
        delivery order (SWEEP_ROWS at a time, so a deep queue is cleared over several
        sweeps). Stats sweep first (`force`), as many times as it takes to clear the head:
        each sweep a short write, so senders are not held up by a pass over a deep queue
        (stats leave what is expired further back out of their counts). A sweep looks
        first, and writes only where it found something: a write takes the store's write
        lock, and the dashboard's sampler asks every queue's stats.
        """
        if not force and now - self._swept.get(qid, -1e18) < SWEEP_INTERVAL:
            return
        self._swept[qid] = now
        d = self.store.dialect
        horizon = now - attrs.retention
        cut, _ = deadline_rules(attrs, now)
        dedup = {"qid": qid, "now": now}

        def expired(ex: E) -> set[int]:
            keys = {
                int(key)
                for (key,) in ex.rows(
                    d.sql(SWEEP_RETAINED, qid), {"rows": SWEEP_ROWS, "horizon": horizon}
                )
            }
            keys.update(
                int(key)
                for (key,) in ex.rows(d.sql(SWEEP_DEADLINES, qid), {"rows": SWEEP_ROWS, "cut": cut})
            )
            return keys

        def stale(ex: E) -> bool:
            """Whether anything is to be removed (a read: most sweeps find nothing)."""
            return bool(expired(ex)) or bool(ex.rows(d.sql(ANY_EXPIRED_DEDUP), dedup))

        def run(ex: E) -> int:
            keys = expired(ex)
            if keys:
                ordered = sorted(keys)
                if attrs.archive:
                    self.store.editor.archive(ex, qid, name, now, "expired", ordered)
                gone = ex.run(d.sql(DELETE_KEYS, qid, len(ordered)), spread("keys", ordered))
                if gone:
                    ex.run(d.sql(ADD_EXPIRED), {"n": gone, "qid": qid})
            ex.run(d.sql(FORGET_EXPIRED_DEDUP), dedup)
            return len(keys)

        while self.store.read(stale) and self.store.write(run) >= SWEEP_ROWS and force:
            pass

    def stats(self, name: str) -> QueueStats:
        """The queue's stats: counted, or estimated from its stored count (deep queues)."""
        if self.totals.due():  # else what is pending is added (`Accounted`), not written
            self.flush()
        now = self.store.clock.now()
        qid, attrs = self.store.lookup(name)
        on_loop = self.store.db.on_loop()
        # a queue counted small here is counted at once (its stored count is not read),
        # except on an event loop's thread, which must not count a deep queue
        if on_loop or not self.counts.small(qid):
            seen = self.store.read(lambda ex: self._accounted(ex, name, qid))
            if seen is not None:  # else gone: counting says so
                last = seen.last
                if last is not None and last.usable(now):
                    # a deep queue counted lately (estimates.py)
                    if last.due(now) and self.counts.start_recount(qid):
                        threading.Thread(
                            target=self._recount, args=(name, qid, attrs), daemon=True
                        ).start()
                    return last.estimate(seen.totals, now)
                if on_loop and self.counts.may_be_deep(seen.totals, last):
                    raise WouldBlock  # counting it would hold up the loop: counted in a thread
        return self._counted(name, qid, attrs, now)

    def _counted(self, name: str, qid: int, attrs: QueueAttributes, now: float) -> QueueStats:
        """The queue's stats, counted, and the count stored where the queue is deep (where
        it is not, a count stored before is no longer used)."""
        started = time.perf_counter()
        stats, before = self._count(name, qid, attrs, now)
        deep = self.counts.deep(stats)
        d = self.store.dialect
        if deep:
            count = Count(stats=stats, at=now, took=time.perf_counter() - started)
            values = {**count.values(qid), "edits": before.edits}
            # the totals it counted and had not written go with it: the count's totals
            # include them, and other processes move it on by the queue's row. The queue's
            # own (if none, nothing) are written with them, its row locked in their order
            self.totals.writing.begin()  # ended by _write_now_or_soon
            rows = self.totals.take()
            mine = next((row for row in rows if row.qid == qid), None)
            if mine is None:
                mine = Counted(qid)
                rows = sorted([*rows, mine], key=lambda row: row.qid)

            def store(ex: E) -> None:
                write_counts(ex, d, rows)
                # another process that wrote its totals after the count read the queue's
                # row found no count to move on, and the count cannot tell which of them
                # it saw: it is not stored, and the next stats count again
                row = ex.one(d.sql(QUEUE_TOTALS_AND_COUNT), {"qid": qid})
                alone = tuple(a + b for a, b in zip(before.written, mine.sums(), strict=True))
                if row is None or tuple(int(v) for v in row[:3]) != alone:
                    return
                ex.run(d.sql(STORE_COUNT), values)
                self.counts.saw(qid, count)

            self._write_now_or_soon(store, rows)
        elif before.last is not None:
            uncount = {"qid": qid, "edits": before.edits}
            self._write_now_or_soon(lambda ex: ex.run(d.sql(UNCOUNT), uncount), None)
        self.counts.record(qid, deep)
        return stats

    def _write_now_or_soon(
        self, fn: Callable[[E], object], taken: Sequence[Counted] | None
    ) -> None:
        """Write now; or, on an event loop's thread where the write would wait for the lock
        (the count is made: it is not made again in a thread for that), from a thread.
        Totals `taken` to be written with it (after `writing.begin()`, which this ends once
        the write has) are counted again where it fails."""
        ended = self.totals.writing.end if taken is not None else lambda: None
        rows = taken or ()
        try:
            self.store.write(fn)
        except WouldBlock:

            def later() -> None:
                try:
                    self.store.write(fn)
                except Exception as exc:  # the next stats count again
                    log.debug("storing a count: %s", exc)
                    self.totals.restore(rows)
                finally:
                    ended()

            threading.Thread(target=later, daemon=True).start()
            return
        except BaseException:
            self.totals.restore(rows)
            ended()
            raise
        try:
            self._kept_if_undone(rows)
        finally:
            ended()

    def _kept_if_undone(self, rows: Sequence[Counted]) -> None:
        """Totals written by a write that shares a transaction not committed yet (an event
        loop's turn, gathered calls): counted again if that transaction fails."""
        if rows:
            self.store.db.if_undone(lambda: self.totals.restore(rows))

    def _recount(self, name: str, qid: int, attrs: QueueAttributes) -> None:
        """A deep queue's count made in the background (the store closing, or the queue
        going, ends it quietly: the next stats count as they would have)."""
        try:
            self._counted(name, qid, attrs, self.store.clock.now())
        except Exception as exc:
            log.debug("counting %s in the background: %s", name, exc)
        finally:
            self.counts.end_recount(qid)

    def recount(self, ex: E, *qids: int) -> None:
        """In the transaction of a change the running totals do not record (a purge, a
        redrive, an edit): the queues' stored counts set aside, so that their next stats,
        in any process, count (and a count made before the change is not stored). In the
        order of their ids, so that two such changes lock the rows in the same order."""
        for qid in sorted(set(qids)):
            ex.run(self.store.dialect.sql(RECOUNT), {"qid": qid})

    def _count(
        self, name: str, qid: int, attrs: QueueAttributes, now: float
    ) -> tuple[QueueStats, Accounted]:
        """The queue's stats, counted, and what its row and stored count said just before."""
        d = self.store.dialect
        self.sweep(qid, name, attrs, now, force=True)

        def run(ex: E) -> tuple[QueueStats, Accounted]:
            qid, _ = self.store.queue_row(ex, name)
            # read first: a change that the count sees and these do not only costs a count
            before = self._accounted(ex, name, qid)
            counts = ex.one(
                d.sql(COUNT_MESSAGES, qid),
                {
                    "now": now,
                    "hidden": HIDDEN,
                    "horizon": now - attrs.retention,
                    "cut": deadline_rules(attrs, now)[0],
                },
            )
            assert counts is not None and before is not None
            ready, delayed, in_flight, oldest = counts
            sent, received, deleted, dead, expired = before.totals
            stats = QueueStats(
                queue=name,
                ready=int(ready),
                delayed=int(delayed),
                in_flight=int(in_flight),
                dead=dead,
                expired=expired,
                oldest_age=None if oldest is None else max(0.0, now - oldest),
                sent=sent,
                received=received,
                deleted=deleted,
            )
            return stats, before

        return self.store.fresh_on_drop(name, lambda: self.store.read(run))

    def _accounted(self, ex: E, name: str, qid: int) -> Accounted | None:
        """The queue's running totals (its row's, and what this process has counted since
        it last wrote them there) and its stored count (read in full only when it is not
        the one this process last saw), in one read (None: no such queue)."""
        d = self.store.dialect
        row = ex.one(d.sql(QUEUE_TOTALS_AND_COUNT), {"qid": qid})
        if row is None:
            return None
        sent, received, deleted, dead, expired = (int(v) for v in row[:5])
        more_sent, more_received, more_deleted = self.totals.pending(qid)
        totals = (sent + more_sent, received + more_received, deleted + more_deleted, dead, expired)
        written = (sent, received, deleted)
        at, took, edits, *counted = row[5:]
        last = None
        if at is not None:
            last = self.counts.seen(qid, float(at), float(took), tuple(map(int, counted)))
            if last is None:
                stored = ex.one(d.sql(STORED_COUNT), {"qid": qid})
                if stored is not None and stored[-2] is not None:
                    last = self.counts.saw(qid, Count.stored(name, stored))
        return Accounted(totals, written, last, int(edits or 0))


class Accounted(NamedTuple):
    """What a queue's row and stored count say (`SQLAccounts._accounted`)."""

    totals: Totals
    written: tuple[int, int, int]  # sent, received, deleted as the row says (`totals` adds
    # what this process has not written)
    last: Count | None  # its last count, if it was deep
    edits: int  # changes the totals do not record, made to it so far (`SQLAccounts.recount`)
