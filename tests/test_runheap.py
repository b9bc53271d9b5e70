"""The memory store's run-heap pops what a binary heap would, in any order of pushes."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from conveyor.backends.memory.runheap import RunHeap

# a push of (key, tie) or a pop (None); keys repeat often, as visibility deadlines do
OPS = st.lists(st.none() | st.tuples(st.integers(0, 20), st.integers(0, 1000)), max_size=300)


@given(OPS)
def test_pops_in_the_order_of_a_heap(ops: list[tuple[int, int] | None]) -> None:
    runs: RunHeap[tuple[int, int]] = RunHeap()
    heap: list[tuple[int, int]] = []
    for op in ops:
        if op is None:
            if heap:
                assert runs.first() == heap[0]
                assert runs.pop() == heapq.heappop(heap)
        else:
            runs.push(op)
            heapq.heappush(heap, op)
        assert len(runs) == len(heap)
        assert bool(runs) == bool(heap)
    assert [runs.pop() for _ in range(len(heap))] == sorted(heap)
    assert not runs


def test_items_in_order_stay_out_of_the_heap() -> None:
    runs: RunHeap[tuple[int, int]] = RunHeap()
    for i in range(1000):
        runs.push((0, i))
    runs.push((0, 5))  # out of order: the heap takes it
    assert len(runs.rest) == 1
    assert [runs.pop()[1] for _ in range(7)] == [0, 1, 2, 3, 4, 5, 5]
    runs.clear()
    assert not runs and len(runs) == 0
