"""`Producer`: gathers sends into batches, by size and by time, one store call per batch."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

from .exceptions import ConveyorError, InvalidInput, StoreUnavailable
from .models import BatchResult, SendResult
from .queues import Queue
from .sends import Body, SendEntry
from .validation import MAX_BATCH, SDK_BATCH

log = logging.getLogger("conveyor.producer")


class Producer:
    """Batching sender. `send` returns a future resolved when the batch is stored.

    A batch goes out when it holds `batch_size` messages or `linger` seconds after its first
    message, whichever is first. `flush()` sends what is gathered; `close()` flushes and stops.
    A failed store call is retried with back-off up to `retries` times before the futures of
    that batch fail. `send` blocks when `max_pending` messages wait (back-pressure).
    """

    def __init__(
        self,
        queue: Queue,
        *,
        batch_size: int = MAX_BATCH,
        linger: float = 0.05,
        max_pending: int = 10_000,
        retries: int = 3,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise InvalidInput(f"batch_size must be a whole number, got {batch_size!r}")
        if not 1 <= batch_size <= SDK_BATCH:
            raise InvalidInput(f"batch_size must be from 1 to {SDK_BATCH}, got {batch_size}")
        if linger < 0:
            raise InvalidInput(f"linger must be >= 0, got {linger}")
        self.queue = queue
        self.batch_size = batch_size
        self.linger = linger
        self.max_pending = max_pending
        self.retries = retries
        self._pending: list[tuple[SendEntry, Future[SendResult]]] = []
        self._first_at = 0.0
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False
        self._flushing = 0
        self._seq = 0
        self._thread = threading.Thread(target=self._loop, name="conveyor-producer", daemon=True)
        self._thread.start()

    def send(self, body: Body, **options: Any) -> Future[SendResult]:
        fut: Future[SendResult] = Future()
        with self._cond:
            if self._closed:
                raise InvalidInput("this producer is closed")
            while len(self._pending) >= self.max_pending:
                self._cond.wait()
            self._seq += 1
            entry = SendEntry(entry_id=f"e{self._seq % 1000}", body=body, **options)
            if not self._pending:
                self._first_at = time.monotonic()
            self._pending.append((entry, fut))
            self._cond.notify_all()
        return fut

    def flush(self, timeout: float | None = None) -> None:
        """Send everything gathered so far and wait until it is stored."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1  # batches go out full or not, without lingering
            self._cond.notify_all()
            try:
                while self._pending or self._busy:
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError("producer flush timed out")
                    self._cond.wait(left)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> list[tuple[SendEntry, Future[SendResult]]] | None:
        with self._cond:
            while True:
                if self._pending:
                    full = len(self._pending) >= self.batch_size
                    due = self._first_at + self.linger - time.monotonic()
                    if full or due <= 0 or self._closed or self._flushing:
                        batch = self._pending[: self.batch_size]
                        del self._pending[: self.batch_size]
                        self._first_at = time.monotonic() if self._pending else 0.0
                        self._busy = True
                        self._cond.notify_all()
                        return batch
                    self._cond.wait(due)
                elif self._closed:
                    return None
                else:
                    self._cond.wait()

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._send(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self, batch: list[tuple[SendEntry, Future[SendResult]]]) -> None:
        """Send a batch (the queue splits one larger than its store takes at once); what
        failed because the store could not be reached is sent again, with back-off."""
        delay = 0.05
        for attempt in range(self.retries + 1):
            entries = [dataclasses.replace(e, entry_id=str(i)) for i, (e, _) in enumerate(batch)]
            try:
                results = self.queue.send_batch(entries)
            except StoreUnavailable as exc:
                results = [BatchResult(entry_id=e.entry_id, error=exc) for e in entries]
            except ConveyorError as exc:
                for _, fut in batch:
                    fut.set_exception(exc)
                return
            again: list[tuple[SendEntry, Future[SendResult]]] = []
            why: Exception | None = None
            for (entry, fut), result in zip(batch, results, strict=True):
                if isinstance(result.error, StoreUnavailable) and attempt < self.retries:
                    again.append((entry, fut))
                    why = result.error
                elif result.error is not None:
                    fut.set_exception(result.error)
                else:
                    fut.set_result(result.result)
            if not again:
                return
            log.warning(
                "sending %d message(s) failed (%s); retrying in %.2fs",
                len(again), why, delay,
            )  # fmt: skip
            time.sleep(delay)
            delay *= 2
            batch = again
