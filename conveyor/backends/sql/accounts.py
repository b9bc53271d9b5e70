"""A SQL store's accounts of its queues: the running totals it counts and writes in bulk
(totals.py), stats counted or estimated between counts (estimates.py), and the sweeps that
remove what expired. A part the store holds, as it holds its editor and registry."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Generic

from ...models import QueueAttributes, QueueStats
from ..rules import SWEEP_INTERVAL, SWEEP_ROWS, deadline_rules
from .connections import E
from .estimates import LastCounts, Totals
from .pipeline import HIDDEN
from .statement import spread
from .statements import (
    ADD_EXPIRED,
    ANY_EXPIRED_DEDUP,
    COUNT_MESSAGES,
    DELETE_KEYS,
    FORGET_EXPIRED_DEDUP,
    QUEUE_TOTALS,
    SWEEP_DEADLINES,
    SWEEP_RETAINED,
)
from .totals import RunningTotals, write_counts

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

    def count(self, qid: int, sent: int = 0, received: int = 0, deleted: int = 0) -> None:
        if self.totals.add(qid, sent, received, deleted):
            self.flush()

    def flush(self) -> None:
        """Write the running totals counted here."""
        rows = self.totals.take()
        if rows:
            self.store.write(lambda ex: write_counts(ex, self.store.dialect, rows))

    def forget(self, qid: int, name: str) -> None:
        """A queue deleted: what was counted of it here goes with it."""
        self.totals.forget(qid)
        self.counts.forget(name)

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
        """The queue's stats: counted, or estimated from its last count (deep queues)."""
        if self.totals.due():  # else what is pending is added (`totals_now`), not written
            self.flush()
        now = self.store.clock.now()
        qid, attrs = self.store.lookup(name)
        last = self.counts.usable(qid, now)
        if last is None:  # due: counted again meanwhile, where the last count is recent
            last = self.counts.recent(qid, now)
            if last is not None and self.counts.start_recount(qid):
                threading.Thread(target=self._recount, args=(name, qid, attrs), daemon=True).start()
        if last is not None:  # a deep queue counted lately (estimates.py)
            totals = self.store.read(lambda ex: self.totals_now(ex, qid))
            if totals is not None:
                return last.estimate(totals, now)
        return self._counted(name, qid, attrs, now)

    def _counted(self, name: str, qid: int, attrs: QueueAttributes, now: float) -> QueueStats:
        started = time.perf_counter()
        stats = self._count(name, qid, attrs, now)
        self.counts.record(qid, stats, now, time.perf_counter() - started)
        return stats

    def _recount(self, name: str, qid: int, attrs: QueueAttributes) -> None:
        """A deep queue's count made in the background (the store closing, or the queue
        going, ends it quietly: the next stats count as they would have)."""
        try:
            self._counted(name, qid, attrs, self.store.clock.now())
        except Exception as exc:
            log.debug("counting %s in the background: %s", name, exc)
        finally:
            self.counts.end_recount(qid)

    def _count(self, name: str, qid: int, attrs: QueueAttributes, now: float) -> QueueStats:
        """The queue's stats, counted."""
        d = self.store.dialect
        self.sweep(qid, name, attrs, now, force=True)

        def run(ex: E) -> QueueStats:
            qid, _ = self.store.queue_row(ex, name)
            counts = ex.one(
                d.sql(COUNT_MESSAGES, qid),
                {
                    "now": now,
                    "hidden": HIDDEN,
                    "horizon": now - attrs.retention,
                    "cut": deadline_rules(attrs, now)[0],
                },
            )
            totals = self.totals_now(ex, qid)
            assert counts is not None and totals is not None
            ready, delayed, in_flight, oldest = counts
            sent, received, deleted, dead, expired = totals
            return QueueStats(
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

        return self.store.fresh_on_drop(name, lambda: self.store.read(run))

    def totals_now(self, ex: E, qid: int) -> Totals | None:
        """The queue's running totals: its row's, and what this process has counted since
        it last wrote them there."""
        totals = self._totals_of(ex, qid)
        if totals is None:
            return None
        sent, received, deleted, dead, expired = totals
        more_sent, more_received, more_deleted = self.totals.pending(qid)
        return sent + more_sent, received + more_received, deleted + more_deleted, dead, expired

    def _totals_of(self, ex: E, qid: int) -> Totals | None:
        """The queue's running totals as its row holds them (None: no such queue)."""
        row = ex.one(self.store.dialect.sql(QUEUE_TOTALS), {"qid": qid})
        if row is None:
            return None
        sent, received, deleted, dead, expired = row
        return int(sent), int(received), int(deleted), int(dead), int(expired)
