"""The REST API: the routes of the REST queue service Conveyor replaces, plus receipts and admin.

Legacy routes keep their paths, status codes and bodies (``PUT /queues/{q}`` answers 201
``"created"``, ``PUT /queues/{q}/message`` the new id as text, ...). Receipt-based routes
give SQS semantics (receive, delete, change visibility); admin routes inspect and edit
messages in place. Errors are ``{"error": "...", "code": "..."}`` with the status
`bodies.rest_status` gives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from ...aio import AsyncClient
from ...client import Client
from ...exceptions import (
    ConveyorError,
    MessageNotFound,
    QueueDoesNotExist,
    QueueExists,
    TopicDoesNotExist,
    TopicExists,
)
from ...models import MessageState
from ...validation import (
    MAX_DELAY,
    MAX_OFFSET,
    MAX_PEEK,
    MAX_PRIORITY,
    MIN_PRIORITY,
    check_queue_name,
)
from ..front.conns import client_gone
from ..metrics import Metrics
from ..sqs.move import MoveTasks
from .bodies import (
    ERRORS,
    GROUP_PATTERN,
    MAX_RECEIVE_BATCH,
    RAW_BODY,
    TEXT_404,
    ConsumerRequest,
    FailRequest,
    InvalidRequest,
    QueueName,
    QueueSettings,
    ReceiptsRequest,
    ReceiveRequest,
    RedriveRequest,
    RedriveTask,
    SendRequest,
    TopicName,
    UpdateRequest,
    VisibilityRequest,
    body_json,
    error_body,
    matches,
    message_json,
    no_queue,
    queue_changes,
)


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
        changes = queue_changes(settings)
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
async def receive(
    rest: Services, request: Request, queue: QueueName, req: ReceiveRequest
) -> dict[str, Any]:
    gone = client_gone(request.scope)
    got = await rest.aio.queue(check_queue_name(queue)).receive(
        req.max_messages,
        visibility_timeout=req.visibility_timeout,
        wait=req.wait,
        # a long poll whose client went away claims nothing after its wait
        stop=lambda: rest.draining() or gone(),
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
    clock = rest.client.clock
    if search is None:
        found = q.peek(limit, state=state, after=after)
        now = clock.now()  # once read: a message sent meanwhile is not told as delayed
        return [message_json(m, now=now) for m in found]
    wanted = search.casefold()
    out: list[dict[str, Any]] = []
    looked = 0
    while looked < scan and len(out) < limit:
        page = q.peek(min(1000, scan - looked), state=state, after=after)
        now = clock.now()
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


__all__ = ["Rest", "router"]
