"""A send before the store sees it: the entries a caller gives (`SendEntry`, bare bodies),
how each is checked and encoded against its queue (`SendChecks`), the checked value that
one store call does (`Send`), and what it did (`Sent`)."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from . import tracing
from .catalog import Catalog
from .exceptions import BatchRequestTooLong, InvalidInput
from .models import (
    Attributes,
    Capability,
    NewMessage,
    QueueAttributes,
    SendResult,
    bare_message,
    new_message,
    sent_result,
)
from .validation import (
    MAX_BATCH,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_MESSAGE_BYTES,
    attribute_size,
    check_batch_size,
    check_body_size,
    check_deadline,
    check_delay,
    check_group_id,
    check_message_attributes,
    check_message_id,
    check_priority,
)

Body = bytes | str
_BYTES = frozenset({bytes})  # the types of a send of bare bodies
MAX_BATCH_BYTES = 1048576


@dataclass(frozen=True, kw_only=True, slots=True)
class SendEntry:
    """One entry of `Queue.send_batch`."""

    entry_id: str
    body: Body
    id: str | None = None
    delay: float | None = None
    group_id: str | None = None
    dedup_id: str | None = None
    priority: int = 0
    attributes: Attributes = field(default_factory=dict)
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class Send:
    """A send to one queue, each message checked and encoded once (`Queue.sending`), done
    in one store call (`Queue.run_send`): all of it or, on an error, none.

    `bodies`, where it is set, holds bare bodies that go to the store as they are (a
    standard queue that compresses nothing, ids made by the store, the queue's `delay`):
    the cheapest send. Otherwise `messages` holds the messages as the store takes them."""

    messages: tuple[NewMessage, ...] = ()
    bodies: tuple[bytes, ...] | None = None
    delay: float = 0.0

    def __len__(self) -> int:
        return len(self.messages) if self.bodies is None else len(self.bodies)

    def as_messages(self) -> list[NewMessage]:
        """The messages of this send, bare bodies made into messages."""
        if self.bodies is None:
            return list(self.messages)
        return [bare_message(b, self.delay) for b in self.bodies]

    @staticmethod
    def joined(sends: Sequence[Send]) -> Send:
        """Sends to one queue as one (the push gateway gathers them): bare bodies stay
        bare where every send is bare with the same delay."""
        if len(sends) == 1:
            return sends[0]
        first = sends[0]
        if first.bodies is not None and all(
            s.bodies is not None and s.delay == first.delay for s in sends
        ):
            return Send(bodies=tuple(b for s in sends for b in s.bodies or ()), delay=first.delay)
        return Send(messages=tuple(m for s in sends for m in s.as_messages()))


@dataclass(frozen=True, slots=True)
class Sent:
    """What a `Send` did, in send order: the messages' ids, and each one's `SendResult`
    (whether the queue had it already, its FIFO sequence number) as `results`. A send of
    bare bodies has its ids alone: none of them is a duplicate or has a sequence number."""

    ids: list[str]
    details: list[SendResult] | None = None  # None: a send of bare bodies

    @property
    def results(self) -> list[SendResult]:
        if self.details is not None:
            return self.details
        return [sent_result(i) for i in self.ids]

    def __len__(self) -> int:
        return len(self.ids)


class SendChecks:
    """How one queue's sends are checked and encoded: against the queue's attributes of
    the moment and what its store takes (ids chosen by senders, priorities, deadlines)."""

    def __init__(self, catalog: Catalog, name: str) -> None:
        self.catalog = catalog
        self.name = name

    # what the store takes, read where an entry asks (a send of bare bodies does not); read
    # each time rather than cached: a cache (functools.cached_property) takes a lock, which
    # costs more than the read, and most checks make one read (a copy of a publication each)

    @property
    def _sender_ids(self) -> bool:
        return Capability.SENDER_IDS in self.catalog.capabilities

    @property
    def _priority(self) -> bool:
        return Capability.PRIORITY in self.catalog.capabilities

    @property
    def _deadlines(self) -> bool:
        return Capability.AT_MOST_ONCE in self.catalog.capabilities

    def sending(
        self,
        attrs: QueueAttributes,
        entries: Iterable[SendEntry | Body],
        ids: Sequence[str | None] | None,
        most: int | None,
    ) -> Send:
        """`Queue.sending` against the queue's attributes `attrs`."""
        if type(entries) is not list and type(entries) is not tuple:
            if isinstance(entries, str | bytes):
                raise InvalidInput("pass a list of entries or bodies, not one body")
            entries = list(entries)
        if most is not None:
            check_batch_size(len(entries), most)
        if ids is None and set(map(type, entries)) == _BYTES:
            bodies = cast(Sequence[bytes], entries)
            sizes = list(map(len, bodies))
            if most is not None and most <= MAX_BATCH:
                check_batch_bytes(sum(sizes))
            if _as_they_are(attrs, sizes):
                return Send(bodies=tuple(bodies), delay=attrs.delay)
        elif most is not None and most <= MAX_BATCH:
            check_batch_bytes(body_bytes(entries))
        if ids is None:
            return Send(messages=tuple(self.one(attrs, e) for e in entries))
        return Send(
            messages=tuple(self.one(attrs, e, i) for i, e in zip(ids, entries, strict=True))
        )

    def as_they_are(
        self, attrs: QueueAttributes, bodies: Sequence[Body]
    ) -> tuple[bytes, ...] | None:
        """Bare bodies (a batch's worth, checked as a batch) as the store takes them, where
        they can go to it as they are, the cheapest send (`Backend.send_bodies`): a standard
        queue without compression, each body of 1 byte to the queue's limit, no trace
        context to add. None where any needs more: each goes through `body` instead."""
        if not bodies or not _plain(attrs):
            return None
        if set(map(type, bodies)) != _BYTES:
            bodies = [encode_body(b) for b in bodies]
        encoded = cast(Sequence[bytes], bodies)
        return tuple(encoded) if _as_they_are(attrs, list(map(len, encoded))) else None

    def as_it_is(self, attrs: QueueAttributes, body: Body) -> bytes | None:
        """`as_they_are` for one body."""
        if not _plain(attrs):
            return None
        if type(body) is not bytes:
            body = encode_body(body)
        if not body or len(body) > attrs.max_message_bytes:
            return None
        return body

    def one(
        self, attrs: QueueAttributes, entry: SendEntry | Body, message_id: str | None = None
    ) -> NewMessage:
        """`entry` for a `SendEntry`, `body` for a bare body (with the id its sender chose,
        if any)."""
        if isinstance(entry, SendEntry):
            return self.entry(attrs, entry)
        return self.body(attrs, entry, message_id)

    def entry(self, attrs: QueueAttributes, entry: SendEntry) -> NewMessage:
        """An entry checked against the queue's attributes `attrs` and encoded as the store
        takes it."""
        body = entry.body if type(entry.body) is bytes else encode_body(entry.body)
        attributes: dict[str, Any] = {}
        size = len(body)
        if entry.attributes:
            attributes = dict(entry.attributes)
            check_message_attributes(attributes)
            size += attribute_size(attributes)
        if size > attrs.max_message_bytes or not body:
            check_body_size(body, attributes, attrs.max_message_bytes)
        if entry.priority:
            check_priority(entry.priority)
            if not self._priority:
                raise self.catalog.unsupported("message priorities")
        if entry.id is not None:
            check_message_id(entry.id)
            if not self._sender_ids:
                raise self.catalog.unsupported("message ids chosen by senders (it makes its own)")
        if entry.deadline is not None:
            check_deadline(entry.deadline, self.catalog.clock.now())
            if not self._deadlines:
                raise self.catalog.unsupported("message deadlines")
        if entry.group_id is not None:  # standard queues take groups too (fair queues)
            check_group_id(entry.group_id)
        if attrs.fifo:
            if entry.group_id is None:
                raise InvalidInput(f"queue {self.name!r} is FIFO: every message needs a group_id")
            if entry.dedup_id is None and not attrs.content_based_dedup:
                raise InvalidInput(
                    f"queue {self.name!r} is FIFO without content-based de-duplication:"
                    " give a dedup_id, or turn on content_based_dedup"
                )
            if entry.delay:  # 0 is accepted, as SQS accepts DelaySeconds=0
                raise InvalidInput(
                    "FIFO queues take no per-message delay: set the queue's delay instead"
                )
            entry = dataclasses.replace(entry, delay=None)
            if entry.priority:
                raise InvalidInput("FIFO queues deliver in send order: priority must be 0")
        if entry.dedup_id is not None:
            check_group_id(entry.dedup_id, "dedup_id")
        delay = attrs.delay if entry.delay is None else check_delay(entry.delay)
        if tracing.ON:  # the current span's context, where it fits
            attributes = tracing.with_context(
                attributes, MAX_MESSAGE_ATTRIBUTES - len(attributes), attrs.max_message_bytes - size
            )
        body, compressed = packed(attrs, body)
        return new_message(
            {
                "id": entry.id or "",
                "body": body,
                "attributes": attributes,
                "group_id": entry.group_id,
                "dedup_id": entry.dedup_id,
                "priority": entry.priority,
                "deadline": entry.deadline,
                "delay": delay,
                "compressed": compressed,
                "generated_id": entry.id is None,
            }
        )

    def body(self, attrs: QueueAttributes, body: Body, message_id: str | None = None) -> NewMessage:
        """`entry` for a bare body and an id (no delay, group, attributes or deadline)."""
        if type(body) is not bytes:
            body = encode_body(body)
        if len(body) > attrs.max_message_bytes or not body:
            check_body_size(body, {}, attrs.max_message_bytes)
        if (
            attrs.fifo
            or (message_id is not None and not self._sender_ids)
            or tracing.ON  # a trace context to add
        ):
            # says what a FIFO queue needs, or that the store makes its own ids
            return self.entry(attrs, SendEntry(entry_id="0", body=body, id=message_id))
        if message_id is not None:
            check_message_id(message_id)
        compressed = False
        if attrs.compress_over is not None and len(body) > attrs.compress_over:
            body, compressed = packed(attrs, body)
        return bare_message(body, attrs.delay, message_id, compressed)


def _as_they_are(attrs: QueueAttributes, sizes: list[int]) -> bool:
    """Whether bodies of these sizes (bytes, one or more) go to the store as they are
    (`SendChecks.as_they_are`): a queue that takes them so, each of 1 byte to its limit."""
    return bool(sizes) and all(sizes) and _plain(attrs) and max(sizes) <= attrs.max_message_bytes


def _plain(attrs: QueueAttributes) -> bool:
    """Whether a queue's bodies can go to its store as they are (`SendChecks.as_they_are`):
    a standard queue without compression, and no trace context to add."""
    return not attrs.fifo and attrs.compress_over is None and not tracing.ON


def encode_body(body: Body) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    raise InvalidInput(
        f"message body must be str or bytes, got {type(body).__name__} (use send_json for objects)"
    )


def plain_message(entry: SendEntry) -> NewMessage:
    """An entry as a message to any queue: checked as every send is, sent as it is (no
    delay, no compression), with the entry's id. Topics publish this."""
    body = encode_body(entry.body)
    attributes = dict(entry.attributes)
    check_message_attributes(attributes)
    check_body_size(body, attributes, MAX_MESSAGE_BYTES)  # each queue checks its own limit too
    if entry.priority:
        check_priority(entry.priority)
    return NewMessage(
        id=entry.id or "",
        generated_id=entry.id is None,
        body=body,
        attributes=attributes,
        group_id=entry.group_id,
        dedup_id=entry.dedup_id,
        priority=entry.priority,
        deadline=entry.deadline,
    )


def body_bytes(entries: Iterable[SendEntry | Body]) -> int:
    """The length of the bodies of a batch's entries together (a body that is neither
    bytes nor str counts nothing here: its entry is refused when it is checked)."""
    return sum(
        len(b)
        for b in (e.body if isinstance(e, SendEntry) else e for e in entries)
        if isinstance(b, bytes | str)
    )


def check_batch_bytes(total: int) -> None:
    """A batch's bodies together are within MAX_BATCH_BYTES."""
    if total > MAX_BATCH_BYTES:
        raise BatchRequestTooLong(
            f"batch bodies total {total} bytes; a batch carries at most {MAX_BATCH_BYTES}"
        )


def packed(attrs: QueueAttributes, body: bytes) -> tuple[bytes, bool]:
    """The body compressed if the queue compresses bodies this long and it gets smaller."""
    if attrs.compress_over is not None and len(body) > attrs.compress_over:
        packed = zlib.compress(body, 6)
        if len(packed) < len(body):
            return packed, True
    return body, False
