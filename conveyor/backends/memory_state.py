"""The in-memory store's data: queues, message records, the shared named stores."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from ..models import ArchivedMessage, Consumer, QueueAttributes, QueueInfo

NAMED: dict[str, State] = {}
NAMED_LOCK = threading.Lock()


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


@dataclass(slots=True)
class QueueState:
    info: QueueInfo
    messages: dict[str, Rec] = field(default_factory=dict)
    ready: list[tuple[int, int, str, int]] = field(default_factory=list)
    later: list[tuple[float, int, str, int]] = field(default_factory=list)
    dedup: dict[str, tuple[str, float]] = field(default_factory=dict)
    archive: list[ArchivedMessage] = field(default_factory=list)
    sent: int = 0
    received: int = 0
    deleted: int = 0
    dead: int = 0
    expired: int = 0
    tokens: float = 0.0
    tokens_at: float = 0.0
    swept_at: float = 0.0

    @property
    def attrs(self) -> QueueAttributes:
        return self.info.attributes


@dataclass
class State:
    lock: threading.RLock = field(default_factory=threading.RLock)
    queues: dict[str, QueueState] = field(default_factory=dict)
    topics: dict[str, list[str]] = field(default_factory=dict)
    consumers: dict[str, Consumer] = field(default_factory=dict)
    seq: int = 0
    key: str = field(default_factory=lambda: f"memory:{secrets.token_hex(6)}")
