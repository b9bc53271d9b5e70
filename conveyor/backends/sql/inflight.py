"""Queues whose head is deep in messages in flight: how PostgreSQL and MySQL find them,
and the two kinds of row every SQL store (SQLite too) then reads from indexes.

A claim walks a queue in delivery order from its head and steps over every message in
flight (or delayed) there, so with thousands of them each receive costs more. When a claim
is slow (`check_after` seconds, at most once a second a queue) the store counts, up to
`rows`, what lies ahead of the first message it took (or, having taken none, in the whole
queue); past `rows` the queue is *deep*, and its claims from then on read the rows never
received in delivery order and the others by the time they become visible (then delivery
order), each from an index, and take the earliest in delivery order. PostgreSQL builds two
partial indexes for that queue alone (`pg_inflight.py`); MySQL keeps one index on a virtual
column for every queue (schema version 7). Every process finds out for itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..rules import ClaimTerms
from .connections import CursorExec
from .rows import Row
from .server_statements import SERVER_ROWS_AHEAD, SERVER_ROWS_AHEAD_OF
from .statement import Compiler

CHECK_AFTER = 0.005  # seconds a claim takes before the store looks at the queue's head
ROWS = 5_000  # messages ahead of the first ready one that make a queue deep
LOOK_EVERY = 1.0  # seconds between looks at one queue's head


def claim_values(terms: ClaimTerms, token: str) -> dict[str, object]:
    """The parameters of a claim (statements.CLAIM_SET and READY, whose FRESH and HELD
    rows are the two kinds this module speaks of), but its limit."""
    return {
        "cut_from": terms.cut_from,
        "until": terms.visible_at,
        "now": terms.now,
        "token": token,
        "horizon": terms.horizon,
        "expires": terms.expires,
    }


class HeadWatch:
    """Which queues are deep, found by their slow claims."""

    def __init__(self, prefix: str, sql: Compiler) -> None:
        self.prefix = prefix
        self.sql = sql  # the dialect's statements
        self.check_after = CHECK_AFTER
        self.rows = ROWS  # 0: every queue is deep from the start
        self.deep: set[int] = set()
        self._looked: dict[int, float] = {}  # queue: when a slow claim last looked

    def is_deep(self, qid: int) -> bool:
        return qid in self.deep or not self.rows

    def watched(
        self, ex: CursorExec, qid: int, run: Callable[[], list[Row]], priority_at: int
    ) -> list[Row]:
        """The rows of a plain claim (or walk page) `run`, timed: a slow one looks at what
        lies ahead of its first row (`priority_at`: where -nprio is in a row, seq first)."""
        started = time.perf_counter()
        rows = run()
        seconds = time.perf_counter() - started
        if seconds >= self.check_after and self.may_look(qid):
            first = min(((-int(r[priority_at]), int(r[0])) for r in rows), default=None)
            if self._many_ahead(ex, qid, first):
                self.deepen(qid)
        return rows

    def may_look(self, qid: int) -> bool:
        """Whether a slow claim of this queue looks now: not deep yet, and (under load) at
        most once a second a queue."""
        if qid in self.deep:
            return False
        now = time.monotonic()
        if now < self._looked.get(qid, -1e18) + LOOK_EVERY and self.check_after:
            return False
        self._looked[qid] = now
        return True

    def _many_ahead(self, ex: CursorExec, qid: int, first: tuple[int, int] | None) -> bool:
        """Whether `rows` messages lie ahead of `first` (nprio, seq; None: in the queue)."""
        values = {"qid": qid, "rows": self.rows}
        if first is None:
            found = ex.one(self.sql(SERVER_ROWS_AHEAD, qid), values)
        else:
            values["nprio"], values["seq"] = first
            found = ex.one(self.sql(SERVER_ROWS_AHEAD_OF, qid), values)
        return found is not None and int(found[0]) >= self.rows

    def deepen(self, qid: int) -> None:
        """Claim a queue found deep as a deep one from now on."""
        self.deep.add(qid)
