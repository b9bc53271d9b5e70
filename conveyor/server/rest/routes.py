"""The REST API: the routes of the REST queue service Conveyor replaces, plus receipts and admin.

Legacy routes keep their paths, status codes and bodies (``PUT /queues/{q}`` answers 201
``"created"``, ``PUT /queues/{q}/message`` the new id as text, ...). Receipt-based routes
give SQS semantics (receive, delete, change visibility); admin routes inspect and edit
messages in place. Errors are ``{"error": "...", "code": "..."}`` with the status below.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from ...aio import AsyncClient
from ...client import Client
from ...exceptions import (
    ConveyorError,
    MessageNotFound,
    NotFound,
    QueueDoesNotExist,
    QueueExists,
    ReceiptHandleInvalid,
    TopicDoesNotExist,
    TopicExists,
)
from ...models import DeadLetterPolicy, Message, MessageState
from ...queues import decode_message
from ...validation import (
    ATTRIBUTE_NAME_RE,
    GROUP_ID_RE,
    MAX_DELAY,
    MAX_FAIL_DELAY,
    MAX_MESSAGE_BYTES,
    MAX_OFFSET,
    MAX_PEEK,
    MAX_PRIORITY,
    MAX_RATE,
    MAX_RETENTION,
    MAX_VISIBILITY,
    MAX_WAIT,
    MIN_PRIORITY,
    MIN_RATE,
    SDK_BATCH,
    check_queue_name,
)
from ..metrics import Metrics
from ..sqs.move import MoveTasks

NAME_PATTERN = r"^(?:[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"
QueueName = Annotated[
    str, Path(description="queue name", examples=["orders"], pattern=NAME_PATTERN)
]
TopicName = Annotated[
    str, Path(description="topic name", examples=["events"], pattern=NAME_PATTERN)
]


class ErrorBody(BaseModel):
    """Every error of the REST API."""

    error: str = Field(description="what went wrong and what to do")
    code: str = Field(description="a stable code (SQS's where one fits)")


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "invalid input: names, ranges, sizes, malformed bodies"),
        (401, "the bearer token is missing or wrong"),
        (404, "no such queue, topic, message or receipt"),
        (409, "the message or queue is in a state that does not allow this"),
        (413, "the request body is over --max-body"),
        (422, "the queue or topic exists with other attributes"),
        (503, "the store cannot be reached"),
    )
}


RAW_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the message body, as sent",
        "content": {
            "text/plain": {"schema": {"type": "string", "minLength": 1}},
            "application/octet-stream": {
                "schema": {"type": "string", "format": "binary", "minLength": 1}
            },
        },
    }
}


MAX_RECEIVE_BATCH = 1000  # messages one GET /queues/{q}/messages/{n} returns at most

TEXT_404: dict[int | str, dict[str, Any]] = {
    404: {
        "description": "no such queue (Dynamiq's answer: a JSON string saying so)",
        "content": {"application/json": {"schema": {"type": "string"}}},
    }
}


def no_queue(queue: str) -> JSONResponse:
    """Dynamiq's 404 for a queue that does not exist: a JSON string."""
    return JSONResponse(f"There is no queue named {queue}", status_code=404)


def rest_status(error: ConveyorError) -> int:
    """Statuses of the REST API (the predecessor's, where it had one)."""
    if isinstance(error, QueueExists | TopicExists):
        return 422
    if isinstance(error, NotFound | ReceiptHandleInvalid):
        return 404
    return error.status


def error_body(error: ConveyorError) -> dict[str, str]:
    return {"error": error.message, "code": error.code}


def body_json(body: bytes) -> dict[str, str]:
    """A body as JSON: its text, or, when it is not UTF-8, its base64 with `"encoding":
    "base64"` (nothing is lost either way)."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "encoding": "base64"}


def matches(m: Message, wanted: str) -> bool:
    """Whether a message's id, body text or an attribute's name or value holds `wanted`
    (casefolded)."""
    if wanted in m.id.casefold() or wanted in m.body.decode("utf-8", "replace").casefold():
        return True
    return any(
        wanted in str(k).casefold() or wanted in str(v).casefold() for k, v in m.attributes.items()
    )


def message_json(m: Message, *, with_body: bool = True, now: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": m.id}
    if now is not None:
        out["state"] = m.state(now).value
    if with_body:
        out.update(body_json(m.body))
    if m.receipt is not None:
        out["receipt"] = m.receipt
    out.update(
        {
            "attributes": {k: str(v) for k, v in m.attributes.items()},
            "group_id": m.group_id,
            "priority": m.priority,
            "sent_at": m.sent_at,
            "visible_at": m.visible_at,
            "receive_count": m.receive_count,
            "sequence": m.sequence,
            "source_queue": m.source_queue,
            "error": m.error,
        }
    )
    return out


class StrictBody(BaseModel):
    """A JSON body whose values must have their schema's types (no true for 1, no "5" for
    5); a whole number may be written 5.0, as JSON Schema allows."""

    model_config = ConfigDict(strict=True, regex_engine="python-re")

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for key, value in data.items():
            field = cls.model_fields.get(key)
            if (
                field is not None
                and isinstance(value, float)
                and value.is_integer()
                and field.annotation in (int, int | None)
            ):
                out[key] = int(value)
        return out


ATTRIBUTE_PATTERN = rf"^(?![Aa][Ww][Ss]\.|[Aa][Mm][Aa][Zz][Oo][Nn]\.){ATTRIBUTE_NAME_RE.pattern}$"
MessageAttributes = Annotated[
    dict[Annotated[str, StringConstraints(pattern=ATTRIBUTE_PATTERN)], str],
    Field(max_length=10),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": 10,
            "propertyNames": {"pattern": ATTRIBUTE_PATTERN},
            "additionalProperties": {"type": "string"},
        }
    ),
]
"""Up to 10 message attributes, named as the SDK takes them."""
GROUP_PATTERN = f"^{GROUP_ID_RE.pattern}$"


class DeadLetterSettings(StrictBody):
    """Where a message goes after `max_receive_count` receives."""

    model_config = ConfigDict(extra="forbid")  # and StrictBody's
    queue: str = Field(description="the dead-letter queue (it must exist)", pattern=NAME_PATTERN)
    max_receive_count: int = Field(ge=1, le=1000)


class QueueSettings(StrictBody):
    """Queue attributes (`QueueAttributes`), plus the predecessor's names. An attribute left
    out, or given as null, keeps its value; `dead_letter`, `rate_limit` and `compress_over`
    given as null are removed."""

    model_config = ConfigDict(extra="forbid")  # and StrictBody's
    visibility_timeout: float | None = Field(default=None, ge=0, le=MAX_VISIBILITY)
    delay: float | None = Field(default=None, ge=0, le=MAX_DELAY)
    retention: float | None = Field(default=None, ge=60, le=MAX_RETENTION)
    max_message_bytes: int | None = Field(default=None, ge=1024, le=MAX_MESSAGE_BYTES)
    receive_wait: float | None = Field(default=None, ge=0, le=MAX_WAIT)
    dead_letter: DeadLetterSettings | None = None
    content_based_dedup: bool | None = Field(
        default=None, description="de-duplicate by body hash (FIFO queues only)"
    )
    dedup_per_group: bool | None = Field(
        default=None, description="de-duplicate within each message group (FIFO queues only)"
    )
    delivery: Literal["at-least-once", "at-most-once"] | None = None
    archive: bool | None = None
    rate_limit: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)
    compress_over: int | None = Field(default=None, ge=0, le=MAX_MESSAGE_BYTES)
    tags: dict[Annotated[str, StringConstraints(min_length=1, max_length=128)], str] | None = Field(
        default=None, max_length=50
    )
    compressed_messages: bool | None = Field(
        default=None, description="compress bodies that shrink (zlib)"
    )
    min_partitions: int | None = Field(default=None, description="accepted and ignored")
    max_partitions: int | None = Field(default=None, description="accepted and ignored")
    max_partition_age: int | None = Field(default=None, description="accepted and ignored")


class ReceiveRequest(StrictBody):
    max_messages: int = Field(default=1, ge=1, le=10)
    visibility_timeout: float | None = Field(default=None, ge=0, le=MAX_VISIBILITY)
    wait: float | None = Field(default=None, ge=0, le=MAX_WAIT)


class RedriveTask(BaseModel):
    """A redrive at a rate, moving in the background."""

    task: str = Field(description="its id, to cancel it with")
    status: Literal["RUNNING", "CANCELLING", "CANCELLED", "COMPLETED", "FAILED"]
    moved: int
    to_move: int = Field(description="ready in the dead-letter queue when it started")
    rate: float | None = Field(description="messages a second, at most")
    to: str | None = Field(description="where they go; null: each to the queue it came from")
    started: float = Field(description="Unix time")
    failure: str | None


class ReceiptsRequest(StrictBody):
    receipts: list[str] = Field(min_length=1, max_length=10)


class VisibilityRequest(StrictBody):
    receipt: str
    timeout: float = Field(ge=0, le=MAX_VISIBILITY)


class RedriveRequest(StrictBody):
    """`ids` moves those; otherwise up to `limit` ready messages move, or with `all` every
    one (the answer comes when they have moved). `all` with a `rate` (a second) starts a
    task that moves them in the background and answers 202 with it."""

    ids: list[str] | None = Field(default=None, min_length=1, max_length=SDK_BATCH)
    to: str | None = Field(default=None, pattern=NAME_PATTERN)
    limit: int = Field(default=100, ge=1, le=SDK_BATCH)
    all: bool = False
    rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)


class UpdateRequest(StrictBody):
    """What to change in a message; what is left out stays."""

    body: str | None = Field(default=None, min_length=1)
    attributes: MessageAttributes | None = None
    priority: int | None = Field(default=None, ge=MIN_PRIORITY, le=MAX_PRIORITY)
    visible_in: float | None = Field(
        default=None, ge=0, le=MAX_VISIBILITY, description="seconds until visible (0: now)"
    )


class ConsumerRequest(StrictBody):
    id: str | None = Field(default=None, pattern=r"^[\x21-\x7e]{1,128}$")
    queue: str | None = Field(default=None, pattern=NAME_PATTERN)
    timeout: float = Field(default=30.0, gt=0, le=86400)
    info: dict[str, Any] = Field(default_factory=dict)


class FailRequest(StrictBody):
    delay: float = Field(default=0, ge=0, le=MAX_FAIL_DELAY, description="seconds until redelivery")


class InvalidRequest(StrictBody):
    error: str | None = Field(default=None, max_length=1024, description="why, kept with it")


class SendRequest(StrictBody):
    body: str = Field(min_length=1)
    delay: float | None = Field(default=None, ge=0, le=MAX_DELAY)
    group_id: str | None = Field(default=None, pattern=GROUP_PATTERN)
    dedup_id: str | None = Field(default=None, pattern=GROUP_PATTERN)
    priority: int = Field(default=0, ge=MIN_PRIORITY, le=MAX_PRIORITY)
    attributes: MessageAttributes = Field(default_factory=dict)
    deadline: float | None = Field(
        default=None,
        gt=0,
        le=MAX_RETENTION,
        description="seconds to process it in (gq's deadline): past it an at-most-once queue"
        " drops it, and an at-least-once queue ends a consumer's claim of it there",
    )


REMOVABLE = frozenset({"dead_letter", "rate_limit", "compress_over"})
IGNORED = ("min_partitions", "max_partitions", "max_partition_age")


def _changes(settings: QueueSettings) -> dict[str, Any]:
    given = settings.model_dump(exclude_unset=True)
    data = {k: v for k, v in given.items() if v is not None or k in REMOVABLE}
    for legacy in IGNORED:
        data.pop(legacy, None)  # the predecessor's partitioning has no meaning here
    compressed = data.pop("compressed_messages", None)
    if compressed is not None:
        data["compress_over"] = 0 if compressed else None
    dl = data.get("dead_letter")
    if dl is not None:
        data["dead_letter"] = DeadLetterPolicy(**dl)
    return data


@dataclass(frozen=True)
class Rest:
    """What the REST handlers work with, one per server (`app.state.rest`)."""

    client: Client
    aio: AsyncClient
    metrics: Metrics
    draining: Callable[[], bool]
    moves: MoveTasks

    def queue_doc(self, name: str) -> dict[str, Any]:
        info = self.client.queue_info(check_queue_name(name), fresh=True)
        a = info.attributes
        return {
            "name": name,
            "attributes": a.to_dict(),
            "stats": self.client.queue(name).stats().to_dict(),
            "VisibilityTimeout": a.visibility_timeout,
            "CompressedMessages": a.compress_over is not None,
        }

    def checked(self, settings: QueueSettings) -> dict[str, Any]:
        changes = _changes(settings)
        dl = changes.get("dead_letter")
        if dl is not None:
            self.client.queue_info(check_queue_name(dl.queue))  # a missing one is a 404
        return changes

    def dead_letters_of(self, queue: str) -> str:
        """As the CLI does: a queue with a dead-letter queue redrives that queue's messages;
        one without is a dead-letter queue named directly."""
        policy = self.client.queue_info(queue, fresh=True).attributes.dead_letter
        return policy.queue if policy is not None else queue


def _services(request: Request) -> Rest:
    rest: Rest = request.app.state.rest
    return rest


Services = Annotated[Rest, Depends(_services)]

# the route table: each handler below is a route of this router, in the order they match
router = APIRouter(responses=ERRORS)

# -- queues ---------------------------------------------------------------------------


@router.get("/queues", tags=["queues"], summary="List queues")
def list_queues(rest: Services, prefix: str = "") -> dict[str, list[str]]:
    return {"queues": rest.client.list_queues(prefix)}


@router.get(
    "/queues/{queue}",
    tags=["queues"],
    summary="Queue attributes and counts",
    responses=TEXT_404,
)
def get_queue(rest: Services, queue: QueueName) -> Any:
    try:
        return rest.queue_doc(queue)
    except QueueDoesNotExist:
        return no_queue(queue)


@router.put("/queues/{queue}", tags=["queues"], status_code=201, summary="Create a queue")
def create_queue(
    rest: Services, queue: QueueName, settings: Annotated[QueueSettings | None, Body()] = None
) -> str:
    if queue in rest.client.list_queues(queue):
        raise QueueExists("Queue already exists.")
    rest.client.create_queue(queue, **rest.checked(settings or QueueSettings()))
    return "created"


@router.delete("/queues/{queue}", tags=["queues"], summary="Delete a queue")
@router.delete("/queue/{queue}", tags=["queues"], summary="Delete a queue (Dynamiq's path)")
def delete_queue(rest: Services, queue: QueueName) -> dict[str, bool]:
    try:
        rest.client.queue_info(queue, fresh=True)
    except QueueDoesNotExist:
        raise QueueDoesNotExist("Queue did not exist.") from None
    rest.client.delete_queue(queue)
    return {"Deleted": True}


@router.patch("/queues/{queue}", tags=["queues"], summary='Change queue attributes; "ok"')
@router.patch("/queues/{queue}/", tags=["queues"], summary="The same (Dynamiq's path)")
def patch_queue(rest: Services, queue: QueueName, settings: QueueSettings) -> Literal["ok"]:
    rest.client.set_attributes(check_queue_name(queue), **rest.checked(settings))
    return "ok"


@router.get("/queues/{queue}/stats", tags=["queues"], summary="Message counts and totals")
def queue_stats(rest: Services, queue: QueueName) -> dict[str, Any]:
    return rest.client.queue(queue).stats().to_dict()


@router.post("/queues/{queue}/purge", tags=["queues"], summary="Remove every message")
def purge(rest: Services, queue: QueueName) -> dict[str, int]:
    return {"purged": rest.client.queue(queue).purge()}


# -- messages (legacy routes) ---------------------------------------------------------


@router.put(
    "/queues/{queue}/message",
    tags=["messages"],
    summary="Send the raw request body as a message; answers its id (a JSON string), or"
    ' "" where there is no such queue',
    openapi_extra=RAW_BODY,
)
async def put_message(
    rest: Services,
    queue: QueueName,
    request: Request,
    delay: Annotated[float | None, Query(ge=0, le=MAX_DELAY)] = None,
    group_id: Annotated[str | None, Query(pattern=GROUP_PATTERN)] = None,
    dedup_id: Annotated[str | None, Query(pattern=GROUP_PATTERN)] = None,
    priority: Annotated[int, Query(ge=MIN_PRIORITY, le=MAX_PRIORITY)] = 0,
) -> str:
    body = await request.body()
    q = rest.aio.queue(check_queue_name(queue))
    try:
        sent = await q.send(
            body, delay=delay, group_id=group_id, dedup_id=dedup_id, priority=priority
        )
    except QueueDoesNotExist:
        return ""  # Dynamiq: "If no ID is returned, no message was enqueued"
    rest.metrics.sent(queue, 1)
    return sent.id


@router.get(
    "/queues/{queue}/messages/{selector}",
    tags=["messages"],
    summary=f"Receive up to `selector` messages, 1-{MAX_RECEIVE_BATCH}, with receipts (204: none)",
    responses={
        204: {"description": "no message to receive"},
        422: {
            "description": "the batch size is not a whole number in range",
            "content": {"application/json": {"schema": {"type": "string"}}},
        },
        **TEXT_404,
    },
    # read by hand (a bad size is Dynamiq's 422 with a string), declared as what it takes
    openapi_extra={
        "parameters": [
            {
                "name": "selector",
                "in": "path",
                "required": True,
                "description": "how many messages, at most",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_RECEIVE_BATCH},
            },
        ]
    },
)
async def get_messages(rest: Services, queue: QueueName, request: Request) -> Any:
    size = str(request.path_params["selector"])
    if not size.isascii() or not size.isdigit() or not 1 <= int(size) <= MAX_RECEIVE_BATCH:
        return JSONResponse(
            f"the batch size must be a whole number from 1 to {MAX_RECEIVE_BATCH},"
            f" got {size[:40]!r}",
            status_code=422,
        )
    batch_size = int(size)
    q = rest.aio.queue(check_queue_name(queue))
    try:
        out = await q.receive(batch_size, wait=0)
    except QueueDoesNotExist:
        return no_queue(queue)
    rest.metrics.received(queue, len(out), batch_size)
    if not out:
        return Response(status_code=204)
    return [{"id": m.id, **body_json(m.body), "receipt": m.receipt} for m in out]


@router.delete("/queues/{queue}/message/{message_id}", tags=["messages"], summary="Delete by id")
def delete_by_id(rest: Services, queue: QueueName, message_id: str) -> bool:
    try:
        rest.client.queue(queue).remove(message_id)
    except (MessageNotFound, QueueDoesNotExist):  # Dynamiq: no error for a wrong id
        return False
    rest.metrics.deleted(queue, 1)
    return True


@router.delete(
    "/queues/{queue}/messages/{selector}",
    tags=["messages"],
    summary="Delete several messages by id (`selector`: ids, comma-separated)",
)
def delete_by_ids(
    rest: Services,
    queue: QueueName,
    selector: Annotated[str, Path(description="message ids, comma-separated")],
) -> dict[str, int]:
    ids = selector
    q = rest.client.queue(queue)
    q.info  # noqa: B018 - a missing queue is a 404, not "0 deleted"
    deleted = 0
    for message_id in filter(None, ids.split(",")):
        try:
            q.remove(message_id)
            deleted += 1
        except MessageNotFound:
            pass
    rest.metrics.deleted(queue, deleted)
    return {"deleted": deleted}


# -- messages (receipts) --------------------------------------------------------------


@router.post("/queues/{queue}/messages", tags=["messages"], summary="Send a message (JSON)")
def send(rest: Services, queue: QueueName, message: SendRequest) -> dict[str, Any]:
    sent = rest.client.queue(queue).send(
        message.body,
        delay=message.delay,
        group_id=message.group_id,
        dedup_id=message.dedup_id,
        priority=message.priority,
        attributes=message.attributes,
        deadline=None if message.deadline is None else rest.client.clock.now() + message.deadline,
    )
    rest.metrics.sent(queue, 1)
    return {"id": sent.id, "duplicate": sent.duplicate, "sequence": sent.sequence}


@router.post("/queues/{queue}/receive", tags=["messages"], summary="Receive with receipts")
async def receive(rest: Services, queue: QueueName, req: ReceiveRequest) -> dict[str, Any]:
    got = await rest.aio.queue(check_queue_name(queue)).receive(
        req.max_messages,
        visibility_timeout=req.visibility_timeout,
        wait=req.wait,
        stop=rest.draining,
    )
    rest.metrics.received(queue, len(got), req.max_messages)
    return {"messages": [message_json(m) for m in got]}


@router.post("/queues/{queue}/delete", tags=["messages"], summary="Delete by receipts")
def delete_receipts(rest: Services, queue: QueueName, req: ReceiptsRequest) -> dict[str, Any]:
    results = rest.client.queue(queue).delete_batch(req.receipts)
    ok = sum(1 for x in results if x.ok)
    rest.metrics.deleted(queue, ok)
    return {
        "deleted": ok,
        "failed": [
            {"index": int(x.entry_id), **error_body(x.error)}
            for x in results
            if isinstance(x.error, ConveyorError)
        ],
    }


@router.post("/queues/{queue}/visibility", tags=["messages"], summary="Change visibility")
def visibility(rest: Services, queue: QueueName, req: VisibilityRequest) -> dict[str, bool]:
    rest.client.queue(queue).change_visibility(req.receipt, req.timeout)
    return {"ok": True}


# -- admin ----------------------------------------------------------------------------


@router.get("/queues/{queue}/peek", tags=["admin"], summary="Messages without receiving them")
def peek(
    rest: Services,
    queue: QueueName,
    limit: Annotated[int, Query(ge=1, le=MAX_PEEK)] = 10,
    state: MessageState | None = None,
    after: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    search: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=1000,
            description="only messages whose id, body text or an attribute's name or"
            " value holds this text (case aside), among the first `scan` looked at",
        ),
    ] = None,
    scan: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> list[dict[str, Any]]:
    q = rest.client.queue(queue)
    now = rest.client.clock.now()
    if search is None:
        return [message_json(m, now=now) for m in q.peek(limit, state=state, after=after)]
    wanted = search.casefold()
    out: list[dict[str, Any]] = []
    looked = 0
    while looked < scan and len(out) < limit:
        page = q.peek(min(1000, scan - looked), state=state, after=after)
        looked += len(page)
        out += [message_json(m, now=now) for m in page if matches(m, wanted)]
        if len(page) < min(1000, scan - looked + len(page)):
            break
        after = page[-1].sequence
    return out[:limit]


@router.get("/queues/{queue}/message/{message_id}", tags=["admin"], summary="One message by id")
def get_message(rest: Services, queue: QueueName, message_id: str) -> dict[str, Any]:
    return message_json(rest.client.queue(queue).get(message_id), now=rest.client.clock.now())


@router.post("/queues/{queue}/message/{message_id}/reset", tags=["admin"], summary="Reset")
def reset(rest: Services, queue: QueueName, message_id: str) -> dict[str, Any]:
    return message_json(rest.client.queue(queue).reset(message_id))


@router.patch("/queues/{queue}/message/{message_id}", tags=["admin"], summary="Edit in place")
def update(rest: Services, queue: QueueName, message_id: str, req: UpdateRequest) -> dict[str, Any]:
    visible_at = None if req.visible_in is None else rest.client.clock.now() + req.visible_in
    return message_json(
        rest.client.queue(queue).update(
            message_id,
            body=req.body,
            attributes=req.attributes,
            priority=req.priority,
            visible_at=visible_at,
        )
    )


@router.post(
    "/queues/{queue}/message/{message_id}/fail",
    tags=["admin"],
    summary="Release for redelivery (after `delay`)",
)
def fail(
    rest: Services, queue: QueueName, message_id: str, req: FailRequest | None = None
) -> dict[str, Any]:
    return message_json(rest.client.queue(queue).fail(message_id, (req or FailRequest()).delay))


@router.post(
    "/queues/{queue}/message/{message_id}/invalid",
    tags=["admin"],
    summary="Move to the dead-letter queue now",
)
def invalid(
    rest: Services, queue: QueueName, message_id: str, req: InvalidRequest | None = None
) -> dict[str, Any]:
    error = (req or InvalidRequest()).error or "marked invalid"
    return message_json(rest.client.queue(queue).move_to_dlq(message_id, error))


@router.post(
    "/queues/{queue}/redrive",
    tags=["admin"],
    summary="Redrive dead letters (of the queue's dead-letter queue, or of the one named)",
    responses={
        202: {
            "model": RedriveTask,
            "description": "with `all` and a `rate`: the"
            " task that moves them (GET /queues/{queue}/redrive/tasks)",
        }
    },
)
async def redrive(rest: Services, queue: QueueName, req: RedriveRequest) -> Any:
    dead = await asyncio.to_thread(rest.dead_letters_of, queue)
    if req.all and not req.ids and req.rate is not None:
        task = await rest.moves.start_redrive(dead, req.to, req.rate)
        return JSONResponse(task.to_json(), status_code=202)
    q = rest.client.queue(dead)
    if req.all and not req.ids:
        return {"moved": await asyncio.to_thread(q.redrive_all, to=req.to)}
    return {"moved": await asyncio.to_thread(q.redrive, req.ids, to=req.to, limit=req.limit)}


@router.get(
    "/queues/{queue}/redrive/tasks",
    tags=["admin"],
    summary="Redrives at a rate: running and recent, the newest first",
)
def redrive_tasks(rest: Services, queue: QueueName) -> dict[str, list[RedriveTask]]:
    tasks = rest.moves.tasks_of(rest.dead_letters_of(queue))
    return {"tasks": [RedriveTask(**t.to_json()) for t in tasks]}


@router.delete(
    "/queues/{queue}/redrive/tasks/{task}",
    tags=["admin"],
    summary="Stop a redrive at a rate (after the batch it is moving)",
)
def cancel_redrive(rest: Services, queue: QueueName, task: str) -> RedriveTask:
    return RedriveTask(**rest.moves.cancel_task(task, rest.dead_letters_of(queue)).to_json())


@router.get("/queues/{queue}/archive", tags=["admin"], summary="Archived messages, oldest first")
def archive(
    rest: Services,
    queue: QueueName,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="skip this many")] = 0,
) -> dict[str, Any]:
    found = rest.client.queue(queue).archive(limit, after)
    return {
        "archived": [
            {
                "id": a.id,
                **body_json(a.body),
                "attributes": {k: str(v) for k, v in a.attributes.items()},
                "group_id": a.group_id,
                "priority": a.priority,
                "sent_at": a.sent_at,
                "removed_at": a.removed_at,
                "receive_count": a.receive_count,
                "outcome": a.outcome,
            }
            for a in found
        ],
        "next_after": after + len(found),
    }


@router.post("/consumers", tags=["admin"], summary="Register (or re-register) a consumer")
def register_consumer(rest: Services, req: ConsumerRequest) -> dict[str, Any]:
    c = rest.client.register_consumer(req.id, queue=req.queue, timeout=req.timeout, info=req.info)
    return c.to_dict()


@router.post("/consumers/{consumer_id}/heartbeat", tags=["admin"], summary="Heartbeat")
def heartbeat(rest: Services, consumer_id: str) -> dict[str, Any]:
    return rest.client.heartbeat(consumer_id).to_dict()


@router.delete("/consumers/{consumer_id}", tags=["admin"], summary="Unregister a consumer")
def unregister_consumer(rest: Services, consumer_id: str) -> dict[str, Any]:
    rest.client.unregister_consumer(consumer_id)
    return {"unregistered": consumer_id}


@router.get("/consumers", tags=["admin"], summary="Live consumers and their last heartbeat")
def consumers(rest: Services, queue: str | None = None) -> dict[str, Any]:
    return {"consumers": [c.to_dict() for c in rest.client.list_consumers(queue)]}


# -- topics ---------------------------------------------------------------------------


@router.get("/topics", tags=["topics"], summary="List topics")
def list_topics(
    rest: Services,
) -> dict[str, list[str]]:
    return {"topics": rest.client.list_topics()}


@router.get("/topics/{topic}", tags=["topics"], summary="Queues subscribed to a topic")
def get_topic(rest: Services, topic: TopicName) -> list[str]:
    return rest.client.topic_queues(topic)


@router.put(
    "/topics/{topic}", tags=["topics"], status_code=201, summary='Create a topic; "created"'
)
def create_topic(rest: Services, topic: TopicName) -> Literal["created"]:
    if not rest.client.create_topic(topic):
        raise TopicExists("Topic already exists.")
    return "created"


@router.delete("/topics/{topic}", tags=["topics"], summary="Delete a topic")
def delete_topic(rest: Services, topic: TopicName) -> dict[str, bool]:
    if topic not in rest.client.list_topics(topic):
        raise TopicDoesNotExist("Topic did not exist.")
    rest.client.delete_topic(topic)
    return {"Deleted": True}


@router.put("/topics/{topic}/queues/{queue}", tags=["topics"], summary="Subscribe a queue")
def subscribe(rest: Services, topic: TopicName, queue: QueueName) -> Any:
    try:
        rest.client.subscribe(topic, queue)
    except TopicDoesNotExist:
        return JSONResponse(
            {"error": "Topic does not exist. Please create it first.", "code": "NotFound"},
            status_code=422,
        )
    except QueueDoesNotExist:
        return JSONResponse(
            {
                "error": "Queue does not exist. Please create it first",
                "code": QueueDoesNotExist.code,
            },
            status_code=422,
        )
    return {"Queues": rest.client.topic_queues(topic)}


@router.delete("/topics/{topic}/queues/{queue}", tags=["topics"], summary="Unsubscribe")
def unsubscribe(rest: Services, topic: TopicName, queue: QueueName) -> dict[str, list[str]]:
    rest.client.unsubscribe(topic, queue)
    return {"Queues": rest.client.topic_queues(topic)}


@router.put(
    "/topics/{topic}/message",
    tags=["topics"],
    summary="Publish the raw body to every subscribed queue; answers {queue: id}",
    openapi_extra=RAW_BODY,
)
async def publish(rest: Services, topic: TopicName, request: Request) -> dict[str, str]:
    body = await request.body()
    sent = await rest.aio.publish(topic, body)
    for queue in sent:
        rest.metrics.sent(queue, 1)
    return {queue: result.id for queue, result in sent.items()}


def json_response(error: ConveyorError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=rest_status(error))


__all__ = ["Rest", "decode_message", "json", "json_response", "rest_status", "router"]
