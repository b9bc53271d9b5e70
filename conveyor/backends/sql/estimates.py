"""Stats of deep queues: the last count, moved on by what the running totals say since.

Counting a queue's messages costs time in proportion to its depth (a quarter of a second at
a million messages on SQLite and PostgreSQL, a second on MariaDB), and the callers of stats
poll: an autoscaler's GetQueueAttributes every few seconds, a dashboard, a monitor. A queue
counted at `ESTIMATE_FROM` messages or more is counted again only once that count is older
than twenty times what it took (so counting it takes at most `COUNT_SHARE` of the time, and
never older than `RECOUNT_AFTER` seconds); until then its stats are that count moved on by
the queue's running totals (sent, received, deleted, dead-lettered and expired since): one
read of the queue's row, whatever the depth. A count that is due but younger than
`RECOUNT_AFTER` is made again in the background while the call that found it due is answered
from it, so a caller polling a deep queue never waits for a count (only one made after a
minute without stats does).

Such stats are approximate, as SQS's ApproximateNumberOfMessages* are: a message whose delay
or visibility timeout ends between two counts is shown where it was at the first; changes
the totals do not record show at the next count (messages dead-lettered into the queue; a
purge, redrive or edit made by another process) or at once (a purge, redrive or edit made
through this store); other processes' totals arrive within a second (totals.py). A queue
counted at fewer messages is counted at every call, exactly: a small queue's stats are never
estimates.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from ...models import COUNT_SHARE, QueueStats

ESTIMATE_FROM = 10_000
"""A queue counted at this many messages or more is estimated between counts."""
RECOUNT_AFTER = 60.0
"""The age (seconds) past which a count is never used for an estimate."""

# (sent, received, deleted, dead, expired): a queue's running totals, as its row holds them
Totals = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class Count:
    """A queue's last count: its stats then, when it was made and when it is due again."""

    stats: QueueStats
    at: float  # the store's clock
    due: float

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
            oldest = s.oldest_age + max(0.0, now - self.at)
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
    """The counts of a store's deep queues, by queue id."""

    def __init__(self, estimate_from: int = ESTIMATE_FROM) -> None:
        self.estimate_from = estimate_from
        self._lock = threading.Lock()
        self._counts: dict[int, Count] = {}
        self._recounting: set[int] = set()

    def usable(self, qid: int, now: float) -> Count | None:
        """The queue's last count, if stats may be estimated from it now."""
        with self._lock:
            count = self._counts.get(qid)
        if count is None or not count.at <= now < count.due:
            return None
        return count

    def recent(self, qid: int, now: float) -> Count | None:
        """The queue's last count, due or not, if younger than RECOUNT_AFTER."""
        with self._lock:
            count = self._counts.get(qid)
        if count is None or not count.at <= now < count.at + RECOUNT_AFTER:
            return None
        return count

    def start_recount(self, qid: int) -> bool:
        """Whether a background count of the queue may start (none is under way)."""
        with self._lock:
            if qid in self._recounting:
                return False
            self._recounting.add(qid)
            return True

    def end_recount(self, qid: int) -> None:
        with self._lock:
            self._recounting.discard(qid)

    def record(self, qid: int, stats: QueueStats, now: float, cost: float) -> None:
        """A new count of the queue, which took `cost` seconds."""
        with self._lock:
            if stats.total < self.estimate_from:
                self._counts.pop(qid, None)
            else:
                wait = min(RECOUNT_AFTER, cost / COUNT_SHARE)
                self._counts[qid] = Count(stats=stats, at=now, due=now + wait)

    def forget(self, *queues: str) -> None:
        """Count these queues at their next stats (a change the totals do not record)."""
        with self._lock:
            for qid in [q for q, c in self._counts.items() if c.stats.queue in queues]:
                del self._counts[qid]
