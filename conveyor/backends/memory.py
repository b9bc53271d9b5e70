"""In-memory store: the reference behaviour of the queue contract.

URL: ``memory://`` (``memory://NAME`` gives a named store shared by every client of this
process that uses the same name). Supports every capability except sharing across processes.
Everything lives in dicts under one lock; standard queues keep a ready heap ordered by
(priority, sequence) and a heap of invisible messages ordered by visible_at, so a receive
costs O(log n) whatever the depth. FIFO queues scan in send order.
"""

from __future__ import annotations

import dataclasses
import heapq
import secrets
from collections.abc import Iterable, Sequence

from ..clock import SYSTEM_CLOCK, Clock
from ..exceptions import (
    MessageNotFound,
    QueueDoesNotExist,
    QueueExists,
)
from ..ids import new_id
from ..models import (
    FAR_FUTURE,
    ArchivedMessage,
    Capability,
    Delivery,
    Message,
    MessageState,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
)
from ..validation import DEDUP_WINDOW
from .base import (
    Backend,
    dedup_key,
    make_receipt,
    parse_receipt,
    refill_tokens,
    stale_receipt,
)
from .memory_admin import MemoryAdmin
from .memory_state import NAMED, NAMED_LOCK, QueueState, Rec, State


class MemoryBackend(MemoryAdmin, Backend):
    scheme = "memory"
    capabilities = frozenset(Capability) - {Capability.CROSS_PROCESS, Capability.PIPELINE}

    def __init__(self, *, name: str | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock=clock)
        if name:
            with NAMED_LOCK:
                state = NAMED.get(name)
                if state is None:
                    state = NAMED[name] = State(key=f"memory:{name}")
            self._s = state
        else:
            self._s = State()

    @classmethod
    def from_url(cls, rest: str, params: dict[str, str], *, clock: Clock) -> MemoryBackend:
        return cls(name=rest.strip("/") or None, clock=clock)

    @property
    def key(self) -> str:
        return self._s.key

    # -- internals ------------------------------------------------------------------------

    def _q(self, name: str) -> QueueState:
        q = self._s.queues.get(name)
        if q is None:
            raise QueueDoesNotExist(f"queue {name!r} does not exist: create it first")
        return q

    def _next_seq(self) -> int:
        self._s.seq += 1
        return self._s.seq

    def _schedule(self, q: QueueState, rec: Rec, now: float) -> None:
        if q.attrs.fifo:
            return
        if rec.visible_at <= now:
            heapq.heappush(q.ready, (-rec.priority, rec.seq, rec.id, rec.version))
        else:
            heapq.heappush(q.later, (rec.visible_at, rec.seq, rec.id, rec.version))

    def _insert(self, q: QueueState, rec: Rec, now: float) -> None:
        q.messages[rec.id] = rec
        self._schedule(q, rec, now)

    def _view(self, q: QueueState, rec: Rec, receipt: str | None = None) -> Message:
        return Message(
            id=rec.id,
            queue=q.info.name,
            body=rec.body,
            attributes=dict(rec.attributes),
            group_id=rec.group_id,
            dedup_id=rec.dedup_id,
            priority=rec.priority,
            deadline=rec.deadline,
            sent_at=rec.sent_at,
            visible_at=rec.visible_at,
            receive_count=rec.receive_count,
            first_received_at=rec.first_received_at,
            version=rec.version,
            sequence=rec.seq,
            source_queue=rec.source_queue,
            error=rec.error,
            compressed=rec.compressed,
            receipt=receipt,
        )

    def _archive(self, q: QueueState, rec: Rec, outcome: str, now: float) -> None:
        if q.attrs.archive:
            q.archive.append(
                ArchivedMessage(
                    id=rec.id,
                    queue=q.info.name,
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

    def _drop(self, q: QueueState, rec: Rec, outcome: str, now: float) -> None:
        del q.messages[rec.id]
        self._archive(q, rec, outcome, now)
        if outcome == "expired":
            q.expired += 1
        elif outcome == "deleted":
            q.deleted += 1

    def _sweep(self, q: QueueState, now: float, force: bool = False) -> None:
        if not force and now - q.swept_at < 1.0:
            return
        q.swept_at = now
        horizon = now - q.attrs.retention
        for rec in [
            r
            for r in q.messages.values()
            if r.sent_at < horizon or (r.deadline is not None and r.deadline <= now)
        ]:
            self._drop(q, rec, "expired", now)
        for key in [k for k, (_, exp) in q.dedup.items() if exp <= now]:
            del q.dedup[key]

    def _to_dlq(self, q: QueueState, rec: Rec, now: float, error: str | None) -> Rec | None:
        policy = q.attrs.dead_letter
        dlq = self._s.queues.get(policy.queue) if policy else None
        if dlq is None:
            return None
        q.dead += 1
        old = dlq.messages.get(rec.id)
        if old is not None:
            self._archive(dlq, old, "replaced", now)
        moved = self._move(q, rec, dlq, now, dead_from=q.info.name, error=error)
        self.notify(dlq.info.name)
        return moved

    def _move(
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
        dest.messages.pop(rec.id, None)
        moved = Rec(
            id=rec.id,
            seq=self._next_seq(),
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
        self._insert(dest, moved, now)
        return moved

    def _claim(self, q: QueueState, rec: Rec, now: float, vt: float, token: str) -> Message:
        rec.receive_count += 1
        if rec.first_received_at is None:
            rec.first_received_at = now
        at_most_once = q.attrs.delivery is Delivery.AT_MOST_ONCE
        rec.visible_at = FAR_FUTURE if at_most_once else now + vt
        rec.version += 1
        rec.token = token
        self._schedule(q, rec, now)
        return self._view(q, rec, make_receipt(q.info.name, rec.seq, rec.id, token))

    def _standard_candidates(self, q: QueueState, now: float) -> Iterable[Rec]:
        while q.later and q.later[0][0] <= now:
            _, seq, mid, version = heapq.heappop(q.later)
            rec = q.messages.get(mid)
            if rec is not None and rec.version == version:
                heapq.heappush(q.ready, (-rec.priority, seq, mid, version))
        while q.ready:
            _, _, mid, version = heapq.heappop(q.ready)
            rec = q.messages.get(mid)
            if rec is None or rec.version != version or rec.visible_at > now:
                continue
            yield rec

    def _fifo_candidates(self, q: QueueState, now: float) -> Iterable[Rec]:
        blocked: set[str | None] = set()
        for rec in list(q.messages.values()):
            if rec.group_id in blocked or rec.id not in q.messages:
                continue
            if rec.visible_at > now:
                blocked.add(rec.group_id)
                continue
            yield rec

    def _get(self, q: QueueState, message_id: str) -> Rec:
        rec = q.messages.get(message_id)
        if rec is None:
            raise MessageNotFound(f"no message {message_id!r} in queue {q.info.name!r}")
        return rec

    def _touch(self, q: QueueState, rec: Rec, now: float) -> None:
        rec.version += 1
        rec.token = None
        self._schedule(q, rec, now)

    # -- queues ---------------------------------------------------------------------------

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        now = self.clock.now()
        with self._s.lock:
            q = self._s.queues.get(name)
            if q is not None:
                if q.attrs != attributes:
                    raise QueueExists(
                        f"queue {name!r} exists with different attributes: use set_attributes"
                        " to change them"
                    )
                return q.info, False
            info = QueueInfo(name=name, attributes=attributes, created_at=now, updated_at=now)
            self._s.queues[name] = QueueState(
                info=info, tokens=attributes.rate_limit or 0, tokens_at=now
            )
            return info, True

    def delete_queue(self, name: str) -> None:
        with self._s.lock:
            self._q(name)
            del self._s.queues[name]
            for subscribers in self._s.topics.values():
                if name in subscribers:
                    subscribers.remove(name)

    def list_queues(self, prefix: str = "") -> list[str]:
        with self._s.lock:
            return sorted(n for n in self._s.queues if n.startswith(prefix))

    def get_queue(self, name: str) -> QueueInfo:
        with self._s.lock:
            return self._q(name).info

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(name)
            q.info = QueueInfo(
                name=name, attributes=attributes, created_at=q.info.created_at, updated_at=now
            )
            return q.info

    def purge_queue(self, name: str) -> int:
        with self._s.lock:
            q = self._q(name)
            n = len(q.messages)
            q.messages.clear()
            q.ready.clear()
            q.later.clear()
            return n

    def queue_stats(self, name: str) -> QueueStats:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(name)
            self._sweep(q, now, force=True)
            counts = {MessageState.READY: 0, MessageState.DELAYED: 0, MessageState.IN_FLIGHT: 0}
            oldest: float | None = None
            for rec in q.messages.values():
                if rec.visible_at <= now:
                    counts[MessageState.READY] += 1
                elif rec.receive_count:
                    counts[MessageState.IN_FLIGHT] += 1
                else:
                    counts[MessageState.DELAYED] += 1
                if oldest is None or rec.sent_at < oldest:
                    oldest = rec.sent_at
            return QueueStats(
                queue=name,
                ready=counts[MessageState.READY],
                delayed=counts[MessageState.DELAYED],
                in_flight=counts[MessageState.IN_FLIGHT],
                dead=q.dead,
                expired=q.expired,
                oldest_age=None if oldest is None else max(0.0, now - oldest),
                sent=q.sent,
                received=q.received,
                deleted=q.deleted,
            )

    # -- messages -------------------------------------------------------------------------

    def _send_locked(
        self, q: QueueState, messages: Sequence[NewMessage], now: float
    ) -> list[SendResult]:
        results: list[SendResult] = []
        fifo = q.attrs.fifo
        for m in messages:
            if m.generated_id or not m.id:
                m = dataclasses.replace(m, id=new_id(), generated_id=False)
            elif m.id in q.messages:
                results.append(SendResult(id=m.id, duplicate=True))
                continue
            key = dedup_key(m, q.attrs.content_based_dedup) if fifo else None
            if key is not None:
                seen = q.dedup.get(key)
                if seen is not None and seen[1] > now:
                    results.append(SendResult(id=seen[0], duplicate=True))
                    continue
                q.dedup[key] = (m.id, now + DEDUP_WINDOW)
            seq = self._next_seq()
            rec = Rec(
                id=m.id,
                seq=seq,
                body=m.body,
                attributes=dict(m.attributes),
                group_id=m.group_id,
                dedup_id=key,
                priority=0 if fifo else m.priority,
                deadline=m.deadline,
                sent_at=now,
                visible_at=now + m.delay,
                compressed=m.compressed,
            )
            self._insert(q, rec, now)
            q.sent += 1
            results.append(SendResult(id=m.id, sequence=seq if fifo else None))
        return results

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        now = self.clock.now()
        with self._s.lock:
            results = self._send_locked(self._q(queue), messages, now)
        self.notify(queue)
        return results

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(queue)
            self._sweep(q, now)
            limit = max_messages
            rate = q.attrs.rate_limit
            if rate:
                q.tokens = refill_tokens(q.tokens, q.tokens_at, rate, now)
                q.tokens_at = now
                limit = min(limit, int(q.tokens))
                if limit <= 0:
                    return []
            token = secrets.token_hex(8)
            policy = q.attrs.dead_letter
            out: list[Message] = []
            pick = self._fifo_candidates if q.attrs.fifo else self._standard_candidates
            for rec in pick(q, now):
                if rec.deadline is not None and rec.deadline <= now:
                    self._drop(q, rec, "expired", now)
                    continue
                if (
                    policy is not None
                    and rec.receive_count >= policy.max_receive_count
                    and self._to_dlq(q, rec, now, None) is not None
                ):
                    continue
                out.append(self._claim(q, rec, now, visibility_timeout, token))
                if len(out) >= limit:
                    break
            q.received += len(out)
            if rate:
                q.tokens -= len(out)
            return out

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        now = self.clock.now()
        results: list[Exception | None] = []
        with self._s.lock:
            q = self._q(queue)
            for receipt in receipts:
                try:
                    _, mid, token = parse_receipt(queue, receipt)
                except Exception as exc:
                    results.append(exc)
                    continue
                rec = q.messages.get(mid)
                if rec is None or rec.token != token:
                    results.append(stale_receipt(mid))
                    continue
                self._drop(q, rec, "deleted", now)
                results.append(None)
        return results

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        now = self.clock.now()
        results: list[Exception | None] = []
        released = False
        with self._s.lock:
            q = self._q(queue)
            for receipt, timeout in entries:
                try:
                    _, mid, token = parse_receipt(queue, receipt)
                except Exception as exc:
                    results.append(exc)
                    continue
                rec = q.messages.get(mid)
                if rec is None or rec.token != token:
                    results.append(stale_receipt(mid))
                    continue
                rec.visible_at = now + timeout
                rec.version += 1
                self._schedule(q, rec, now)
                released = released or timeout == 0
                results.append(None)
        if released:
            self.notify(queue)
        return results
