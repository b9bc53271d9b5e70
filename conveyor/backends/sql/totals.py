"""Running totals (sent, received, deleted) of the SQL stores, kept in memory between writes.

Hot operations would otherwise all update one row per queue, which concurrent transactions
on PostgreSQL and MySQL would wait for one by one, and which on SQLite would add that row's
page to every commit (a fifth of a single-message send's time). A store adds to the totals
as it goes (once the operation has committed: `SQLStore.counted_write`) and writes them to
its queue rows at most once a second (by the calls that count them, or from a thread once
the process has gone idle: backends/idle.py; and on close, at exit, and at the end of a
`multiprocessing` child): its own stats add what it has not written yet, stats in other
processes may lag by up to a second, and a process killed, or ended by a bare `os._exit`,
may lose a second of counts, never a message.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..idle import Writing
from .connections import Connections, Exec
from .statement import spread
from .statements import ADD_COUNTS, COUNTS_MADE_AT, SHIFT_COUNT

if TYPE_CHECKING:
    from .dialect import Dialect

Total = Literal["sent", "received", "deleted"]
TOTALS: dict[Total, int] = {"sent": 1, "received": 2, "deleted": 3}  # where a span holds it

SPAN = 0.01
"""Seconds of a queue's counts kept together: whether a count of the queue made meanwhile
saw what they did is told by the span (`Counted.before`)."""


class Counted:
    """A queue's counts not written yet, in spans of `SPAN` seconds by when they were made:
    each span [began at (the store's clock), sent, received, deleted], oldest first (added
    to by `RunningTotals.add`)."""

    __slots__ = ("qid", "spans")

    def __init__(self, qid: int) -> None:
        self.qid = qid
        self.spans: list[list[float]] = []

    def sums(self) -> tuple[int, int, int]:
        """Sent, received, deleted."""
        return self.before(math.inf)

    def before(self, at: float) -> tuple[int, int, int]:
        """Sent, received and deleted in the spans begun before `at`: done before a count
        made then, which saw what they did (to within a span)."""
        sent = received = deleted = 0
        for began, s, r, d in self.spans:
            if began >= at:
                break
            sent += int(s)
            received += int(r)
            deleted += int(d)
        return sent, received, deleted


class RunningTotals:
    def __init__(self, interval: float = 1.0) -> None:
        self.writing = Writing()  # writes of counts taken from here, under way
        self._lock = threading.Lock()
        self._pending: dict[int, Counted] = {}
        self._interval = interval
        self._due_at = 0.0

    def add(self, at: float, total: Total, done: Iterable[tuple[int, int]]) -> bool:
        """Count what was done at `at` (the store's clock): `done`, (queue id, how many)
        pairs of `total` (a pair of none left out); True when the totals are due to be
        written."""
        which = TOTALS[total]
        with self._lock:
            pending = self._pending
            for qid, n in done:
                if not n:
                    continue
                c = pending.get(qid)
                if c is None:
                    c = pending[qid] = Counted(qid)
                spans = c.spans  # `n` more in the span of `at` (a new one where it ended)
                if spans and at < spans[-1][0] + SPAN:
                    spans[-1][which] += n
                else:
                    span = [at, 0, 0, 0]
                    span[which] = n
                    spans.append(span)
        return time.monotonic() >= self._due_at  # `due`, with counts just added

    def due(self) -> bool:
        return bool(self._pending) and time.monotonic() >= self._due_at

    def hold(self) -> None:
        """Hold the totals: never due (written only by `take`, at close or exit) until
        `due_now`."""
        self._due_at = math.inf

    def due_now(self) -> None:
        """Make the totals due at once: the next write that counts writes them."""
        self._due_at = 0.0

    def wait(self) -> float | None:
        """Seconds until the totals held fall due (None: none held, or never due)."""
        if not self._pending or self._due_at == math.inf:
            return None
        return max(0.0, self._due_at - time.monotonic())

    def take(self) -> list[Counted]:
        """The counts to write, one per queue; starts counting afresh."""
        with self._lock:
            rows = [c for _, c in sorted(self._pending.items())]
            self._pending.clear()
            self._due_at = time.monotonic() + self._interval
        return rows

    def restore(self, rows: Sequence[Counted]) -> None:
        """Counts taken and not written (the write failed), counted again (a row with none
        is left out)."""
        with self._lock:
            for row in rows:
                if not row.spans:
                    continue
                c = self._pending.get(row.qid)
                if c is None:
                    self._pending[row.qid] = row
                else:
                    c.spans = sorted(row.spans + c.spans)

    def pending(self, qid: int) -> tuple[int, int, int]:
        """A queue's counts not written yet: sent, received, deleted."""
        with self._lock:
            c = self._pending.get(qid)
            return c.sums() if c is not None else (0, 0, 0)

    def forget(self, qid: int) -> None:
        with self._lock:
            self._pending.pop(qid, None)

    def __bool__(self) -> bool:
        return bool(self._pending)


def write_counts(ex: Exec, d: Dialect[Any], rows: Sequence[Counted]) -> None:
    """Add counts to their queues' rows. Where a queue has a stored count (estimates.py)
    made after some of them, that count saw what they did and its totals did not include
    them: its totals are moved on by those, so that its estimates do not take them twice."""
    sums = [(row, row.sums()) for row in rows]
    ex.run_many(
        d.sql(ADD_COUNTS),
        [
            {"sent": sent, "received": received, "deleted": deleted, "qid": row.qid}
            for row, (sent, received, deleted) in sums
        ],
    )
    qids = [row.qid for row in rows]
    made: dict[int, float] = {}
    for start in range(0, len(qids), 500):  # well within every driver's parameter limit
        part = qids[start : start + 500]
        found = ex.rows(d.sql(COUNTS_MADE_AT, 0, len(part)), spread("qids", part))
        made.update((int(qid), float(at)) for qid, at in found)
    for row in rows:
        at = made.get(row.qid)
        if at is None or not row.spans or row.spans[0][0] >= at:
            continue  # no count, or one made before all of these: it saw none
        sent, received, deleted = row.before(at)
        values = {"sent": sent, "received": received, "deleted": deleted}
        ex.run(d.sql(SHIFT_COUNT), {**values, "qid": row.qid, "counted_at": at})


def last_counts(db: Connections[Any], totals: RunningTotals, d: Dialect[Any]) -> None:
    """Write counts a store still holds when it is garbage collected or the process exits
    (once the writes of counts under way in its threads have ended: what one of them gives
    back is written here)."""
    totals.writing.settle()
    rows = totals.take()
    if rows:
        db.last_write(lambda ex: write_counts(ex, d, rows))
