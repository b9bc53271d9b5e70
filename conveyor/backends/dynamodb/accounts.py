"""A DynamoDB store's accounts of its queues: the running totals counted in this process and
added to each queue's totals item (totals.py), and stats, which count a queue's messages and
read those totals. A part the store holds, as it holds its editor and registry."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...exceptions import StoreUnavailable
from ...models import QueueStats
from ..idle import WhenIdle
from ..rules import deadline_rules, expired, tally
from .items import Entry, n, num, s
from .table import expr
from .totals import FIELDS, Totals

if TYPE_CHECKING:
    from .store import DynamoStore

log = logging.getLogger(__name__)


def totals_key(qt: str) -> dict[str, Any]:
    """The key of a queue's totals item."""
    return {"id": s(f"conveyor#totals#{qt}")}


def add_totals(call: Callable[..., Any], totals: Totals, qt: str | None = None) -> None:
    """Add what `totals` counted (of one queue, or of all) to the totals items, through the
    store's `call`; where an update fails, what it and the rest held is counted again."""
    totals.writing.begin()
    try:
        taken = totals.take(qt)
        for name, counts in list(taken.items()):
            parts = [f"#{f} :{f}" for f, c in zip(FIELDS, counts, strict=True) if c]
            if parts:
                values = {f":{f}": n(c) for f, c in zip(FIELDS, counts, strict=True) if c}
                try:
                    call(
                        "update_item",
                        Key=totals_key(name),
                        ExpressionAttributeValues=values,
                        **expr(UpdateExpression="ADD " + ", ".join(parts)),
                    )
                except BaseException:
                    totals.restore(taken)
                    raise
            del taken[name]
    finally:
        totals.writing.end()


def last_totals(table: Any, totals: Totals) -> None:
    """What a store still counts as it goes or its process ends, added to the totals items
    (nothing said if the table cannot be reached then), once the writes of counts under way
    in its threads have ended (what one of them gives back is written here)."""
    totals.writing.settle()
    with contextlib.suppress(Exception):
        add_totals(lambda op, **kw: table.call(op, TableName=table.name, **kw), totals)


class DynamoAccounts:
    """What a store's queues hold and have seen."""

    def __init__(self, store: DynamoStore) -> None:
        self.store = store
        self.totals = Totals()  # counted here, not yet added to the totals items
        self._idle = WhenIdle(self._flush_if_due, self.totals.wait)

    def count(self, entry: Entry, field: str, n: int = 1) -> None:
        """Count what an operation did once it is done, and write the totals when due."""
        if self.totals.add(entry.qt, field, n):
            self._flush_if_due()
        else:
            self._idle.counted()

    def _flush_if_due(self) -> None:
        """Write the totals when due. A failure to write them is the totals', not the
        operation's that counted last (a send said to have failed would be sent again): it
        is logged, and they wait for the next write (the idle timer armed for it)."""
        if self.totals.due():
            try:
                self.flush()
            except StoreUnavailable as exc:
                log.warning("could not write the running totals (%s); trying again later", exc)
                self._idle.counted()

    def close(self) -> None:
        """The store closing: add what is held (once a write under way in a thread has
        ended), and no more later."""
        self._idle.cancel()
        self.totals.writing.settle()
        self.flush()

    def flush(self, qt: str | None = None) -> None:
        """Add what was counted here (of one queue, or of all) to the totals items."""
        add_totals(self.store.call, self.totals, qt)

    def forget(self, qt: str) -> None:
        """A queue deleted: its totals go, those counted here and its item."""
        self.totals.forget(qt)
        self.store.call("delete_item", Key=totals_key(qt))

    def stats(self, name: str) -> QueueStats:
        store = self.store
        entry = store.queue_entry(name)
        now = store.clock.now()
        horizon = now - entry.attrs.retention
        cut, _ = deadline_rules(entry.attrs, now)
        counts = tally(  # not the expired: a receive that meets one removes it
            (
                (doc.vis, doc.rc, doc.sat)
                for doc in store.queue_docs(entry)
                if not expired(doc.sat, doc.dl, horizon, cut)
            ),
            now,
        )
        self.flush(entry.qt)
        got = store.call("get_item", Key=totals_key(entry.qt), ConsistentRead=True)
        totals = {f: int(num(got.get("Item", {}), f) or 0) for f in FIELDS}
        return QueueStats(
            queue=name,
            ready=counts.ready,
            delayed=counts.delayed,
            in_flight=counts.in_flight,
            oldest_age=None if counts.oldest is None else max(0.0, now - counts.oldest),
            **totals,
        )
