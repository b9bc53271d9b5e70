"""The in-memory store's data and the rules that act on it, under the caller's lock.

`QueueState` holds one queue: its records by id (insertion order is send order), a
run-heap of ready messages ordered by delivery order and one of invisible ones ordered by
visible_at, so a receive costs O(1) a message when they arrive in order and O(log n)
otherwise, whatever the depth. Heap entries carry the record's sequence and version: an
entry whose record changed since, or whose id names another record now (a message moved
back into the queue, or sent again with the same id, is a new record with a new sequence),
is stale and skipped. `State` holds a whole store (queues, topics, consumers, the
sequence) and the operations that touch several queues.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...ids import new_ids
from ...models import (
    ArchivedMessage,
    Consumer,
    Message,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    SendResult,
    message_from,
    sent_result,
)
from ...receipts import receipt_tail
from ...validation import DEDUP_WINDOW
from ..errors import no_message, no_queue
from ..rules import SEQ_MASK, SWEEP_INTERVAL, band, deadline_rules, dedup, expired, order_key
from .runheap import RunHeap

_BAND_0 = band(0)


@dataclass(slots=True)
class Rec:
    id: str
    seq: int
    body: bytes
    attributes: dict[str, Any]
    group_id: str | None
    dedup_id: str | None
    priority: int
    deadline: float | None
    sent_at: float
    visible_at: float
    compressed: bool
    receive_count: int = 0
    first_received_at: float | None = None
    version: int = 1
    token: str | None = None
    source_queue: str | None = None
    error: str | None = None

    @property
    def order(self) -> int:
        """The record's place in delivery order (priority 0's band without a call)."""
        if self.priority == 0:
            return _BAND_0 | (self.seq & SEQ_MASK)
        return order_key(self.priority, self.seq)


@dataclass(slots=True)
class TopicState:
    settings: dict[str, str] = field(default_factory=dict)
    subscriptions: dict[str, dict[str, str]] = field(default_factory=dict)  # queue: attributes


@dataclass(slots=True)
class QueueState:
    info: QueueInfo
    messages: dict[str, Rec] = field(default_factory=dict)
    ready: RunHeap[tuple[int, int, str, int]] = field(default_factory=RunHeap)
    later: RunHeap[tuple[float, int, str, int]] = field(default_factory=RunHeap)
    dedup: dict[str, tuple[str, float]] = field(default_factory=dict)
    archive: list[ArchivedMessage] = field(default_factory=list)
    sent: int = 0
    received: int = 0
    deleted: int = 0
    dead: int = 0
    expired: int = 0
    tokens: float = 0.0
    tokens_at: float = 0.0
    swept_at: float = -1e18

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def attrs(self) -> QueueAttributes:
        return self.info.attributes

    def schedule(self, rec: Rec, now: float) -> None:
        """Put the record's current version on the heap it belongs to (FIFO queues walk
        their records in send order instead)."""
        if self.attrs.fifo:
            return
        if rec.visible_at <= now:
            self.ready.push((-rec.priority, rec.seq, rec.id, rec.version))
        else:
            self.later.push((rec.visible_at, rec.seq, rec.id, rec.version))

    def insert(self, rec: Rec, now: float) -> None:
        self.messages[rec.id] = rec
        self.schedule(rec, now)

    def get(self, message_id: str) -> Rec:
        rec = self.messages.get(message_id)
        if rec is None:
            raise no_message(self.name, message_id)
        return rec

    def view(self, rec: Rec, receipt: str | None = None) -> Message:
        return message_from(
            {
                "id": rec.id,
                "queue": self.name,
                "body": rec.body,
                "attributes": dict(rec.attributes) if rec.attributes else {},
                "group_id": rec.group_id,
                "dedup_id": rec.dedup_id,
                "priority": rec.priority,
                "deadline": rec.deadline,
                "sent_at": rec.sent_at,
                "visible_at": rec.visible_at,
                "receive_count": rec.receive_count,
                "first_received_at": rec.first_received_at,
                "version": rec.version,
                "sequence": rec.order,
                "source_queue": rec.source_queue,
                "error": rec.error,
                "compressed": rec.compressed,
                "receipt": receipt,
            }
        )

    def keep(self, rec: Rec, outcome: str, now: float) -> None:
        """Archive a record leaving the queue, where the queue archives."""
        if self.attrs.archive:
            self.archive.append(
                ArchivedMessage(
                    id=rec.id,
                    queue=self.name,
                    body=rec.body,
                    attributes=dict(rec.attributes),
                    group_id=rec.group_id,
                    priority=rec.priority,
                    sent_at=rec.sent_at,
                    first_received_at=rec.first_received_at,
                    removed_at=now,
                    receive_count=rec.receive_count,
                    outcome=outcome,
                    compressed=rec.compressed,
                )
            )

    def drop(self, rec: Rec, outcome: str, now: float) -> None:
        del self.messages[rec.id]
        self.keep(rec, outcome, now)
        if outcome == "expired":
            self.expired += 1
        elif outcome in ("deleted", "removed"):  # an admin's delete by id is a delete too
            self.deleted += 1

    def expired_at(self, rec: Rec, now: float) -> bool:
        """Past retention or (at-most-once) deadline: never delivered again."""
        cut, _ = deadline_rules(self.attrs, now)
        return expired(rec.sent_at, rec.deadline, now - self.attrs.retention, cut)

    def sweep(self, now: float, force: bool = False) -> None:
        """Drop what is past retention or deadline and forget old de-duplication keys."""
        if not force and now - self.swept_at < SWEEP_INTERVAL:
            return
        self.swept_at = now
        for rec in [r for r in self.messages.values() if self.expired_at(r, now)]:
            self.drop(rec, "expired", now)
        for key in [k for k, (_, until) in self.dedup.items() if until <= now]:
            del self.dedup[key]

    def candidates(self, now: float) -> Iterator[Rec]:
        """Ready records in delivery order; FIFO queues give each group's run of visible
        records at its head, in send order."""
        if self.attrs.fifo:
            blocked: set[str | None] = set()
            for rec in self._in_order():
                if rec.group_id in blocked or rec.id not in self.messages:
                    continue
                if rec.visible_at > now:
                    blocked.add(rec.group_id)
                    continue
                yield rec
            return
        ready, later = self.ready, self.later
        while later and later.first()[0] <= now:
            _, seq, mid, version = later.pop()
            due = self.messages.get(mid)
            if due is not None and due.version == version and due.seq == seq:
                ready.push((-due.priority, seq, mid, version))
        while ready:
            _, seq, mid, version = ready.pop()
            found = self.messages.get(mid)
            if found is None or found.version != version or found.seq != seq:
                continue
            if found.visible_at > now:  # scheduled by a clock ahead of this one: keep it
                later.push((found.visible_at, found.seq, mid, version))
                continue
            yield found

    def _in_order(self) -> Iterator[Rec]:
        """The records in send order, read in pages that double in size (a receive usually
        stops in the first), so that the caller may drop the records it was given."""
        start, size = 0, 64
        while True:
            page = list(itertools.islice(self.messages.values(), start, start + size))
            yield from page
            if len(page) < size:
                return
            # what the caller dropped of this page no longer comes before the next one
            start += sum(1 for rec in page if rec.id in self.messages)
            size *= 2

    def claim(self, rec: Rec, now: float, visible_at: float, token: str, prefix: str) -> Message:
        """Deliver the record until `visible_at` (the receive's `claim_terms`) under the
        receive's token; `prefix` is `receipt_prefix(queue, token)`."""
        rec.receive_count += 1
        if rec.first_received_at is None:
            rec.first_received_at = now
        rec.visible_at = visible_at
        rec.version += 1
        rec.token = token
        self.schedule(rec, now)
        return self.view(rec, prefix + receipt_tail(rec.seq, rec.id))

    def touch(self, rec: Rec, now: float) -> None:
        """A new version of the record: its receipts and heap entries are stale."""
        rec.version += 1
        rec.token = None
        self.schedule(rec, now)


NAMED: dict[str, State] = {}
NAMED_LOCK = threading.Lock()


@dataclass
class State:
    lock: threading.RLock = field(default_factory=threading.RLock)
    queues: dict[str, QueueState] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    consumers: dict[str, Consumer] = field(default_factory=dict)
    seq: int = 0
    key: str = field(default_factory=lambda: f"memory:{secrets.token_hex(6)}")

    def queue(self, name: str) -> QueueState:
        q = self.queues.get(name)
        if q is None:
            raise no_queue(name)
        return q

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def send(self, q: QueueState, messages: Sequence[NewMessage], now: float) -> list[SendResult]:
        results: list[SendResult] = []
        attrs = q.attrs
        fifo = attrs.fifo
        stored = q.messages
        fresh = iter(new_ids(sum(1 for m in messages if m.generated_id or not m.id)))
        seq = self.seq
        for m in messages:
            if m.generated_id or not m.id:
                mid = next(fresh)
            elif m.id in stored:
                results.append(SendResult(id=m.id, duplicate=True))
                continue
            else:
                mid = m.id
            shown, key = dedup(m, attrs)
            if key is not None:
                seen = q.dedup.get(key)
                if seen is not None and seen[1] > now:
                    results.append(SendResult(id=seen[0], duplicate=True))
                    continue
                q.dedup[key] = (mid, now + DEDUP_WINDOW)
            seq += 1
            rec = Rec(
                mid,
                seq,
                m.body,
                dict(m.attributes) if m.attributes else {},
                m.group_id,
                shown,
                0 if fifo else m.priority,
                m.deadline,
                now,
                now + m.delay,
                m.compressed,
            )
            stored[mid] = rec
            if fifo:
                results.append(SendResult(id=mid, sequence=rec.order))
                continue
            if rec.visible_at <= now:
                q.ready.push((-rec.priority, seq, mid, 1))
            else:
                q.later.push((rec.visible_at, seq, mid, 1))
            results.append(sent_result(mid))
        q.sent += seq - self.seq
        self.seq = seq
        return results

    def send_bodies(
        self, q: QueueState, bodies: Sequence[bytes], delay: float, now: float
    ) -> list[str]:
        """`send` of bare bodies on a standard queue (`Backend.send_bodies`): new ids, no
        de-duplication, priority 0."""
        ids = new_ids(len(bodies))
        stored = q.messages
        visible_at = now + delay
        first = seq = self.seq
        for mid, body in zip(ids, bodies, strict=True):
            seq += 1
            stored[mid] = Rec(mid, seq, body, {}, None, None, 0, None, now, visible_at, False)
        if visible_at <= now:
            ready = q.ready.push
            for n, mid in enumerate(ids, first + 1):
                ready((0, n, mid, 1))
        else:
            later = q.later.push
            for n, mid in enumerate(ids, first + 1):
                later((visible_at, n, mid, 1))
        q.sent += seq - first
        self.seq = seq
        return ids

    def move(
        self,
        q: QueueState,
        rec: Rec,
        dest: QueueState,
        now: float,
        *,
        dead_from: str | None,
        error: str | None = None,
    ) -> Rec:
        """Move a message to the back of another queue.

        Into a dead-letter queue (`dead_from` names the source): keeps sent_at, records the
        source and `error` (or the error it had). Out of one (`dead_from` None, a redrive):
        sent now, source and error cleared. A message of the same id already in the
        destination is replaced; receive count and receipts start afresh.
        """
        del q.messages[rec.id]
        old = dest.messages.pop(rec.id, None)
        if old is not None:
            dest.keep(old, "replaced", now)
        moved = Rec(
            id=rec.id,
            seq=self.next_seq(),
            body=rec.body,
            attributes=rec.attributes,
            group_id=rec.group_id,
            dedup_id=rec.dedup_id,
            priority=rec.priority,
            deadline=rec.deadline,
            sent_at=now if dead_from is None else rec.sent_at,
            visible_at=now,
            compressed=rec.compressed,
            source_queue=dead_from,
            error=None if dead_from is None else (error if error is not None else rec.error),
        )
        dest.insert(moved, now)
        return moved

    def to_dlq(self, q: QueueState, rec: Rec, now: float, error: str | None) -> Rec | None:
        """Move a record to its queue's dead-letter queue; None if there is none."""
        policy = q.attrs.dead_letter
        dlq = self.queues.get(policy.queue) if policy else None
        if dlq is None:
            return None
        q.dead += 1
        return self.move(q, rec, dlq, now, dead_from=q.name, error=error)
