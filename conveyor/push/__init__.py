"""SKMQ's TCP push protocol: the gateway (`conveyor gateway`, `conveyor serve --tcp`), its
clients `PushProducer` and `PushConsumer`, and the sans-I/O `codec`."""

from .client import (
    DeadLetter,
    PushConsumer,
    PushMessage,
    PushProducer,
    PushRefused,
    PushReply,
    Reject,
)
from .config import GatewayConfig
from .gateway import Gateway

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
