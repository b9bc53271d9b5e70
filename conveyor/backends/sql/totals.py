"""Running totals (sent, received, deleted) of the server databases, kept in memory between
writes (SQLite writes them with each operation: `SQLStore.counted_write`).

Hot operations would otherwise all update one row per queue, which concurrent transactions
on PostgreSQL and MySQL would wait for one by one. A store adds to the totals as it goes and
writes them to its queue rows at most once a second (and on close, at exit, and at the end
of a `multiprocessing` child): its own stats add what it has not written yet, stats in other
processes may lag by up to a second, and a process killed, or ended by `os._exit`, may lose
a second of counts, never a message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from .connections import Connections, Exec
from .statements import ADD_COUNTS, ADD_TOTAL

if TYPE_CHECKING:
    from .dialect import Dialect

# (sent, received, deleted, queue id): the parameters of one UPDATE per queue
CountRow = tuple[int, int, int, int]


class RunningTotals:
    def __init__(self, interval: float = 1.0) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, list[int]] = {}
        self._interval = interval
        self._due_at = 0.0

    def add(self, qid: int, sent: int = 0, received: int = 0, deleted: int = 0) -> bool:
        """Count; True when the totals are due to be written."""
        with self._lock:
            c = self._pending.get(qid)
            if c is None:
                self._pending[qid] = [sent, received, deleted]
            else:
                c[0] += sent
                c[1] += received
                c[2] += deleted
        return self.due()

    def due(self) -> bool:
        return bool(self._pending) and time.monotonic() >= self._due_at

    def take(self) -> list[CountRow]:
        """The counts to write, one row per queue; starts counting afresh."""
        with self._lock:
            rows = [(s, r, d, qid) for qid, (s, r, d) in sorted(self._pending.items())]
            self._pending.clear()
            self._due_at = time.monotonic() + self._interval
        return rows

    def pending(self, qid: int) -> tuple[int, int, int]:
        """A queue's counts not written yet: sent, received, deleted."""
        with self._lock:
            c = self._pending.get(qid)
            return (c[0], c[1], c[2]) if c is not None else (0, 0, 0)

    def forget(self, qid: int) -> None:
        with self._lock:
            self._pending.pop(qid, None)

    def __bool__(self) -> bool:
        return bool(self._pending)


Total = Literal["sent", "received", "deleted"]


def add_total(ex: Exec, d: Dialect[Any], qid: int, total: Total, n: int) -> None:
    """Raise one running total of a queue by `n`, in the transaction of `ex`."""
    ex.run(d.sql(ADD_TOTAL[total]), {"n": n, "qid": qid})


def write_counts(ex: Exec, d: Dialect[Any], rows: Sequence[CountRow]) -> None:
    """Add counts to their queues' rows."""
    ex.run_many(
        d.sql(ADD_COUNTS),
        [
            {"sent": sent, "received": received, "deleted": deleted, "qid": qid}
            for sent, received, deleted, qid in rows
        ],
    )


def last_counts(db: Connections[Any], totals: RunningTotals, d: Dialect[Any]) -> None:
    """Write counts a store still holds when it is garbage collected or the process exits."""
    rows = totals.take()
    if rows:
        db.last_write(lambda ex: write_counts(ex, d, rows))
