"""Rows of the `conveyor` data source: the declared schema and conversions to and from it."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ..models import ArchivedMessage, AttributeValue, Message, TypedValue

SCHEMA = (
    "id STRING, queue STRING, body BINARY, body_text STRING, attributes MAP<STRING, STRING>,"
    " group_id STRING, priority INT, sent_at TIMESTAMP, visible_at TIMESTAMP,"
    " first_received_at TIMESTAMP, removed_at TIMESTAMP, receive_count INT, state STRING,"
    " source_queue STRING, error STRING"
)
COLUMNS = [c.strip().split(" ")[0] for c in SCHEMA.split(",") if " " in c.strip()]
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


def message_row(m: Message, now: float) -> tuple[Any, ...]:
    """A message as a row of the schema (times as epoch seconds: `record_batch` converts)."""
    return (
        m.id,
        m.queue,
        m.body,
        _text(m.body),
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


def archived_row(a: ArchivedMessage) -> tuple[Any, ...]:
    return (
        a.id,
        a.queue,
        a.body,
        _text(a.body),
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


def _arrow_schema() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    text, i32 = pa.string(), pa.int32()
    return pa.schema(
        [
            ("id", text), ("queue", text), ("body", pa.binary()), ("body_text", text),
            ("attributes", pa.map_(text, text)), ("group_id", text), ("priority", i32),
            ("sent_at", ts), ("visible_at", ts), ("first_received_at", ts), ("removed_at", ts),
            ("receive_count", i32), ("state", text), ("source_queue", text), ("error", text),
        ]
    )  # fmt: skip


def record_batch(rows: list[tuple[Any, ...]]) -> Any:
    """Rows of the declared schema as one Arrow record batch (what Spark reads fastest)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _arrow_schema()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = []
    for field, values in zip(schema, columns, strict=True):
        if field.name == "attributes":
            values = tuple(list(v.items()) if v else [] for v in values)
        elif pa.types.is_timestamp(field.type):
            # epoch seconds to microseconds in one vectorised step, not a datetime per value
            micros = pc.round(pc.multiply(pa.array(values, type=pa.float64()), 1e6))
            arrays.append(pc.cast(micros, pa.int64()).cast(field.type))
            continue
        arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
