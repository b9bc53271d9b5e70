"""`QueuePipeline`: one queue's bulk access for parallel jobs (the Spark data source), from
`Client.pipeline`. It calls its store's `Pipeline` contract, prepares what it writes as a
send would, and decodes what it reads (bodies a queue compressed come back as sent)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from .backends.base import Bounds, Pipeline
from .models import ArchivedMessage, Message, NewMessage
from .queues import Queue, decode_archived, decode_message
from .sends import SendEntry


class QueuePipeline:
    def __init__(self, store: Pipeline, queue: Queue) -> None:
        self.store = store
        self.queue = queue
        self.name = queue.name

    def bounds(self, *, archive: bool = False) -> Bounds:
        """Row count and key range of the queue's messages (or its archive's)."""
        return self.store.row_bounds(self.name, archive=archive)

    def scan(self, low: int, high: int) -> Iterator[Message]:
        """Every message with low < row key <= high, none received."""
        for m in self.store.scan_messages(self.name, low, high):
            yield decode_message(m) if m.compressed else m

    def scan_archive(self, low: int, high: int) -> Iterator[ArchivedMessage]:
        for a in self.store.scan_archive(self.name, low, high):
            yield decode_archived(a)

    def position(self, stream: str) -> int:
        """The highest lease number acknowledged for `stream` (0 at first)."""
        return self.store.stream_position(self.name, stream)

    def lease(self, stream: str, lease: int, max_messages: int, visibility_timeout: float) -> int:
        """Top lease `lease` up to `max_messages` held messages; how many it holds."""
        return self.store.lease_messages(self.name, stream, lease, max_messages, visibility_timeout)

    def lease_bounds(self, stream: str, first: int, last: int) -> Bounds:
        return self.store.lease_bounds(self.name, stream, first, last)

    def read_leased(
        self, stream: str, first: int, last: int, low: int, high: int
    ) -> Iterator[Message]:
        for m in self.store.read_leased(self.name, stream, first, last, low, high):
            yield decode_message(m) if m.compressed else m

    def acknowledge(self, stream: str, upto: int) -> int:
        """Delete what leases <= `upto` still hold and record the stream's position."""
        return self.store.acknowledge_leases(self.name, stream, upto)

    def stage(
        self, sink: str, batch: int, part: int, attempt: int, entries: Iterable[SendEntry]
    ) -> int:
        """Insert entries hidden under (sink, batch, part, attempt), each checked and
        encoded as a send to the queue would be; how many were staged."""
        prepared = self.queue.sending(entries, most=None).as_messages()
        return self.stage_prepared(sink, batch, part, attempt, prepared)

    def stage_prepared(
        self, sink: str, batch: int, part: int, attempt: int, messages: Sequence[NewMessage]
    ) -> int:
        """`stage` for the messages of a checked send (`Queue.sending(...).as_messages()`)."""
        return self.store.stage_messages(self.name, sink, batch, part, attempt, messages)

    def publish(self, sink: str, batch: int, tags: Sequence[tuple[int, int]]) -> int | None:
        """Make visible what (part, attempt) in `tags` staged for (sink, batch)."""
        return self.store.publish_staged(self.name, sink, batch, tags)

    def discard(self, sink: str, batch: int) -> int:
        """Remove everything staged for (sink, batch)."""
        return self.store.discard_staged(self.name, sink, batch)

    def remove(self, ids: Sequence[str]) -> int:
        """Remove the messages with these ids (moved elsewhere by a job); how many went."""
        return self.store.remove_messages(self.name, ids)
