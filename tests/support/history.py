"""A history of queue operations and a checker for it, in the manner of Jepsen's.

Clients record each operation's invocation and completion: what they asked for (a send of a
body, a receive, a delete of a receipt) and how it ended: `ok`, `fail` (the server said it
did nothing) or `info` (no answer: it may or may not have happened). From the history alone,
and a final read of what the queue still holds, `check` reports:

- `lost`: sends acknowledged (`ok`) whose body was never received nor left in the queue;
- `after_delete`: receives of a body that began after a delete of it was acknowledged;
- `concurrent`: a body received again while an earlier receive's visibility timeout still
  ran, with no failed or unanswered operation on it in between that could explain it;
- `duplicated`: bodies that reached the queue under more than one message id;
- `order`: in a FIFO queue's group, a body first delivered before one sent before it (each
  group's bodies are sent in order by one client, one at a time).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Op:
    process: str
    kind: str  # send, receive, delete
    start: float
    end: float = 0.0
    outcome: str = "info"  # ok, fail, info
    body: str | None = None  # a send's, a delete's
    group: str | None = None
    seq: int = 0  # a FIFO send's place in its group
    receipt: str | None = None  # a delete's
    got: list[tuple[str, str, str]] = field(default_factory=list)  # (body, message id, receipt)


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    @contextmanager
    def op(self, process: str, kind: str, **what: Any) -> Iterator[Op]:
        """Record one operation: `ok` if the block ends, `fail` if it raises `Refused`,
        `info` on any other exception (which is swallowed: the client goes on)."""
        o = Op(process, kind, time.monotonic(), **what)
        try:
            yield o
            o.outcome = "ok"
        except Refused:
            o.outcome = "fail"
        except Exception:
            o.outcome = "info"
        finally:
            o.end = time.monotonic()
            with self._lock:
                self.ops.append(o)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for o in self.ops:
            out[f"{o.kind}:{o.outcome}"] += 1
        return dict(out)


class Refused(Exception):
    """The server answered that it did not do the operation (a 4xx, or a 503 said before
    anything was written)."""


@dataclass
class Report:
    sent_ok: int
    sent_unknown: int
    delivered: int
    lost: list[str]
    after_delete: list[str]
    concurrent: list[str]
    duplicated: list[str]
    order: list[str]

    def problems(self) -> dict[str, list[str]]:
        return {
            k: v
            for k, v in {
                "lost": self.lost,
                "after_delete": self.after_delete,
                "concurrent": self.concurrent,
                "duplicated": self.duplicated,
                "order": self.order,
            }.items()
            if v
        }

    def row(self) -> dict[str, int]:
        return {
            "sent ok": self.sent_ok,
            "sent unknown": self.sent_unknown,
            "delivered": self.delivered,
            "lost": len(self.lost),
            "after delete": len(self.after_delete),
            "concurrent": len(self.concurrent),
            "duplicated": len(self.duplicated),
            "order": len(self.order),
        }


def check(history: History, remaining: Iterable[tuple[str, str]], visibility: float) -> Report:
    """`remaining`: (body, message id) of what the queue held at the end, read after the
    faults healed."""
    ops = sorted(history.ops, key=lambda o: o.start)
    sends = [o for o in ops if o.kind == "send"]
    sent_ok = {o.body for o in sends if o.outcome == "ok" and o.body is not None}
    receives = [(o, b, m, r) for o in ops if o.kind == "receive" for b, m, r in o.got]
    ids: dict[str, set[str]] = defaultdict(set)
    seen: set[str] = set()
    for _, b, m, _ in receives:
        ids[b].add(m)
        seen.add(b)
    for b, m in remaining:
        ids[b].add(m)
        seen.add(b)
    lost = sorted(sent_ok - seen)
    duplicated = sorted(b for b, found in ids.items() if len(found) > 1)

    deleted_at: dict[str, float] = {}
    for o in ops:
        if o.kind == "delete" and o.outcome == "ok" and o.body is not None:
            deleted_at[o.body] = min(o.end, deleted_at.get(o.body, o.end))
    after_delete = sorted({b for o, b, _, _ in receives if o.start > deleted_at.get(b, o.start)})

    # a delete that failed or went unanswered, or a receive whose answer was lost, may
    # leave a body to come back early only if its timeout was changed: none is here, so a
    # second receive within the first's visibility timeout is a double delivery
    concurrent: set[str] = set()
    last: dict[str, float] = {}
    for o, b, _, _ in sorted(receives, key=lambda x: x[0].end):
        if b in last and o.end < last[b] + visibility - 0.5:
            concurrent.add(b)
        last[b] = o.start

    order: list[str] = []
    first: dict[str, float] = {}
    for o, b, _, _ in receives:
        first[b] = min(o.end, first.get(b, o.end))
    groups: dict[str, list[Op]] = defaultdict(list)
    for o in sends:
        if o.group is not None and o.outcome == "ok":
            groups[o.group].append(o)
    for group, sent in groups.items():
        sent.sort(key=lambda o: o.seq)
        delivered = [o.body for o in sent if o.body in first]
        by_time = sorted(delivered, key=lambda b: first[b] if b is not None else 0)
        if delivered != by_time:
            order.append(group)
    return Report(
        sent_ok=len(sent_ok),
        sent_unknown=sum(1 for o in sends if o.outcome == "info"),
        delivered=len(seen),
        lost=lost,
        after_delete=after_delete,
        concurrent=sorted(concurrent),
        duplicated=duplicated,
        order=order,
    )
