"""Conveyor: a message queue with Amazon SQS semantics over the storage you already run.

The names below load on first use (PEP 562), so that `import conveyor` and the command line
start in a fraction of the time importing every part would take.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        OutcomeUnknown,
        QueueDoesNotExist,
        QueueExists,
        ReceiptHandleInvalid,
        StagedWritesLost,
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
    from .queues import ChangeVisibility, Delete, Queue, Receive
    from .sends import Send, SendEntry, Sent
    from .urls import open_backend
    from .worker import Worker

_EXPORTS = {
    "ArchivedMessage": "models",
    "AsyncClient": "aio",
    "AsyncQueue": "aio",
    "Backend": "backends.base",
    "BatchError": "exceptions",
    "BatchResult": "models",
    "Capability": "models",
    "ChangeVisibility": "queues",
    "Client": "client",
    "Clock": "clock",
    "Consumer": "models",
    "ConveyorError": "exceptions",
    "DeadLetterPolicy": "models",
    "Delete": "queues",
    "Delivery": "models",
    "InvalidAttribute": "exceptions",
    "InvalidInput": "exceptions",
    "InvalidName": "exceptions",
    "InvalidState": "exceptions",
    "ManualClock": "clock",
    "Message": "models",
    "MessageNotFound": "exceptions",
    "MessageNotInflight": "exceptions",
    "MessageState": "models",
    "MessageTooLong": "exceptions",
    "NotFound": "exceptions",
    "OutcomeUnknown": "exceptions",
    "Producer": "producer",
    "Queue": "queues",
    "QueueAttributes": "models",
    "QueueDoesNotExist": "exceptions",
    "QueueExists": "exceptions",
    "QueueInfo": "models",
    "QueueStats": "models",
    "ReceiptHandleInvalid": "exceptions",
    "Receive": "queues",
    "Send": "sends",
    "SendEntry": "sends",
    "SendResult": "models",
    "Sent": "sends",
    "StagedWritesLost": "exceptions",
    "StoreUnavailable": "exceptions",
    "SystemClock": "clock",
    "TopicDoesNotExist": "exceptions",
    "TypedValue": "models",
    "Unsupported": "exceptions",
    "Worker": "worker",
    "open_backend": "urls",
}

__version__ = "0.1.0"

__all__ = [
    "ArchivedMessage",
    "AsyncClient",
    "AsyncQueue",
    "Backend",
    "BatchError",
    "BatchResult",
    "Capability",
    "ChangeVisibility",
    "Client",
    "Clock",
    "Consumer",
    "ConveyorError",
    "DeadLetterPolicy",
    "Delete",
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
    "OutcomeUnknown",
    "Producer",
    "Queue",
    "QueueAttributes",
    "QueueDoesNotExist",
    "QueueExists",
    "QueueInfo",
    "QueueStats",
    "ReceiptHandleInvalid",
    "Receive",
    "Send",
    "SendEntry",
    "SendResult",
    "Sent",
    "StagedWritesLost",
    "StoreUnavailable",
    "SystemClock",
    "TopicDoesNotExist",
    "TypedValue",
    "Unsupported",
    "Worker",
    "__version__",
    "open_backend",
]


if not TYPE_CHECKING:  # (to type checkers, the names are the imports above)

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)
