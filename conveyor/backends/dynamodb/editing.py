"""Inspection and editing in place for the DynamoDB store: reads of a queue through
DynamoMQ's index, and rewrites of one message conditional on its `version` (retried when a
receiver changed it meanwhile)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...exceptions import ConveyorError, StoreUnavailable
from ...models import ArchivedMessage, Message, MessageState, MessageUpdate
from ..base import Editing
from ..errors import in_flight, no_dead_letter_policy, no_dead_letter_queue, no_message, no_source
from .items import Doc, Entry, doc_item, n, s
from .table import Cancelled, ConditionFailed, expr

if TYPE_CHECKING:
    from .store import DynamoStore

EDIT_ATTEMPTS = 8


class DynamoEditor(Editing):
    """The store's `editing()`."""

    def __init__(self, store: DynamoStore) -> None:
        self.store = store

    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        entry = self.store.queue_entry(queue)
        now = self.store.clock.now()
        out: list[Message] = []
        for doc in sorted(self.store.queue_docs(entry), key=lambda d: d.order):
            if doc.order <= after:
                continue
            m = doc.message(queue)
            if state is None or m.state(now) is state:
                out.append(m)
                if len(out) >= limit:
                    break
        return out

    def get_message(self, queue: str, message_id: str) -> Message:
        return self.store.message_doc(self.store.queue_entry(queue), message_id).message(queue)

    def _rewrite(self, queue: str, message_id: str, change: Callable[[Doc, float], None]) -> Doc:
        """Read a message, change it, and write it back if nobody changed it meanwhile
        (retried); its version goes up."""
        entry = self.store.queue_entry(queue)
        for _ in range(EDIT_ATTEMPTS):
            now = self.store.clock.now()
            doc = self.store.message_doc(entry, message_id)
            old = doc.version
            change(doc, now)
            doc.version = old + 1
            try:
                self.store.call(
                    "put_item",
                    Item=doc_item(doc, entry, now),
                    ExpressionAttributeValues={":v": n(old), ":q": s(entry.qt)},
                    **expr(ConditionExpression="#version = :v AND #queue_type = :q"),
                )
            except ConditionFailed:
                continue
            if doc.vis <= now:
                self.store.notify(queue)
            else:
                self.store.note_due(entry, doc.vis)
            return doc
        raise _busy(message_id)

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        fifo = self.store.queue_entry(queue).attrs.fifo

        def change(doc: Doc, now: float) -> None:
            if update.body is not None:
                doc.body = update.body
                doc.z = bool(update.compressed)
            if update.attributes is not None:
                doc.attributes = dict(update.attributes)
            if update.priority is not None and not fifo and update.priority != doc.pri:
                doc.pri = update.priority
                doc.seq = self.store.order.take(1)  # the back of its new priority
                doc.tok = None
            if update.visible_at is not None:
                doc.vis = update.visible_at

        return self._rewrite(queue, message_id, change).message(queue)

    def remove_message(self, queue: str, message_id: str) -> None:
        entry = self.store.queue_entry(queue)
        try:
            self.store.call(
                "delete_item",
                Key={"id": s(entry.item_id(message_id))},
                ExpressionAttributeValues={":q": s(entry.qt)},
                **expr(ConditionExpression="#queue_type = :q"),
            )
        except ConditionFailed:
            raise no_message(queue, message_id) from None
        self.store.accounts.count(entry, "deleted")  # an admin's delete is a delete

    def reset_message(self, queue: str, message_id: str) -> Message:
        def change(doc: Doc, now: float) -> None:
            doc.rc = 0
            doc.frx = None
            doc.vis = now
            doc.tok = None

        return self._rewrite(queue, message_id, change).message(queue)

    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        def change(doc: Doc, now: float) -> None:
            doc.vis = now + delay
            doc.tok = None

        return self._rewrite(queue, message_id, change).message(queue)

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        entry = self.store.queue_entry(queue)
        policy = entry.attrs.dead_letter
        if policy is None:
            raise no_dead_letter_policy(queue)
        dlq = self.store.maybe_entry(policy.queue)
        if dlq is None:
            raise no_dead_letter_queue(policy.queue, queue)
        for _ in range(EDIT_ATTEMPTS):
            doc = self.store.message_doc(entry, message_id)
            try:
                moved = self.store.move(
                    entry, doc, dlq, self.store.clock.now(), dead_from=queue, error=error
                )
            except (ConditionFailed, Cancelled):
                continue
            self.store.accounts.count(entry, "dead")
            self.store.notify(dlq.name)
            return moved.message(dlq.name)
        raise _busy(message_id)

    def redrive(
        self,
        queue: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int = 100,
        to: str | None = None,
    ) -> list[str]:
        entry = self.store.queue_entry(queue)
        now = self.store.clock.now()
        if ids is not None:
            docs = [self.store.message_doc(entry, mid) for mid in ids]
            for doc in docs:
                if doc.vis > now and doc.rc:
                    raise in_flight(doc.mid)
        else:
            ready = (d for d in self.store.queue_docs(entry) if d.vis <= now)
            docs = sorted(ready, key=lambda d: d.order)[:limit]
        targets: dict[str, Entry] = {}
        for doc in docs:
            dest = to or doc.src
            if dest is None:
                raise no_source(doc.mid)
            if dest not in targets:
                targets[dest] = self.store.queue_entry(dest)
        moved: list[str] = []
        for doc in docs:
            target = targets[to or doc.src or ""]
            try:
                self.store.move(entry, doc, target, now, dead_from=None, error=None)
            except (ConditionFailed, Cancelled):
                continue  # received or changed since it was read: it stays
            self.store.accounts.count(target, "sent")
            moved.append(doc.mid)
        for name in targets:
            self.store.notify(name)
        return moved

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        self.store.queue_entry(queue)
        return []  # no archive on this store (the ARCHIVE feature is absent)


def _busy(message_id: str) -> ConveyorError:
    return StoreUnavailable(
        f"message {message_id!r} kept changing while it was edited (busy receivers?); retry"
    )
