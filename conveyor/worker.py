"""`Worker`: runs a handler over a queue's messages, in threads or on asyncio.

Lifecycle: `run()` registers the worker as a consumer, receives messages (up to
`batch_size` at once, as many as it has room for: `concurrency` handlers at a time, and a
batch larger than that waits its turn, held), runs the handler on each, deletes a message
when its handler returns, and keeps extending the visibility of messages it holds. A handler
that raises gets its message back after an exponential back-off; once the message has been
received the queue's max receive count times it goes to the dead-letter queue with the error
recorded.

Deadlines follow gq's document. A message whose handler fails after its deadline has passed
has failed for good: it goes to the dead-letter queue (or, without one, is deleted) rather
than being tried again. On an at-least-once queue the worker does not extend a message's
visibility past its deadline, so that another consumer may take it then. On an at-most-once
queue a claim never ends by itself (nothing is extended); a failed message with a deadline
still ahead is tried again, one without a deadline is not (it was tried once).

`stop()` is thread-safe. On SIGTERM/SIGINT (handlers installed only in the main thread, and
restored afterwards) the worker stops receiving, lets running handlers finish within `grace`
seconds, releases what is still held and returns: a message whose handler began visible
again at once (visibility 0), one still waiting its turn given back as though never received
(`Queue.give_back`: its receive count as before, so that a worker's restarts bring no
message it never handled nearer the dead-letter queue).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from types import FrameType
from typing import Any

from . import tracing
from .exceptions import ConveyorError, InvalidInput, NotFound, ReceiptHandleInvalid
from .models import Capability, Delivery, Message
from .queues import Queue
from .validation import SDK_BATCH

log = logging.getLogger("conveyor.worker")

Handler = Callable[[Message], Any] | Callable[[Message], Awaitable[Any]]


@dataclass(slots=True)
class _Held:
    message: Message
    extend_at: float
    started: bool = False  # its handler began (else it waits its turn, held)
    done: bool = False


@contextmanager
def on_stop(callback: Callable[[], None]) -> Iterator[None]:
    """Call `callback` on SIGTERM/SIGINT while inside; restores the old handlers after.

    Outside the main thread signals cannot be caught, and nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        callback()

    old = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


class Worker:
    def __init__(
        self,
        queue: Queue,
        handler: Handler,
        *,
        concurrency: int = 1,
        batch_size: int = 1,
        visibility_timeout: float | None = None,
        wait: float = 1.0,
        grace: float = 30.0,
        backoff: float = 1.0,
        max_backoff: float = 900.0,
        consumer_timeout: float = 30.0,
        consumer_id: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise InvalidInput(f"concurrency must be at least 1, got {concurrency}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise InvalidInput(f"batch_size must be a whole number, got {batch_size!r}")
        if not 1 <= batch_size <= SDK_BATCH:
            raise InvalidInput(f"batch_size must be from 1 to {SDK_BATCH}, got {batch_size}")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.visibility_timeout = visibility_timeout
        self.wait = wait
        self.grace = grace
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.consumer_timeout = consumer_timeout
        self.consumer_id = (
            consumer_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        )
        self.processed = 0
        self.failed = 0
        self.dead_lettered = 0
        self._stop = threading.Event()
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        # messages held at once: what runs and, for a batch larger than that, what waits
        self._room = max(concurrency, batch_size)
        # a receive waits for room for half a batch (a batch at most what runs at once)
        self._refill = 1 if batch_size <= concurrency else max(1, batch_size // 2)
        self._slots = threading.Semaphore(self._room)
        self._is_async = inspect.iscoroutinefunction(handler)

    # -- public ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop; safe from any thread or a signal handler."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, until_empty: bool = False, handle_signals: bool = True) -> int:
        """Process messages until stopped (or, with `until_empty`, until none is ready and
        nothing is running). Returns how many messages were handled successfully."""
        self._stop.clear()
        registered = self._register()
        with on_stop(self.stop) if handle_signals else _nothing():
            keeper = threading.Thread(target=self._keep, name="conveyor-keeper", daemon=True)
            keeper.start()
            try:
                if self._is_async:
                    asyncio.run(self._run_async(until_empty))
                else:
                    self._run_threads(until_empty)
            finally:
                self._stop.set()
                keeper.join()
                if registered:
                    self._unregister()
        return self.processed

    # -- receiving ------------------------------------------------------------------------

    def _vt(self) -> float:
        if self.visibility_timeout is not None:
            return self.visibility_timeout
        return self.queue.info.attributes.visibility_timeout

    def _take(self, free: int, until_empty: bool) -> list[Message]:
        try:
            messages = self.queue.receive(
                min(free, self.batch_size),
                visibility_timeout=self._vt(),
                wait=0 if until_empty else self.wait,
            )
        except ConveyorError as exc:
            log.warning("receive failed: %s; retrying", exc)
            self._stop.wait(1.0)
            return []
        now = self.queue.catalog.clock.now()
        with self._lock:
            for m in messages:
                self._held[m.receipt or m.id] = _Held(m, now + self._vt() / 2)
        return messages

    def _idle(self) -> bool:
        with self._lock:
            return not self._held

    def _run_threads(self, until_empty: bool) -> None:
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="conveyor-worker")
        running: set[Future[None]] = set()
        try:
            while not self._stop.is_set():
                free = 0
                while free < self._refill and not self._stop.is_set():
                    if self._slots.acquire(timeout=0.25):
                        free += 1
                while free < self.batch_size and self._slots.acquire(blocking=False):
                    free += 1
                messages = [] if self._stop.is_set() else self._take(free, until_empty)
                for _ in range(free - len(messages)):
                    self._slots.release()
                for m in messages:
                    fut = pool.submit(self._handle, m)
                    running.add(fut)
                    fut.add_done_callback(running.discard)
                if not messages and until_empty:
                    for fut in list(running):
                        fut.result()
                    if self._idle() and not self._take_peek():
                        break
        finally:
            self._drain(running)
            pool.shutdown(wait=False, cancel_futures=True)

    def _take_peek(self) -> bool:
        """With until_empty: is anything ready right now?"""
        try:
            return self.queue.stats().ready > 0
        except ConveyorError:
            return False

    def _drain(self, running: set[Future[None]]) -> None:
        end = time.monotonic() + self.grace
        for fut in list(running):
            left = end - time.monotonic()
            if left <= 0:
                break
            with suppress(Exception):
                fut.result(timeout=left)
        self._release_held()

    def _release_held(self) -> None:
        with self._lock:
            held = [h for h in self._held.values() if not h.done and h.message.receipt]
            self._held.clear()
        waiting = [h.message for h in held if not h.started]
        if waiting:
            try:
                errors = self.queue.give_back([m.receipt or "" for m in waiting])
            except ConveyorError as exc:
                errors = [exc] * len(waiting)
            for m, error in zip(waiting, errors, strict=True):
                if error is None:
                    log.info("gave back message %s (not handled)", m.id)
                else:
                    log.warning("could not give back message %s: %s", m.id, error)
        for h in held:
            if h.started:
                try:
                    self.queue.change_visibility(h.message.receipt or "", 0)
                    log.info("released message %s", h.message.id)
                except ConveyorError as exc:
                    log.warning("could not release message %s: %s", h.message.id, exc)

    def _start(self, message: Message) -> None:
        """Its handler begins: released at a stop with its receive counted."""
        with self._lock:
            held = self._held.get(message.receipt or message.id)
            if held is not None:
                held.started = True

    # -- handling -------------------------------------------------------------------------

    def _handle(self, message: Message) -> None:
        try:
            self._start(message)
            with self._processing(message):  # the handler, and its outcome's store call
                try:
                    result = self.handler(message)
                    if inspect.isawaitable(result):
                        raise InvalidInput("an async handler must run with an async Worker")
                except Exception as exc:
                    tracing.failed(exc)
                    self._settle(message, exc)
                else:
                    self._settle(message, None)
        finally:
            self._slots.release()

    def _processing(self, message: Message) -> AbstractContextManager[Any]:
        """The span a message is handled in: the child of the trace its sender was in, so
        that the handler's own spans join that trace (tracing.py)."""
        if tracing.active() is None:
            return nullcontext()
        queue = self.queue
        return tracing.span(
            f"process {queue.name}",
            "consumer",
            parent=tracing.context_of(message),
            attributes={
                **tracing.messaging("process", queue.name, queue.backend.scheme),
                "messaging.message.id": message.id,
                "messaging.message.delivery_count": message.receive_count,
            },
        )

    def _settle(self, message: Message, error: BaseException | None) -> None:
        key = message.receipt or message.id
        with self._lock:
            held = self._held.get(key)
            if held is None:  # released at stop: someone else will get it
                return
            held.done = True
        try:
            if error is None:
                self._ack(message)
            else:
                self._retry(message, error)
        except ConveyorError as exc:
            log.warning("could not settle message %s: %s", message.id, exc)
        finally:
            with self._lock:
                self._held.pop(key, None)

    def _ack(self, message: Message) -> None:
        assert message.receipt is not None
        try:
            self.queue.delete(message.receipt)
        except ReceiptHandleInvalid:
            log.warning("message %s was redelivered before it was deleted", message.id)
        self.processed += 1

    def _retry(self, message: Message, error: BaseException) -> None:
        assert message.receipt is not None
        self.failed += 1
        text = f"{type(error).__name__}: {error}"
        log.warning(
            "handler failed on message %s (receive %d): %s", message.id, message.receive_count, text
        )
        attrs = self.queue.info.attributes
        now = self.queue.catalog.clock.now()
        deadline = message.deadline
        if deadline is not None and deadline <= now:  # failed for good (gq: "failed")
            self._give_up(message, f"deadline passed: {text}")
            return
        if attrs.delivery is Delivery.AT_MOST_ONCE and deadline is None:
            self.queue.delete(message.receipt)  # tried once, as at most once promises
            return
        policy = attrs.dead_letter
        if (
            policy is not None
            and message.receive_count >= policy.max_receive_count
            and Capability.EDIT_IN_PLACE in self.queue.catalog.capabilities
        ):
            self.queue.move_to_dlq(message.id, error=text)
            self.dead_lettered += 1
            return
        delay = min(self.max_backoff, self.backoff * 2 ** max(0, message.receive_count - 1))
        self.queue.change_visibility(message.receipt, min(delay, 43200.0))

    def _give_up(self, message: Message, error: str) -> None:
        """A message that is not to be tried again: to the dead-letter queue, with the
        error, where the queue has one and the store can move it; else deleted."""
        assert message.receipt is not None
        if (
            self.queue.info.attributes.dead_letter is not None
            and Capability.EDIT_IN_PLACE in self.queue.catalog.capabilities
        ):
            try:
                self.queue.move_to_dlq(message.id, error=error)
                self.dead_lettered += 1
                return
            except NotFound:
                return  # gone meanwhile (another consumer took it after its deadline)
        self.queue.delete(message.receipt)

    # -- keeping visibility and the heartbeat ---------------------------------------------

    def _keep(self) -> None:
        clock = self.queue.catalog.clock
        beat_every = self.consumer_timeout / 3
        next_beat = clock.now() + beat_every
        while not self._stop.wait(0.05 if clock.manual else 0.25):
            now = clock.now()
            vt = self._vt()
            with self._lock:
                due = [h for h in self._held.values() if not h.done and h.extend_at <= now]
                for h in due:
                    h.extend_at = now + vt / 2
            if due and self.queue.info.attributes.delivery is Delivery.AT_MOST_ONCE:
                continue  # its claims never end: extending one would end it
            for h in due:
                # at least once, a claim is not extended past the message's deadline: once
                # that passes, another consumer may take it (gq's document)
                deadline = h.message.deadline
                timeout = vt if deadline is None else min(vt, deadline - now)
                if timeout <= 0:
                    continue
                try:
                    if h.message.receipt:
                        self.queue.change_visibility(h.message.receipt, timeout)
                except ConveyorError as exc:
                    log.warning("could not extend visibility of %s: %s", h.message.id, exc)
            if now >= next_beat:
                next_beat = now + beat_every
                self._beat()

    def _register(self) -> bool:
        if Capability.CONSUMERS not in self.queue.catalog.capabilities:
            return False
        try:
            self.queue.catalog.register_consumer(
                self.consumer_id,
                queue=self.queue.name,
                timeout=self.consumer_timeout,
                info={
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "concurrency": self.concurrency,
                },
            )
            return True
        except ConveyorError as exc:
            log.warning("could not register consumer: %s", exc)
            return False

    def _beat(self) -> None:
        if Capability.CONSUMERS not in self.queue.catalog.capabilities:
            return
        try:
            self.queue.catalog.consumers().heartbeat(self.consumer_id)
        except NotFound:
            self._register()
        except ConveyorError as exc:
            log.warning("heartbeat failed: %s", exc)

    def _unregister(self) -> None:
        with suppress(ConveyorError):
            self.queue.catalog.consumers().unregister_consumer(self.consumer_id)

    # -- asyncio --------------------------------------------------------------------------

    async def _run_async(self, until_empty: bool) -> None:
        running: set[asyncio.Task[None]] = set()
        sem = asyncio.Semaphore(self._room)  # held
        turns = asyncio.Semaphore(self.concurrency)  # handlers running
        try:
            while not self._stop.is_set():
                free = 0
                while free < self._refill and not self._stop.is_set():
                    try:  # a stop is seen while every handler still runs
                        await asyncio.wait_for(sem.acquire(), 0.25)
                    except TimeoutError:
                        continue
                    free += 1
                while free < self.batch_size and not sem.locked():
                    await sem.acquire()
                    free += 1
                messages = (
                    []
                    if self._stop.is_set()
                    else await asyncio.to_thread(self._take, free, until_empty)
                )
                for _ in range(free - len(messages)):
                    sem.release()
                for m in messages:
                    task = asyncio.create_task(self._handle_async(m, sem, turns))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if not messages and until_empty:
                    if running:
                        await asyncio.gather(*running, return_exceptions=True)
                    if self._idle() and not await asyncio.to_thread(self._take_peek):
                        break
        finally:
            if running:
                await asyncio.wait(list(running), timeout=self.grace)
                for task in running:
                    task.cancel()
            await asyncio.to_thread(self._release_held)

    async def _handle_async(
        self, message: Message, sem: asyncio.Semaphore, turns: asyncio.Semaphore
    ) -> None:
        try:
            with self._processing(message):  # the handler, and its outcome's store call
                try:
                    async with turns:
                        self._start(message)
                        result = self.handler(message)
                        if inspect.isawaitable(result):
                            await result
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    tracing.failed(exc)
                    await asyncio.to_thread(self._settle, message, exc)
                else:
                    await asyncio.to_thread(self._settle, message, None)
        finally:
            sem.release()


@contextmanager
def _nothing() -> Iterator[None]:
    yield
