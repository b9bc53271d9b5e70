"""Stats of deep queues: the last count, moved on by what the running totals say since.

Counting a queue's messages costs time in proportion to its depth (a quarter of a second at
a million messages on SQLite and PostgreSQL, a second on MariaDB), and the callers of stats
poll: an autoscaler's GetQueueAttributes every few seconds, a dashboard, a monitor, a
command run now and then. A queue counted at `ESTIMATE_FROM` messages or more has that
count stored in the store (the ``counts`` table), where every process finds it: its stats
are that count moved on by the queue's running totals (sent, received, deleted,
dead-lettered and expired since), one read of the queue's row and its count, whatever the
depth. The count is made again once it is twenty times older than it took (so counting
takes at most `COUNT_SHARE` of the time, and never older than `RECOUNT_AFTER` seconds): in
the background by the process whose call found it due, which answers from the count it has.
So a caller never waits for a deep queue's count unless no process has counted the queue
within `RECOUNT_AFTER` (or ever).

Such stats are approximate, as SQS's ApproximateNumberOfMessages* are: a message whose delay
or visibility timeout ends between two counts is shown where it was at the first; other
processes' totals arrive within a second (totals.py), and those written while a count is
made make it unusable (it cannot tell which of what they did it saw: it is not stored, and
the next stats count again); messages dead-lettered into the queue show at the next count.
A purge, redrive or edit made through any process sets the queue's stored count aside in
its own transaction (and raises the queue's ``edits``, so that a count begun before it is
not stored after it): the next stats count. A queue counted at fewer messages is counted at
every call, exactly: a small queue's stats are never estimates.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...models import COUNT_SHARE, QueueStats

ESTIMATE_FROM = 10_000
"""A queue counted at this many messages or more is estimated between counts."""
RECOUNT_AFTER = 60.0
"""The age (seconds) past which a count is never used for an estimate."""

# (sent, received, deleted, dead, expired): a queue's running totals, as its row holds them
Totals = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class Count:
    """A queue's last count: its stats then, when it was made and how long it took."""

    stats: QueueStats
    at: float  # the store's clock
    took: float  # seconds

    @classmethod
    def stored(cls, queue: str, row: Sequence[Any]) -> Count:
        """A count as the counts table holds it (`STORE_COUNT`'s columns, in order)."""
        ready, delayed, in_flight, oldest, sent, received, deleted, dead, expired, at, took = row
        stats = QueueStats(
            queue=queue,
            ready=int(ready),
            delayed=int(delayed),
            in_flight=int(in_flight),
            oldest_age=None if oldest is None else float(oldest),
            sent=int(sent),
            received=int(received),
            deleted=int(deleted),
            dead=int(dead),
            expired=int(expired),
        )
        return cls(stats=stats, at=float(at), took=float(took))

    def values(self, qid: int) -> dict[str, Any]:
        """Its values as `STORE_COUNT` writes them."""
        s = self.stats
        return {
            "qid": qid,
            "ready": s.ready,
            "delayed": s.delayed,
            "in_flight": s.in_flight,
            "oldest_age": s.oldest_age,
            "sent": s.sent,
            "received": s.received,
            "deleted": s.deleted,
            "dead": s.dead,
            "expired": s.expired,
            "counted_at": self.at,
            "took": self.took,
        }

    def age(self, now: float) -> float:
        return max(0.0, now - self.at)  # another machine's clock may be a little ahead

    def due(self, now: float) -> bool:
        """Whether it is to be counted again (it is used until RECOUNT_AFTER meanwhile)."""
        return self.age(now) >= min(RECOUNT_AFTER, self.took / COUNT_SHARE)

    def usable(self, now: float) -> bool:
        """Whether stats may be estimated from it now."""
        return self.age(now) < RECOUNT_AFTER

    def estimate(self, totals: Totals, now: float) -> QueueStats:
        """The stats now, by the totals now against those of the count."""
        s = self.stats
        sent, received, deleted, dead, expired = totals
        gone = (deleted - s.deleted) + (dead - s.dead) + (expired - s.expired)
        present = max(0, s.total + (sent - s.sent) - gone)
        in_flight = min(
            present, max(0, s.in_flight + (received - s.received) - (deleted - s.deleted))
        )
        delayed = min(s.delayed, present - in_flight)
        oldest = None
        if present and s.oldest_age is not None:
            oldest = s.oldest_age + self.age(now)
        return dataclasses.replace(
            s,
            ready=present - in_flight - delayed,
            delayed=delayed,
            in_flight=in_flight,
            oldest_age=oldest,
            sent=sent,
            received=received,
            deleted=deleted,
            dead=dead,
            expired=expired,
        )


class LastCounts:
    """What a process knows of its store's counts: the stored count of each queue it last
    saw (read again only once another is stored), the queues it last counted below the
    threshold (counted at every call, so their stored count is not looked for), and the
    counts it is making in the background."""

    def __init__(self, estimate_from: int = ESTIMATE_FROM) -> None:
        self.estimate_from = estimate_from
        self._lock = threading.Lock()
        self._seen: dict[int, Count] = {}
        self._small: set[int] = set()
        self._recounting: set[int] = set()

    def seen(self, qid: int, at: float, took: float, totals: tuple[int, ...]) -> Count | None:
        """The queue's stored count made at `at` in `took` seconds with the totals `totals`
        (sent, received, deleted: moved on since it was stored, `SHIFT_COUNT`), if this
        process has seen it."""
        count = self._seen.get(qid)
        if count is None or count.at != at or count.took != took:
            return None
        s = count.stats
        return count if (s.sent, s.received, s.deleted) == totals else None

    def saw(self, qid: int, count: Count) -> Count:
        with self._lock:
            self._seen[qid] = count
        return count

    def small(self, qid: int) -> bool:
        """Whether the queue's last count here was below the threshold."""
        return qid in self._small

    def deep(self, stats: QueueStats) -> bool:
        """Whether a count is of a deep queue: stored, and estimated from."""
        return stats.total >= self.estimate_from

    def may_be_deep(self, totals: Totals, last: Count | None) -> bool:
        """Whether a queue's count may take long: it was deep at its last count, or its
        totals say it holds as many messages as a deep queue (they leave out what is
        dead-lettered into it and over-count after a purge)."""
        sent, _, deleted, dead, expired = totals
        return last is not None or sent - deleted - dead - expired >= self.estimate_from

    def record(self, qid: int, deep: bool) -> None:
        with self._lock:
            if deep:
                self._small.discard(qid)
            else:
                self._small.add(qid)

    def start_recount(self, qid: int) -> bool:
        """Whether a background count of the queue may start (none is under way here)."""
        with self._lock:
            if qid in self._recounting:
                return False
            self._recounting.add(qid)
            return True

    def end_recount(self, qid: int) -> None:
        with self._lock:
            self._recounting.discard(qid)

    def forget(self, qid: int) -> None:
        with self._lock:
            self._small.discard(qid)
            self._seen.pop(qid, None)
