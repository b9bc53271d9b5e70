"""The REST API: the routes of the REST queue service Conveyor replaces, plus receipts and admin.

Legacy routes keep their paths, status codes and bodies (``PUT /queues/{q}`` answers 201
``"created"``, ``PUT /queues/{q}/message`` the new id as text, ...). Receipt-based routes
give SQS semantics (receive, delete, change visibility); admin routes inspect and edit
messages in place. Errors are ``{"error": "...", "code": "..."}`` with the status below.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from ..aio import AsyncClient
from ..client import Client
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    MessageNotFound,
    NotFound,
    QueueDoesNotExist,
    QueueExists,
    ReceiptHandleInvalid,
    TopicDoesNotExist,
    TopicExists,
)
from ..models import Message, MessageState, QueueAttributes
from ..queues import decode_message
from ..validation import check_queue_name
from .metrics import Metrics

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
        (413, "the request body is over --max-body"),
        (422, "the queue or topic exists with other attributes"),
        (503, "the store cannot be reached"),
    )
}


def rest_status(error: ConveyorError) -> int:
    """Statuses of the REST API (the predecessor's, where it had one)."""
    if isinstance(error, QueueExists | TopicExists):
        return 422
    if isinstance(error, NotFound | ReceiptHandleInvalid):
        return 404
    return error.status


def error_body(error: ConveyorError) -> dict[str, str]:
    return {"error": error.message, "code": error.code}


def message_json(m: Message, *, with_body: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"id": m.id}
    if with_body:
        out["body"] = m.body.decode("utf-8", errors="replace")
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
            "source_queue": m.source_queue,
            "error": m.error,
        }
    )
    return out


class QueueSettings(BaseModel):
    """Queue attributes: any field of QueueAttributes, plus the predecessor's names."""

    model_config = ConfigDict(extra="allow")
    visibility_timeout: float | None = None
    compressed_messages: StrictBool | None = Field(
        default=None, description="compress bodies that shrink (zlib)"
    )


class ReceiveRequest(BaseModel):
    max_messages: int = Field(default=1, ge=1, le=10)
    visibility_timeout: float | None = Field(default=None, ge=0, le=43200)
    wait: float | None = Field(default=None, ge=0, le=20)


class ReceiptsRequest(BaseModel):
    receipts: list[str] = Field(min_length=1, max_length=10)


class VisibilityRequest(BaseModel):
    receipt: str
    timeout: float = Field(ge=0, le=43200)


class RedriveRequest(BaseModel):
    ids: list[str] | None = None
    to: str | None = Field(default=None, pattern=NAME_PATTERN)
    limit: int = Field(default=100, ge=1, le=10000)


class SendRequest(BaseModel):
    body: str = Field(min_length=1)
    delay: float | None = None
    group_id: str | None = None
    dedup_id: str | None = None
    priority: int = 0
    attributes: dict[str, str] = Field(default_factory=dict)


def _changes(settings: QueueSettings) -> dict[str, Any]:
    data = settings.model_dump(exclude_none=True)
    compressed = data.pop("compressed_messages", None)
    for legacy in ("min_partitions", "max_partitions", "max_partition_age"):
        data.pop(legacy, None)  # the predecessor's partitioning has no meaning here
    if compressed is not None:
        data["compress_over"] = 0 if compressed else None
    try:
        QueueAttributes().replace(**data)
    except TypeError as exc:
        raise InvalidInput(f"unknown queue attribute: {exc}") from None
    return data


def build_router(client: Client, aio: AsyncClient, metrics: Metrics, draining: Any) -> APIRouter:
    r = APIRouter(responses=ERRORS)

    def queue_doc(name: str) -> dict[str, Any]:
        info = client.queue_info(check_queue_name(name), fresh=True)
        a = info.attributes
        return {
            "name": name,
            "attributes": a.to_dict(),
            "stats": client.queue(name).stats().to_dict(),
            "VisibilityTimeout": a.visibility_timeout,
            "CompressedMessages": a.compress_over is not None,
        }

    # -- queues ---------------------------------------------------------------------------

    @r.get("/queues", tags=["queues"], summary="List queues")
    def list_queues(prefix: str = "") -> dict[str, list[str]]:
        return {"queues": client.list_queues(prefix)}

    @r.get("/queues/{queue}", tags=["queues"], summary="Queue attributes and counts")
    def get_queue(queue: QueueName) -> dict[str, Any]:
        return queue_doc(queue)

    @r.put("/queues/{queue}", tags=["queues"], status_code=201, summary="Create a queue")
    def create_queue(
        queue: QueueName, settings: Annotated[QueueSettings | None, Body()] = None
    ) -> str:
        if queue in client.list_queues(queue):
            raise QueueExists("Queue already exists.")
        client.create_queue(queue, **_changes(settings or QueueSettings()))
        return "created"

    @r.delete("/queues/{queue}", tags=["queues"], summary="Delete a queue")
    def delete_queue(queue: QueueName) -> dict[str, bool]:
        try:
            client.queue_info(queue, fresh=True)
        except QueueDoesNotExist:
            raise QueueDoesNotExist("Queue did not exist.") from None
        client.delete_queue(queue)
        return {"Deleted": True}

    @r.patch("/queues/{queue}", tags=["queues"], summary="Change queue attributes")
    def patch_queue(queue: QueueName, settings: QueueSettings) -> dict[str, Any]:
        attrs = client.set_attributes(check_queue_name(queue), **_changes(settings))
        return attrs.to_dict()

    @r.get("/queues/{queue}/stats", tags=["queues"], summary="Message counts and totals")
    def queue_stats(queue: QueueName) -> dict[str, Any]:
        return client.queue(queue).stats().to_dict()

    @r.post("/queues/{queue}/purge", tags=["queues"], summary="Remove every message")
    def purge(queue: QueueName) -> dict[str, int]:
        return {"purged": client.queue(queue).purge()}

    # -- messages (legacy routes) ---------------------------------------------------------

    @r.put(
        "/queues/{queue}/message",
        tags=["messages"],
        summary="Send the raw request body as a message; answers its id as text",
        response_class=PlainTextResponse,
    )
    async def put_message(
        queue: QueueName,
        request: Request,
        delay: Annotated[float | None, Query()] = None,
        group_id: Annotated[str | None, Query()] = None,
        dedup_id: Annotated[str | None, Query()] = None,
        priority: Annotated[int, Query()] = 0,
    ) -> str:
        body = await request.body()
        q = aio.queue(check_queue_name(queue))
        sent = await q.send(
            body, delay=delay, group_id=group_id, dedup_id=dedup_id, priority=priority
        )
        metrics.sent(queue, 1)
        return sent.id

    @r.get(
        "/queues/{queue}/messages/{selector}",
        tags=["messages"],
        summary="Receive up to `selector` messages, 1-100 (with receipts)",
    )
    async def get_messages(
        queue: QueueName,
        selector: Annotated[int, Path(ge=1, le=100, description="how many messages, at most")],
    ) -> list[dict[str, Any]]:
        batch_size = selector
        q = aio.queue(check_queue_name(queue))
        out: list[Message] = []
        while len(out) < batch_size:
            got = await q.receive(min(10, batch_size - len(out)), wait=0)
            out += got
            if not got:
                break
        metrics.received(queue, len(out), batch_size)
        return [{"id": m.id, "body": m.text, "receipt": m.receipt} for m in out]

    @r.delete("/queues/{queue}/message/{message_id}", tags=["messages"], summary="Delete by id")
    def delete_by_id(queue: QueueName, message_id: str) -> bool:
        try:
            client.queue(queue).remove(message_id)
        except MessageNotFound:
            return False
        metrics.deleted(queue, 1)
        return True

    @r.delete(
        "/queues/{queue}/messages/{selector}",
        tags=["messages"],
        summary="Delete several messages by id (`selector`: ids, comma-separated)",
    )
    def delete_by_ids(
        queue: QueueName,
        selector: Annotated[str, Path(description="message ids, comma-separated")],
    ) -> dict[str, int]:
        ids = selector
        q = client.queue(queue)
        q.info  # noqa: B018 - a missing queue is a 404, not "0 deleted"
        deleted = 0
        for message_id in filter(None, ids.split(",")):
            try:
                q.remove(message_id)
                deleted += 1
            except MessageNotFound:
                pass
        metrics.deleted(queue, deleted)
        return {"deleted": deleted}

    # -- messages (receipts) --------------------------------------------------------------

    @r.post("/queues/{queue}/messages", tags=["messages"], summary="Send a message (JSON)")
    def send(queue: QueueName, message: SendRequest) -> dict[str, Any]:
        sent = client.queue(queue).send(
            message.body,
            delay=message.delay,
            group_id=message.group_id,
            dedup_id=message.dedup_id,
            priority=message.priority,
            attributes=message.attributes,
        )
        metrics.sent(queue, 1)
        return {"id": sent.id, "duplicate": sent.duplicate, "sequence": sent.sequence}

    @r.post("/queues/{queue}/receive", tags=["messages"], summary="Receive with receipts")
    async def receive(queue: QueueName, req: ReceiveRequest) -> dict[str, Any]:
        got = await aio.queue(check_queue_name(queue)).receive(
            req.max_messages,
            visibility_timeout=req.visibility_timeout,
            wait=req.wait,
            stop=draining,
        )
        metrics.received(queue, len(got), req.max_messages)
        return {"messages": [message_json(m) for m in got]}

    @r.post("/queues/{queue}/delete", tags=["messages"], summary="Delete by receipts")
    def delete_receipts(queue: QueueName, req: ReceiptsRequest) -> dict[str, Any]:
        results = client.queue(queue).delete_batch(req.receipts)
        ok = sum(1 for x in results if x.ok)
        metrics.deleted(queue, ok)
        return {
            "deleted": ok,
            "failed": [
                {"index": int(x.entry_id), **error_body(x.error)}
                for x in results
                if isinstance(x.error, ConveyorError)
            ],
        }

    @r.post("/queues/{queue}/visibility", tags=["messages"], summary="Change visibility")
    def visibility(queue: QueueName, req: VisibilityRequest) -> dict[str, bool]:
        client.queue(queue).change_visibility(req.receipt, req.timeout)
        return {"ok": True}

    # -- admin ----------------------------------------------------------------------------

    @r.get("/queues/{queue}/peek", tags=["admin"], summary="Messages without receiving them")
    def peek(
        queue: QueueName,
        limit: Annotated[int, Query(ge=1, le=10000)] = 10,
        state: MessageState | None = None,
        after: int = 0,
    ) -> list[dict[str, Any]]:
        return [message_json(m) for m in client.queue(queue).peek(limit, state=state, after=after)]

    @r.get("/queues/{queue}/message/{message_id}", tags=["admin"], summary="One message by id")
    def get_message(queue: QueueName, message_id: str) -> dict[str, Any]:
        return message_json(client.queue(queue).get(message_id))

    @r.post("/queues/{queue}/message/{message_id}/reset", tags=["admin"], summary="Reset")
    def reset(queue: QueueName, message_id: str) -> dict[str, Any]:
        return message_json(client.queue(queue).reset(message_id))

    @r.post("/queues/{queue}/redrive", tags=["admin"], summary="Redrive dead letters")
    def redrive(queue: QueueName, req: RedriveRequest) -> dict[str, Any]:
        moved = client.queue(queue).redrive(req.ids, to=req.to, limit=req.limit)
        return {"moved": moved}

    # -- topics ---------------------------------------------------------------------------

    @r.get("/topics", tags=["topics"], summary="List topics")
    def list_topics() -> dict[str, list[str]]:
        return {"topics": client.list_topics()}

    @r.get("/topics/{topic}", tags=["topics"], summary="Queues subscribed to a topic")
    def get_topic(topic: TopicName) -> dict[str, list[str]]:
        return {"Queues": client.topic_queues(topic)}

    @r.put("/topics/{topic}", tags=["topics"], status_code=201, summary="Create a topic")
    def create_topic(topic: TopicName) -> dict[str, list[str]]:
        if not client.create_topic(topic):
            raise TopicExists("Topic already exists.")
        return {"Queues": []}

    @r.delete("/topics/{topic}", tags=["topics"], summary="Delete a topic")
    def delete_topic(topic: TopicName) -> dict[str, bool]:
        if topic not in client.list_topics(topic):
            raise TopicDoesNotExist("Topic did not exist.")
        client.delete_topic(topic)
        return {"Deleted": True}

    @r.put("/topics/{topic}/queues/{queue}", tags=["topics"], summary="Subscribe a queue")
    def subscribe(topic: TopicName, queue: QueueName) -> Any:
        try:
            client.subscribe(topic, queue)
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
        return {"Queues": client.topic_queues(topic)}

    @r.delete("/topics/{topic}/queues/{queue}", tags=["topics"], summary="Unsubscribe")
    def unsubscribe(topic: TopicName, queue: QueueName) -> dict[str, list[str]]:
        client.unsubscribe(topic, queue)
        return {"Queues": client.topic_queues(topic)}

    @r.put(
        "/topics/{topic}/message",
        tags=["topics"],
        summary="Publish the raw body to every subscribed queue; answers {queue: id}",
    )
    async def publish(topic: TopicName, request: Request) -> dict[str, str]:
        body = await request.body()
        sent = await aio.publish(topic, body)
        for queue in sent:
            metrics.sent(queue, 1)
        return {queue: result.id for queue, result in sent.items()}

    return r


def json_response(error: ConveyorError) -> JSONResponse:
    return JSONResponse(error_body(error), status_code=rest_status(error))


__all__ = ["build_router", "decode_message", "json", "json_response", "rest_status"]
