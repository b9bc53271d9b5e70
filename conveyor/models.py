"""Values passed between the client, the stores and the ways in: frozen, keyword-only."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .exceptions import InvalidAttribute


@dataclass(frozen=True, slots=True)
class TypedValue:
    """An attribute value that keeps its SQS data type and text verbatim.

    Plain `str`, `bytes` and numbers map to SQS's String, Binary and Number; a TypedValue
    carries what they cannot: a Number's exact text ("1.50") and custom types
    ("String.uuid", "Binary.gzip").
    """

    data_type: str
    value: str | bytes

    def __str__(self) -> str:
        return self.value if isinstance(self.value, str) else self.value.hex()


AttributeValue = str | int | float | bytes | TypedValue
"""A message attribute: a string, a number, bytes, or a value with an SQS data type."""

Attributes = Mapping[str, AttributeValue]

FAR_FUTURE = 253402300799.0  # 9999-12-31: "never visible again" for at-most-once receives


class Delivery(StrEnum):
    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"


DELIVERIES = frozenset(d.value for d in Delivery)


class MessageState(StrEnum):
    READY = "ready"
    DELAYED = "delayed"
    IN_FLIGHT = "in_flight"


class Capability(StrEnum):
    """What a store can do beyond the core message operations."""

    EDIT_IN_PLACE = "edit_in_place"  # peek/get/update/remove/reset/fail/move_to_dlq/redrive
    TOPICS = "topics"
    CONSUMERS = "consumers"
    PRIORITY = "priority"
    FIFO = "fifo"  # FIFO queues: message groups in order, 5-minute de-duplication
    ARCHIVE = "archive"
    AT_MOST_ONCE = "at_most_once"
    RATE_LIMIT = "rate_limit"
    CROSS_PROCESS = "cross_process"  # several processes may share the store
    SENDER_IDS = "sender_ids"  # senders may choose message ids
    DUPLICATE_REPORT = "duplicate_report"  # a de-duplicated send says so (SendResult.duplicate)
    TOTALS = "totals"  # stats count sent/received/deleted/expired/dead and the oldest age
    BINARY_BODIES = "binary_bodies"  # bodies may be any bytes, not only UTF-8 text
    COMPRESSION = "compression"  # compress_over
    PIPELINE = "pipeline"  # snapshots, leases and staged writes for parallel jobs (Spark)
    # an earlier receipt is refused once the message was received again (SQS accepts it)
    STRICT_RECEIPTS = "strict_receipts"
    # give_back undoes a receive: the message's receive count and first receive as before
    GIVE_BACK = "give_back"


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetterPolicy:
    queue: str
    max_receive_count: int

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "max_receive_count": self.max_receive_count}

    def receives_before_move(self, dead_letter_queue: str) -> int:
        """How many receives a message this policy moved to `dead_letter_queue` had in its
        source queue (SQS counts receives across queues; the SDK counts afresh there): the
        policy's max receive count, or 0 when the policy does not name that queue (any
        more)."""
        return self.max_receive_count if self.queue == dead_letter_queue else 0


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueAttributes:
    """A queue's settings. Defaults and ranges follow SQS; `validate_attributes` checks them."""

    visibility_timeout: float = 30.0
    delay: float = 0.0
    retention: float = 4 * 86400.0
    max_message_bytes: int = 1048576  # SQS's default and maximum since 2025: 1 MiB
    receive_wait: float = 0.0
    dead_letter: DeadLetterPolicy | None = None
    fifo: bool = False
    content_based_dedup: bool = False
    dedup_per_group: bool = False
    """De-duplicate within each message group, not across the queue (SQS's
    DeduplicationScope=messageGroup): the same dedup id in two groups sends two messages."""
    delivery: Delivery = Delivery.AT_LEAST_ONCE
    archive: bool = False
    rate_limit: float | None = None
    compress_over: int | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, str] = field(default_factory=dict)
    """Settings kept verbatim for other APIs (SQS's Policy, RedriveAllowPolicy, ...)."""

    def __post_init__(self) -> None:
        given: object = self.delivery  # stores and APIs may hand over its text
        if isinstance(given, Delivery):
            return
        # given as its text ("at-most-once"): every store compares members, not strings
        if not (isinstance(given, str) and given in DELIVERIES):
            raise InvalidAttribute(
                f"delivery must be 'at-least-once' or 'at-most-once', got {given!r}"
            )
        object.__setattr__(self, "delivery", Delivery(given))

    def replace(self, **changes: Any) -> QueueAttributes:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, DeadLetterPolicy):
                value = value.to_dict()
            elif isinstance(value, Delivery):
                value = value.value
            elif f.name in ("tags", "settings"):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueAttributes:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        dl = kwargs.get("dead_letter")
        if isinstance(dl, Mapping):
            kwargs["dead_letter"] = DeadLetterPolicy(
                queue=str(dl["queue"]), max_receive_count=int(dl["max_receive_count"])
            )
        if "delivery" in kwargs:
            kwargs["delivery"] = Delivery(kwargs["delivery"])
        return cls(**kwargs)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> QueueAttributes:
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueInfo:
    name: str
    attributes: QueueAttributes
    created_at: float
    updated_at: float


@dataclass(frozen=True, kw_only=True)
class NewMessage:
    """A message as the client hands it to a store: validated, body encoded. With
    `generated_id` the store assigns the id (returned in `SendResult.id`)."""

    id: str
    body: bytes
    attributes: Attributes = field(default_factory=dict)
    group_id: str | None = None
    dedup_id: str | None = None
    priority: int = 0
    deadline: float | None = None
    delay: float = 0.0
    compressed: bool = False
    generated_id: bool = False  # no id was given: the store makes one up (never a duplicate)


@dataclass(frozen=True, kw_only=True)
class Message:
    """A stored message. `receipt` is set on messages returned by a receive.

    Frozen like every value here, but without __slots__: stores build one per delivered
    message with `message_from`, which fills the instance dict directly (a tenth of the
    cost of the generated __init__ with its 18 frozen-field assignments).
    """

    id: str
    queue: str
    body: bytes
    attributes: Attributes = field(default_factory=dict)
    group_id: str | None = None
    dedup_id: str | None = None
    priority: int = 0
    deadline: float | None = None
    sent_at: float = 0.0
    visible_at: float = 0.0
    receive_count: int = 0
    first_received_at: float | None = None
    version: int = 1
    sequence: int = 0
    source_queue: str | None = None
    error: str | None = None
    compressed: bool = False
    receipt: str | None = None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)

    def state(self, now: float) -> MessageState:
        if self.visible_at <= now:
            return MessageState.READY
        return MessageState.IN_FLIGHT if self.receive_count > 0 else MessageState.DELAYED

    def replace(self, **changes: Any) -> Message:
        return dataclasses.replace(self, **changes)


MESSAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Message))


def message_from(values: dict[str, Any]) -> Message:
    """A Message from a complete dict of its fields, without the dataclass __init__ (the
    message takes the dict: pass a fresh one)."""
    m = object.__new__(Message)
    object.__setattr__(m, "__dict__", values)
    return m


def new_message(values: dict[str, Any]) -> NewMessage:
    """A NewMessage from a complete dict of its fields, without the dataclass __init__ (the
    message takes the dict: pass a fresh one)."""
    m = object.__new__(NewMessage)
    object.__setattr__(m, "__dict__", values)
    return m


def bare_message(
    body: bytes, delay: float, message_id: str | None = None, compressed: bool = False
) -> NewMessage:
    """A NewMessage of a body alone (no attributes, group, de-duplication id, priority or
    deadline), first visible after `delay`; its id made by the store where `message_id` is
    None."""
    return new_message(
        {
            "id": message_id or "",
            "body": body,
            "attributes": {},
            "group_id": None,
            "dedup_id": None,
            "priority": 0,
            "deadline": None,
            "delay": delay,
            "compressed": compressed,
            "generated_id": message_id is None,
        }
    )


@dataclass(frozen=True, kw_only=True)
class SendResult:
    """What a send did with one message. Built per message by `sent_result` (no __slots__, like
    Message)."""

    id: str
    duplicate: bool = False
    sequence: int | None = None


@dataclass(frozen=True, kw_only=True)
class BatchResult:
    """One entry of a batch call: `error` is None on success. Built per entry by
    `batch_result` (no __slots__, like Message)."""

    entry_id: str
    result: Any = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


_new = object.__new__


def sent_result(id: str) -> SendResult:
    """`SendResult(id=id)` at a third of the cost of the frozen dataclass __init__ (the
    fields written straight into the instance's dict)."""
    r = _new(SendResult)
    d = r.__dict__
    d["id"] = id
    d["duplicate"] = False
    d["sequence"] = None
    return r


def batch_result(entry_id: str, result: Any = None, error: Exception | None = None) -> BatchResult:
    """`BatchResult(...)` at a third of the cost of the frozen dataclass __init__."""
    r = _new(BatchResult)
    d = r.__dict__
    d["entry_id"] = entry_id
    d["result"] = result
    d["error"] = error
    return r


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageUpdate:
    """An in-place edit; fields left None are kept."""

    body: bytes | None = None
    attributes: Attributes | None = None
    priority: int | None = None
    visible_at: float | None = None
    compressed: bool | None = None


COUNT_SHARE = 0.05
"""The share of the time that counting a queue for its stats may take: a reader sharing
counts (the server's), a store estimating deep queues between counts (the SQL stores')."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueStats:
    queue: str
    ready: int = 0
    delayed: int = 0
    in_flight: int = 0
    dead: int = 0
    expired: int = 0
    oldest_age: float | None = None
    sent: int = 0
    received: int = 0
    deleted: int = 0

    @property
    def total(self) -> int:
        return self.ready + self.delayed + self.in_flight

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Consumer:
    id: str
    queue: str | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 30.0
    registered_at: float = 0.0
    heartbeat_at: float = 0.0

    def alive(self, now: float) -> bool:
        return now - self.heartbeat_at <= self.timeout

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": self.queue,
            "info": dict(self.info),
            "timeout": self.timeout,
            "registered_at": self.registered_at,
            "heartbeat_at": self.heartbeat_at,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ArchivedMessage:
    """A deleted (or expired) message kept for analytics on queues with `archive`."""

    id: str
    queue: str
    body: bytes
    attributes: Attributes
    group_id: str | None
    priority: int
    sent_at: float
    first_received_at: float | None
    removed_at: float
    receive_count: int
    outcome: str  # deleted | expired | moved
    compressed: bool = False
