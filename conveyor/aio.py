"""`AsyncClient`: `Client` for asyncio programs.

The stores are synchronous (one implementation each); their calls run in a thread pool,
or on the event loop's own thread where the store says they cannot wait there (memory;
SQLite, whose calls raise `WouldBlock` before they would wait, and then run in the pool:
`offload`). Its sends, receives, deletes and visibility changes (`offload_write`) share a
transaction with the others of the event loop's turn, and where they would wait, join the
writes the store gathers into one transaction in a thread of its own. Long polls wait in the
event loop, so a waiting receive holds no thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, ParamSpec, TypeVar

from . import tracing
from .backends.base import Backend, RunAgain, WouldBlock
from .client import Client
from .clock import Clock
from .models import (
    BatchResult,
    Consumer,
    Message,
    QueueAttributes,
    QueueStats,
    SendResult,
)
from .queues import RECEIVE, ChangeVisibility, Delete, Queue, Receive, Wait, decode_message
from .sends import Body, Send, SendEntry, Sent

P = ParamSpec("P")
T = TypeVar("T")
Offload = Callable[..., Awaitable[Any]]  # `offload` or `offload_write`


async def offload(backend: Backend, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `fn`, which calls `backend`, for asyncio code: on the event loop's own thread
    where the store allows it (`LoopCommits.inline`), else, or when it would wait after all,
    in the default thread pool."""
    return await _offload(None, backend, False, functools.partial(fn, *args, **kwargs))


async def offload_write(
    backend: Backend, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """`offload` for a short write (a send, receive, delete or visibility change): when it
    would wait for the store's write lock, it joins the others waiting for it in one
    transaction where the store can gather them (`LoopCommits.gather`)."""
    return await _offload(None, backend, True, functools.partial(fn, *args, **kwargs))


async def offload_to(
    executor: Executor | None,
    backend: Backend,
    fn: Callable[P, T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`offload` with the calls that cannot run inline sent to `executor` (None: the event
    loop's default pool)."""
    return await _offload(executor, backend, False, functools.partial(fn, *args, **kwargs))


async def offload_lazy_to(
    executor: Executor | None,
    backend: Backend,
    fn: Callable[P, T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`offload_to` for a write its caller answers once it is committed, without waiting for
    the disk where it runs inline (`Inline.lazy`): the next durable commit takes it there.
    For what at-least-once delivery may lose to a power cut, as an acknowledgement (its
    message is delivered again)."""
    call = functools.partial(fn, *args, **kwargs)
    return await _offload(executor, backend, False, call, lazy=True)


async def _offload(
    executor: Executor | None,
    backend: Backend,
    gather: bool,
    call: Callable[[], T],
    *,
    lazy: bool = False,
) -> T:
    if tracing.active() is not None:  # a span made by the call has the caller's for parent
        call = functools.partial(contextvars.copy_context().run, call)
    commits = backend.loop_commits()
    while commits is not None:
        if not (gather and commits.gathering()):  # else it would meet the lock taken
            try:
                with commits.inline() as made:
                    made.short = gather
                    made.lazy = lazy
                    result = call()
            except WouldBlock:
                pass
            else:
                if made.durable is not None:
                    await made.durable
                return result
        if not gather:
            break
        gathered = commits.gather(call)
        if gathered is None:
            break
        try:
            return await gathered
        except RunAgain:
            continue  # handed back unrun: the lock is free again
    return await asyncio.get_running_loop().run_in_executor(executor, call)


class AsyncClient:
    def __init__(
        self,
        url: str | None = None,
        *,
        backend: Backend | None = None,
        clock: Clock | None = None,
        client: Client | None = None,
    ) -> None:
        self.sync = client or Client(url, backend=backend, clock=clock)
        self.waits = Waits()

    @property
    def backend(self) -> Backend:
        return self.sync.backend

    def queue(self, name: str) -> AsyncQueue:
        return AsyncQueue(self.sync.queue(name), self.waits)

    async def create_queue(
        self, name: str, attributes: QueueAttributes | None = None, **options: Any
    ) -> AsyncQueue:
        return AsyncQueue(
            await offload(self.backend, self.sync.create_queue, name, attributes, **options),
            self.waits,
        )

    async def delete_queue(self, name: str) -> None:
        await offload(self.backend, self.sync.delete_queue, name)

    async def list_queues(self, prefix: str = "") -> list[str]:
        return await offload(self.backend, self.sync.list_queues, prefix)

    async def set_attributes(self, name: str, **changes: Any) -> QueueAttributes:
        return await offload(self.backend, self.sync.set_attributes, name, **changes)

    async def create_topic(self, name: str) -> bool:
        return await offload(self.backend, self.sync.create_topic, name)

    async def subscribe(self, topic: str, queue: str) -> None:
        await offload(self.backend, self.sync.subscribe, topic, queue)

    async def publish(self, topic: str, body: Body, **options: Any) -> dict[str, SendResult]:
        return await offload(self.backend, self.sync.publish, topic, body, **options)

    async def register_consumer(self, consumer_id: str | None = None, **options: Any) -> Consumer:
        return await offload(self.backend, self.sync.register_consumer, consumer_id, **options)

    async def heartbeat(self, consumer_id: str) -> Consumer:
        return await offload(self.backend, self.sync.heartbeat, consumer_id)

    async def close(self) -> None:
        await offload(self.backend, self.sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def long_poll_async(
    queue: Queue,
    wait: float,
    claim: Callable[[], Awaitable[list[Message]]],
    stop: Callable[[], bool] | None = None,
    waits: Waits | None = None,
) -> list[Message]:
    """A receive that waits in the event loop up to `wait` seconds for `claim` to get a
    first message (`long_poll`'s steps): woken by a send in this process, and every
    `poll_interval` for delays ending and other processes' sends; no thread held while it
    waits. `stop` is asked before every wait: True ends it with nothing. `waits` counts
    the waiters. `stop` is asked again before each claim that follows a wait, and where it
    answers True the wait's wake-up is passed on to the next waiter (this one may have
    taken it from a receiver that would claim)."""
    poll = queue.polling(wait)
    step = next(poll)
    waited = False
    try:
        while True:
            if step is RECEIVE:
                if waited and stop is not None and stop():
                    queue.notify()
                    return []
                step = poll.send(await claim())
                continue
            assert isinstance(step, Wait)
            if stop is not None and stop():
                return []
            waited = True
            if waits is not None:
                waits.enter(queue.name)
            try:
                await queue.wait_async(step.since, step.remaining)
            finally:
                if waits is not None:
                    waits.leave(queue.name)
            step = next(poll)
    except StopIteration as done:
        messages: list[Message] = done.value
        return messages


class Waits:
    """How many receives wait in a long poll now, per queue (a server's metrics show it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def enter(self, queue: str) -> None:
        with self._lock:
            self._counts[queue] = self._counts.get(queue, 0) + 1

    def leave(self, queue: str) -> None:
        with self._lock:
            left = self._counts[queue] - 1
            if left:
                self._counts[queue] = left
            else:
                del self._counts[queue]

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class AsyncQueue:
    def __init__(self, queue: Queue, waits: Waits | None = None) -> None:
        self.sync = queue
        self.name = queue.name
        self.waits = waits or Waits()

    @property
    def backend(self) -> Backend:
        return self.sync.backend

    async def send(self, body: Body, **options: Any) -> SendResult:
        return await offload_write(self.backend, self.sync.send, body, **options)

    async def send_json(self, value: Any, **options: Any) -> SendResult:
        return await offload_write(self.backend, self.sync.send_json, value, **options)

    async def send_batch(self, entries: Iterable[SendEntry | Body]) -> list[BatchResult]:
        return await offload_write(self.backend, self.sync.send_batch, entries)

    async def receive(
        self,
        max_messages: int = 1,
        *,
        visibility_timeout: float | None = None,
        wait: float | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> list[Message]:
        """As `Queue.receive`; the wait happens in the event loop, not in a thread.

        `stop` is asked after every wake-up: when it answers True (a server shutting down,
        which wakes every waiter through `HUB.wake_all`) the receive returns what it has.
        """
        op = await offload(
            self.backend,
            self.sync.receiving,
            max_messages,
            visibility_timeout=visibility_timeout,
            wait=wait,
        )
        return await self.run_receive(op, stop)

    async def run_receive(
        self, op: Receive, stop: Callable[[], bool] | None = None
    ) -> list[Message]:
        """Do a checked receive (`Queue.receiving`), waiting in the event loop."""
        if tracing.active() is not None:
            attributes = tracing.messaging("receive", self.name, self.backend.scheme)
            with tracing.span(f"receive {self.name}", "client", attributes=attributes) as span:
                got = await self._receive(op, stop)
                tracing.received(span, got)
                return got
        return await self._receive(op, stop)

    async def _receive(self, op: Receive, stop: Callable[[], bool] | None) -> list[Message]:
        queue, backend, most, vt = self.sync, self.backend, op.most, op.visibility_timeout
        first = min(most, backend.batch_limit)

        async def claim() -> list[Message]:
            got = await offload_write(backend, queue.claim, first, vt)
            if got and len(got) == first < most:
                got = await offload_write(backend, queue.receive_more, got, most, vt)
            if got and op.wait and len(got) == most:
                queue.notify()  # there may be more: wake the next waiter
            return got

        got = await (
            claim() if op.wait <= 0 else long_poll_async(queue, op.wait, claim, stop, self.waits)
        )
        return [decode_message(m) if m.compressed else m for m in got]

    async def run_send(self, op: Send) -> Sent:
        """Do a checked send (`Queue.sending`) in one store call, from the event loop."""
        return await offload_write(self.backend, self.sync.run_send, op)

    async def run_delete(self, op: Delete) -> list[Exception | None]:
        """Do a checked delete (`Queue.deleting`), from the event loop."""
        return await offload_write(self.backend, self.sync.run_delete, op)

    async def run_change_visibility(self, op: ChangeVisibility) -> list[Exception | None]:
        """Do a checked change of visibility (`Queue.changing_visibility`), from the event
        loop."""
        return await offload_write(self.backend, self.sync.run_change_visibility, op)

    async def delete(self, receipt: str) -> None:
        await offload_write(self.backend, self.sync.delete, receipt)

    async def delete_batch(self, receipts: Sequence[str] | Mapping[str, str]) -> list[BatchResult]:
        return await offload_write(self.backend, self.sync.delete_batch, receipts)

    async def change_visibility(self, receipt: str, timeout: float) -> None:
        await offload_write(self.backend, self.sync.change_visibility, receipt, timeout)

    async def stats(self) -> QueueStats:
        return await offload(self.backend, self.sync.stats)

    async def peek(self, limit: int = 10, **options: Any) -> list[Message]:
        return await offload(self.backend, self.sync.peek, limit, **options)

    async def get(self, message_id: str) -> Message:
        return await offload(self.backend, self.sync.get, message_id)

    async def move_to_dlq(self, message_id: str, error: str | None = None) -> Message:
        return await offload(self.backend, self.sync.move_to_dlq, message_id, error)
