"""The `conveyor` PySpark data source: batch and streaming, read and write.

Nothing is shared between the planner, the tasks and the commit but what Spark pickles: the
options, the partitions, batch ids and commit messages. Each side opens its own store
connection on first use (never in pickled state) and closes it when done.

- Batch read: a snapshot of a queue (every state, nothing received) or of its archive,
  split into row-key ranges, one per partition.
- Streaming read: the offset is a lease number kept in the store. Planning batch N+1
  acknowledges everything leased under numbers <= N (Spark committed them) and leases up to
  `maxMessagesPerBatch` messages under N+1; tasks read lease N+1 by row-key range, so a
  replayed batch reads the same messages; `commit` acknowledges again (idempotent).
- Writes: tasks stage messages hidden, tagged with (sink, batch, partition, attempt); the
  job commit publishes the successful attempts' messages in one transaction and records
  (sink, batch), so a retried task or a replayed batch never duplicates; abort removes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from .. import tracing
from ..client import Client
from ..exceptions import InvalidInput, Unsupported
from ..models import Message, NewMessage
from ..pipeline import QueuePipeline
from .options import Options, parse_options
from .rows import (
    SCHEMA,
    WRITABLE,
    archived_row,
    check_columns,
    message_row,
    messages_from,
    projection,
    record_batch,
)

STAGE_CHUNK = 5000  # messages per staging transaction


def _open(options: Options) -> tuple[Client, QueuePipeline]:
    client = Client(options.store)
    try:
        return client, client.pipeline(options.queue)
    except Unsupported:
        client.close()
        raise Unsupported(
            f"store {client.backend.scheme}:// cannot serve Spark jobs (no bulk snapshots,"
            " leases or staged writes): use a sqlite://, postgresql:// or mysql:// store"
        ) from None


class _Store:
    """A lazily opened store connection that is never pickled."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._open: tuple[Client, QueuePipeline] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_open": None}

    @property
    def client(self) -> Client:
        if self._open is None:
            self._open = _open(self.options)
        return self._open[0]

    @property
    def queue(self) -> QueuePipeline:
        if self._open is None:
            self._open = _open(self.options)
        return self._open[1]

    def close(self) -> None:
        if self._open is not None:
            self._open[0].close()
            self._open = None


@dataclass(frozen=True)
class RangePartition(InputPartition):
    low: int
    high: int


@dataclass(frozen=True)
class LeasePartition(InputPartition):
    first: int
    last: int
    low: int
    high: int


@dataclass(frozen=True)
class Staged(WriterCommitMessage):
    part: int
    attempt: int
    count: int


ARROW_ROWS = 5000  # rows per Arrow record batch a read yields


def _batches(source: Iterator[tuple[Any, ...]], columns: list[str] | None) -> Iterator[Any]:
    """Whole rows of the declared schema as Arrow record batches of ARROW_ROWS, of `columns`
    (None: all)."""
    pick = projection(columns)
    rows = []
    for row in source:
        rows.append(pick(row))
        if len(rows) >= ARROW_ROWS:
            yield record_batch(rows, columns)
            rows = []
    if rows:
        yield record_batch(rows, columns)


class ConveyorDataSource(DataSource):
    """``spark.read.format("conveyor").option("store", url).option("queue", name)``."""

    @classmethod
    def name(cls) -> str:
        return "conveyor"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse_options(dict(options))

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SnapshotReader(self.parsed, _columns(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self.parsed.source != "queue":
            raise InvalidInput("a stream reads a queue: source=archive is for batch reads only")
        return LeaseStreamReader(self.parsed, _columns(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _check_writable(schema, overwrite)
        _check_target(self.parsed)
        return StagedWriter(self.parsed, f"job:{uuid.uuid4()}")

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _check_writable(schema, overwrite)
        _check_target(self.parsed)
        if self.parsed.sink is None:
            raise InvalidInput(
                "writeStream to conveyor needs option sinkId (or checkpointLocation): a name"
                " unique to this query and stable across its restarts"
            )
        return StagedStreamWriter(self.parsed, self.parsed.sink)


def _columns(schema: StructType) -> list[str] | None:
    """The columns a read fills: those of a schema given with `.schema(...)` (a subset of
    the declared one, which reads less), or None for the declared schema."""
    return check_columns([(f.name, f.dataType.simpleString()) for f in schema.fields])


def _check_target(options: Options) -> None:
    """The queue exists and takes parallel writes: checked on the driver, before any task."""
    client, _ = _open(options)
    try:
        attrs = client.queue_info(options.queue, fresh=True).attributes
    finally:
        client.close()
    if attrs.fifo:
        raise InvalidInput(
            f"queue {options.queue!r} is FIFO: parallel writers cannot keep group order;"
            " write to a standard queue"
        )


def _check_writable(schema: StructType, overwrite: bool) -> None:
    if overwrite:
        raise InvalidInput("a queue can only be appended to: use .mode('append')")
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields and "body_text" not in fields:
        raise InvalidInput(
            "the DataFrame needs a 'body' column (string or binary) to write messages"
        )
    body = fields.get("body", fields.get("body_text"))
    if not isinstance(body, StringType | BinaryType):
        raise InvalidInput(f"column 'body' must be a string or binary, not {body}")
    attrs = fields.get("attributes")
    if attrs is not None and not (
        isinstance(attrs, MapType) and isinstance(attrs.keyType, StringType)
    ):
        raise InvalidInput("column 'attributes' must be a map of strings to strings")
    snapshot = {"queue", "sent_at", "visible_at", "first_received_at", "removed_at"}
    snapshot |= {"receive_count", "state", "source_queue", "error"}
    unknown = sorted(set(fields) - WRITABLE - snapshot)
    if unknown:
        raise InvalidInput(
            f"unknown column(s) {', '.join(unknown)}: a conveyor sink writes id, body (or"
            " body_text), attributes, group_id and priority"
        )


# -- reading --------------------------------------------------------------------------------


class SnapshotReader(DataSourceReader):
    def __init__(self, options: Options, columns: list[str] | None = None) -> None:
        self.options = options
        self.columns = columns
        self.conn = _Store(options)

    def partitions(self) -> Sequence[InputPartition]:
        try:
            bounds = self.conn.queue.bounds(archive=self.options.source == "archive")
        finally:
            self.conn.close()
        ranges = bounds.split(self.options.partitions) or [(0, 0)]
        return [RangePartition(lo, hi) for lo, hi in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        queue, columns = self.conn.queue, self.columns
        text = columns is None or "body_text" in columns
        try:
            if self.options.source == "archive":
                archived = queue.scan_archive(partition.low, partition.high)
                yield from _batches((archived_row(a, text) for a in archived), columns)
            else:
                now = self.conn.client.clock.now()
                messages = self._traced(queue.scan(partition.low, partition.high))
                yield from _batches((message_row(m, now, text) for m in messages), columns)
        finally:
            self.conn.close()

    def _traced(self, messages: Iterator[Message]) -> Iterator[Message]:
        return tracing.reading(self.options.queue, self.conn.client.backend.scheme, messages)


class LeaseStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options, columns: list[str] | None = None) -> None:
        self.options = options
        self.columns = columns
        self.conn = _Store(options)
        self.budget: int | None = None  # messages left to lease under availableNow

    def initialOffset(self) -> dict[str, int]:
        return {"lease": self.conn.queue.position(self.options.stream)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        stats = self.conn.client.queue(self.options.queue).stats()
        self.budget = stats.ready

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        o, queue = self.options, self.conn.queue
        done = int(start["lease"])
        queue.acknowledge(o.stream, done)
        want = o.max_per_batch
        if isinstance(limit, ReadMaxRows):
            want = min(want, limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            want = o.max_per_batch
        if self.budget is not None:
            if self.budget <= 0:
                return {"lease": done}
            want = min(want, self.budget)
        held = queue.lease(o.stream, done + 1, want, o.lease_timeout)
        if self.budget is not None:
            self.budget -= held
        return {"lease": done + 1} if held else {"lease": done}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        o = self.options
        first, last = int(start["lease"]) + 1, int(end["lease"])
        if last < first:
            return []
        bounds = self.conn.queue.lease_bounds(o.stream, first, last)
        return [LeasePartition(first, last, lo, hi) for lo, hi in bounds.split(o.partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LeasePartition)
        o, p = self.options, partition
        try:
            now = self.conn.client.clock.now()
            messages = tracing.reading(
                o.queue,
                self.conn.client.backend.scheme,
                self.conn.queue.read_leased(o.stream, p.first, p.last, p.low, p.high),
            )
            text = self.columns is None or "body_text" in self.columns
            yield from _batches((message_row(m, now, text) for m in messages), self.columns)
        finally:
            self.conn.close()

    def commit(self, end: dict[str, int]) -> None:
        self.conn.queue.acknowledge(self.options.stream, end["lease"])

    def stop(self) -> None:
        self.conn.close()


# -- writing --------------------------------------------------------------------------------


class Staging:
    """What both writers do: a task stages its partition's rows in the sink (hidden), the
    driver's commit publishes the staged rows of the tasks that succeeded, an abort discards
    them. `batch` is 0 for a batch write, the micro-batch's id for a stream."""

    def __init__(self, options: Options, sink: str) -> None:
        self.options = options
        self.sink = sink
        self.conn = _Store(options)

    def write(self, iterator: Iterator[Any], batch: int) -> Staged:
        ctx = TaskContext.get()
        part, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
        queue = self.conn.queue
        count = 0
        chunk: list[NewMessage] = []
        try:
            for records in iterator:
                chunk += messages_from(queue.queue, records)
                while len(chunk) >= STAGE_CHUNK:
                    count += queue.stage_prepared(
                        self.sink, batch, part, attempt, chunk[:STAGE_CHUNK]
                    )
                    del chunk[:STAGE_CHUNK]
            # the last chunk, however small: an empty partition's records its stage too
            # (publishing asks for each)
            count += queue.stage_prepared(self.sink, batch, part, attempt, chunk)
        finally:
            self.conn.close()
        return Staged(part, attempt, count)

    def publish(self, messages: Sequence[WriterCommitMessage | None], batch: int) -> None:
        tags = [(m.part, m.attempt) for m in messages if isinstance(m, Staged)]
        try:
            self.conn.queue.publish(self.sink, batch, tags)
        finally:
            self.conn.close()

    def discard(self, batch: int) -> None:
        try:
            self.conn.queue.discard(self.sink, batch)
        finally:
            self.conn.close()


class StagedWriter(DataSourceArrowWriter):
    def __init__(self, options: Options, sink: str) -> None:
        self.staging = Staging(options, sink)

    def write(self, iterator: Iterator[Any]) -> Staged:
        return self.staging.write(iterator, 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.staging.publish(messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.staging.discard(0)


class StagedStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Options, sink: str) -> None:
        self.staging = Staging(options, sink)

    def write(self, iterator: Iterator[Any]) -> Staged:
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        if raw is None:
            raise RuntimeError("Spark did not say which micro-batch this task writes")
        return self.staging.write(iterator, int(raw))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.staging.publish(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.staging.discard(batchId)
