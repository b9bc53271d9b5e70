"""Queue counts for the server's own readers: the dashboard, its sampler, /metrics and StatsD.

A store's stats may cost time in proportion to a queue's depth (the SQL stores bound that
themselves by estimating deep queues between counts, backends/sql/estimates.py; a store
without such estimates counts at every call), and these readers look at every queue every
few seconds, each on its own schedule. They share each queue's last stats instead, until
they are twenty times as old as they took to make (COUNT_SHARE): stats that took under 10 ms
are asked for afresh at every look. The SQS and REST APIs ask the store at every call, as
their callers ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from ..client import Client
from ..exceptions import ConveyorError
from ..models import COUNT_SHARE, QueueStats

REUSED_FROM = 0.01
"""A count that took less (seconds) is never reused: only deep queues wait for theirs."""


class SharedCounts:
    def __init__(
        self,
        now: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._now = now
        self._timer = timer
        self._lock = threading.Lock()
        self._counted: dict[str, tuple[float, float, QueueStats]] = {}  # at, cost, stats
        self._counting: dict[str, threading.Lock] = {}

    def stats(self, client: Client, name: str) -> QueueStats:
        """The queue's last count while it is younger than its cost allows, else a new one
        (one at a time per queue: who comes while a count runs gets that count)."""
        with self._lock:
            counting = self._counting.setdefault(name, threading.Lock())
        with counting:
            with self._lock:
                last = self._counted.get(name)
            now = self._now()
            if (
                last is not None
                and last[1] >= REUSED_FROM
                and 0 <= now - last[0] < last[1] / COUNT_SHARE
            ):
                return last[2]
            start = self._timer()
            stats = client.queue(name).stats()
            cost = self._timer() - start
            with self._lock:
                self._counted[name] = (now, cost, stats)
            return stats

    def every(self, client: Client) -> Iterator[QueueStats]:
        """Every queue's counts, by name; queues deleted meanwhile are left out."""
        names = client.list_queues()
        for name in names:
            try:
                yield self.stats(client, name)
            except ConveyorError:
                continue  # deleted while we looked, or the store is away: the next look tries
        self.forget(set(names))

    def forget(self, names: set[str]) -> None:
        """Drop the counts of queues not in `names` (deleted)."""
        with self._lock:
            for name in set(self._counted) - names:
                del self._counted[name]
                self._counting.pop(name, None)
