"""SKMQ's TCP push protocol: the gateway (`conveyor gateway`, `conveyor serve --tcp`), its
clients `PushProducer` and `PushConsumer`, and the sans-I/O `codec`.

The names below load on first use (PEP 562): the command line reads `config` alone."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..exceptions import PushRefused
    from .client import (
        DeadLetter,
        PushConsumer,
        PushMessage,
        PushProducer,
        PushReply,
        Reject,
    )
    from .config import GatewayConfig
    from .gateway import Gateway

_EXPORTS = {
    "DeadLetter": "client",
    "Gateway": "gateway",
    "GatewayConfig": "config",
    "PushConsumer": "client",
    "PushMessage": "client",
    "PushProducer": "client",
    "PushRefused": "client",
    "PushReply": "client",
    "Reject": "client",
}

__all__ = [
    "DeadLetter",
    "Gateway",
    "GatewayConfig",
    "PushConsumer",
    "PushMessage",
    "PushProducer",
    "PushRefused",
    "PushReply",
    "Reject",
]


if not TYPE_CHECKING:  # (to type checkers, the names are the imports above)

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'conveyor.push' has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)
