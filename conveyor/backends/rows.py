"""Row codecs shared by the SQL stores: attributes as JSON text, rows to messages."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from ..models import (
    ArchivedMessage,
    AttributeValue,
    Consumer,
    Message,
    TypedValue,
    message_from,
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


def row_to_message(queue: str, row: tuple[Any, ...], receipt: str | None = None) -> Message:
    return stored_message(queue, row, receipt, row[0], row[6], row[2])


def stored_message(
    queue: str, row: tuple[Any, ...], receipt: str | None, sequence: int, priority: int, body: bytes
) -> Message:
    """A message from a row of the stores' message columns (sequence, id, body, attributes,
    group, dedup id, priority, deadline, sent, visible, receive count, first received,
    version, source queue, error, compressed), with its sequence, priority and body given."""
    return message_from(
        {
            "sequence": sequence,
            "id": row[1],
            "queue": queue,
            "body": body,
            "attributes": decode_attributes(row[3]) if row[3] else {},
            "group_id": row[4],
            "dedup_id": row[5],
            "priority": priority,
            "deadline": row[7],
            "sent_at": row[8],
            "visible_at": row[9],
            "receive_count": row[10],
            "first_received_at": row[11],
            "version": row[12],
            "source_queue": row[13],
            "error": row[14],
            "compressed": bool(row[15]),
            "receipt": receipt,
        }
    )


def row_to_archived(row: tuple[Any, ...]) -> ArchivedMessage:
    return ArchivedMessage(
        queue=row[0],
        id=row[1],
        body=row[2],
        attributes=decode_attributes(row[3]),
        group_id=row[4],
        priority=row[5],
        sent_at=row[6],
        first_received_at=row[7],
        removed_at=row[8],
        receive_count=row[9],
        outcome=row[10],
        compressed=bool(row[11]),
    )


def row_to_consumer(row: tuple[Any, ...]) -> Consumer:
    """A consumer from a row of (id, queue, info as JSON, timeout, registered, heartbeat)."""
    return Consumer(
        id=row[0],
        queue=row[1],
        info=json.loads(row[2]),
        timeout=row[3],
        registered_at=row[4],
        heartbeat_at=row[5],
    )
