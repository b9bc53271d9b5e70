"""How many HTTP connections this process has open now (the server's protocol counts them;
the dashboard shows them), and how an ASGI request asks whether its client went away."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

OPEN = [0]

GONE = "conveyor.gone"
"""The ASGI scope's key of a callable: whether the request's client has closed the
connection, or its sending side of it (the server's protocol sets it)."""


def client_gone(scope: Mapping[str, Any]) -> Callable[[], bool]:
    """The request's `GONE` (never gone where the server cannot tell)."""
    gone: Callable[[], bool] | None = scope.get(GONE)
    return gone if gone is not None else _never


def _never() -> bool:
    return False


def open_connections() -> int:
    return OPEN[0]
