"""What the Redis store keeps and how it reads it back: queue registry entries, numbers as
the scripts take them, and messages and archived messages as the scripts return them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from ...exceptions import InvalidInput
from ...models import ArchivedMessage, Message, QueueAttributes, QueueInfo, message_from
from ...receipts import receipt_tail
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


def pack_message(
    sent: str, visible: str, group: str, dedup: str, ext: str | bytes, body: bytes
) -> bytes:
    """A message as the store keeps it (the layout in common.lua): one string."""
    head = f"{sent}\t{visible}\t{group}\t{dedup}\t".encode()
    return b"".join((head, ext if isinstance(ext, bytes) else ext.encode(), b"\n", body))


def pack_ext(
    attributes: str | None = None,
    deadline: str | None = None,
    source: str | None = None,
    error: str | None = None,
    compressed: bool = False,
) -> str:
    """What a message carries beyond its body, FIFO ids and times ('' for nothing)."""
    fields: dict[str, str] = {}
    if attributes:
        fields["a"] = attributes
    if deadline:
        fields["dl"] = deadline
    if source:
        fields["o"] = source
    if error:
        fields["e"] = error
    if compressed:
        fields["z"] = "1"
    return json.dumps(fields, separators=(",", ":")) if fields else ""


def messages(queue: str, flat: Sequence[Any], prefix: str | None = None) -> list[Message]:
    """Messages from a script's flat answer (id, order score, string, state each); with a
    receive's `prefix`, with their receipts."""
    return [
        message(queue, flat[i], flat[i + 1], flat[i + 2], flat[i + 3], prefix)
        for i in range(0, len(flat), 4)
    ]


def message(
    queue: str,
    raw_id: bytes,
    score: bytes,
    blob: bytes,
    state: bytes | None,
    prefix: str | None = None,
) -> Message:
    """A message from its id, order score, string and receipt state (see common.lua)."""
    head, _, body = blob.partition(b"\n")
    sent, visible, group, dedup, ext = head.split(b"\t")
    order = int(float(score))
    seq = order % BAND
    mid = raw_id.decode()
    if state is None:
        count, version, first = 0, 1, None
    else:
        _token, n, r, f, visible = state.split(b"|")
        count, version, first = int(n), int(r), float(f) if f else None
    fields = json.loads(ext) if ext else _NO_EXT
    attributes = fields.get("a")
    deadline = fields.get("dl")
    return message_from(
        {
            "sequence": order,
            "id": mid,
            "queue": queue,
            "body": body,
            "attributes": decode_attributes(attributes) if attributes else {},
            "group_id": group.decode() if group else None,
            "dedup_id": dedup.decode() if dedup else None,
            "priority": 32767 - order // BAND,
            "deadline": float(deadline) if deadline is not None else None,
            "sent_at": float(sent),
            "visible_at": float(visible),
            "receive_count": count,
            "first_received_at": first,
            "version": version,
            "source_queue": fields.get("o"),
            "error": fields.get("e"),
            "compressed": "z" in fields,
            "receipt": None if prefix is None else prefix + receipt_tail(seq, mid),
        }
    )


_NO_EXT: dict[str, str] = {}


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
