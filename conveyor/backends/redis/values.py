"""What the Redis store keeps and how it reads it back: queue registry entries, numbers as
the scripts take them, and messages and archived messages as the scripts return them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from ...exceptions import InvalidInput
from ...models import ArchivedMessage, Message, QueueAttributes, QueueInfo, message_from
from ..codec import decode_attributes

BAND = 1 << 37  # the delivery-order score of the Lua scripts: (32767 - priority) * BAND + seq
ARCHIVE_FIELDS = ("i", "b", "a", "g", "p", "s", "f", "x", "n", "y", "z")


def num(value: float) -> str:
    """A number as the scripts take it: the shortest text that reads back as the same float."""
    return repr(float(value))


def check_prefix(prefix: str) -> str:
    if not prefix or not all(c.isalnum() or c in "_-." for c in prefix) or len(prefix) > 64:
        raise InvalidInput(
            f"key prefix {prefix!r} is not valid: use 1-64 letters, digits, '-', '_' or '.'"
            " (for example prefix=conveyor)"
        )
    return prefix


class QueueEntry(NamedTuple):
    """A queue's registry entry: its hash tag (the slot its keys live in), its id (keys of a
    queue deleted and made again never meet) and its attributes."""

    name: str
    tag: str
    qid: str
    attrs: QueueAttributes
    created_at: float
    updated_at: float
    prefix: str  # the queue's keys start with this

    @property
    def meta(self) -> str:
        """The key a script of this queue is routed by."""
        return f"{self.prefix}meta"

    def info(self) -> QueueInfo:
        return QueueInfo(
            name=self.name,
            attributes=self.attrs,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def encode(self) -> str:
        return json.dumps(
            {
                "tag": self.tag,
                "id": self.qid,
                "attrs": self.attrs.to_dict(),
                "created_at": self.created_at,
                "updated_at": self.updated_at,
            },
            sort_keys=True,
        )


def queue_prefix(store_prefix: str, name: str, tag: str, qid: str) -> str:
    return f"{store_prefix}:{{{tag}}}:{name}:{qid}:"


def decode_entry(store_prefix: str, name: str, text: bytes | str) -> QueueEntry:
    data = json.loads(text)
    return QueueEntry(
        name=name,
        tag=data["tag"],
        qid=data["id"],
        attrs=QueueAttributes.from_dict(data["attrs"]),
        created_at=float(data["created_at"]),
        updated_at=float(data["updated_at"]),
        prefix=queue_prefix(store_prefix, name, data["tag"], data["id"]),
    )


def message(queue: str, values: Sequence[Any], prefix: str | None = None) -> Message:
    """A message from a script's answer (`fetch` in common.lua); with a receive's
    `prefix`, with its receipt."""
    (
        message_id,
        body,
        attributes,
        group,
        dedup,
        priority,
        deadline,
        sent,
        visible,
        count,
        first,
        version,
        source,
        error,
        compressed,
        seq,
        _placeholder,
    ) = values
    mid = message_id.decode()
    return message_from(
        {
            "sequence": (32767 - int(priority)) * BAND + int(seq),
            "id": mid,
            "queue": queue,
            "body": body,
            "attributes": decode_attributes(attributes.decode()) if attributes else {},
            "group_id": group.decode() if group is not None else None,
            "dedup_id": dedup.decode() if dedup is not None else None,
            "priority": int(priority),
            "deadline": float(deadline) if deadline is not None else None,
            "sent_at": float(sent),
            "visible_at": float(visible),
            "receive_count": int(count or 0),
            "first_received_at": float(first) if first is not None else None,
            "version": int(version or 1),
            "source_queue": source.decode() if source is not None else None,
            "error": error.decode() if error is not None else None,
            "compressed": compressed is not None,
            "receipt": None if prefix is None else f"{prefix}{int(seq):x}.{mid}",
        }
    )


def archived(queue: str, values: Sequence[Any]) -> ArchivedMessage | None:
    """An archived message from its entry's ARCHIVE_FIELDS (None if the entry is gone)."""
    mid, body, attrs, group, priority, sent, first, removed, count, outcome, z = values
    if mid is None:
        return None
    return ArchivedMessage(
        id=mid.decode(),
        queue=queue,
        body=body,
        attributes=decode_attributes(attrs.decode()) if attrs else {},
        group_id=group.decode() if group is not None else None,
        priority=int(priority),
        sent_at=float(sent),
        first_received_at=float(first) if first is not None else None,
        removed_at=float(removed),
        receive_count=int(count or 0),
        outcome=outcome.decode(),
        compressed=z is not None,
    )
