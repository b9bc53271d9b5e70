"""How the push gateway gathers store operations of one kind on one queue (`Batcher`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from conveyor.push.dispatch import Batcher

from ..support.push import Start

T = TypeVar("T")


def test_a_lone_call_goes_in_at_once_and_calls_made_meanwhile_go_in_together(
    start: Start,
) -> None:
    """Where nothing is in the store, a call's items go in at once, on its caller's task;
    the calls handed over while a batch is in the store go in as one batch after it (up to
    the limit), each answered with its own results; a store call that fails is each of its
    items' error, and a failed item is that item's alone."""
    running = start()
    batches: list[list[int]] = []

    def store(items: list[int]) -> list[int | Exception]:
        batches.append(items)
        if 0 in items:
            raise RuntimeError("the store failed")
        return [ValueError(f"{i} refused") if i < 0 else 10 * i for i in items]

    async def scenario() -> tuple[Any, ...]:
        loop = asyncio.get_running_loop()
        batcher = Batcher[int, int](running.gateway, store, limit=3)
        release = asyncio.Event()
        tasks_before = len(running.gateway.tasks)

        async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
            await release.wait()  # the batch stays in the store until released
            return fn(*args, **kwargs)

        batcher.call = call
        first = loop.create_task(batcher.many([1]))
        await asyncio.sleep(0)
        alone = len(running.gateway.tasks) == tasks_before and batches == []
        later = [loop.create_task(batcher.many(items)) for items in ([2, -3], [4], [5], [0])]
        await asyncio.sleep(0)
        release.set()
        return alone, await first, await asyncio.gather(*later)

    alone, first, later = running.run(scenario())
    assert alone  # in the store on its caller's task: no task of the gateway's for it
    assert first == [10]
    assert batches == [[1], [2, -3, 4], [5, 0]]
    assert later[0][0] == 20 and str(later[0][1]) == "-3 refused"
    assert later[1] == [40]
    assert [str(e) for e in later[2] + later[3]] == ["the store failed"] * 2
