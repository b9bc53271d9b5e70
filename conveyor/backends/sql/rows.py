"""Rows of the SQL stores, named: what a message row holds, what an insert writes, and the
codecs between rows and Conveyor's values (attributes are JSON text)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from ...models import ArchivedMessage, Consumer, Message, NewMessage, message_from
from ...receipts import receipt_tail
from ..codec import decode_attributes, encode_attributes
from ..rules import ClaimTerms, claimed_until

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
            "receipt": None
            if receipt_prefix is None
            else receipt_prefix + receipt_tail(key, message_id),
        }
    )


def claimed(row: Row, terms: ClaimTerms) -> Row:
    """A message row read before a claim, as the claim left it (unpacked, not built as a
    MessageRow: receives of ten rows do this ten times)."""
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
        _,
        receive_count,
        first_received_at,
        version,
        source_queue,
        error,
        compressed,
    ) = row
    return (
        key,
        message_id,
        body,
        attributes,
        group_id,
        dedup_id,
        priority,
        deadline,
        sent_at,
        claimed_until(terms, deadline),
        receive_count + 1,
        terms.now if first_received_at is None else first_received_at,
        version + 1,
        source_queue,
        error,
        compressed,
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
