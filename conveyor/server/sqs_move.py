"""SQS message move tasks: redrive a dead-letter queue at a rate, in the background.

Tasks live in the server process that started them (their progress is in memory; the
messages they move are in the store, so a task cut short by a restart can be started again).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..client import Client
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    MissingParameter,
    NotFound,
    QueueDoesNotExist,
    Unsupported,
)
from ..validation import parse_json_text
from .sqs_attributes import dead_letter_sources, int_in
from .sqs_names import Namespaces

log = logging.getLogger("conveyor.server")

MAX_RATE = 500


@dataclass
class MoveTask:
    handle: str
    source: str
    destination: str | None
    rate: int | None
    to_move: int
    started: float
    status: str = "RUNNING"
    moved: int = 0
    failure: str | None = None
    cancel: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class MoveTasks:
    def __init__(self, client: Client, ns: Namespaces) -> None:
        self.client = client
        self.ns = ns
        self._tasks: dict[str, MoveTask] = {}

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
        for t in self._tasks.values():
            if t.source == source and t.status in ("RUNNING", "CANCELLING"):
                raise InvalidInput(
                    "There is already a task running. Only one active task is allowed for a"
                    " source queue arn at a given time."
                )
        handle = base64.b64encode(
            json.dumps({"taskId": str(uuid.uuid4()), "sourceArn": source_arn}).encode()
        ).decode()
        task = MoveTask(
            handle=handle,
            source=source,
            destination=destination,
            rate=rate,
            to_move=stats,
            started=time.time(),
        )
        self._tasks[handle] = task
        task.task = asyncio.get_running_loop().create_task(self._run(task))
        return {"TaskHandle": handle}

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
        chunk = min(task.rate or 100, 100)
        started = time.monotonic()
        try:
            while not task.cancel:
                moved = await asyncio.to_thread(queue.redrive, limit=chunk, to=task.destination)
                task.moved += len(moved)
                if len(moved) < chunk:
                    break
                if task.rate:
                    ahead = task.moved / task.rate - (time.monotonic() - started)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
            task.status = "CANCELLED" if task.cancel else "COMPLETED"
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
        task = self._tasks.get(str(params["TaskHandle"]))
        if task is None:
            raise NotFound("Task does not exist.")
        if task.status != "RUNNING":
            raise Unsupported(f"The task is {task.status}; only a RUNNING task can be cancelled")
        task.cancel = True
        task.status = "CANCELLING"
        return {"ApproximateNumberOfMessagesMoved": task.moved}

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
        if t.rate is not None:
            out["MaxNumberOfMessagesPerSecond"] = t.rate
        if t.failure is not None:
            out["FailureReason"] = t.failure
        return out
