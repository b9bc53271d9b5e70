"""What the REST API reads and writes: path names, request bodies and their checks, error
bodies and the JSON of messages (the routes are in routes.py)."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from fastapi import Path
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from ...exceptions import (
    ConveyorError,
    NotFound,
    QueueExists,
    ReceiptHandleInvalid,
    TopicExists,
)
from ...models import DeadLetterPolicy, Message
from ...validation import (
    ATTRIBUTE_NAME_RE,
    GROUP_ID_RE,
    MAX_DELAY,
    MAX_FAIL_DELAY,
    MAX_MESSAGE_BYTES,
    MAX_PRIORITY,
    MAX_RATE,
    MAX_RETENTION,
    MAX_VISIBILITY,
    MAX_WAIT,
    MIN_PRIORITY,
    MIN_RATE,
    SDK_BATCH,
)

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


def queue_changes(settings: QueueSettings) -> dict[str, Any]:
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


def json_response(error: ConveyorError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=rest_status(error))
