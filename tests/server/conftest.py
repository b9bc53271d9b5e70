"""Fixtures: one live server per module over a SQLite store, boto3 clients for it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client

from ..live import LiveServer


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    path: Path = tmp_path_factory.mktemp("server") / "conveyor.db"
    client = Client(f"sqlite:///{path}?durability=normal")
    yield client
    client.close()


@pytest.fixture(scope="module")
def server(store: Client) -> Iterator[LiveServer]:
    with LiveServer(store) as live:
        yield live


@pytest.fixture
def sqs(server: LiveServer) -> Any:
    return server.sqs()


@pytest.fixture
def name() -> str:
    """A queue name no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"
