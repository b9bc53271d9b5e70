"""How many HTTP connections this process has open now (the server's protocol counts them;
the dashboard shows them)."""

from __future__ import annotations

OPEN = [0]


def open_connections() -> int:
    return OPEN[0]
