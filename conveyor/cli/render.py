"""Output for the CLI: tables for people, stable JSON for scripts."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from ..models import ArchivedMessage, Consumer, Message, QueueAttributes, QueueStats

console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)


def when(ts: float | None) -> str | None:
    if ts is None:
        return None
    if ts >= 253402300799.0:
        return "never"
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def body_text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def message_dict(m: Message, now: float | None = None, *, with_body: bool = True) -> dict[str, Any]:
    now = time.time() if now is None else now
    out: dict[str, Any] = {
        "id": m.id,
        "queue": m.queue,
        "state": m.state(now).value,
        "receive_count": m.receive_count,
        "priority": m.priority,
        "sent_at": when(m.sent_at),
        "visible_at": when(m.visible_at),
        "first_received_at": when(m.first_received_at),
        "version": m.version,
        "sequence": m.sequence,
    }
    for key in ("group_id", "dedup_id", "source_queue", "error"):
        if getattr(m, key) is not None:
            out[key] = getattr(m, key)
    if m.deadline is not None:
        out["deadline"] = when(m.deadline)
    if with_body:
        text = body_text(m.body)
        if text is None:
            out["body_base64"] = base64.b64encode(m.body).decode()
        else:
            out["body"] = text
        if m.attributes:
            out["attributes"] = {
                k: (base64.b64encode(v).decode() if isinstance(v, bytes) else v)
                for k, v in m.attributes.items()
            }
    if m.receipt is not None:
        out["receipt"] = m.receipt
    return out


def attributes_dict(a: QueueAttributes) -> dict[str, Any]:
    return a.to_dict()


def stats_dict(s: QueueStats) -> dict[str, Any]:
    return s.to_dict()


def archived_dict(a: ArchivedMessage) -> dict[str, Any]:
    return {
        "id": a.id,
        "queue": a.queue,
        "outcome": a.outcome,
        "removed_at": when(a.removed_at),
        "sent_at": when(a.sent_at),
        "receive_count": a.receive_count,
        "priority": a.priority,
        "group_id": a.group_id,
        "attributes": {k: str(v) for k, v in a.attributes.items()},
        "body": a.body.decode("utf-8", errors="replace"),
    }


def consumer_dict(c: Consumer, now: float) -> dict[str, Any]:
    return {
        "id": c.id,
        "queue": c.queue,
        "registered_at": when(c.registered_at),
        "last_heartbeat": when(c.heartbeat_at),
        "heartbeat_age": round(now - c.heartbeat_at, 3),
        "timeout": c.timeout,
        "info": dict(c.info),
    }


def emit_json(value: Any) -> None:
    console.out(json.dumps(value, indent=2, sort_keys=False, default=str), highlight=False)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left", show_lines=False, pad_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*["-" if v is None else str(v) for v in r])
    console.print(t)


def pairs(title: str | None, items: Iterable[tuple[str, Any]]) -> None:
    t = Table(title=title, title_justify="left", show_header=False, pad_edge=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for k, v in items:
        t.add_row(k, "-" if v is None else str(v))
    console.print(t)
