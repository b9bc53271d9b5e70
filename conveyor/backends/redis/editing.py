"""The Redis store's messages read and edited in place: peek, get, update, remove, reset,
fail, moves to the dead-letter queue and redrives (across Cluster slots where the two
queues' keys live apart), and the archive; each change one Lua script."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...exceptions import ConveyorError
from ...models import ArchivedMessage, Message, MessageState, MessageUpdate
from ..base import Editing
from ..codec import encode_attributes
from ..errors import in_flight, no_dead_letter_policy, no_dead_letter_queue, no_message, no_source
from .values import (
    ARCHIVE_FIELDS,
    QueueEntry,
    archived,
    message,
    messages,
    num,
    pack_ext,
    pack_message,
)

if TYPE_CHECKING:
    from .store import RedisStore


class RedisEditor(Editing):
    """A Redis store's messages, read and edited in place."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    # -- reading messages -----------------------------------------------------------------

    def _fetch(self, entry: QueueEntry, message_id: str) -> Message:
        found = self.store.queue_script("peek", entry, [entry.prefix, "", message_id])
        if not found:
            raise no_message(entry.name, message_id)
        return message(entry.name, *found)

    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        entry = self.store.queue_entry(queue)
        found = self.store.queue_script(
            "peek",
            entry,
            [
                entry.prefix,
                num(self.store.clock.now()),
                str(after),
                limit,
                state.value if state else "",
            ],
        )
        return messages(queue, found)

    def get_message(self, queue: str, message_id: str) -> Message:
        return self._fetch(self.store.queue_entry(queue), message_id)

    # -- editing --------------------------------------------------------------------------

    def _edit(self, entry: QueueEntry, op: str, message_id: str, *args: Any) -> Any:
        out = self.store.queue_script(
            "edit",
            entry,
            [
                entry.prefix,
                entry.name,
                num(self.store.clock.now()),
                self.store.channel,
                op,
                message_id,
                *args,
            ],
        )
        if out is None:
            raise no_message(entry.name, message_id)
        return out

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        entry = self.store.queue_entry(queue)
        priority = update.priority if not entry.attrs.fifo else None
        values = self._edit(
            entry,
            "update",
            message_id,
            update.body if update.body is not None else "",
            "1" if update.compressed else "0",
            (encode_attributes(update.attributes) or "") if update.attributes is not None else "",
            str(priority) if priority is not None else "",
            num(update.visible_at) if update.visible_at is not None else "",
            "1" if update.body is not None else "0",
            "1" if update.attributes is not None else "0",
            "1" if priority is not None else "0",
            "1" if update.visible_at is not None else "0",
        )
        return message(queue, *values)

    def remove_message(self, queue: str, message_id: str) -> None:
        entry = self.store.queue_entry(queue)
        self._edit(entry, "remove", message_id, "1" if entry.attrs.archive else "0")

    def reset_message(self, queue: str, message_id: str) -> Message:
        return message(queue, *self._edit(self.store.queue_entry(queue), "reset", message_id))

    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        visible = num(self.store.clock.now() + delay)
        return message(
            queue, *self._edit(self.store.queue_entry(queue), "fail", message_id, visible)
        )

    def move_across(
        self, src: QueueEntry, message_id: str, dest: QueueEntry, *, dead: bool, error: str | None
    ) -> int:
        """Move a message between queues in different slots of a cluster: write it into the
        destination, then take it out of the source. A crash between the two leaves it in
        both (never in neither): at least once."""
        m = self._fetch(src, message_id)
        now = num(self.store.clock.now())
        sent = num(m.sent_at) if dead else now
        deadline = "" if m.deadline is None else num(m.deadline)
        ext = pack_ext(
            encode_attributes(m.attributes),
            deadline,
            src.name if dead else None,
            (error if error is not None else m.error) if dead else None,
            m.compressed,
        )
        blob = pack_message(sent, now, m.group_id or "", m.dedup_id or "", ext, m.body)
        seq = self.store.queue_script(
            "put",
            dest,
            [
                dest.prefix,
                dest.name,
                now,
                self.store.channel,
                "0" if dead else "1",
                m.id,
                blob,
                str(m.priority),
                deadline,
                sent,
            ],
        )
        self._edit(src, "moved", message_id, "dead" if dead else "")
        return int(seq)

    def _move(
        self,
        src: QueueEntry,
        dest: QueueEntry,
        ids: Sequence[str],
        *,
        dead: bool,
        error: str | None,
    ) -> list[tuple[int, int | None]]:
        """Move messages from `src` to `dest`; per id its status (1 moved, 0 absent, 2 in
        flight) and new sequence."""
        if not self.store.same_slot(src, dest):
            out: list[tuple[int, int | None]] = []
            for message_id in ids:
                try:
                    m = self._fetch(src, message_id)
                except ConveyorError:
                    out.append((0, None))
                    continue
                if not dead and m.visible_at > self.store.clock.now() and m.receive_count > 0:
                    out.append((2, None))
                    continue
                out.append((1, self.move_across(src, message_id, dest, dead=dead, error=error)))
            return out
        flat = self.store.redis.script(
            "move",
            [f"{src.prefix}meta", f"{dest.prefix}meta"],
            [
                src.prefix,
                src.name,
                dest.prefix,
                dest.name,
                num(self.store.clock.now()),
                self.store.channel,
                "dead" if dead else "redrive",
                error or "",
                *ids,
            ],
        )
        return [
            (int(flat[i]), int(flat[i + 1]) if flat[i + 1] is not None else None)
            for i in range(0, len(flat), 2)
        ]

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        entry = self.store.queue_entry(queue)
        policy = entry.attrs.dead_letter
        if policy is None:
            raise no_dead_letter_policy(queue)
        dlq = self.store.maybe_entry(policy.queue)
        if dlq is None:
            raise no_dead_letter_queue(policy.queue, queue)
        [(status, _)] = self._move(entry, dlq, [message_id], dead=True, error=error)
        if status == 0:
            raise no_message(queue, message_id)
        return self._fetch(dlq, message_id)

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
            chosen = [self._fetch(entry, message_id) for message_id in ids]
            for m in chosen:
                if m.visible_at > now and m.receive_count > 0:
                    raise in_flight(m.id)
        else:
            chosen = self.list_messages(queue, state=MessageState.READY, limit=limit)
        by_dest: dict[str, list[str]] = {}
        for m in chosen:
            dest = to or m.source_queue
            if dest is None:
                raise no_source(m.id)
            by_dest.setdefault(dest, []).append(m.id)
        dests = {name: self.store.queue_entry(name) for name in by_dest}
        moved: set[str] = set()
        for name, message_ids in by_dest.items():
            for message_id, (status, _) in zip(
                message_ids,
                self._move(entry, dests[name], message_ids, dead=False, error=None),
                strict=True,
            ):
                if status == 1:
                    moved.add(message_id)
        return [m.id for m in chosen if m.id in moved]

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        entry = self.store.queue_entry(queue)

        def read(client: Any) -> list[Any]:
            numbers = client.lrange(f"{entry.prefix}archive", after, after + limit - 1)
            pipe = client.pipeline(transaction=False)
            for n in numbers:
                pipe.hmget(f"{entry.prefix}arch:{n.decode()}", *ARCHIVE_FIELDS)
            return list(pipe.execute()) if numbers else []

        found = (archived(queue, values) for values in self.store.redis.run(read))
        return [a for a in found if a is not None]
