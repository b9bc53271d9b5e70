"""Running totals of each queue (sent, received, deleted, dead, expired), counted in memory
and added to the queue's totals item at most once a second (by the calls that count them,
or from a thread once the process has gone idle: backends/idle.py), before `stats()` and
on close.

Every send and receive writing to one item per queue would make that item a hot spot that
caps the queue's throughput on DynamoDB; so a process writes at most one update per queue a
second. Stats in other processes may lag by up to a second, and a crash loses at most a
second of counts, never a message.
"""

from __future__ import annotations

import threading
import time

from ..idle import Writing

FIELDS = ("sent", "received", "deleted", "dead", "expired")


class Totals:
    def __init__(self, interval: float = 1.0) -> None:
        self.writing = Writing()  # writes of counts taken from here, under way
        self._lock = threading.Lock()
        self._pending: dict[str, list[int]] = {}
        self._interval = interval
        self._due_at = 0.0

    def add(self, qt: str, field: str, n: int = 1) -> bool:
        """Count; True when the totals are due to be written."""
        if n <= 0:
            return False
        with self._lock:
            counts = self._pending.setdefault(qt, [0] * len(FIELDS))
            counts[FIELDS.index(field)] += n
        return self.due()

    def due(self) -> bool:
        return bool(self._pending) and time.monotonic() >= self._due_at

    def wait(self) -> float | None:
        """Seconds until the totals held fall due (None: none held)."""
        if not self._pending:
            return None
        return max(0.0, self._due_at - time.monotonic())

    def take(self, qt: str | None = None) -> dict[str, list[int]]:
        """What to write (of one queue, or of all), counting afresh."""
        with self._lock:
            if qt is not None:
                counts = self._pending.pop(qt, None)
                return {qt: counts} if counts else {}
            taken, self._pending = self._pending, {}
            self._due_at = time.monotonic() + self._interval
            return taken

    def restore(self, taken: dict[str, list[int]]) -> None:
        """Counts taken and not written (the write failed), counted again."""
        with self._lock:
            for qt, counts in taken.items():
                held = self._pending.setdefault(qt, [0] * len(FIELDS))
                for i, c in enumerate(counts):
                    held[i] += c

    def forget(self, qt: str) -> None:
        with self._lock:
            self._pending.pop(qt, None)
