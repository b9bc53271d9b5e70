"""The memory store and the SQLite store answer any program of queue operations alike.

Both keep the queue contract's order (priority, then send order; FIFO groups in send
order), so under one ManualClock every receive, delete and visibility change must give the
same bodies, receive counts and outcomes on both, and leave the same counts behind.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor import Client, DeadLetterPolicy, SendEntry
from conveyor.clock import ManualClock
from conveyor.exceptions import ConveyorError

# (operation, a, b, c); what a, b and c mean depends on the operation
Op = tuple[str, int, int, int]
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("send"), st.integers(1, 4), st.sampled_from([0, 0, 5]), st.integers(0, 2)
        ),
        st.tuples(st.just("batch"), st.integers(1, 10), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("receive"), st.integers(1, 10), st.sampled_from([0, 1, 30]), st.just(0)),
        st.tuples(st.just("delete"), st.integers(0, 20), st.integers(1, 10), st.just(0)),
        st.tuples(
            st.just("visibility"), st.integers(0, 20), st.sampled_from([0, 3, 20]), st.just(0)
        ),
        st.tuples(st.just("tick"), st.sampled_from([1, 5, 31]), st.just(0), st.just(0)),
        st.tuples(st.just("purge"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=40,
)
_runs = itertools.count()


def _run(url: str, program: list[Op], fifo: bool, dlq: bool) -> list[Any]:
    """What the program observes on a fresh queue of the store at `url`."""
    clock = ManualClock()
    suffix = ".fifo" if fifo else ""
    with Client(url, clock=clock) as client:
        options: dict[str, Any] = {}
        if dlq:
            client.create_queue(f"dead{suffix}")
            options["dead_letter"] = DeadLetterPolicy(queue=f"dead{suffix}", max_receive_count=2)
        q = client.create_queue(f"q{suffix}", visibility_timeout=30, **options)
        seen: list[Any] = []
        receipts: list[str] = []
        sent = 0

        def entry(i: int, delay: int, priority: int, group: int) -> SendEntry:
            nonlocal sent
            sent += 1
            if fifo:
                return SendEntry(
                    entry_id=str(i), body=f"m{sent}", group_id=f"g{group}", dedup_id=str(sent)
                )
            return SendEntry(entry_id=str(i), body=f"m{sent}", delay=delay, priority=priority)

        for op, a, b, c in program:
            if op == "send":
                for i in range(a):
                    e = entry(i, b, 0, c)
                    q.send(e.body, delay=e.delay, group_id=e.group_id, dedup_id=e.dedup_id)
            elif op == "batch":
                results = q.send_batch([entry(i, 0, b, c) for i in range(a)])
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
                try:
                    q.change_visibility(receipts[a % len(receipts)], b)
                    seen.append(("visibility", None))
                except ConveyorError as exc:
                    seen.append(("visibility", type(exc).__name__))
            elif op == "tick":
                clock.advance(a)
            elif op == "purge":
                q.purge()
        stats = q.stats()
        seen.append(("stats", stats.ready, stats.in_flight, stats.delayed, stats.total))
        return seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=OPS, fifo=st.booleans(), dlq=st.booleans())
def test_memory_and_sqlite_observe_the_same(
    tmp_path_factory: Any, program: list[Op], fifo: bool, dlq: bool
) -> None:
    folder: Path = tmp_path_factory.mktemp("agree")
    sqlite = f"sqlite:///{folder}/run{next(_runs)}.db"
    assert _run("memory://", program, fifo, dlq) == _run(sqlite, program, fifo, dlq)
