"""In-process wake-ups for long polls: a send wakes the receivers waiting in the same process.

Waiters are keyed by (store key, queue). Threads wait on a per-key condition and are all
woken by a send (they are few: one per worker thread). Asyncio tasks (a server may hold
thousands of long polls) wait on futures in arrival order and are woken one per notification:
a woken receiver that fills its batch passes the wake-up on, so a send of one message costs
one receive, not one per waiter. While tasks wait on a queue, one ticker per queue wakes the
longest waiter every `interval` seconds, which finds messages that became ready without a
send in this process (delays and visibility timeouts ending, other processes' sends).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import defaultdict, deque
from typing import TYPE_CHECKING, TypeVar

from .forks import renew_after_fork

if TYPE_CHECKING:  # imported where an event loop runs: a synchronous program goes without
    import asyncio

Key = tuple[str, str]
T = TypeVar("T")


class WaitHub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[Key, int] = defaultdict(int)
        self._conditions: dict[Key, threading.Condition] = {}
        self._futures: dict[Key, deque[asyncio.Future[bool]]] = defaultdict(deque)
        self._tickers: dict[Key, asyncio.Task[None]] = {}

    def forked(self) -> None:
        """A forked child: its parent's waiters did not come with it, and a thread of the
        parent may have held the lock, or a condition's, at the fork."""
        self._lock = threading.Lock()
        self._conditions = {}
        self._futures = defaultdict(deque)
        self._tickers = {}

    def version(self, store: str, queue: str) -> int:
        with self._lock:
            return self._versions[(store, queue)]

    def waiting(self, store: str, queue: str) -> int:
        """How many asyncio tasks wait on `queue` (for metrics and tests)."""
        with self._lock:
            return len(self._futures.get((store, queue), ()))

    def notify(self, store: str, queue: str, count: int = 1) -> None:
        """Something changed on `queue`: wake every waiting thread and `count` waiting tasks."""
        key = (store, queue)
        with self._lock:
            self._versions[key] += 1
            cond = self._conditions.get(key)
            woken = self._pop(key, count)
        if cond is not None:
            with cond:
                cond.notify_all()
        _resolve_all(woken)

    def wake_all(self) -> None:
        """Wake every waiting task (a server shutting down ends its long polls)."""
        with self._lock:
            woken = [f for waiting in self._futures.values() for f in waiting if not f.done()]
            self._futures.clear()
        _resolve_all(woken)

    def _pop(self, key: Key, count: int) -> list[asyncio.Future[bool]]:
        waiting = self._futures.get(key)
        woken: list[asyncio.Future[bool]] = []
        while waiting and len(woken) < count:
            fut = waiting.popleft()
            if not fut.done():
                woken.append(fut)
        return woken

    def wait(self, store: str, queue: str, since: int, timeout: float) -> bool:
        """Block until `notify` moves the key past `since`, or `timeout`. True if notified."""
        key = (store, queue)
        with self._lock:
            cond = self._conditions.get(key)
            if cond is None:
                cond = self._conditions[key] = threading.Condition(threading.Lock())
        with cond:
            return cond.wait_for(lambda: self.version(store, queue) != since, timeout)

    async def wait_async(
        self, store: str, queue: str, since: int, timeout: float, interval: float | None = None
    ) -> bool:
        """Wait in the event loop until woken or `timeout`; True if woken.

        With `interval`, a ticker wakes the longest waiter of the queue that often. The
        wait needs no task of its own (a timer ends it, not `asyncio.timeout`): the server
        steps a request's coroutine before it gives it a task.
        """
        import asyncio

        key = (store, queue)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        with self._lock:
            if self._versions[key] != since:
                return True
            self._futures[key].append(fut)
            if interval is not None and key not in self._tickers:
                self._tickers[key] = loop.create_task(self._tick(key, interval))
        timer = loop.call_later(timeout, settle, fut, False)
        try:
            return await fut  # True: woken; False: the time is up
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result():
                self._wake(key)  # the wake-up was meant for someone: pass it on
            raise
        finally:
            timer.cancel()
            if not fut.done():
                fut.cancel()
            if fut.cancelled() or not fut.result():  # else a wake-up took it off the queue
                with self._lock, contextlib.suppress(ValueError):
                    self._futures[key].remove(fut)

    def _wake(self, key: Key) -> None:
        with self._lock:
            woken = self._pop(key, 1)
        _resolve_all(woken)

    async def _tick(self, key: Key, interval: float) -> None:
        import asyncio

        while True:
            await asyncio.sleep(interval)
            with self._lock:
                if not self._futures.get(key):
                    del self._tickers[key]
                    return
                woken = self._pop(key, 1)
            _resolve_all(woken)


def _resolve_all(futures: list[asyncio.Future[bool]]) -> None:
    if not futures:  # a send with no receive waiting
        return
    running = running_loop()
    for fut in futures:
        loop = fut.get_loop()
        if loop is running:  # the waiter's own thread: no need to wake its loop
            loop.call_soon(settle, fut, True)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(settle, fut, True)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread, if any (none, where asyncio was never
    imported)."""
    aio = sys.modules.get("asyncio")
    if aio is None:
        return None
    try:
        loop: asyncio.AbstractEventLoop = aio.get_running_loop()
    except RuntimeError:
        return None
    return loop


def settle(fut: asyncio.Future[T], value: T) -> None:
    """Resolve `fut` with `value` unless something else has (a timer that ends a wait, or a
    wake-up, whichever comes first)."""
    if not fut.done():
        fut.set_result(value)


HUB = WaitHub()
renew_after_fork(HUB)
