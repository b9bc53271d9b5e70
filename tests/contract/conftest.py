"""The contract runs on every store, and through the SQS API of `conveyor serve` as a client.

``sqs-http``: the `sqs://` store (boto3) talking to a live server over loopback, the server
running on a memory store that shares the test's ManualClock. ``sqlite-held``: the SQLite
store with every queue's head indexed at its first claim, as a queue deep in messages in
flight is (`SQLiteDialect.claim_ready`), so that every rule holds on that path too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Client, ManualClock
from conveyor.backends.memory import MemoryBackend
from conveyor.models import Capability

from .. import sqlstores
from ..conftest import STORES
from ..live import LiveServer

CONTRACT_STORES = [*sorted(STORES), "sqlite-held", "sqs-http"]
HELD = "sqlite-held:"


@pytest.fixture(params=CONTRACT_STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqs-http":
        yield "sqs-http"
        return
    if request.param == "sqlite-held":
        yield HELD + STORES["sqlite"](tmp_path)
        return
    url = STORES[request.param](tmp_path)
    yield url
    sqlstores.drop(url)


@pytest.fixture
def client(store_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    if store_url != "sqs-http":
        c = Client(store_url.removeprefix(HELD), clock=clock)
        if store_url.startswith(HELD):
            c.backend.dialect.held_index_after = 0  # type: ignore[attr-defined]
        yield c
        c.close()
        return
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "contract"),
        ("AWS_SECRET_ACCESS_KEY", "contract"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
    ):
        monkeypatch.setenv(key, value)
    with (
        Client(backend=MemoryBackend(clock=clock), clock=clock) as served,
        LiveServer(served) as live,
    ):
        c = Client(f"sqs://?region=us-east-1&endpoint_url={live.url}", clock=clock)
        yield c
        c.close()


def has(client: Client, capability: Capability) -> bool:
    """Whether the store declares a capability (for checks only some stores can make)."""
    return capability in client.capabilities


def needs(client: Client, *capabilities: Capability) -> None:
    """Skip a contract test on stores that declare they cannot do this."""
    missing = [c.value for c in capabilities if c not in client.capabilities]
    if missing:
        pytest.skip(f"the store lacks {', '.join(missing)}")
