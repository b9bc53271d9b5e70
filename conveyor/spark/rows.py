"""Rows of the `conveyor` data source: the declared schema and conversions to and from it."""

from __future__ import annotations

import base64
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..exceptions import InvalidInput
from ..models import ArchivedMessage, AttributeValue, Message, NewMessage, TypedValue
from ..queues import Queue
from ..sends import SendEntry

SCHEMA = (
    "id STRING, queue STRING, body BINARY, body_text STRING, attributes MAP<STRING, STRING>,"
    " group_id STRING, priority INT, sent_at TIMESTAMP, visible_at TIMESTAMP,"
    " first_received_at TIMESTAMP, removed_at TIMESTAMP, receive_count INT, state STRING,"
    " source_queue STRING, error STRING"
)
# each column's type as Spark's DataType.simpleString() spells it
TYPES = {
    name: kind.lower().replace(" ", "")
    for name, kind in (c.split(" ", 1) for c in re.split(r",\s*(?![^<]*>)", SCHEMA))
}
COLUMNS = list(TYPES)
# what a sink takes from a DataFrame; the snapshot's other columns are ignored
WRITABLE = {"id", "body", "body_text", "attributes", "group_id", "priority"}


def _text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def attribute_text(value: AttributeValue) -> str:
    if isinstance(value, TypedValue):
        value = value.value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _attributes(attrs: Mapping[str, AttributeValue]) -> dict[str, str]:
    return {k: attribute_text(v) for k, v in attrs.items()} if attrs else {}


def check_columns(fields: Sequence[tuple[str, str]]) -> list[str] | None:
    """The columns of a schema given to a read, as (name, simpleString) pairs: None for the
    whole schema, else their names (each one of SCHEMA's, of its type, once)."""
    names = [name for name, _ in fields]
    for name, kind in fields:
        if name not in TYPES:
            raise InvalidInput(f"unknown column {name!r}: a conveyor read has {', '.join(COLUMNS)}")
        if kind != TYPES[name]:
            raise InvalidInput(f"column {name!r} is {TYPES[name]}, not {kind}")
    if len(set(names)) != len(names) or not names:
        raise InvalidInput("a schema given to a conveyor read names each column once")
    return None if names == COLUMNS else names


def projection(columns: Sequence[str] | None) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """From a whole row, the row of `columns` (None: all)."""
    if columns is None:
        return lambda row: row
    at = [COLUMNS.index(c) for c in columns]
    if len(at) == 1:
        (i,) = at
        return lambda row: (row[i],)
    pick = operator.itemgetter(*at)
    return lambda row: pick(row)


def message_row(m: Message, now: float, text: bool = True) -> tuple[Any, ...]:
    """A message as a row of the schema (times as epoch seconds: `record_batch` converts);
    `text` False leaves body_text None (a read that does not want it skips decoding)."""
    return (
        m.id,
        m.queue,
        m.body,
        _text(m.body) if text else None,
        _attributes(m.attributes),
        m.group_id,
        m.priority,
        m.sent_at,
        m.visible_at,
        m.first_received_at,
        None,
        m.receive_count,
        m.state(now)._value_,  # the member's value without the enum descriptor (per row)
        m.source_queue,
        m.error,
    )


def archived_row(a: ArchivedMessage, text: bool = True) -> tuple[Any, ...]:
    return (
        a.id,
        a.queue,
        a.body,
        _text(a.body) if text else None,
        _attributes(a.attributes),
        a.group_id,
        a.priority,
        a.sent_at,
        None,
        a.first_received_at,
        a.removed_at,
        a.receive_count,
        a.outcome,
        None,
        None,
    )


def _arrow_schema(columns: Sequence[str] | None = None) -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    text, i32 = pa.string(), pa.int32()
    whole = pa.schema(
        [
            ("id", text), ("queue", text), ("body", pa.binary()), ("body_text", text),
            ("attributes", pa.map_(text, text)), ("group_id", text), ("priority", i32),
            ("sent_at", ts), ("visible_at", ts), ("first_received_at", ts), ("removed_at", ts),
            ("receive_count", i32), ("state", text), ("source_queue", text), ("error", text),
        ]
    )  # fmt: skip
    return whole if columns is None else pa.schema([whole.field(c) for c in columns])


def record_batch(rows: list[tuple[Any, ...]], columns: Sequence[str] | None = None) -> Any:
    """Rows of the declared schema (or of `columns`) as one Arrow record batch (what Spark
    reads fastest)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _arrow_schema(columns)
    by_column = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = []
    for field, values in zip(schema, by_column, strict=True):
        if field.name == "attributes":
            values = tuple(list(v.items()) if v else [] for v in values)
        elif pa.types.is_timestamp(field.type):
            # epoch seconds to microseconds in one vectorised step, not a datetime per value
            micros = pc.round(pc.multiply(pa.array(values, type=pa.float64()), 1e6))
            arrays.append(pc.cast(micros, pa.int64()).cast(field.type))
            continue
        arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# -- from a sink's rows --------------------------------------------------------------------


def _plain(batch: Any) -> tuple[list[str | None], list[Any]] | None:
    """(ids, bodies) of an Arrow record batch whose rows carry nothing else (no attributes,
    group or priority: an export of a standard queue), or None."""
    names, n = batch.schema.names, batch.num_rows
    for extra in ("group_id", "priority", "attributes"):
        if extra not in names:
            continue
        column = batch.column(extra)
        if column.null_count == n:
            continue
        if extra == "priority" and not any(column.to_pylist()):
            continue
        if extra == "attributes" and column.offsets[-1].as_py() == column.offsets[0].as_py():
            continue  # every map empty (or null)
        return None
    if "body" in names and batch.column("body").null_count == 0:
        bodies = batch.column("body").to_pylist()
    elif "body" not in names and batch.column("body_text").null_count == 0:
        bodies = batch.column("body_text").to_pylist()
    else:
        return None
    ids = batch.column("id").to_pylist() if "id" in names else [None] * n
    return ids, bodies


def messages_from(queue: Queue, batch: Any) -> list[NewMessage]:
    """The messages of an Arrow record batch of the sink's columns, checked and encoded as
    sends to `queue` are."""
    plain = _plain(batch)
    if plain is not None:
        ids, bodies = plain
        return queue.sending(bodies, ids=ids, most=None).as_messages()
    return queue.sending(_entries(batch), most=None).as_messages()


def _entries(batch: Any) -> Iterator[SendEntry]:
    """Send entries from an Arrow record batch of the sink's columns."""
    cols = batch.to_pydict()
    n = batch.num_rows
    none: list[Any] = [None] * n
    bodies = cols.get("body", none)
    texts = cols.get("body_text", none)
    ids, groups = cols.get("id", none), cols.get("group_id", none)
    priorities, attributes = cols.get("priority", none), cols.get("attributes", none)
    for i in range(n):
        body = bodies[i] if bodies[i] is not None else texts[i]
        if body is None:
            raise InvalidInput("a row has no body: every message needs one")
        attrs = attributes[i]
        yield SendEntry(
            entry_id="0",
            body=body,
            id=ids[i],
            group_id=groups[i],
            priority=int(priorities[i] or 0),
            attributes=dict(attrs) if attrs else {},
        )
