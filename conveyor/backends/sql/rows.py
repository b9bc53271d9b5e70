"""Rows of the SQL stores, named: what a message row holds, what an insert writes, and the
codecs between rows and Conveyor's values (attributes are JSON text)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ...models import (
    ArchivedMessage,
    AttributeValue,
    Consumer,
    Message,
    NewMessage,
    TypedValue,
    message_from,
)
from ..rules import ClaimTerms

Row = tuple[Any, ...]
"""A row as the driver returns it; its columns are named by the statement that read it."""


class MessageRow(NamedTuple):
    """What a message row holds, in the order a dialect's `columns` select it (`key` is the
    row's key in its table). Hot paths unpack rows in this order instead of building one."""

    key: int
    id: str
    body: bytes
    attributes: str | None
    group_id: str | None
    dedup_id: str | None
    priority: int
    deadline: float | None
    sent_at: float
    visible_at: float
    receive_count: int
    first_received_at: float | None
    version: int
    source_queue: str | None
    error: str | None
    compressed: int


ARCHIVE_COLUMNS = (
    "queue_name, id, body, attributes, group_id, priority, sent_at, first_received_at,"
    " removed_at, receive_count, outcome, compressed"
)
CONSUMER_COLUMNS = "id, queue_name, info, timeout, registered_at, heartbeat_at"


class Fields(NamedTuple):
    """A message row to insert: what a send writes, and what a move carries along."""

    id: str
    body: bytes
    attributes: str | None
    group_id: str | None
    dedup_id: str | None
    priority: int
    deadline: float | None
    sent_at: float
    visible_at: float
    compressed: int
    receive_count: int = 0
    first_received_at: float | None = None
    version: int = 1
    source_queue: str | None = None
    error: str | None = None

    @property
    def as_sent(self) -> bool:
        """Whether its receive state is a new message's (an insert writes only what a send
        writes)."""
        return (
            self.receive_count == 0
            and self.first_received_at is None
            and self.version == 1
            and self.source_queue is None
            and self.error is None
        )


def new_fields(
    m: NewMessage, message_id: str, dedup: str | None, now: float, fifo: bool, hidden: float | None
) -> Fields:
    """The row a send writes for `m` (visible after its delay, or at `hidden` if given)."""
    return Fields(
        message_id,
        m.body,
        encode_attributes(m.attributes),
        m.group_id,
        dedup,
        0 if fifo else m.priority,
        m.deadline,
        now,
        now + m.delay if hidden is None else hidden,
        int(m.compressed),
    )


def encode_attributes(attributes: Mapping[str, AttributeValue]) -> str | None:
    if not attributes:
        return None
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, bytes):
            out[key] = {"b": base64.b64encode(value).decode()}
        elif isinstance(value, TypedValue):
            v = value.value
            out[key] = (
                {"t": value.data_type, "v": v}
                if isinstance(v, str)
                else {"t": value.data_type, "b": base64.b64encode(v).decode()}
            )
        else:
            out[key] = value
    return json.dumps(out, separators=(",", ":"))


def decode_attributes(text: str | None) -> dict[str, AttributeValue]:
    if not text:
        return {}
    out: dict[str, AttributeValue] = {}
    for key, value in json.loads(text).items():
        if not isinstance(value, dict):
            out[key] = value
        elif "t" not in value:
            out[key] = base64.b64decode(value["b"])
        else:
            v = value["v"] if "v" in value else base64.b64decode(value["b"])
            out[key] = TypedValue(value["t"], v)
    return out


def row_message(
    queue: str, row: Row, sequence: Callable[[int, int], int], receipt_prefix: str | None = None
) -> Message:
    """A message from a row of MessageRow's columns; `sequence` gives its place in delivery order
    from its key and priority. With `receipt_prefix` (a receive's), it carries a receipt."""
    (
        key,
        message_id,
        body,
        attributes,
        group_id,
        dedup_id,
        priority,
        deadline,
        sent_at,
        visible_at,
        receive_count,
        first_received_at,
        version,
        source_queue,
        error,
        compressed,
    ) = row
    return message_from(
        {
            "sequence": sequence(key, priority),
            "id": message_id,
            "queue": queue,
            "body": body if type(body) is bytes else bytes(body),
            "attributes": decode_attributes(attributes) if attributes else {},
            "group_id": group_id,
            "dedup_id": dedup_id,
            "priority": priority,
            "deadline": deadline,
            "sent_at": sent_at,
            "visible_at": visible_at,
            "receive_count": receive_count,
            "first_received_at": first_received_at,
            "version": version,
            "source_queue": source_queue,
            "error": error,
            "compressed": bool(compressed),
            "receipt": None if receipt_prefix is None else f"{receipt_prefix}{key:x}.{message_id}",
        }
    )


def claimed(row: Row, terms: ClaimTerms) -> Row:
    """A message row read before a claim, as the claim left it."""
    r = MessageRow._make(row)
    return r._replace(
        visible_at=terms.visible_at,
        receive_count=r.receive_count + 1,
        first_received_at=terms.now if r.first_received_at is None else r.first_received_at,
        version=r.version + 1,
    )


def row_fields(row: Row) -> Fields:
    """What a move writes again of a message row (everything but its key)."""
    r = MessageRow._make(row)
    return Fields(
        r.id,
        r.body if type(r.body) is bytes else bytes(r.body),
        r.attributes,
        r.group_id,
        r.dedup_id,
        r.priority,
        r.deadline,
        r.sent_at,
        r.visible_at,
        r.compressed,
        r.receive_count,
        r.first_received_at,
        r.version,
        r.source_queue,
        r.error,
    )


def row_archived(row: Row) -> ArchivedMessage:
    """An archived message from a row of ARCHIVE_COLUMNS."""
    (
        queue,
        message_id,
        body,
        attributes,
        group_id,
        priority,
        sent_at,
        first_received_at,
        removed_at,
        receive_count,
        outcome,
        compressed,
    ) = row
    return ArchivedMessage(
        queue=queue,
        id=message_id,
        body=body if type(body) is bytes else bytes(body),
        attributes=decode_attributes(attributes),
        group_id=group_id,
        priority=priority,
        sent_at=sent_at,
        first_received_at=first_received_at,
        removed_at=removed_at,
        receive_count=receive_count,
        outcome=outcome,
        compressed=bool(compressed),
    )


def row_consumer(row: Row) -> Consumer:
    """A consumer from a row of CONSUMER_COLUMNS."""
    consumer_id, queue, info, timeout, registered_at, heartbeat_at = row
    return Consumer(
        id=consumer_id,
        queue=queue,
        info=json.loads(info),
        timeout=timeout,
        registered_at=registered_at,
        heartbeat_at=heartbeat_at,
    )
