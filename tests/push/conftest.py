"""The push gateway's tests: `start` makes gateways that the test's end closes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client
from conveyor.push import GatewayConfig

from ..support.push import Running, Start, close_peers


@pytest.fixture(autouse=True)
def closed_peers() -> Iterator[None]:
    """The raw connections a test opened, closed after it."""
    yield
    close_peers()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    running: list[Running] = []
    clients: list[Client] = []

    def make(store: str = "memory://", **settings: Any) -> Running:
        if store == "sqlite":
            store = f"sqlite:///{tmp_path / 'push.db'}"
        client = Client(store)
        clients.append(client)
        config = replace(GatewayConfig(port=0), **settings)
        r = Running(client, config)
        running.append(r)
        return r

    yield make
    for r in running:
        r.close()
    for c in clients:
        c.close()
