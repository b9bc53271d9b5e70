"""The memory store and the SQLite store answer any program of queue operations alike.

Both keep the queue contract's order (priority, then send order; FIFO groups in send
order) and edit messages in place, so under one ManualClock every receive, delete,
visibility change and edit must give the same bodies, receive counts and outcomes on both,
and leave the same messages behind, in the queue and in its dead-letter queue.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor import Client, DeadLetterPolicy, Message, Queue, SendEntry
from conveyor.clock import ManualClock
from conveyor.exceptions import ConveyorError

# (operation, a, b, c); what a, b and c mean depends on the operation
Op = tuple[str, int, int, int]
ANY = st.integers(0, 30)  # picks a receipt, or a message by the order it was sent in
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 4), st.sampled_from([0, 0, 5]), ANY),
        st.tuples(st.just("batch"), st.integers(1, 10), st.integers(0, 3), ANY),
        st.tuples(st.just("receive"), st.integers(1, 10), st.sampled_from([0, 1, 30]), ANY),
        st.tuples(st.just("delete"), ANY, st.integers(1, 10), ANY),
        st.tuples(st.just("visibility"), ANY, st.sampled_from([0, 3, 20]), ANY),
        st.tuples(st.just("tick"), st.sampled_from([1, 5, 31]), ANY, ANY),
        st.tuples(st.just("purge"), ANY, ANY, ANY),
        st.tuples(st.sampled_from(["get", "remove", "dead", "reset"]), ANY, ANY, ANY),
        st.tuples(st.just("fail"), ANY, st.sampled_from([0, 5]), ANY),
        st.tuples(st.just("update"), ANY, st.sampled_from([-1, 0, 10]), st.integers(0, 3)),
        st.tuples(st.just("redrive"), st.integers(1, 5), ANY, ANY),
        st.tuples(st.just("peek"), st.integers(1, 10), st.integers(0, 3), ANY),
    ),
    max_size=40,
)
STATES = (None, "ready", "in_flight", "delayed")
_runs = itertools.count()


def _outcome(call: Callable[[], Any]) -> Any:
    """What a call returned, or the name of the error it raised."""
    try:
        return call()
    except ConveyorError as exc:
        return type(exc).__name__


def _edit(q: Queue, op: str, mid: str, b: int, c: int, fifo: bool, now: float) -> Any:
    """One edit in place of the message `mid`."""
    if op == "get":
        return q.get(mid)
    if op == "remove":
        return q.remove(mid)
    if op == "dead":
        return q.move_to_dlq(mid, "bad input")
    if op == "reset":
        return q.reset(mid)
    if op == "fail":
        return q.fail(mid, b)
    if b >= 0:
        return q.update(mid, visible_at=now + b)
    return q.update(mid, body=f"edited{c}", priority=None if fifo else c)


def _run(url: str, program: list[Op], fifo: bool) -> list[Any]:
    """What the program observes on a fresh queue of the store at `url`."""
    clock = ManualClock()
    suffix = ".fifo" if fifo else ""
    with Client(url, clock=clock) as client:
        dead = client.create_queue(f"dead{suffix}")
        policy = DeadLetterPolicy(queue=f"dead{suffix}", max_receive_count=3)
        q = client.create_queue(f"q{suffix}", visibility_timeout=30, dead_letter=policy)
        seen: list[Any] = []
        receipts: list[str] = []
        ids: list[str] = []  # in the order they were sent: stores make different ids

        def entry(i: int, delay: int, priority: int, group: int) -> SendEntry:
            body = f"m{len(ids) + i}"
            if fifo:
                return SendEntry(
                    entry_id=str(i), body=body, group_id=f"g{group % 3}", dedup_id=body
                )
            return SendEntry(entry_id=str(i), body=body, delay=delay, priority=priority)

        def view(m: Message | str) -> Any:
            if isinstance(m, str):
                return m
            return (m.text, m.receive_count, m.state(clock.now()).value, m.priority, m.error)

        for op, a, b, c in program:
            if op == "send":
                for i in range(a):
                    e = entry(i, b, 0, c)
                    ids.append(
                        q.send(e.body, delay=e.delay, group_id=e.group_id, dedup_id=e.dedup_id).id
                    )
            elif op == "batch":
                results = q.send_batch([entry(i, 0, b, c) for i in range(a)])
                ids += [r.result.id for r in results if r.ok]
                seen.append(("batch", [r.ok for r in results]))
            elif op == "receive":
                got = q.receive(a, visibility_timeout=b)
                seen.append(("receive", [(m.text, m.receive_count) for m in got]))
                receipts += [m.receipt or "" for m in got]
            elif op == "delete" and receipts:
                chosen = [receipts[(a + i) % len(receipts)] for i in range(b)]
                results = q.delete_batch({str(i): r for i, r in enumerate(chosen)})
                seen.append(("delete", [r.ok for r in results]))
            elif op == "visibility" and receipts:
                r = receipts[a % len(receipts)]
                seen.append(("visibility", _outcome(partial(q.change_visibility, r, b))))
            elif op == "tick":
                clock.advance(a)
            elif op == "purge":
                q.purge()
            elif op == "redrive":
                moved = _outcome(partial(dead.redrive, limit=a))
                seen.append(("redrive", len(moved) if isinstance(moved, list) else moved))
            elif op == "peek":
                got = q.peek(a, state=STATES[b])
                seen.append(("peek", [(m.text, m.receive_count) for m in got]))
            elif ids:
                mid = ids[a % len(ids)]
                done = _outcome(partial(_edit, q, op, mid, b, c, fifo, clock.now()))
                seen.append((op, None if done is None else view(done)))
        for each in (q, dead):
            stats = each.stats()
            seen.append(("stats", stats.ready, stats.in_flight, stats.delayed, stats.total))
            seen.append(("left", [(m.text, m.receive_count, m.error) for m in each.peek(100)]))
        return seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=OPS, fifo=st.booleans())
def test_memory_and_sqlite_observe_the_same(
    tmp_path_factory: Any, program: list[Op], fifo: bool
) -> None:
    folder: Path = tmp_path_factory.mktemp("agree")
    sqlite = f"sqlite:///{folder}/run{next(_runs)}.db"
    assert _run("memory://", program, fifo) == _run(sqlite, program, fifo)
