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
        st.tuples(st.just("tick"), st.sampled_from([1, 5, 31, 200]), ANY, ANY),
        st.tuples(st.just("again"), ANY, st.integers(0, 2), ANY),
        st.tuples(st.just("deadline"), st.integers(1, 3), st.sampled_from([10, 100]), ANY),
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
# the queue's settings: retention (seconds; None: the default), archive, and for FIFO queues
# content-based de-duplication and de-duplication per group
SETTINGS = st.tuples(st.sampled_from([None, 60, 300]), st.booleans(), st.booleans(), st.booleans())
Settings = tuple[int | None, bool, bool, bool]
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


def _run(url: str, program: list[Op], fifo: bool, settings: Settings) -> list[Any]:
    """What the program observes on a fresh queue of the store at `url`."""
    clock = ManualClock()
    suffix = ".fifo" if fifo else ""
    retention, archive, by_content, per_group = settings
    options: dict[str, Any] = {"archive": archive}
    if retention is not None:
        options["retention"] = retention
    if fifo:
        options.update(content_based_dedup=by_content, dedup_per_group=per_group)
    with Client(url, clock=clock) as client:
        dead = client.create_queue(f"dead{suffix}")
        policy = DeadLetterPolicy(queue=f"dead{suffix}", max_receive_count=3)
        q = client.create_queue(f"q{suffix}", visibility_timeout=30, dead_letter=policy, **options)
        seen: list[Any] = []
        receipts: list[str] = []
        ids: list[str] = []  # in the order they were sent: stores make different ids
        bodies: dict[str, str] = {}
        numbers = itertools.count()

        def entry(i: int, delay: int, priority: int, group: int) -> SendEntry:
            body = f"m{next(numbers)}"
            if fifo:
                dedup = None if by_content else body
                return SendEntry(
                    entry_id=str(i), body=body, group_id=f"g{group % 3}", dedup_id=dedup
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
                    sent = q.send(e.body, delay=e.delay, group_id=e.group_id, dedup_id=e.dedup_id)
                    ids.append(sent.id)
                    bodies[sent.id] = str(e.body)
            elif op == "batch":
                entries = [entry(i, 0, b, c) for i in range(a)]
                results = q.send_batch(entries)
                for e, r in zip(entries, results, strict=True):
                    if r.ok:
                        ids.append(r.result.id)
                        bodies[r.result.id] = str(e.body)
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
                receipt = receipts[a % len(receipts)]
                seen.append(("visibility", _outcome(partial(q.change_visibility, receipt, b))))
            elif op == "tick":
                clock.advance(a)
            elif op == "again" and ids:  # a body sent before, sent again (FIFO: a duplicate)
                body = bodies[ids[a % len(ids)]]
                group, dedup = (f"g{b}", None if by_content else body) if fifo else (None, None)
                again = q.send(body, group_id=group, dedup_id=dedup)
                seen.append(("again", again.duplicate))
                if not again.duplicate:
                    ids.append(again.id)
                    bodies[again.id] = body
            elif op == "deadline":
                for i in range(a):
                    e = entry(i, 0, 0, c)
                    sent = q.send(
                        e.body, group_id=e.group_id, dedup_id=e.dedup_id, deadline=clock.now() + b
                    )
                    ids.append(sent.id)
                    bodies[sent.id] = str(e.body)
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
        if archive:
            kept = [(a.body, a.outcome, a.receive_count) for a in q.archive()]
            seen.append(("archive", sorted(kept)))
        return seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=OPS, fifo=st.booleans(), settings=SETTINGS)
def test_memory_and_sqlite_observe_the_same(
    tmp_path_factory: Any, program: list[Op], fifo: bool, settings: Settings
) -> None:
    folder: Path = tmp_path_factory.mktemp("agree")
    sqlite = f"sqlite:///{folder}/run{next(_runs)}.db"
    assert _run("memory://", program, fifo, settings) == _run(sqlite, program, fifo, settings)
