"""Message move tasks: redrive a dead-letter queue at a rate, in the background, for the SQS
API (StartMessageMoveTask) and the REST API (a redrive with a rate) alike.

Tasks live in the server process that started them (their progress is in memory; the
messages they move are in the store, so a task cut short by a restart can be started again).
At most MAX_RUNNING run at once, and the server stops them when it shuts down.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ...client import Client
from ...exceptions import (
    ConveyorError,
    InvalidInput,
    MissingParameter,
    NotFound,
    QueueDoesNotExist,
    Unsupported,
)
from ...validation import parse_json_text
from .attributes import dead_letter_sources, int_in
from .names import Namespaces

log = logging.getLogger("conveyor.server")

MAX_RATE = 500
MAX_RUNNING = 64  # move tasks running at once in one server
KEEP_ENDED = 10  # ended tasks kept a source queue, for listing (SQS lists 10)


@dataclass
class MoveTask:
    handle: str
    source: str
    destination: str | None
    rate: float | None
    to_move: int
    started: float
    status: str = "RUNNING"
    moved: int = 0
    failure: str | None = None
    cancel: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    task_id: str = ""  # the handle's taskId: the REST API's name for the task
    wake: asyncio.Event = field(default_factory=asyncio.Event, repr=False)  # ends a pause

    @property
    def active(self) -> bool:
        """Running, or asked to stop and not stopped yet."""
        return self.status in ("RUNNING", "CANCELLING")

    def to_json(self) -> dict[str, Any]:
        """The task as the REST API shows it."""
        return {
            "task": self.task_id,
            "status": self.status,
            "moved": self.moved,
            "to_move": self.to_move,
            "rate": self.rate,
            "to": self.destination,
            "started": self.started,
            "failure": self.failure,
        }


class MoveTasks:
    def __init__(self, client: Client, ns: Namespaces) -> None:
        self.client = client
        self.ns = ns
        self._tasks: dict[str, MoveTask] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, params: dict[str, Any]) -> dict[str, Any]:
        source_arn = params.get("SourceArn")
        if not source_arn:
            raise MissingParameter("The request must contain the parameter SourceArn.")
        source = self.ns.from_arn(source_arn, "SourceArn")
        destination = None
        if params.get("DestinationArn"):
            destination = self.ns.from_arn(params["DestinationArn"], "DestinationArn")
        rate = params.get("MaxNumberOfMessagesPerSecond")
        if rate is not None:
            rate = int_in(rate, 1, MAX_RATE)
            if rate is None:
                raise InvalidInput(f"MaxNumberOfMessagesPerSecond must be from 1 to {MAX_RATE}")
        stats = await asyncio.to_thread(self._check, source, destination)
        return {"TaskHandle": self._launch(source, destination, rate, stats).handle}

    async def start_redrive(
        self, source: str, destination: str | None, rate: float | None
    ) -> MoveTask:
        """A redrive of every ready message of `source` (to `destination`, else each to the
        queue it came from), at most `rate` a second, in the background (the REST API's)."""

        def check() -> int:
            self._exists(source, "queue")
            if destination is not None:
                self._exists(destination, "to")
            return self.client.queue(source).stats().ready

        return self._launch(source, destination, rate, await asyncio.to_thread(check))

    def _launch(
        self, source: str, destination: str | None, rate: float | None, to_move: int
    ) -> MoveTask:
        running = [t for t in self._tasks.values() if t.active]
        if any(t.source == source for t in running):
            raise InvalidInput(
                "There is already a task running. Only one active task is allowed for a"
                " source queue arn at a given time."
            )
        if len(running) >= MAX_RUNNING:
            raise InvalidInput(
                f"{MAX_RUNNING} message move tasks are running, the most a server runs at"
                " once: wait for one to end, or cancel one"
            )
        ended = [t for t in self._tasks.values() if t.source == source and not t.active]
        for old in sorted(ended, key=lambda t: t.started)[: max(0, len(ended) - KEEP_ENDED + 1)]:
            del self._tasks[old.handle]
        task_id = str(uuid.uuid4())
        handle = base64.b64encode(
            json.dumps({"taskId": task_id, "sourceArn": self.ns.arn(source)}).encode()
        ).decode()
        task = MoveTask(
            handle=handle,
            source=source,
            destination=destination,
            rate=rate,
            to_move=to_move,
            started=time.time(),
            task_id=task_id,
        )
        self._tasks[handle] = task
        self._loop = asyncio.get_running_loop()
        task.task = self._loop.create_task(self._run(task))
        return task

    def tasks_of(self, source: str) -> list[MoveTask]:
        """The tasks of a source queue, the newest first."""
        found = (t for t in self._tasks.values() if t.source == source)
        return sorted(found, key=lambda t: t.started, reverse=True)

    def close(self) -> None:
        """Stop every running task (the server is shutting down): each ends CANCELLED after
        the batch it is moving. Safe to call from a signal handler."""
        for task in self._tasks.values():
            if task.active:
                task.cancel = True
                self._wake(task)

    def _check(self, source: str, destination: str | None) -> int:
        self._exists(source, "SourceArn")
        if destination is not None:
            self._exists(destination, "DestinationArn")
        if not dead_letter_sources(self.client, source, self.client.list_queues()):
            # as on SQS, only a dead-letter queue's messages move, wherever they go
            raise InvalidInput("Source queue must be configured as a Dead Letter Queue.")
        stats = self.client.queue(source).stats()
        return stats.ready + stats.in_flight + stats.delayed

    async def _run(self, task: MoveTask) -> None:
        queue = self.client.queue(task.source)
        chunk = max(1, min(100, int(task.rate))) if task.rate else 100
        started = time.monotonic()
        try:
            while not task.cancel:
                moved = await asyncio.to_thread(queue.redrive, limit=chunk, to=task.destination)
                task.moved += len(moved)
                if len(moved) < chunk:
                    break
                if task.rate:
                    ahead = task.moved / task.rate - (time.monotonic() - started)
                    if ahead > 0:  # a pause that a cancel ends
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(task.wake.wait(), ahead)
            task.status = "CANCELLED" if task.cancel else "COMPLETED"
        except asyncio.CancelledError:
            task.status = "CANCELLED"  # the server is shutting down
            raise
        except ConveyorError as exc:
            task.status, task.failure = "FAILED", exc.message
        except Exception as exc:  # a task must end in a state, whatever broke
            log.exception("message move task on %s failed", task.source)
            task.status, task.failure = "FAILED", f"internal error: {type(exc).__name__}"

    def _exists(self, queue: str, parameter: str) -> None:
        try:
            self.client.queue_info(queue, fresh=True)
        except QueueDoesNotExist:
            raise NotFound(
                f"The resource that you specified for the {parameter} parameter doesn't exist."
            ) from None

    @staticmethod
    def source_arn(params: dict[str, Any]) -> str:
        """The source queue's ARN a TaskHandle names."""
        handle = params.get("TaskHandle")
        if not handle:
            raise MissingParameter("The request must contain the parameter TaskHandle.")
        try:  # SQS's handles (and these) are base64 JSON naming the task and its source
            named = parse_json_text(base64.b64decode(str(handle), validate=True))
            source_arn = named["sourceArn"]
            if not isinstance(source_arn, str) or not isinstance(named["taskId"], str):
                raise ValueError
        except (ValueError, TypeError, KeyError, binascii.Error):
            raise InvalidInput("Value for parameter TaskHandle is invalid.") from None
        return source_arn

    def cancel(self, params: dict[str, Any]) -> dict[str, Any]:
        source_arn = self.source_arn(params)
        self._exists(self.ns.from_arn(source_arn, "SourceArn"), "SourceArn")
        return {"ApproximateNumberOfMessagesMoved": self.cancel_task(params["TaskHandle"]).moved}

    def cancel_task(self, handle: str, source: str | None = None) -> MoveTask:
        """Ask a running task to stop after its batch: by handle, or with `source` by the
        REST API's task id."""
        if source is None:
            task = self._tasks.get(str(handle))
        else:
            task = next((t for t in self.tasks_of(source) if t.task_id == handle), None)
        if task is None:
            raise NotFound("Task does not exist.")
        if task.status != "RUNNING":
            raise Unsupported(f"The task is {task.status}; only a RUNNING task can be cancelled")
        task.cancel = True
        task.status = "CANCELLING"
        self._wake(task)
        return task

    def _wake(self, task: MoveTask) -> None:
        """End the task's pause, from any thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(task.wake.set)

    def list_tasks(self, params: dict[str, Any]) -> dict[str, Any]:
        source_arn = params.get("SourceArn")
        if not source_arn:
            raise MissingParameter("The request must contain the parameter SourceArn.")
        source = self.ns.from_arn(source_arn, "SourceArn")
        limit = int_in(params.get("MaxResults") or 1, 1, 10)
        if limit is None:
            raise InvalidInput("MaxResults must be from 1 to 10")
        tasks = sorted(
            (t for t in self._tasks.values() if t.source == source),
            key=lambda t: t.started,
            reverse=True,
        )[:limit]
        return {"Results": [self._render(t) for t in tasks]}

    def _render(self, t: MoveTask) -> dict[str, Any]:
        out: dict[str, Any] = {
            "Status": t.status,
            "SourceArn": self.ns.arn(t.source),
            "ApproximateNumberOfMessagesMoved": t.moved,
            "ApproximateNumberOfMessagesToMove": t.to_move,
            "StartedTimestamp": int(t.started * 1000),
        }
        if t.status == "RUNNING":
            out["TaskHandle"] = t.handle
        if t.destination is not None:
            out["DestinationArn"] = self.ns.arn(t.destination)
        if t.rate is not None and float(t.rate).is_integer():  # SQS's is a whole number
            out["MaxNumberOfMessagesPerSecond"] = int(t.rate)
        if t.failure is not None:
            out["FailureReason"] = t.failure
        return out
