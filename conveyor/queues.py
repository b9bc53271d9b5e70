"""`Queue`: a handle on one queue (the message operations, each checked once into a value:
`Send` in sends.py, `Receive`, `Delete`, `ChangeVisibility` here), and the message helpers
shared by the SDK and the servers: decoding bodies, the steps of a long poll."""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from . import tracing
from .backends.base import Backend, Editing
from .catalog import Catalog
from .exceptions import ConveyorError, InvalidInput
from .models import (
    ArchivedMessage,
    Attributes,
    BatchResult,
    Capability,
    Message,
    MessageState,
    MessageUpdate,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
    batch_result,
    sent_result,
)
from .sends import (
    MAX_BATCH_BYTES,
    Body,
    Send,
    SendChecks,
    SendEntry,
    Sent,
    body_bytes,
    check_batch_bytes,
    encode_body,
)
from .validation import (
    INDEX_IDS,
    MAX_BATCH,
    MAX_FAIL_DELAY,
    MAX_OFFSET,
    MAX_PEEK,
    MAX_VISIBILITY,
    SDK_BATCH,
    check_batch,
    check_batch_size,
    check_body_size,
    check_count,
    check_max_messages,
    check_message_attributes,
    check_number,
    check_priority,
    check_queue_name,
    check_rate,
    check_visibility,
    check_wait,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Receive:
    """A receive of one queue, checked once (`Queue.receiving`): up to `most` messages
    (claimed `batch_limit` at a time), out of sight for `visibility_timeout` seconds,
    waiting up to `wait` seconds for the first (0: answer at once)."""

    most: int
    visibility_timeout: float
    wait: float


@dataclass(frozen=True, slots=True)
class Delete:
    """A delete of received messages of one queue, checked once (`Queue.deleting`): each
    entry's id and receipt, done `batch_limit` receipts a store call (`Queue.run_delete`)."""

    entry_ids: Sequence[str]
    receipts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChangeVisibility:
    """A change of received messages' visibility, checked once (`Queue.changing_visibility`):
    each entry's id and its (receipt, timeout), or the error that refused its timeout (such
    an entry is answered alone), done `batch_limit` a store call
    (`Queue.run_change_visibility`)."""

    entry_ids: Sequence[str]
    changes: tuple[tuple[str, float] | ConveyorError, ...]


def decode_message(message: Message) -> Message:
    if message.compressed:
        return message.replace(body=zlib.decompress(message.body), compressed=False)
    return message


def decode_archived(a: ArchivedMessage) -> ArchivedMessage:
    if a.compressed:
        return dataclasses.replace(a, body=zlib.decompress(a.body), compressed=False)
    return a


class Queue:
    """A handle on one queue: the message operations."""

    def __init__(self, catalog: Catalog, name: str) -> None:
        self.catalog = catalog
        self.name = name
        self._backend = catalog.backend
        self._checks = SendChecks(catalog, name)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def info(self) -> QueueInfo:
        return self.catalog.info(self.name)

    @property
    def attributes(self) -> QueueAttributes:
        return self.catalog.info(self.name, fresh=True).attributes

    def set_attributes(self, **changes: Any) -> QueueAttributes:
        return self.catalog.set_attributes(self.name, changes)

    def stats(self) -> QueueStats:
        return self._backend.queue_stats(self.name)

    @tracing.store_call("purge")
    def purge(self) -> int:
        return self._backend.purge_queue(self.name)

    def delete_queue(self) -> None:
        self.catalog.delete_queue(self.name)

    # -- send -----------------------------------------------------------------------------

    def sending(
        self,
        entries: Iterable[SendEntry | Body],
        *,
        ids: Sequence[str | None] | None = None,
        most: int | None = MAX_BATCH,
    ) -> Send:
        """The send of these entries (`SendEntry` values or bare bodies), each checked and
        encoded as `send` would, against one read of the queue's attributes: the first one
        refused raises, and nothing is sent. `ids` gives bare bodies the ids their senders
        chose (None: made by the store). Up to `most` entries, at SQS's 10 within 1 MiB of
        bodies together; None for any number (a job stages its parts so)."""
        return self._checks.sending(self.info.attributes, entries, ids, most)

    def check(self, entry: SendEntry) -> None:
        """Check `entry` as a send to this queue would (a refused one raises), sending
        nothing: a publication's copy for a subscribed queue."""
        self._checks.entry(self.info.attributes, entry)

    @tracing.store_call("send")
    def run_send(self, op: Send) -> Sent:
        """Do a checked send (`sending`) in one store call: all of it or, on an error,
        none. What it did, in send order."""
        if op.bodies is not None:
            return Sent(self._backend.send_bodies(self.name, op.bodies, op.delay))
        results = self._backend.send(self.name, op.messages)
        return Sent([r.id for r in results], results)

    @tracing.store_call("send")
    def run_send_receive(self, op: Send, most: int, vt: float) -> tuple[Sent, list[Message]]:
        """Do a checked send (`sending`), then one claim of up to `most` (at most
        `batch_limit`) messages invisible for `vt` seconds, as `claim`, in one store call
        (`Backend.send_receive`): for a receiver that waits on the queue where the sender
        is. What the send did, and the messages claimed, as stored."""
        results, claimed = self._backend.send_receive(self.name, op.as_messages(), most, vt)
        return Sent([r.id for r in results], results), claimed

    @tracing.store_call("send")
    def send(
        self,
        body: Body,
        *,
        id: str | None = None,
        delay: float | None = None,
        group_id: str | None = None,
        dedup_id: str | None = None,
        priority: int = 0,
        attributes: Attributes | None = None,
        deadline: float | None = None,
    ) -> SendResult:
        """Send one message; `duplicate=True` in the result if the queue already had it."""
        attrs = self.info.attributes
        if (
            id is None
            and delay is None
            and group_id is None
            and dedup_id is None
            and priority == 0
            and not attributes
            and deadline is None
        ):
            bare = self._checks.as_it_is(attrs, body)
            if bare is not None:  # the store takes it as it is
                return sent_result(self._backend.send_bodies(self.name, (bare,), attrs.delay)[0])
            return self._backend.send(self.name, [self._checks.body(attrs, body)])[0]
        entry = SendEntry(
            entry_id="0",
            body=body,
            id=id,
            delay=delay,
            group_id=group_id,
            dedup_id=dedup_id,
            priority=priority,
            attributes=attributes or {},
            deadline=deadline,
        )
        return self._backend.send(self.name, [self._checks.entry(attrs, entry)])[0]

    def send_json(self, value: Any, **options: Any) -> SendResult:
        return self.send(json.dumps(value, separators=(",", ":")), **options)

    @tracing.store_call("send")
    def send_batch(self, entries: Iterable[SendEntry | Body]) -> list[BatchResult]:
        """Send messages; results per entry, in order. Entries are `SendEntry` values or
        bare bodies (a bare body's entry id is its index).

        Up to 10 entries (SQS's batch, bodies within 1 MiB together) are one store
        transaction. Up to 10,000 are taken (gq's producers batch any number): they go to
        the store `batch_limit` messages (and at most 1 MiB of bodies) at a time, each such
        part one transaction; a part the store refuses fails its entries alone.
        """
        if isinstance(entries, str | bytes):
            raise InvalidInput("pass a list of entries or bodies, not one body")
        entries = list(entries)
        bare = all(type(e) is bytes or type(e) is str for e in entries)
        if bare:
            check_batch_size(len(entries), SDK_BATCH)
            ids: Sequence[str] = INDEX_IDS[: len(entries)]
            total = sum(len(e) for e in entries if isinstance(e, bytes | str))
        else:
            ids = [
                e.entry_id if isinstance(e, SendEntry) else str(i) for i, e in enumerate(entries)
            ]
            check_batch(ids, SDK_BATCH)
            total = body_bytes(entries)
        if len(entries) <= MAX_BATCH:
            check_batch_bytes(total)
        attrs = self.info.attributes
        if bare and len(entries) <= self._backend.batch_limit:
            bodies = self._checks.as_they_are(attrs, cast(list[Body], entries))
            if bodies is not None:  # one store call takes them as they are
                made = self._backend.send_bodies(self.name, bodies, attrs.delay)
                return [batch_result(k, sent_result(i)) for k, i in zip(ids, made, strict=True)]
        prepared: list[NewMessage] = []
        sent_ids: list[str] = []
        failed: dict[str, BatchResult] = {}
        for entry_id, e in zip(ids, entries, strict=True):
            try:
                prepared.append(self._checks.one(attrs, e))
            except ConveyorError as exc:
                failed[entry_id] = BatchResult(entry_id=entry_id, error=exc)
                continue
            sent_ids.append(entry_id)
        if len(entries) <= MAX_BATCH and len(prepared) <= self._backend.batch_limit:
            sent = self._backend.send(self.name, prepared) if prepared else []
            done = [
                batch_result(entry_id, result)
                for entry_id, result in zip(sent_ids, sent, strict=True)
            ]
        else:
            done = [
                batch_result(entry_id, None, result)
                if isinstance(result, ConveyorError)
                else batch_result(entry_id, result)
                for entry_id, result in zip(sent_ids, self._send_parts(prepared), strict=True)
            ]
        if not failed:  # every entry was sent: already in order
            return done
        failed.update((r.entry_id, r) for r in done)
        return [failed[entry_id] for entry_id in ids]

    def _send_parts(self, messages: Sequence[NewMessage]) -> list[SendResult | ConveyorError]:
        """Send a batch larger than the store takes at once: a store call (a transaction)
        per `batch_limit` messages and MAX_BATCH_BYTES of bodies; a part the store refuses
        gives each of its messages the error, and the rest go on."""
        out: list[SendResult | ConveyorError] = []
        limit = self._backend.batch_limit

        def part(chunk: list[NewMessage]) -> None:
            try:
                out.extend(self._backend.send(self.name, chunk))
            except ConveyorError as exc:
                out.extend([exc] * len(chunk))

        chunk: list[NewMessage] = []
        size = 0
        for m in messages:
            if chunk and (len(chunk) >= limit or size + len(m.body) > MAX_BATCH_BYTES):
                part(chunk)
                chunk, size = [], 0
            chunk.append(m)
            size += len(m.body)
        if chunk:
            part(chunk)
        return out

    # -- receive --------------------------------------------------------------------------

    def receiving(
        self,
        max_messages: int = 1,
        *,
        visibility_timeout: float | None = None,
        wait: float | None = None,
    ) -> Receive:
        """The receive these options ask for, checked, the queue's defaults filled in:
        `wait` its receive_wait, `visibility_timeout` its visibility timeout."""
        check_max_messages(max_messages, SDK_BATCH)
        attrs = self.info.attributes  # its values were checked as they were set
        vt = attrs.visibility_timeout if visibility_timeout is None else visibility_timeout
        if visibility_timeout is not None:
            check_visibility(visibility_timeout)
        return Receive(max_messages, vt, attrs.receive_wait if wait is None else check_wait(wait))

    def receive(
        self,
        max_messages: int = 1,
        *,
        visibility_timeout: float | None = None,
        wait: float | None = None,
    ) -> list[Message]:
        """Receive up to `max_messages`, waiting up to `wait` seconds for the first one.

        Returns as soon as a message is there. `wait` defaults to the queue's receive_wait,
        `visibility_timeout` to the queue's. Up to 10,000 messages (gq's consumers pop any
        number): more than the store claims at once (`batch_limit`) are claimed a part at
        a time, the next part once the last one came back full.
        """
        return self.run_receive(
            self.receiving(max_messages, visibility_timeout=visibility_timeout, wait=wait)
        )

    @tracing.store_call("receive")
    def run_receive(self, op: Receive) -> list[Message]:
        """Do a checked receive (`receiving`), waiting in this thread."""
        backend, name, vt = self._backend, self.name, op.visibility_timeout
        first = min(op.most, backend.batch_limit)
        if op.wait <= 0:
            got = backend.receive(name, first, vt)
        else:
            poll = long_poll(backend, name, op.wait)
            step = next(poll)
            try:
                while True:
                    if step is RECEIVE:
                        step = poll.send(backend.receive(name, first, vt))
                    else:
                        assert isinstance(step, Wait)
                        backend.wait_for_messages(
                            name, step.since, min(step.remaining, step.interval)
                        )
                        step = next(poll)
            except StopIteration as done:
                got = done.value
        if len(got) == first < op.most:
            got = self.receive_more(got, op.most, vt)
        return [decode_message(m) if m.compressed else m for m in got]

    def receive_more(self, got: list[Message], most: int, vt: float) -> list[Message]:
        """`got`, a full claim of `batch_limit` messages, and what further claims add up to
        `most` in all (each part claimed once the last one came back full)."""
        backend, limit = self._backend, self._backend.batch_limit
        got = list(got)
        while len(got) < most:
            want = min(limit, most - len(got))
            more = backend.receive(self.name, want, vt)
            got += more
            if len(more) < want:
                break
        return got

    # -- for the ways in that gather work or wait on an event loop (AsyncQueue, the push
    # gateway): the store's message calls, one each, with no checks of their own

    def claim(self, most: int, vt: float) -> list[Message]:
        """One store claim of up to `most` (at most `batch_limit`) messages, as stored:
        `decode_message` each before it leaves."""
        return self._backend.receive(self.name, most, vt)

    def polling(self, wait: float) -> Generator[Wait | None, list[Message], list[Message]]:
        """The steps of a long poll of this queue (`long_poll`)."""
        return long_poll(self._backend, self.name, wait)

    def change_token(self) -> int:
        """The queue's change token now: read before a receive attempt, a wait after it
        (`wait_async`) ends on a change made since."""
        return self._backend.change_token(self.name)

    async def wait_async(self, since: int, timeout: float) -> None:
        """Wait in the event loop, up to `timeout` seconds, for a change after `since`."""
        await self._backend.wait_for_messages_async(self.name, since, timeout)

    def notify(self) -> None:
        """Wake a receive waiting on this queue (there may be more to take)."""
        self._backend.notify(self.name)

    def deleting(
        self, receipts: Sequence[str] | Mapping[str, str], *, most: int | None = SDK_BATCH
    ) -> Delete:
        """The delete of these receipts ({entry id: receipt}, or receipts: entry ids their
        indexes), checked: up to `most` (None: any number, gathered by the push gateway)."""
        ids, handles = _entries(receipts, most)
        return Delete(ids, tuple(handles))

    @tracing.store_call("delete")
    def run_delete(self, op: Delete) -> list[Exception | None]:
        """Do a checked delete (`deleting`), `batch_limit` receipts a store call: each
        receipt's error (ReceiptHandleInvalid for a stale or forged one), or None."""
        return self._in_parts(op.receipts, self._backend.delete)

    def delete(self, receipt: str) -> None:
        """Delete a received message. ReceiptHandleInvalid if the receipt is stale or forged."""
        error = self.run_delete(Delete(INDEX_IDS[:1], (receipt,)))[0]
        if error is not None:
            raise error

    def delete_batch(self, receipts: Sequence[str] | Mapping[str, str]) -> list[BatchResult]:
        """Delete messages: {entry id: receipt}, or receipts (entry ids 0..n-1). Up to
        10,000, `batch_limit` receipts a store call."""
        op = self.deleting(receipts)
        errors = self.run_delete(op)
        return [batch_result(k, None, e) for k, e in zip(op.entry_ids, errors, strict=True)]

    def _in_parts(
        self,
        items: Sequence[T],
        call: Callable[[str, Sequence[T]], Sequence[Exception | None]],
    ) -> list[Exception | None]:
        """`call(queue, part)`, a store method, on `items`, `batch_limit` at a time; a part
        the store refuses gives each of its items the error."""
        name, limit = self.name, self._backend.batch_limit
        if len(items) <= limit:
            return list(call(name, items))
        out: list[Exception | None] = []
        for start in range(0, len(items), limit):
            part = items[start : start + limit]
            try:
                out.extend(call(name, part))
            except ConveyorError as exc:
                out.extend([exc] * len(part))
        return out

    @tracing.store_call("give_back")
    def give_back(self, receipts: Sequence[str]) -> list[Exception | None]:
        """Make received messages visible again as though that receive had not been made
        (`Backend.give_back`): for messages claimed and never handed to anyone. Per
        receipt, None or its error; `batch_limit` receipts a store call."""
        return self._in_parts(receipts, self._backend.give_back)

    def changing_visibility(
        self,
        entries: Mapping[str, tuple[str, float]] | Sequence[tuple[str, float]],
        *,
        most: int | None = SDK_BATCH,
    ) -> ChangeVisibility:
        """The change of these messages' visibility ({entry id: (receipt, timeout)}, or
        (receipt, timeout) pairs: entry ids their indexes), checked: up to `most` (None:
        any number, gathered by the push gateway). A timeout out of range refuses its entry
        alone."""
        ids, pairs = _entries(entries, most)
        changes: list[tuple[str, float] | ConveyorError] = []
        for receipt, timeout in pairs:
            try:
                changes.append((receipt, check_visibility(timeout)))
            except ConveyorError as exc:
                changes.append(exc)
        return ChangeVisibility(ids, tuple(changes))

    @tracing.store_call("change_visibility")
    def run_change_visibility(self, op: ChangeVisibility) -> list[Exception | None]:
        """Do a checked change of visibility (`changing_visibility`), `batch_limit` entries
        a store call: each entry's error, or None."""
        valid = [c for c in op.changes if not isinstance(c, ConveyorError)]
        done = iter(self._in_parts(valid, self._backend.change_visibility) if valid else ())
        return [c if isinstance(c, ConveyorError) else next(done) for c in op.changes]

    def change_visibility(self, receipt: str, timeout: float) -> None:
        """Make a received message visible `timeout` seconds from now (0 releases it now)."""
        op = ChangeVisibility(INDEX_IDS[:1], ((receipt, check_visibility(timeout)),))
        error = self.run_change_visibility(op)[0]
        if error is not None:
            raise error

    def change_visibility_batch(
        self, entries: Mapping[str, tuple[str, float]]
    ) -> list[BatchResult]:
        """Change messages' visibility: {entry id: (receipt, timeout)}; results per entry."""
        op = self.changing_visibility(entries)
        errors = self.run_change_visibility(op)
        return [batch_result(k, None, e) for k, e in zip(op.entry_ids, errors, strict=True)]

    # -- inspection and editing in place --------------------------------------------------

    def _editable(self, operation: str) -> Editing:
        return self.catalog.editing(operation)

    def peek(
        self, limit: int = 10, *, state: MessageState | str | None = None, after: int = 0
    ) -> list[Message]:
        """Messages in send order (sequence > `after`) without receiving them."""
        check_count("limit", limit, 1, MAX_PEEK)
        check_count("after", after, 0, MAX_OFFSET)
        st = MessageState(state) if state is not None else None
        found = self._editable("peek").list_messages(self.name, state=st, limit=limit, after=after)
        return [decode_message(m) for m in found]

    def get(self, message_id: str) -> Message:
        return decode_message(self._editable("get").get_message(self.name, message_id))

    def update(
        self,
        message_id: str,
        *,
        body: Body | None = None,
        attributes: Attributes | None = None,
        priority: int | None = None,
        visible_at: float | None = None,
    ) -> Message:
        """Edit a message in place: body, attributes, priority, or `visible_at` to reorder."""
        backend = self._editable("update")
        data: bytes | None = None
        compressed = False
        if body is not None:
            data = encode_body(body)
            attrs = self.info.attributes
            check_body_size(data, attributes or {}, attrs.max_message_bytes)
            if attrs.compress_over is not None and len(data) > attrs.compress_over:
                data, compressed = zlib.compress(data, 6), True
        if attributes is not None:
            check_message_attributes(attributes)
        if priority is not None:
            check_priority(priority)
        if visible_at is not None:  # up to the longest visibility timeout from now
            check_number("visible_at", visible_at, 0, self.catalog.clock.now() + MAX_VISIBILITY)
        update = MessageUpdate(
            body=data,
            attributes=attributes,
            priority=priority,
            visible_at=visible_at,
            compressed=compressed,
        )
        return decode_message(backend.update_message(self.name, message_id, update))

    def remove(self, message_id: str) -> None:
        """Remove a message by id whatever its state."""
        self._editable("remove").remove_message(self.name, message_id)

    def move_to_dlq(self, message_id: str, error: str | None = None) -> Message:
        """Move a message to the dead-letter queue now ("invalid"), recording `error`."""
        return decode_message(
            self._editable("move_to_dlq").move_to_dlq(self.name, message_id, error)
        )

    def redrive(
        self, ids: Sequence[str] | str | None = None, *, to: str | None = None, limit: int = 100
    ) -> list[str]:
        """Move messages of this dead-letter queue back to their source (or to `to`)."""
        backend = self._editable("redrive")
        if isinstance(ids, str):
            ids = [ids]
        if to is not None:
            check_queue_name(to)
        if ids is not None:
            check_batch_size(len(ids), SDK_BATCH)
        check_count("limit", limit, 1, SDK_BATCH)
        return backend.redrive(self.name, ids=ids, limit=limit, to=to)

    def redrive_all(
        self,
        *,
        to: str | None = None,
        rate: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Redrive every ready message, at most `rate` per second; returns how many moved."""
        backend = self._editable("redrive")
        if rate is not None:
            check_rate(rate)
        if to is not None:
            check_queue_name(to)
        clock = self.catalog.clock
        # unthrottled, a thousand a move: each is a few statements (or one script) on the
        # stores, and each looks for the dead-letter queue's head once
        chunk = 1000 if rate is None else max(1, min(100, int(rate)))
        total = 0
        started = clock.now()
        while True:
            moved = backend.redrive(self.name, limit=chunk, to=to)
            total += len(moved)
            if progress is not None and moved:
                progress(len(moved))
            if len(moved) < chunk:
                return total
            if rate is not None:
                ahead = total / rate - (clock.now() - started)
                clock.sleep(ahead)

    def reset(self, message_id: str) -> Message:
        """receive_count 0 and visible now."""
        return decode_message(self._editable("reset").reset_message(self.name, message_id))

    def fail(self, message_id: str, delay: float = 0.0) -> Message:
        """Release a message for redelivery after `delay` seconds."""
        check_number("delay", delay, 0, MAX_FAIL_DELAY)
        return decode_message(self._editable("fail").fail_message(self.name, message_id, delay))

    def archive(self, limit: int = 1000, after: int = 0) -> list[ArchivedMessage]:
        self.catalog.require(Capability.ARCHIVE, "archive")
        check_count("limit", limit, 1, MAX_PEEK)
        check_count("after", after, 0, MAX_OFFSET)
        out = self._editable("archive").list_archive(self.name, limit=limit, after=after)
        return [decode_archived(a) for a in out]


# -- the long poll ------------------------------------------------------------------------

RECEIVE = None
"""A step of `long_poll`: make one receive attempt and send its messages back."""


@dataclass(frozen=True, slots=True)
class Wait:
    """A step of `long_poll`: wait for a send since change token `since`, for `remaining`
    seconds at most; a thread that cannot be woken by other processes wakes every
    `interval` to try again."""

    since: int
    remaining: float
    interval: float


def long_poll(
    backend: Backend, name: str, wait: float
) -> Generator[Wait | None, list[Message], list[Message]]:
    """The steps of a receive that waits up to `wait` seconds for a first message, without
    doing them: `Queue.receive` runs it in a thread, `AsyncQueue.receive` in the event loop.

    Yields RECEIVE (send back what the attempt got) or a `Wait`; returns the messages.
    """
    clock = backend.clock
    end = clock.now() + wait
    interval = backend.first_poll_interval
    while True:
        since = backend.change_token(name)
        messages = yield RECEIVE
        if messages:
            return messages
        remaining = end - clock.now()
        if remaining <= 0:
            return []
        yield Wait(since, remaining, interval)
        interval = min(interval * 2, backend.poll_interval)


def _entries(
    entries: Sequence[T] | Mapping[str, T], most: int | None
) -> tuple[Sequence[str], list[T]]:
    """A batch's entry ids and items, checked: {entry id: item}, or items (entry ids their
    indexes); up to `most` (None: any number)."""
    if isinstance(entries, Mapping):
        ids = list(entries)
        check_batch(ids, SDK_BATCH if most is None else most)
        return ids, list(entries.values())
    if isinstance(entries, str):
        raise InvalidInput("pass a list of receipts, not one string")
    items = list(entries)
    if most is not None:
        check_batch_size(len(items), most)
    n = len(items)
    return (INDEX_IDS[:n] if n <= len(INDEX_IDS) else [str(i) for i in range(n)]), items
