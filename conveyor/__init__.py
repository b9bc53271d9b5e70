"""Conveyor: a message queue with Amazon SQS semantics over the storage you already run."""

from __future__ import annotations

from .aio import AsyncClient, AsyncQueue
from .backends.base import Backend
from .client import Client
from .clock import Clock, ManualClock, SystemClock
from .exceptions import (
    BatchError,
    ConveyorError,
    InvalidAttribute,
    InvalidInput,
    InvalidName,
    InvalidState,
    MessageNotFound,
    MessageNotInflight,
    MessageTooLong,
    NotFound,
    QueueDoesNotExist,
    QueueExists,
    ReceiptHandleInvalid,
    StoreUnavailable,
    TopicDoesNotExist,
    Unsupported,
)
from .models import (
    ArchivedMessage,
    BatchResult,
    Capability,
    Consumer,
    DeadLetterPolicy,
    Delivery,
    Message,
    MessageState,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
    TypedValue,
)
from .producer import Producer
from .queues import Queue, SendEntry
from .urls import open_backend
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "ArchivedMessage",
    "AsyncClient",
    "AsyncQueue",
    "Backend",
    "BatchError",
    "BatchResult",
    "Capability",
    "Client",
    "Clock",
    "Consumer",
    "ConveyorError",
    "DeadLetterPolicy",
    "Delivery",
    "InvalidAttribute",
    "InvalidInput",
    "InvalidName",
    "InvalidState",
    "ManualClock",
    "Message",
    "MessageNotFound",
    "MessageNotInflight",
    "MessageState",
    "MessageTooLong",
    "NotFound",
    "Producer",
    "Queue",
    "QueueAttributes",
    "QueueDoesNotExist",
    "QueueExists",
    "QueueInfo",
    "QueueStats",
    "ReceiptHandleInvalid",
    "SendEntry",
    "SendResult",
    "StoreUnavailable",
    "SystemClock",
    "TopicDoesNotExist",
    "TypedValue",
    "Unsupported",
    "Worker",
    "__version__",
    "open_backend",
]
