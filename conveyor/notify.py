"""In-process wake-ups for long polls: a send wakes the receivers waiting in the same process.

Waiters are keyed by (store key, queue). Threads wait on a per-key condition; asyncio tasks
wait on a future resolved through their loop, so a waiting coroutine holds no thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict


class WaitHub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str], int] = defaultdict(int)
        self._conditions: dict[tuple[str, str], threading.Condition] = {}
        self._futures: dict[tuple[str, str], list[asyncio.Future[None]]] = defaultdict(list)

    def version(self, store: str, queue: str) -> int:
        with self._lock:
            return self._versions[(store, queue)]

    def notify(self, store: str, queue: str) -> None:
        key = (store, queue)
        with self._lock:
            self._versions[key] += 1
            cond = self._conditions.get(key)
            futures = self._futures.pop(key, [])
        if cond is not None:
            with cond:
                cond.notify_all()
        for fut in futures:
            loop = fut.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, fut)

    def wait(self, store: str, queue: str, since: int, timeout: float) -> bool:
        """Block until `notify` moves the key past `since`, or `timeout`. True if notified."""
        key = (store, queue)
        with self._lock:
            cond = self._conditions.get(key)
            if cond is None:
                cond = self._conditions[key] = threading.Condition(threading.Lock())
        with cond:
            return cond.wait_for(lambda: self.version(store, queue) != since, timeout)

    async def wait_async(self, store: str, queue: str, since: int, timeout: float) -> bool:
        key = (store, queue)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._versions[key] != since:
                return True
            self._futures[key].append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                waiting = self._futures.get(key)
                if waiting and fut in waiting:
                    waiting.remove(fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


HUB = WaitHub()
