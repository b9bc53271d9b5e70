"""A priority queue that is cheap when items arrive mostly in order.

A memory queue's ready messages are mostly pushed in delivery order (sends append), and its
invisible ones mostly in the order they become visible (one visibility timeout for a
queue's receives). Items not below the last item of the in-order run are appended to a
deque; the others go to a binary heap. Popping takes the smaller of the two heads, so a
queue fed in order pays O(1) a message instead of O(log n) at every depth.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])


class RunHeap(Generic[T]):
    """Push, pop the smallest, look at the smallest; items compare as tuples."""

    __slots__ = ("rest", "run")

    def __init__(self) -> None:
        self.run: deque[T] = deque()  # in order: each item not below the one before
        self.rest: list[T] = []  # a heap of the items that came out of order

    def push(self, item: T) -> None:
        run = self.run
        if not run or item >= run[-1]:
            run.append(item)
        else:
            heapq.heappush(self.rest, item)

    def pop(self) -> T:
        """The smallest item, removed; IndexError when empty."""
        rest = self.rest
        if rest and (not self.run or rest[0] < self.run[0]):
            return heapq.heappop(rest)
        return self.run.popleft()

    def first(self) -> T:
        """The smallest item, kept; IndexError when empty."""
        rest = self.rest
        if rest and (not self.run or rest[0] < self.run[0]):
            return rest[0]
        return self.run[0]

    def clear(self) -> None:
        self.run.clear()
        self.rest.clear()

    def __len__(self) -> int:
        return len(self.run) + len(self.rest)

    def __bool__(self) -> bool:
        return bool(self.run) or bool(self.rest)
