"""The contract runs on every store, and through the SQS API of `conveyor serve` as a client.

``sqs-http``: the `sqs://` store (boto3) talking to a live server over loopback, the server
running on a memory store that shares the test's ManualClock. ``sqlite-held``,
``postgres-held`` and ``mysql-held``: those stores with every queue claimed as a queue deep
in messages in flight is (SQLite indexes it at its first claim, `SQLiteDialect.claim_ready`;
PostgreSQL as it is made, `pg_inflight.py`; MySQL reads its held_at index, `inflight.py`),
so that every rule holds on that path too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client, DeadLetterPolicy, ManualClock, Queue
from conveyor.backends.memory import MemoryBackend
from conveyor.models import Capability

from ..conftest import STORES
from ..support import sqlstores
from ..support.live import LiveServer

# and the store each indexes
HELD = {"sqlite-held": "sqlite", "postgres-held": "postgres", "mysql-held": "mysql"}
CONTRACT_STORES = [*sorted(STORES), *HELD, "sqs-http"]


@pytest.fixture(params=CONTRACT_STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqs-http":
        yield "sqs-http"
        return
    held = request.param in HELD
    url = STORES[HELD.get(request.param, request.param)](tmp_path)
    yield f"held+{url}" if held else url
    sqlstores.drop(url)


def index_every_queue(client: Client) -> None:
    """Make a store index every queue as it does a queue deep in messages in flight."""
    dialect: Any = client.backend.dialect  # type: ignore[attr-defined]
    if dialect.name == "sqlite":
        dialect.held_index_after = 0
    elif dialect.name == "postgresql":
        dialect.held.rows = 0
    else:
        dialect.heads.rows = 0


@pytest.fixture
def client(store_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    if store_url != "sqs-http":
        c = Client(store_url.removeprefix("held+"), clock=clock)
        if store_url.startswith("held+"):
            index_every_queue(c)
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


def scaled(client: Client, n: int) -> int:
    """`n` messages for a load of a contract test, a third of them where the store's test
    endpoint is an emulator (moto's DynamoDB serves a request in milliseconds, not the
    rules' business); the rule is the same at either size."""
    return n // 3 if client.backend.scheme == "dynamodb" else n


def has(client: Client, capability: Capability) -> bool:
    """Whether the store declares a capability (for checks only some stores can make)."""
    return capability in client.capabilities


def needs(client: Client, *capabilities: Capability) -> None:
    """Skip a contract test on stores that declare they cannot do this."""
    missing = [c.value for c in capabilities if c not in client.capabilities]
    if missing:
        pytest.skip(f"the store lacks {', '.join(missing)}")


def fifo_with_dlq(client: Client, name: str, visibility_timeout: float) -> Queue:
    """A FIFO queue `name`.fifo (content-based de-duplication) whose messages move to
    `name`-dlq.fifo when received a second time."""
    client.create_queue(f"{name}-dlq.fifo")
    return client.create_queue(
        f"{name}.fifo",
        visibility_timeout=visibility_timeout,
        content_based_dedup=True,
        dead_letter=DeadLetterPolicy(queue=f"{name}-dlq.fifo", max_receive_count=1),
    )
