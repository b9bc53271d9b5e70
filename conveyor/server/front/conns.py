"""How many HTTP connections this process has open now (the server's protocol counts them;
the dashboard shows them), and how an ASGI request asks whether its client went away."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

OPEN = [0]

GONE = "conveyor.gone"
"""The ASGI scope's key of the request's `Gone`."""


class Gone:
    """Whether a request's client has closed the connection, or its sending side of it,
    before the answer was complete (called: True once it has). The server's protocol sets
    it; the request holds it, not the connection or the request's cycle, so that nothing
    the request made refers back to them."""

    __slots__ = ("gone",)

    def __init__(self) -> None:
        self.gone = False

    def __call__(self) -> bool:
        return self.gone


def client_gone(scope: Mapping[str, Any]) -> Callable[[], bool]:
    """The request's `Gone` (never gone where the server cannot tell)."""
    gone: Callable[[], bool] | None = scope.get(GONE)
    return gone if gone is not None else never_gone


def never_gone() -> bool:
    """A request's `Gone` where the server cannot tell (and `Caller.gone`'s default)."""
    return False


def open_connections() -> int:
    return OPEN[0]
