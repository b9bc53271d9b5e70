"""The SQL store's moves between queues (expiry, dead letters, redrive) and its inspection
and editing in place: a part the store holds (its receives dead-letter and expire through
it too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...exceptions import MessageNotFound, QueueDoesNotExist, StoreUnavailable
from ...models import ArchivedMessage, Message, MessageState, MessageUpdate, QueueAttributes
from ..base import Editing
from ..codec import encode_attributes
from ..errors import in_flight, no_dead_letter_policy, no_dead_letter_queue, no_message, no_source
from .connections import Exec
from .pipeline import HIDDEN
from .rows import (
    Fields,
    Row,
    row_archived,
    row_fields,
    row_message,
)
from .statement import Statement, spread
from .statements import (
    ADD_DEAD,
    ADD_EXPIRED,
    ARCHIVE_HELD,
    ARCHIVE_KEYS,
    DELETE_KEY,
    DELETE_KEYS,
    FAIL_MESSAGE,
    LIST_ARCHIVE,
    LIST_DELAYED,
    LIST_IN_FLIGHT,
    LIST_MESSAGES,
    LIST_READY,
    MESSAGE_ROW,
    REDRIVE_PICK,
    RESET_MESSAGE,
    UPDATE_MESSAGE,
)

if TYPE_CHECKING:
    from .store import SQLStore


REPLACE_TRIES = 5
"""Times a move looks again for a message of the same id written meanwhile (`_replace_into`)."""
# why a message found by a call is gone when it reads or moves it
LEFT = "it left its queue while this call used it (another call deleted, moved or expired it)"


class SQLEditor(Editing):
    def __init__(self, store: SQLStore[Any]) -> None:
        self.store = store
        self.d = store.dialect

    # -- moving messages ------------------------------------------------------------------

    def archive(
        self,
        ex: Exec,
        qid: int,
        queue: str,
        now: float,
        outcome: str,
        keys: Sequence[int],
        token: str | None = None,
    ) -> None:
        """Copy the queue's rows of `keys` to the archive (only those `token` holds, if
        given)."""
        values = {"queue": queue, "now": now, "outcome": outcome, **spread("keys", keys)}
        if token is None:
            statement = ARCHIVE_KEYS
        else:
            statement, values["token"] = ARCHIVE_HELD, token
        ex.run(self.d.sql(statement, qid, len(keys)), values)

    def expire(
        self, ex: Exec, qid: int, queue: str, attrs: QueueAttributes, key: int, now: float
    ) -> None:
        d = self.d
        if attrs.archive:
            self.archive(ex, qid, queue, now, "expired", [key])
        ex.run(d.sql(DELETE_KEY, qid), {"key": key})
        ex.run(d.sql(ADD_EXPIRED), {"n": 1, "qid": qid})

    def _row(self, ex: Exec, qid: int, key: int) -> Row:
        """The row of `key`, which this transaction found (MessageNotFound where another took
        it out of the queue since: deleted, moved or expired it)."""
        row = ex.one(self.d.sql(MESSAGE_ROW, qid), {"key": key})
        if row is None:
            raise MessageNotFound(LEFT)
        return row

    def _rewrite(self, ex: Exec, qid: int, key: int, dest: int, fields: Fields) -> int:
        """Take row `key` out of queue `qid` and write `fields` at the back of queue
        `dest` (the same queue, for a new priority); the new row's key. A message of the
        same id in `dest` is replaced."""
        if not ex.run(self.d.sql(DELETE_KEY, qid), {"key": key}):
            raise MessageNotFound(f"message {fields.id!r}: {LEFT}")  # by a call that ended first
        [new] = self._replace_into(ex, dest, [fields])
        return new

    def move(
        self, ex: Exec, src: int, key: int, dest: int, *, dead_from: str | None, error: str | None
    ) -> int:
        """Move a message to the back of another queue; returns its new key.

        Into a dead-letter queue (`dead_from` names the source): keeps sent_at, records the
        source and `error` (or the error it had). Out of one (`dead_from` None, a redrive):
        sent now, source and error cleared. A message of the same id already in the
        destination is replaced; receive count and receipts start afresh.
        """
        now = self.store.clock.now()
        f = row_fields(self._row(ex, src, key))
        moved = f._replace(
            sent_at=now if dead_from is None else f.sent_at,
            visible_at=now,
            receive_count=0,
            first_received_at=None,
            version=1,
            source_queue=dead_from,
            error=None if dead_from is None else (error if error is not None else f.error),
        )
        return self._rewrite(ex, src, key, dest, moved)

    def to_dlq(
        self, ex: Exec, qid: int, queue: str, dlq_id: int, key: int, error: str | None
    ) -> int:
        moved = self.move(ex, qid, key, dlq_id, dead_from=queue, error=error)
        ex.run(self.d.sql(ADD_DEAD), {"qid": qid})
        return moved

    # -- inspection and editing -----------------------------------------------------------

    def _message_row(self, ex: Exec, qid: int, queue: str, message_id: str) -> Row:
        key = self.d.find(ex, qid, message_id)
        row = None if key is None else ex.one(self.d.sql(MESSAGE_ROW, qid), {"key": key})
        if row is None:
            raise no_message(queue, message_id)
        return row

    def _message(self, queue: str, row: Row) -> Message:
        return row_message(queue, row, self.d.sequence)

    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        d = self.d
        now = self.store.clock.now()
        statement = {  # (messages a job staged, hidden until it publishes, are not listed)
            None: LIST_MESSAGES,
            MessageState.READY: LIST_READY,
            MessageState.DELAYED: LIST_DELAYED,
            MessageState.IN_FLIGHT: LIST_IN_FLIGHT,
        }[state]
        values = {"now": now, "hidden": HIDDEN, "limit": limit, **d.after_values(after)}

        def run(ex: Exec) -> list[Row]:
            qid, _ = self.store.queue_row(ex, queue)
            return ex.rows(d.sql(statement, qid), values)

        return [self._message(queue, row) for row in self.store.read(run)]

    def get_message(self, queue: str, message_id: str) -> Message:
        def run(ex: Exec) -> Row:
            qid, _ = self.store.queue_row(ex, queue)
            return self._message_row(ex, qid, queue, message_id)

        return self._message(queue, self.store.read(run))

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        d = self.d

        def run(ex: Exec) -> Row:
            qid, attrs = self.store.queue_row(ex, queue)
            row = self._message_row(ex, qid, queue, message_id)
            old = row_fields(row)
            key, *_ = row
            f = old._replace(version=old.version + 1)
            if update.body is not None:
                f = f._replace(body=update.body, compressed=int(bool(update.compressed)))
            if update.attributes is not None:
                f = f._replace(attributes=encode_attributes(update.attributes))
            if update.visible_at is not None:
                f = f._replace(visible_at=update.visible_at)
            if update.priority is not None and not attrs.fifo and update.priority != old.priority:
                # a new priority is a new place in the queue: the back of that priority
                key = self._rewrite(ex, qid, key, qid, f._replace(priority=update.priority))
            else:
                ex.run(
                    d.sql(UPDATE_MESSAGE, qid),
                    {
                        "body": f.body,
                        "compressed": f.compressed,
                        "attributes": f.attributes,
                        "visible_at": f.visible_at,
                        "key": key,
                    },
                )
            d.notify_waiters(ex, queue)
            self.store.accounts.recount(ex, qid)
            return self._row(ex, qid, key)

        message = self._message(queue, self.store.write(run))
        self.store.notify(queue)
        return message

    def remove_message(self, queue: str, message_id: str) -> None:
        d = self.d
        now = self.store.clock.now()

        def run(ex: Exec) -> int:
            qid, attrs = self.store.queue_row(ex, queue)
            key, *_ = self._message_row(ex, qid, queue, message_id)
            if attrs.archive:
                self.archive(ex, qid, queue, now, "removed", [key])
            if not ex.run(d.sql(DELETE_KEY, qid), {"key": key}):
                raise no_message(queue, message_id)  # deleted by a call that ended first
            return qid

        # an admin's delete is a delete
        self.store.counted_write(run, "deleted", lambda qid: [(qid, 1)])

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        d = self.d

        def run(ex: Exec) -> tuple[str, Row]:
            qid, attrs = self.store.queue_row(ex, queue)
            key, *_ = self._message_row(ex, qid, queue, message_id)
            policy = attrs.dead_letter
            if policy is None:
                raise no_dead_letter_policy(queue)
            try:
                dlq_id, _ = self.store.queue_row(ex, policy.queue)
            except QueueDoesNotExist:
                raise no_dead_letter_queue(policy.queue, queue) from None
            moved = self.to_dlq(ex, qid, queue, dlq_id, key, error)
            d.notify_waiters(ex, policy.queue)
            self.store.accounts.recount(ex, qid, dlq_id)
            return policy.queue, self._row(ex, dlq_id, moved)

        dlq, row = self.store.write(run)
        self.store.notify(dlq)
        return self._message(dlq, row)

    def redrive(
        self,
        queue: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int = 100,
        to: str | None = None,
    ) -> list[str]:
        d = self.d
        now = self.store.clock.now()

        def run(ex: Exec) -> tuple[list[str], dict[str, tuple[int, int]]]:
            qid, _ = self.store.queue_row(ex, queue)
            if ids is not None:
                rows = [self._message_row(ex, qid, queue, mid) for mid in ids]
            else:
                rows = ex.rows(d.sql(REDRIVE_PICK, qid), {"now": now, "limit": limit})
            picked: list[tuple[int, Fields]] = []
            for row in rows:
                key, *_ = row
                picked.append((key, row_fields(row)))
            for _, f in picked:
                if ids is not None and f.visible_at > now and f.receive_count > 0:
                    raise in_flight(f.id)
            dests: dict[str, tuple[int, int]] = {}  # name: (queue id, messages moved in)
            for _, f in picked:
                dest = to or f.source_queue
                if dest is None:
                    raise no_source(f.id)
                if dest not in dests:
                    dests[dest] = (self.store.queue_row(ex, dest)[0], 0)
            by_dest: dict[str, list[Fields]] = {}
            for _, f in picked:
                by_dest.setdefault(to or f.source_queue or "", []).append(
                    f._replace(  # sent now, its receives and its dead-letter past forgotten
                        sent_at=now, visible_at=now, receive_count=0, first_received_at=None,
                        version=1, source_queue=None, error=None,
                    )
                )  # fmt: skip
            self._delete_keys(ex, qid, [key for key, _ in picked])
            for name, moved in by_dest.items():
                dest_id, _ = dests[name]
                self._replace_into(ex, dest_id, moved)
                dests[name] = (dest_id, len(moved))
                d.notify_waiters(ex, name)
            self.store.accounts.recount(ex, qid, *(dest_id for dest_id, _ in dests.values()))
            return [f.id for _, f in picked], dests

        # counted with the transaction that commits, not once per attempt
        moved, dests = self.store.counted_write(run, "sent", lambda done: list(done[1].values()))
        for name in dests:
            self.store.notify(name)
        return moved

    def _delete_keys(self, ex: Exec, qid: int, keys: Sequence[int]) -> None:
        d = self.d
        for i in range(0, len(keys), 1000):
            part = keys[i : i + 1000]
            ex.run(d.sql(DELETE_KEYS, qid, len(part)), spread("keys", part))

    def _replace_into(self, ex: Exec, dest: int, rows: Sequence[Fields]) -> list[int]:
        """Write moved messages at the back of queue `dest`, replacing messages of the same
        ids there, a few statements for all of them; their new keys. A message of one of
        those ids that another transaction stores in `dest` after this one looked (a move
        or redrive of the same message at once) is replaced too: the insert waits for that
        transaction, and its row is then found."""
        d = self.d
        keys: list[int | None] = [None] * len(rows)
        todo = list(range(len(rows)))
        for _ in range(REPLACE_TRIES):
            found = d.find_many(ex, dest, [rows[i].id for i in todo])
            self._delete_keys(ex, dest, [key for key, _ in found])
            stored = d.insert_keyed(ex, dest, [rows[i] for i in todo], False)
            for i, key in zip(todo, stored, strict=True):
                keys[i] = key
            todo = [i for i, key in zip(todo, stored, strict=True) if key is None]
            if not todo:
                return [key for key in keys if key is not None]
        raise StoreUnavailable(
            f"messages {', '.join(rows[i].id for i in todo[:3])} were written to the"
            f" destination by other transactions {REPLACE_TRIES} times while this one moved"
            " them: try again"
        )

    def reset_message(self, queue: str, message_id: str) -> Message:
        return self._release(queue, message_id, 0.0, RESET_MESSAGE)

    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        return self._release(queue, message_id, delay, FAIL_MESSAGE)

    def _release(self, queue: str, message_id: str, delay: float, statement: Statement) -> Message:
        d = self.d
        now = self.store.clock.now()

        def run(ex: Exec) -> Row:
            qid, _ = self.store.queue_row(ex, queue)
            key, *_ = self._message_row(ex, qid, queue, message_id)
            ex.run(d.sql(statement, qid), {"visible_at": now + delay, "key": key})
            if delay == 0:
                d.notify_waiters(ex, queue)
            self.store.accounts.recount(ex, qid)
            return self._row(ex, qid, key)

        message = self._message(queue, self.store.write(run))
        if delay == 0:
            self.store.notify(queue)
        return message

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        values = {"queue": queue, "limit": limit, "skip": after}
        rows = self.store.read(lambda ex: ex.rows(self.d.sql(LIST_ARCHIVE), values))
        return [row_archived(row) for row in rows]
